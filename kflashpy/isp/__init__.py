"""The serial side of kflashpy: framing, ports, board reset, ROM and stage-2 protocols."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .api import (
        EraseResult,
        LoadRamResult,
        RebootResult,
        burn_plan,
        erase,
        load_ram,
        plan_burn,
        reboot,
    )
    from .burn import BurnResult, RegionResult, WriteRegion, burn_on, erase_on
    from .connect import ConnectOptions, Device, open_device
    from .flashops import (
        FlashIdResult,
        ReadResult,
        VerifyResult,
        flash_id,
        read_flash,
        verify_flash,
    )

#: public name -> the module defining it, imported on first use (kflashpy/_lazy.py)
EXPORTS: dict[str, str] = {
    "BurnResult": ".burn",
    "RegionResult": ".burn",
    "WriteRegion": ".burn",
    "burn_on": ".burn",
    "erase_on": ".burn",
    "EraseResult": ".api",
    "LoadRamResult": ".api",
    "RebootResult": ".api",
    "burn_plan": ".api",
    "erase": ".api",
    "load_ram": ".api",
    "plan_burn": ".api",
    "reboot": ".api",
    "ConnectOptions": ".connect",
    "Device": ".connect",
    "open_device": ".connect",
    "FlashIdResult": ".flashops",
    "ReadResult": ".flashops",
    "VerifyResult": ".flashops",
    "flash_id": ".flashops",
    "read_flash": ".flashops",
    "verify_flash": ".flashops",
}

__all__ = [
    "BurnResult",
    "ConnectOptions",
    "Device",
    "EraseResult",
    "FlashIdResult",
    "LoadRamResult",
    "ReadResult",
    "RebootResult",
    "RegionResult",
    "VerifyResult",
    "WriteRegion",
    "burn_on",
    "burn_plan",
    "erase",
    "erase_on",
    "flash_id",
    "load_ram",
    "open_device",
    "plan_burn",
    "read_flash",
    "reboot",
    "verify_flash",
]

__getattr__, __dir__ = lazy_exports(__name__, EXPORTS, globals())
