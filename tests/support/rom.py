"""Greeting the boot ROM of a board on a serial port (a pty of ``sim serve`` in the tests)."""

from __future__ import annotations

import time

import serial

from kflashpy.isp.frames import RomOp, legacy_short_request
from kflashpy.isp.slip import encode

#: the ROM's NOP request and its answer
GREETING = encode(legacy_short_request(RomOp.NOP))
REPLY = bytes.fromhex("c0c2e0c0")


def greet(port: serial.Serial, timeout: float = 3.0) -> bytes:
    """Send the ROM greeting; return what came back up to the reply (boot text skipped)."""
    port.write(GREETING)
    got = b""
    deadline = time.monotonic() + timeout
    while not got.endswith(REPLY) and time.monotonic() < deadline:
        got += port.read(1)
    return got
