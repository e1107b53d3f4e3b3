"""What answers on the UART after the ROM booted a valid firmware image from flash.

The board hands the serial line to a *personality*: an object with
``on_host_bytes(data, now)`` and ``poll(now) -> bytes``. ``"maixpy"`` is the MaixPy REPL
model in :mod:`kflashpy.sim.maixpy_personality` (when installed); ``"silent"`` is a
firmware that prints one boot banner and then ignores its input.
"""

from __future__ import annotations

import hashlib
import importlib
from typing import Protocol

from kflashpy.errors import InputError

from .parts import BoardServices

FIRMWARE_BAUD = 115200


class Personality(Protocol):
    def on_host_bytes(self, data: bytes, now: float) -> None: ...

    def poll(self, now: float) -> bytes: ...


class SilentFirmware:
    """A firmware that says which image booted, then stays quiet."""

    def __init__(self, board: BoardServices) -> None:
        result = board.boot_result
        length = result.length if result else 0
        digest = hashlib.sha256(bytes(board.sram.data[:length])).hexdigest()[:16]
        self._banner = f"\r\n[virtual K210] firmware booted: {length} bytes, sha256 {digest}\r\n"
        self._sent = False
        self.received = 0

    def on_host_bytes(self, data: bytes, now: float) -> None:
        self.received += len(data)

    def poll(self, now: float) -> bytes:
        if self._sent:
            return b""
        self._sent = True
        return self._banner.encode()


def default_personality() -> str:
    """ "maixpy" when the MaixPy personality module is installed, else "silent"."""
    try:
        importlib.import_module("kflashpy.sim.maixpy_personality")
    except ImportError:
        return "silent"
    return "maixpy"


def make_personality(name: str | None, board: BoardServices) -> Personality:
    """Instantiate the personality called ``name`` (None: the default) for ``board``."""
    name = name or default_personality()
    if name == "silent":
        return SilentFirmware(board)
    if name == "maixpy":
        module = importlib.import_module("kflashpy.sim.maixpy_personality")
        return module.MaixPyPersonality(board)  # type: ignore[no-any-return]
    raise InputError(f"unknown personality {name!r}", hint="use personality=maixpy or silent")
