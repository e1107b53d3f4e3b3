"""Opt-in: the REPL driver and compare against a real MaixPy board.

Set ``KFLASHPY_MAIXPY_PORT=/dev/ttyUSB0`` (and optionally ``KFLASHPY_MAIXPY_MODEL`` plus
``KFLASHPY_MAIXPY_ADDR`` for a model already burned there) and run
``pytest -m hardware tests/test_maixpy_hardware.py``.
"""

from __future__ import annotations

import os

import pytest

from kflashpy.maixpy.board import board_info
from kflashpy.maixpy.compare import LoadSpec, compare
from kflashpy.maixpy.repl import open_repl

PORT = os.environ.get("KFLASHPY_MAIXPY_PORT")
pytestmark = [
    pytest.mark.hardware,
    pytest.mark.skipif(not PORT, reason="set KFLASHPY_MAIXPY_PORT to run against a board"),
]


def test_board_answers_as_maixpy():
    with open_repl(PORT, reset=True) as repl:
        assert repl.exec_raw("print(1+1)") == b"2\n"
        assert board_info(repl).platform == "MaixPy"


@pytest.mark.skipif(not os.environ.get("KFLASHPY_MAIXPY_MODEL"), reason="no model given")
def test_compare_on_the_board():
    model = os.environ["KFLASHPY_MAIXPY_MODEL"]
    addr = int(os.environ.get("KFLASHPY_MAIXPY_ADDR", "0x300000"), 0)
    with open(model, "rb") as f, open_repl(PORT, reset=True) as repl:
        rep = compare(repl, f.read(), LoadSpec(addr=addr), "random:1")
    assert rep.passed, rep.as_dict()


def test_files_on_the_board_flash():
    """A put/get round trip on the real SPIFFS, then the file is removed again."""
    from kflashpy.maixpy import fs

    data = os.urandom(20_000)
    with open_repl(PORT, reset=True) as repl:
        fs.write_file(repl, "/flash/kflashpy_hw.bin", data)
        assert fs.read_file(repl, "/flash/kflashpy_hw.bin") == data
        assert fs.Entry("/flash/kflashpy_hw.bin", False, len(data)) in fs.ls(repl, "/flash")
        assert any(u.mount == "/flash" and u.free > 0 for u in fs.df(repl))
        fs.rm(repl, "/flash/kflashpy_hw.bin")
        assert fs.stat(repl, "/flash/kflashpy_hw.bin") is None
