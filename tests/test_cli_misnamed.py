"""Bytes that are not what their name says are refused; kfpkg image-info; erase bounds."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from kflashpy.cli import main

MODEL = "tests/fixtures/kmodels/v3/mnist_maixpy-scripts.kmodel"
NO_PORT = ["-p", "/dev/ttyNO_SUCH_PORT"]
LFS = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"ab" * 32 + b"\nsize 208072\n"
HTML = b"\n<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head></html>\n"


def _zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("model.kmodel", b"\x03\x00\x00\x00" * 64)
    return buf.getvalue()


@pytest.mark.parametrize(
    ("name", "data", "says"),
    [
        ("model.kmodel", LFS, "Git LFS pointer"),
        ("model.kmodel", HTML, "HTML page"),
        ("maixpy.bin", HTML, "HTML page"),
        ("model.kmodel", _zip(), "zip archive"),
        ("model.kmodel", b"\x00\x01\x02\x03" * 100, "named .kmodel but holds data"),
    ],
)
@pytest.mark.parametrize("address", ["0", "0x300000"])
def test_burn_and_check_layout_refuse_bytes_that_are_not_the_file(
    tmp_path, capsys, name, data, says, address
):
    path = tmp_path / name
    path.write_bytes(data)
    # refused before any port is opened: exit 2, not the port error (1)
    assert main([*NO_PORT, "burn", address, str(path)]) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("error:") == 1
    assert main(["check-layout", address, str(path)]) == 2
    out, err = capsys.readouterr()
    errors = [line for line in (out + err).splitlines() if line.startswith("error:")]
    assert len([e for e in errors if says in e]) == 1  # printed once


def test_truncated_kmodel_stops_the_burn_unless_forced(tmp_path, capsys):
    data = Path(MODEL).read_bytes()
    cut = tmp_path / "cut.kmodel"
    cut.write_bytes(data[: len(data) // 2])
    assert main([*NO_PORT, "burn", "0x300000", str(cut)]) == 2
    err = capsys.readouterr().err
    assert "looks damaged" in err and "--force" in err
    assert main([*NO_PORT, "burn", "0x300000", str(cut), "--force"]) == 1  # on to the port


def test_image_info_on_a_kfpkg_lists_members_and_true_footprint(tmp_path, capsys):
    fw = tmp_path / "fw.bin"
    fw.write_bytes(b"\x21\xa8\xef\xbe\xad\xde" + bytes(10_000))
    pkg = tmp_path / "app.kfpkg"
    assert main(["-q", "pack", "-o", str(pkg), "0", str(fw), "0x300000", MODEL]) == 0
    capsys.readouterr()
    assert main(["image-info", str(pkg), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)["result"]["files"][0]
    assert [m["address"] for m in doc["members"]] == [0, 0x300000]
    # 10,043 B boot image -> 3 sectors; 208,072 B model -> 51 sectors
    assert doc["footprint"] == (3 + 51) * 4096
    assert main(["image-info", str(pkg)]) == 0
    out = capsys.readouterr().out
    assert "fw.bin" in out and "boot image" in out and "mnist_maixpy-scripts.kmodel" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_image_info_and_model_info_agree_on_the_firmwares(capsys):
    assert main(["--json", "model", "info", MODEL]) == 0
    verdicts = json.loads(capsys.readouterr().out)["result"]["firmwares"]
    assert main(["--json", "image-info", MODEL]) == 0
    listed = json.loads(capsys.readouterr().out)["result"]["files"][0]["firmwares"]
    assert listed == [v["firmware"] for v in verdicts if v["loads"] == "yes"] and listed


def test_erase_past_the_end_of_flash_is_refused_before_connecting(capsys):
    assert main([*NO_PORT, "erase", "--addr", "0xF00000", "--size", "2M"]) == 2
    assert "past the end of the 16 MiB flash" in capsys.readouterr().err
