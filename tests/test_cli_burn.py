"""CLI of the board commands: argument handling and checks that run before any port opens."""

import json

from kflashpy.cli import main

NO_PORT = ["-p", "/dev/ttyNO_SUCH_PORT"]


def _json(capsys):
    return json.loads(capsys.readouterr().out)


def test_layout_errors_stop_the_burn_before_the_port_opens(tmp_path, capsys):
    a = tmp_path / "a.bin"
    b = tmp_path / "b.bin"
    a.write_bytes(b"\x01" * 0x3000)
    b.write_bytes(b"\x02" * 0x1000)
    rc = main(["--json", *NO_PORT, "burn", "0x100000", str(a), "0x101000", str(b)])
    doc = _json(capsys)
    assert rc == 2 and doc["error"]["kind"] == "layout" and "overlap" in doc["error"]["message"]


def test_collision_warnings_need_force_and_force_never_skips_errors(tmp_path, capsys):
    a = tmp_path / "a.bin"
    b = tmp_path / "b.bin"
    a.write_bytes(b"\x01" * 0x800)
    b.write_bytes(b"\x02" * 0x100)
    args = [*NO_PORT, "burn", "0x100000", str(a), "0x100800", str(b)]
    assert main(["--json", *args]) == 2
    assert "erase" in _json(capsys)["error"]["message"]  # shared-sector collision
    # with --force the plan passes and the next failure is the (missing) port
    assert main(["--json", *args, "--force"]) == 1
    assert _json(capsys)["error"]["kind"] == "port"


def test_argument_forms(tmp_path, capsys):
    f = tmp_path / "m.bin"
    f.write_bytes(b"\x00" * 16)
    assert main([*NO_PORT, "burn", str(f)]) == 2
    assert "--addr" in capsys.readouterr().err
    assert main([*NO_PORT, "burn", str(f), str(f), "--addr", "0x1000"]) == 2
    assert main([*NO_PORT, "burn", "0x1000"]) == 2  # odd number of ADDR FILE arguments
    assert main([*NO_PORT, "erase", "--addr", "0x1000"]) == 2
    assert main([*NO_PORT, "erase", "--all", "--size", "4k"]) == 2


def test_missing_port_is_a_port_error_with_a_hint(tmp_path, capsys):
    f = tmp_path / "m.bin"
    f.write_bytes(b"\x00" * 16)
    assert main([*NO_PORT, "burn", str(f), "--addr", "0x300000"]) == 1
    err = capsys.readouterr().err
    assert "cannot open /dev/ttyNO_SUCH_PORT" in err and "hint: the port does not exist" in err


def test_bad_reset_sequence_is_an_input_error(capsys):
    assert main(["-p", "loop://", "reboot", "--reset-seq", "D1 Q2"]) == 2
    assert "'Q2'" in capsys.readouterr().err


def test_ports_json(capsys):
    assert main(["--json", "ports"]) == 0
    assert isinstance(_json(capsys)["result"]["ports"], list)


def test_burn_help_says_how_the_default_flasher_verifies(capsys):
    assert main(["burn", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "SHA-256 computed on the board" in text and "--stub kflash" in text
