"""What a part of the virtual board (mask ROM, core, firmware personality) may ask of the
board it sits on.

The parts hold a reference to their board; typing it as :class:`BoardServices` instead of
the concrete :class:`~kflashpy.sim.board.VirtualBoard` keeps the import graph one-way:
``board`` imports ``rom``, ``core`` and ``firmware``, and they import only this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .config import BoardConfig
from .flash import NorFlash
from .memory import Sram
from .wire import Wire


@dataclass
class BootResult:
    """Outcome of a normal boot attempt: ``ok`` or the reason it fell back to ISP."""

    ok: bool
    reason: str
    duration: float = 0.0
    encrypted: bool = False
    length: int = 0
    hang: bool = False  # the ROM jumped into an image it could not decrypt


class RomServices(Protocol):
    """What the core needs of the mask ROM: the UARTHS divider it left, and where the
    uploaded code lies (for the instruction scan)."""

    div: int

    def written_range(self, entry: int) -> tuple[int, int]: ...


class BoardServices(Protocol):
    """The board as its parts see it: clock, memories, serial line, life-cycle calls."""

    config: BoardConfig
    now: float  # virtual time, seconds
    host_baud: float  # the host side's rate on the serial line
    sram: Sram
    flash: NorFlash
    to_board: Wire  # host -> board bytes in flight
    boot_result: BootResult | None
    core: object | None  # the running core, if any (compared by identity)

    @property
    def rom(self) -> RomServices: ...

    def board_transmit(self, data: bytes, t: float, baud: float) -> None:
        """Send ``data`` to the host, starting at virtual time ``t``."""

    def start_core(self, entry: int, t: float) -> None:
        """The ROM jumps to ``entry`` at ``t``: the emulated core takes over."""

    def halt(self, reason: str) -> None:
        """The core stopped for good (a fault): nothing runs until a reset."""

    def soft_reset(self, at: float | None = None) -> None:
        """A SYSCTL soft reset: the ROM starts again and samples IO16."""
