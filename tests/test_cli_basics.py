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
