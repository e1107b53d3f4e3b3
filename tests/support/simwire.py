"""Raw protocol on the virtual board, for tests and benchmarks that talk frames
themselves: reset into the boot ROM and read one SLIP reply."""

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


def enter_isp(port: serial.SerialBase) -> None:
    """Reset the board into the boot ROM with the Maix Bit's wiring (RTS = RESET held
    with IO16 high, then RESET released with IO16 low) and drop its output."""
    port.timeout = 0.1
    port.dtr, port.rts = False, True
    port.read(4096)
    port.rts, port.dtr = False, True
    port.read(4096)
    port.reset_input_buffer()
