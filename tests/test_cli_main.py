import json

from kflashpy.cli import main


def test_version_exit_zero(capsys):
    assert main(["--version"]) == 0
    assert "kflashpy" in capsys.readouterr().out


def test_unknown_command_is_usage_error(capsys):
    assert main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


def test_json_envelope_on_error(capsys):
    assert main(["--json", "no-such-command"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"]["major"] == 1
    assert doc["status"] == 2 and doc["error"]["kind"] == "usage"


def test_verbose_and_quiet_conflict(capsys):
    assert main(["-v", "-q", "--version"]) in (0, 2)


def test_json_with_help_prints_only_help(capsys):
    assert main(["--json", "boards", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage:") and '"schema"' not in out


def test_quiet_suppresses_warnings_but_json_keeps_them(tmp_path, capsys):
    fw = tmp_path / "fw.bin"
    fw.write_bytes(b"\x01" * 1_493_375)
    model = tmp_path / "m.bin"
    model.write_bytes(b"\x00" * 4096)
    args = ["check-layout", "0", str(fw), "0x180000", str(model)]
    main(["-q", *args])
    assert "warning" not in capsys.readouterr().err
    main(["--json", *args])
    import json as _json

    assert _json.loads(capsys.readouterr().out)["warnings"]
