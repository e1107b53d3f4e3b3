"""Opt-in: the REPL driver and compare against a real MaixPy board.

Run ``pytest -m hardware --port /dev/ttyUSB0 --board maix-bit tests/test_maixpy_hardware.py``
(options defined in ``tests/conftest.py``; without ``--port`` these tests are skipped).
For the comparison, also set ``KFLASHPY_MAIXPY_MODEL`` to a kmodel file burned at
``KFLASHPY_MAIXPY_ADDR`` (default 0x300000).
"""

from __future__ import annotations

import os

import pytest

from kflashpy.maixpy.board import board_info
from kflashpy.maixpy.compare import LoadSpec, compare
from kflashpy.maixpy.repl import open_repl

pytestmark = pytest.mark.hardware


def test_board_answers_as_maixpy(hw_port, hw_board):
    with open_repl(hw_port, reset=True, board=hw_board) as repl:
        assert repl.exec_raw("print(1+1)") == b"2\n"
        assert board_info(repl).platform == "MaixPy"


@pytest.mark.skipif(not os.environ.get("KFLASHPY_MAIXPY_MODEL"), reason="no model given")
def test_compare_on_the_board(hw_port, hw_board):
    model = os.environ["KFLASHPY_MAIXPY_MODEL"]
    addr = int(os.environ.get("KFLASHPY_MAIXPY_ADDR", "0x300000"), 0)
    with open(model, "rb") as f, open_repl(hw_port, reset=True, board=hw_board) as repl:
        rep = compare(repl, f.read(), LoadSpec(addr=addr), "random:1")
    assert rep.passed, rep.to_dict()


def test_files_on_the_board_flash(hw_port, hw_board):
    """A put/get round trip on the real SPIFFS, then the file is removed again."""
    from kflashpy.maixpy import fs

    data = os.urandom(20_000)
    with open_repl(hw_port, reset=True, board=hw_board) as repl:
        fs.write_file(repl, "/flash/kflashpy_hw.bin", data)
        assert fs.read_file(repl, "/flash/kflashpy_hw.bin") == data
        assert fs.Entry("/flash/kflashpy_hw.bin", False, len(data)) in fs.ls(repl, "/flash")
        assert any(u.mount == "/flash" and u.free > 0 for u in fs.df(repl))
        fs.rm(repl, "/flash/kflashpy_hw.bin")
        assert fs.stat(repl, "/flash/kflashpy_hw.bin") is None
