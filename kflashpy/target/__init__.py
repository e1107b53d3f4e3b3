"""The K210 and its boards: every fact about the chip and the board/firmware model.

* :mod:`.k210` — the chip: SRAM and mask-ROM addresses, ROM baud, flash geometry and
  limits, the peripheral map. Every other module reads these names instead of restating
  a number.
* :mod:`.boards` — boards, reset wirings and firmware layouts, loaded from the TOML data in
  ``firmware_layouts/`` (documented by ``firmware_layouts/SCHEMA.md``).

Ground floor: imports nothing of kflashpy above ``errors`` and ``units``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .boards import (
        Board,
        Firmware,
        Region,
        ResetStep,
        UsbId,
        Wiring,
        get_board,
        get_firmware,
        load_boards,
        load_firmware_file,
        load_firmwares,
    )

#: public name -> the module defining it, imported on first use (kflashpy/_lazy.py)
EXPORTS: dict[str, str] = {
    "Board": ".boards",
    "Firmware": ".boards",
    "Region": ".boards",
    "ResetStep": ".boards",
    "UsbId": ".boards",
    "Wiring": ".boards",
    "get_board": ".boards",
    "get_firmware": ".boards",
    "load_boards": ".boards",
    "load_firmware_file": ".boards",
    "load_firmwares": ".boards",
}

__all__ = [
    "Board",
    "Firmware",
    "Region",
    "ResetStep",
    "UsbId",
    "Wiring",
    "get_board",
    "get_firmware",
    "load_boards",
    "load_firmware_file",
    "load_firmwares",
]

__getattr__, __dir__ = lazy_exports(__name__, EXPORTS, globals())
