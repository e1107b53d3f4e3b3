"""Stage 1: the K210 mask-ROM ISP (greeting, SRAM writes, boot, optional baud change).

The ROM answers on UARTHS at 115200 baud. It takes memory writes of at most 1 KiB per
frame and answers each with ``C3 E0`` (some ROM paths answer ``C3 00``, which is also
success). ``MEMORY_BOOT`` jumps to SRAM without answering.
"""

from __future__ import annotations

import struct

from ..errors import NoResponseError, ProtocolError
from ..progress import Progress, ProgressFn, report
from ..target import k210
from .frames import ROM_MAX_CHUNK, RomOp
from .link import Link
from .timeouts import TIMEOUTS

ROM_BAUD = k210.ROM_BAUD
GREETING_TIMEOUT = TIMEOUTS["rom_greeting"]
#: the ROM answers a greeting within ~2 ms; after a quick reset a short wait is enough
QUICK_GREETING_TIMEOUT = TIMEOUTS["rom_quick_greeting"]
WRITE_TIMEOUT = TIMEOUTS["rom_write"]
WRITE_RETRIES = 8

#: the ROM derives its divider from a 38 MHz assumption while some boards run the UART
#: clock differently; kflash scales the requested rate by 38.6/38 on FT2232 boards
ROM_BAUD_FACTOR = {"ft2232": 38.6 / 38}


class Rom:
    """Talks to the mask ROM over an established :class:`Link`."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def greet(self, timeout: float = GREETING_TIMEOUT) -> bool:
        """Send one NOP and wait for ``C2 E0``; False when nothing valid came back."""
        self.link.send(RomOp.NOP)
        try:
            resp = self.link.recv(RomOp.NOP, timeout)
        except NoResponseError:
            return False
        if not resp.ok:
            raise ProtocolError(
                f"the boot ROM answered the greeting with {resp.describe()}",
                "reset the board and try again",
            )
        return True

    def write_memory(
        self, address: int, data: bytes, progress: ProgressFn | None = None, label: str = ""
    ) -> None:
        """Write ``data`` to SRAM at ``address`` in 1 KiB frames.

        A frame is resent (never skipped) until the ROM acknowledges it; the address
        advances only after an OK.
        """
        total = len(data)
        report(progress, Progress("upload", 0, total, label))
        for pos in range(0, total, ROM_MAX_CHUNK):
            chunk = data[pos : pos + ROM_MAX_CHUNK]
            self.link.request(
                RomOp.MEMORY_WRITE,
                address + pos,
                chunk,
                timeout=WRITE_TIMEOUT,
                nop_op=RomOp.NOP,
                retries=WRITE_RETRIES,
                what=f"SRAM write at 0x{address + pos:08X}",
            )
            report(progress, Progress("upload", pos + len(chunk), total, label))

    def boot(self, entry: int) -> None:
        """Jump to ``entry``; the ROM does not answer, the program takes over the line."""
        self.link.send(RomOp.MEMORY_BOOT, entry, data_len=0)
        self.link.port.flush()

    def set_baud(self, baud: int, factor: float = 1.0) -> bool:
        """Ask the ROM to change its rate, follow it, and check it still answers.

        Returns False (line back at 115200, ROM answering) if the ROM could not be
        reached at the new rate; the caller then continues slowly. Raises
        :class:`NoResponseError` if the ROM answers at neither rate.
        """
        self.link.send(RomOp.BAUDRATE_SET, 0, struct.pack("<I", int(baud * factor)))
        self.link.wait(0.05)
        self.link.set_baud(baud)
        for _ in range(3):
            if self.greet():
                return True
        self.link.set_baud(ROM_BAUD)
        if any(self.greet() for _ in range(3)):
            return False
        raise NoResponseError(
            f"the boot ROM stopped answering after a switch to {baud} baud",
            "reset the board and try again without --rom-baud",
        )
