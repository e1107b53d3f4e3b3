"""The virtual K210: mask ROM, emulated RV64 core, peripherals, NOR flash, virtual clock.

Reach it as a serial URL (``sim://?board=maix-bit``, see :mod:`kflashpy.sim.protocol_sim`)
or drive :class:`~kflashpy.sim.board.VirtualBoard` directly. Nothing outside ``sim``
imports this package; the client sees the board only through a port.
"""

from __future__ import annotations

from .board import VirtualBoard
from .config import BoardConfig

__all__ = ["BoardConfig", "VirtualBoard"]
