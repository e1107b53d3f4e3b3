"""The one timeout table and its environment overrides (kflashpy/isp/timeouts.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kflashpy.errors import InputError
from kflashpy.isp import kfpy_stage2, rom, stage2, timeouts


def test_the_clients_read_the_table():
    t = timeouts.TIMEOUTS
    assert t["reply"] == stage2.DEFAULT_TIMEOUT and t["chip_erase"] == stage2.CHIP_ERASE_TIMEOUT
    assert t["rom_greeting"] == rom.GREETING_TIMEOUT and t["rom_write"] == rom.WRITE_TIMEOUT
    assert t["ack"] == kfpy_stage2.ACK_TIMEOUT and t["command"] == kfpy_stage2.COMMAND_TIMEOUT


def test_defaults_scale_and_one_override():
    assert timeouts.load({}) == {n: d for n, (d, _) in timeouts.DEFAULTS.items()}
    env = {"KFLASHPY_TIMEOUT_SCALE": "2", "KFLASHPY_TIMEOUT_CHIP_ERASE": "400"}
    table = timeouts.load(env)
    assert table["reply"] == 6.0 and table["chip_erase"] == 800.0


@pytest.mark.parametrize(
    "env,needle",
    [
        ({"KFLASHPY_TIMEOUT_REPLY": "soon"}, "KFLASHPY_TIMEOUT_REPLY='soon'"),
        ({"KFLASHPY_TIMEOUT_SCALE": "-1"}, "KFLASHPY_TIMEOUT_SCALE"),
        ({"KFLASHPY_TIMEOUT_REPLIES": "3"}, "unknown timeout KFLASHPY_TIMEOUT_REPLIES"),
    ],
)
def test_bad_overrides_are_input_errors_naming_the_variable(env, needle):
    with pytest.raises(InputError, match=needle.replace("(", r"\(")) as info:
        timeouts.load(env)
    assert info.value.hint


def test_the_cli_reports_a_bad_override_before_opening_the_port():
    env = {**os.environ, "KFLASHPY_TIMEOUT_SCALE": "fast"}
    out = subprocess.run(
        [sys.executable, "-m", "kflashpy", "-p", "sim://?board=maix-bit", "reboot"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2, out.stderr
    assert "KFLASHPY_TIMEOUT_SCALE='fast'" in out.stderr and "Traceback" not in out.stderr


def test_the_docs_name_every_timeout():
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "burning.md").read_text()
    for name, (default, _what) in timeouts.DEFAULTS.items():
        assert f"| `{name}` | `KFLASHPY_TIMEOUT_{name.upper()}` | {default:g} |" in text
