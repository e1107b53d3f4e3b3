"""`merge`: one flat flash image, byte-for-byte what a burn of the same plan leaves in flash."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kflashpy.cli import main
from kflashpy.image import merge

MODEL = Path("tests/fixtures/kmodels/v3/mnist_maixpy-scripts.kmodel")


@pytest.fixture
def plan_files(tmp_path):
    fw = tmp_path / "maixpy.bin"
    fw.write_bytes(b"\x21\xa8\xef\xbe\xad\xde" + os.urandom(30_000))
    font = tmp_path / "font.bin"
    font.write_bytes(os.urandom(5000))
    return ["0", str(fw), "0x300000", str(MODEL), "0x500000", str(font)]


def test_merge_matches_a_burn_of_the_same_plan_into_a_virtual_flash(tmp_path, plan_files, capsys):
    image = tmp_path / "flash.bin"
    assert main(["-q", "merge", "-o", str(image), "--fill-to", "16M", *plan_files]) == 0
    flash = tmp_path / "board.img"
    port = f"sim://?board=maix-bit&flash={flash}"
    assert main(["-p", port, "-q", "burn", *plan_files]) == 0
    assert image.read_bytes() == flash.read_bytes()


def test_merge_of_a_kfpkg_equals_merge_of_its_files(tmp_path, plan_files, capsys):
    pkg = tmp_path / "app.kfpkg"
    assert main(["-q", "pack", "-o", str(pkg), *plan_files]) == 0
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    assert main(["-q", "merge", "-o", str(a), str(pkg)]) == 0
    capsys.readouterr()
    assert main(["--json", "merge", "-o", str(b), *plan_files]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert a.read_bytes() == b.read_bytes()
    data = a.read_bytes()
    assert len(data) == doc["result"]["size"] == 0x500000 + 5000  # ends at the last byte
    boot_end = 5 + 30_006 + 32  # flag + length, the firmware, its SHA-256
    assert data[1:5] == (30_006).to_bytes(4, "little")  # wrapped as burn wraps it
    assert data[boot_end:0x300000] == b"\xff" * (0x300000 - boot_end)
    assert data[0x300000 : 0x300000 + MODEL.stat().st_size] == MODEL.read_bytes()


def test_fill_to_too_small_or_past_the_flash_is_refused(tmp_path, plan_files, capsys):
    out = tmp_path / "x.bin"
    assert main(["merge", "-o", str(out), "--fill-to", "1M", *plan_files]) == 2
    assert "cut off" in capsys.readouterr().err
    assert main(["merge", "-o", str(out), "--fill-to", "32M", *plan_files]) == 2
    assert "larger than the 16 MiB flash" in capsys.readouterr().err
    assert not out.exists()


def test_merge_library_function_returns_the_image(tmp_path):
    data = tmp_path / "d.bin"
    data.write_bytes(b"\x01\x02")
    plan, image = merge(None, [(0x1000, str(data))], fill_to=0x2000)
    assert image == b"\xff" * 0x1000 + b"\x01\x02" + b"\xff" * (0x1000 - 2)
    assert [r.address for r in plan.writes] == [0x1000]
