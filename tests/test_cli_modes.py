"""What esptool and kflash.py users expect: --before/--after, --erase-all, -vv traces."""

from __future__ import annotations

import json
import os
import re

from kflashpy.cli import main


def _port(tmp_path) -> str:
    return f"sim://?board=maix-bit&flash={tmp_path / 'flash.img'}"


def test_before_no_reset_says_which_buttons_and_connects(tmp_path, capsys):
    assert main(["flash-id", "-p", _port(tmp_path), "--before", "no-reset"]) == 0
    err = capsys.readouterr().err
    assert "hold the BOOT button (IO16), press and release RESET" in err
    assert "reset wiring" not in err  # no DTR/RTS wiring was tried


def test_before_no_reset_contradicts_a_reset_sequence(tmp_path, capsys):
    args = ["flash-id", "-p", _port(tmp_path), "--before", "no-reset", "--reset-seq", "D0 R0"]
    assert main(args) == 2
    assert "contradict" in capsys.readouterr().err


def test_after_stay_and_reboot(tmp_path, capsys):
    data = tmp_path / "d.bin"
    data.write_bytes(os.urandom(3000))
    base = ["--json", "-p", _port(tmp_path), "burn", "0x100000", str(data)]
    assert main([*base, "--after", "stay"]) == 0
    assert not json.loads(capsys.readouterr().out)["result"]["rebooted"]
    assert main([*base, "--no-reboot", "--after", "reboot"]) == 0  # --after wins
    assert json.loads(capsys.readouterr().out)["result"]["rebooted"]


def test_erase_all_leaves_only_the_burned_file(tmp_path, capsys):
    flash = tmp_path / "flash.img"
    flash.write_bytes(b"\x5a" * (16 << 20))  # old contents everywhere
    data = tmp_path / "d.bin"
    data.write_bytes(os.urandom(3000))
    port = _port(tmp_path)
    assert main(["-p", port, "--no-progress", "burn", "0x100000", str(data), "--erase-all"]) == 0
    assert "erased the whole chip first" in capsys.readouterr().err
    image = flash.read_bytes()
    assert image[0x100000 : 0x100000 + 3000] == data.read_bytes()
    outside = image[:0x100000] + image[0x100000 + 3000 :]
    assert outside.count(0xFF) == len(outside)  # everything else erased


def test_vv_traces_carry_timestamps_and_command_names(tmp_path, capsys):
    assert main(["flash-id", "-p", _port(tmp_path), "-vv"]) == 0
    lines = capsys.readouterr().err.splitlines()
    traced = [line for line in lines if re.match(r"\s*\d+\.\d{3}s (tx|rx) ", line)]
    text = "\n".join(traced)
    assert "tx NOP" in text and "rx NOP ok" in text and "tx MEMORY_WRITE" in text
    assert "IDENTIFY" in text  # our flasher's commands are named too
