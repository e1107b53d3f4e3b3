"""The virtual K210: mask ROM, emulated RV64 core, peripherals, NOR flash, virtual clock.

Reach it as a serial URL (``sim://?board=maix-bit``, see :mod:`kflashpy.sim.protocol_sim`)
or drive :class:`~kflashpy.sim.board.VirtualBoard` directly. Nothing outside ``sim``
imports this package; the client sees the board only through a port.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .board import VirtualBoard
    from .config import BoardConfig

#: public name -> the module defining it, imported on first use (kflashpy/_lazy.py)
EXPORTS: dict[str, str] = {
    "VirtualBoard": ".board",
    "BoardConfig": ".config",
}

__all__ = [
    "BoardConfig",
    "VirtualBoard",
]

__getattr__, __dir__ = lazy_exports(__name__, EXPORTS, globals())
