"""Global options anywhere: before or after the subcommand, same meaning, same env defaults."""

from __future__ import annotations

import dataclasses
import json

import click
import pytest

from kflashpy.cli import cli, main
from kflashpy.cli.options import conflicts
from kflashpy.cli.session import Session

MODEL = "tests/fixtures/kmodels/v3/mnist_maixpy-scripts.kmodel"
SIM = "sim://?board=maix-bit"

#: one command of each kind: board, model, image
KINDS = {
    "board": (["reboot"], []),
    "model": (["model", "info"], [MODEL]),
    "image": (["image-info"], [MODEL]),
}

OPTIONS = [
    ["-p", "loop://"],
    ["--port", "loop://"],
    ["-b", "115200"],
    ["--baud", "115200"],
    ["-B", "maix-go"],
    ["--board", "maix-go"],
    ["--json"],
    ["-v"],
    ["-vv"],
    ["-q"],
    ["--no-progress"],
    ["--color", "always"],
]


def _session_seen(monkeypatch, argv: list[str], path: list[str]) -> Session:
    """Run the CLI with the command's body replaced by a recorder of the session it sees."""
    command: click.Command = cli
    for name in path:
        command = command.commands[name]
    seen: list[Session] = []

    def record(*_args, **_kwargs):
        seen.append(dataclasses.replace(click.get_current_context().find_object(Session)))

    monkeypatch.setattr(command, "callback", record)
    assert main(argv) == 0
    return seen[0]


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("option", OPTIONS, ids=" ".join)
def test_global_option_after_the_subcommand_means_the_same(monkeypatch, capsys, kind, option):
    path, args = KINDS[kind]
    before = _session_seen(monkeypatch, [*option, *path, *args], path)
    after = _session_seen(monkeypatch, [*path, *args, *option], path)
    plain = _session_seen(monkeypatch, [*path, *args], path)
    capsys.readouterr()
    assert after == before
    assert after != plain  # the option did something


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_environment_defaults_hold_and_an_option_after_the_command_overrides_them(
    monkeypatch, capsys, kind
):
    path, args = KINDS[kind]
    monkeypatch.setenv("KFLASHPY_PORT", "loop://")
    monkeypatch.setenv("KFLASHPY_BOARD", "maix-go")
    s = _session_seen(monkeypatch, [*path, *args], path)
    assert (s.port, s.board) == ("loop://", "maix-go")
    s = _session_seen(monkeypatch, [*path, *args, "-p", SIM, "--board", "maix-bit"], path)
    assert (s.port, s.board) == (SIM, "maix-bit")
    capsys.readouterr()


def test_verbose_before_and_after_add_up_and_conflict_with_quiet(monkeypatch, capsys):
    s = _session_seen(monkeypatch, ["-v", "image-info", MODEL, "-v"], ["image-info"])
    assert s.verbose == 2
    assert main(["-v", "image-info", MODEL, "-q"]) == 2
    assert "cannot be used together" in capsys.readouterr().err


def test_no_command_gives_a_global_flag_a_second_meaning():
    assert conflicts(cli) == {}


def test_board_command_with_port_and_json_after_it(capsys):
    assert main(["flash-id", "-p", SIM, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"]["port"] == SIM and doc["result"]["jedec_id"] == "0xEF4018"


def test_model_and_image_commands_with_json_after_them(capsys):
    assert main(["model", "info", MODEL, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"]
    assert main(["image-info", MODEL, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["result"]


def test_board_option_after_check_layout_picks_the_flash_size(tmp_path, capsys):
    data = tmp_path / "d.bin"
    data.write_bytes(b"\x01" * 0x1000)
    assert main(["check-layout", "0xF00000", str(data), "--json", "-B", "maix-bit"]) == 0
    assert json.loads(capsys.readouterr().out)["result"]["board"] == "maix-bit"


def test_help_names_the_global_options(capsys):
    assert main(["burn", "--help"]) == 0
    assert "Global options" in capsys.readouterr().out
