"""The shared CLI frame as the image commands use it: colour rules and the --json envelope."""

import io
import json

import pytest

from kflashpy import __version__
from kflashpy.cli import main
from kflashpy.cli.session import Session


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize(
    "color,env,expected",
    [
        ("auto", {}, True),
        ("auto", {"NO_COLOR": "1"}, False),
        ("auto", {"TERM": "dumb"}, False),
        ("never", {}, False),
        ("always", {"NO_COLOR": "1"}, True),
    ],
)
def test_colour_rules(monkeypatch, color, env, expected):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert Session(color=color).use_color(FakeTTY()) is expected


def test_no_color_output_has_no_escapes(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.bin").write_bytes(b"x" * 10)
    monkeypatch.setenv("NO_COLOR", "1")
    assert main(["check-layout", "0x1000", "a.bin", "0x1000", "a.bin"]) == 2
    out, err = capsys.readouterr()
    assert "\x1b[" not in out + err and "overlap" in err
    assert main(["--color", "always", "check-layout", "0x1000", "a.bin", "0x1000", "a.bin"]) == 2
    out, err = capsys.readouterr()
    assert "\x1b[" in out and "\x1b[" in err


def test_json_envelope_success_warnings_and_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.bin").write_bytes(b"x" * 10)
    assert main(["--json", "image-info", "a.bin"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["kflashpy_version", "schema", "status", "error", "warnings", "result"]
    assert doc["kflashpy_version"] == __version__ and doc["schema"] == {"major": 1, "minor": 0}
    assert doc["error"] is None and doc["result"]["files"][0]["kind"] == "data"

    assert main(["--json", "check-layout", "0x1000", "a.bin", "0x1000", "a.bin"]) == 2
    out, err = capsys.readouterr()
    doc = json.loads(out)  # stdout holds exactly one JSON document, nothing else
    assert doc["status"] == 2 and doc["error"]["kind"] == "layout"
    assert "overlap" in doc["error"]["message"] and doc["result"]["ok"] is False
    assert err == ""

    assert main(["--json", "check-layout", "0x1000"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"]["kind"] == "input" and doc["result"] is None


def test_warnings_go_into_the_envelope(tmp_path, monkeypatch, capsys):
    import zipfile

    monkeypatch.chdir(tmp_path)
    with zipfile.ZipFile(tmp_path / "p.kfpkg", "w") as zf:
        zf.writestr(
            "flash-list.json", '{"files": [{"address": 0x3000, "bin": "a", "sha256Prefix": false}]}'
        )
        zf.writestr("a", b"1")
    assert main(["--json", "info", "p.kfpkg"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert not any("hex address" in w for w in doc["warnings"])  # normal: noted with -v
    assert any("no version" in w for w in doc["warnings"])
    assert doc["result"]["files"][0]["address"] == 0x3000
