"""The MaixPy side: a raw-REPL driver, on-board helpers and the board-vs-host comparison.

Everything here talks to a running MaixPy through a pyserial port (a real board, or
the virtual one as ``sim://...``); nothing imports the simulator.

- :mod:`.repl`: :class:`~.repl.MaixPyRepl` and :func:`~.repl.open_repl`;
- :mod:`.board`: flash read/hash through ``Maix.utils.flash_read``, board information;
- :mod:`.fs`: files on ``/flash`` and ``/sd`` (ls, get, put, rm, mkdir, df) and scripts;
- :mod:`.terminal`: the interactive terminal of ``kflashpy repl``;
- :mod:`.compare`: :func:`~.compare.compare` and its report types;
- :mod:`.errors`: MaixPy's KPU error codes with their likely causes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .board import BoardInfo, board_info
    from .compare import CompareReport, LoadSpec, OutputDiff
    from .repl import MaixPyRepl, open_repl

#: public name -> the module defining it, imported on first use (kflashpy/_lazy.py)
EXPORTS: dict[str, str] = {
    "MaixPyRepl": ".repl",
    "open_repl": ".repl",
    "BoardInfo": ".board",
    "board_info": ".board",
    "CompareReport": ".compare",
    "LoadSpec": ".compare",
    "OutputDiff": ".compare",
}

__all__ = [
    "BoardInfo",
    "CompareReport",
    "LoadSpec",
    "MaixPyRepl",
    "OutputDiff",
    "board_info",
    "open_repl",
]

__getattr__, __dir__ = lazy_exports(__name__, EXPORTS, globals())
