"""burn, verify and read agree: the same wrapping rule, the same size spellings."""

from __future__ import annotations

import json
import os

import pytest

from kflashpy.cli import main
from kflashpy.units import parse_int

FIRMWARE_START = b"\x21\xa8\xef\xbe\xad\xde"  # SDK start-up: jump + 0xDEADBEEF halves


def _sim(tmp_path) -> str:
    return f"sim://?board=maix-bit&flash={tmp_path / 'flash.img'}"


@pytest.fixture
def firmware(tmp_path):
    path = tmp_path / "maixpy.bin"
    path.write_bytes(FIRMWARE_START + os.urandom(6000))
    return path


def test_burn_then_verify_a_raw_firmware_at_0_agree(tmp_path, firmware, capsys):
    port = _sim(tmp_path)
    assert main(["-p", port, "--no-progress", "burn", "0", str(firmware)]) == 0
    capsys.readouterr()
    assert main(["-p", port, "--json", "verify", "0", str(firmware)]) == 0
    region = json.loads(capsys.readouterr().out)["result"]["regions"][0]
    assert region["ok"] and region["size"] == firmware.stat().st_size + 37
    assert "boot image" in region["compared"]
    assert main(["-p", port, "verify", "0", str(firmware)]) == 0
    assert "compared with the boot image" in capsys.readouterr().err


def test_verify_still_catches_a_different_firmware(tmp_path, firmware, capsys):
    port = _sim(tmp_path)
    assert main(["-p", port, "--no-progress", "burn", "0", str(firmware)]) == 0
    other = tmp_path / "other.bin"
    other.write_bytes(FIRMWARE_START + os.urandom(6000))
    assert main(["-p", port, "verify", "0", str(other)]) == 3
    assert "other.bin at 0x00000000" in capsys.readouterr().err


def test_data_keeps_its_bytes_when_verified_away_from_0(tmp_path, capsys):
    port = _sim(tmp_path)
    data = tmp_path / "d.bin"
    data.write_bytes(FIRMWARE_START + os.urandom(100))  # looks like firmware, but at 1 MiB
    assert main(["-p", port, "--no-progress", "burn", "0x100000", str(data), "--force"]) == 0
    capsys.readouterr()
    assert main(["-p", port, "--json", "verify", "0x100000", str(data)]) == 0


def test_burn_of_a_firmware_without_address_goes_to_0_and_says_so(tmp_path, firmware, capsys):
    port = _sim(tmp_path)
    assert main(["-p", port, "--no-progress", "burn", str(firmware)]) == 0
    assert "maixpy.bin is a K210 firmware: burning it at 0x00000000" in capsys.readouterr().err
    assert main(["-p", port, "verify", "0", str(firmware)]) == 0


def test_burn_of_data_without_address_asks_for_one(tmp_path, capsys):
    data = tmp_path / "font.bin"
    data.write_bytes(b"\x00\x01" * 100)
    assert main(["-p", "/dev/ttyNO_SUCH", "burn", str(data)]) == 2
    err = capsys.readouterr().err
    assert "where should it go" in err and "--addr" in err


@pytest.mark.parametrize(
    ("text", "value"),
    [("1.5M", 0x180000), ("512k", 0x80000), ("0x180000", 0x180000), ("1.25k", 1280)],
)
def test_sizes_spelled_as_the_docs_print_them(text, value):
    assert parse_int(text) == value


def test_fraction_of_a_byte_is_refused(capsys):
    assert main(["-p", "/dev/ttyNO_SUCH", "read", "--addr", "0", "--size", "0.3k", "-o", "x"]) == 2
    assert "not a whole number of bytes" in capsys.readouterr().err


def test_read_size_all_reads_to_the_end_of_the_flash(tmp_path, capsys):
    out = tmp_path / "tail.bin"
    args = ["-p", _sim(tmp_path), "--json", "read", "--addr", "0xFF8000", "--size", "all"]
    assert main([*args, "-o", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["result"]["size"] == 0x8000
    assert out.read_bytes() == b"\xff" * 0x8000
    umask = os.umask(0o022)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as open() makes it, not 0o600
