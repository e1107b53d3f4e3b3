"""Reading one SLIP reply from the virtual board, for tests that talk raw protocol."""

from __future__ import annotations

import serial

from kflashpy.isp.slip import SlipDecoder


def reply(port: serial.SerialBase, timeout: float = 1.0) -> bytes | None:
    """The first complete frame within ``timeout`` virtual seconds, else None."""
    dec = SlipDecoder()
    board = port.sim_board
    deadline = board.now + timeout
    port.timeout = 0.01
    while board.now < deadline:
        frames = dec.feed(port.read(64))
        if frames:
            return frames[0]
    return None
