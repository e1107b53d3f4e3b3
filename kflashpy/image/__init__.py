"""Bytes destined for flash: boot images, kfpkg packages, content kinds, the plan checker.

* :mod:`.bootimage` — wrap/unwrap the ROM boot image (flag, length, payload, SHA-256;
  optional AES-128-CBC for OTP-keyed chips).
* :mod:`.kfpkg` — read packages from every producer, write the portable dialect.
* :mod:`.content` — what a binary is, from its bytes.
* :mod:`.plan` — the layout checker used by ``check-layout``, ``pack`` and ``burn``.
* :mod:`.merge` — one flat flash image from a plan (``merge``).

Pure: never imports the serial, simulator, MaixPy or CLI layers.
"""

from __future__ import annotations

from ..keys import load_key
from ..target.boards import Board, Firmware, get_board, get_firmware, load_boards, load_firmwares
from .api import check_layout, image_info, load_items, merge, pack, unpack
from .bootimage import BootImage, parse_boot_image, unwrap_boot_image, wrap_boot_image
from .content import ContentInfo, detect_content
from .kfpkg import Kfpkg, KfpkgEntry, read_kfpkg, write_kfpkg
from .plan import Finding, FlashItem, FlashPlan, PlannedRegion, plan_flash

__all__ = [
    "BootImage",
    "Board",
    "ContentInfo",
    "Finding",
    "Firmware",
    "FlashItem",
    "FlashPlan",
    "Kfpkg",
    "KfpkgEntry",
    "PlannedRegion",
    "check_layout",
    "detect_content",
    "get_board",
    "get_firmware",
    "image_info",
    "load_boards",
    "load_firmwares",
    "load_items",
    "load_key",
    "merge",
    "pack",
    "parse_boot_image",
    "plan_flash",
    "read_kfpkg",
    "unpack",
    "unwrap_boot_image",
    "wrap_boot_image",
    "write_kfpkg",
]
