"""Bytes destined for flash: boot images, kfpkg packages, content kinds, the plan checker.

* :mod:`.bootimage` — wrap/unwrap the ROM boot image (flag, length, payload, SHA-256;
  optional AES-128-CBC for OTP-keyed chips).
* :mod:`.kfpkg` — read packages from every producer, write the portable dialect.
* :mod:`.content` — what a binary is, from its bytes.
* :mod:`.plan` — the layout checker used by ``check-layout``, ``pack`` and ``burn``.

Boards and firmware layouts are K210 facts: they live in :mod:`kflashpy.target`, and key
loading in :mod:`kflashpy.keys`. Pure: never imports the serial, simulator, MaixPy or CLI
layers.
"""

from __future__ import annotations

from .api import check_layout, image_info, load_items, pack, unpack
from .bootimage import BootImage, parse_boot_image, unwrap_boot_image, wrap_boot_image
from .content import ContentInfo, detect_content
from .kfpkg import Kfpkg, KfpkgEntry, read_kfpkg, write_kfpkg
from .plan import Finding, FlashItem, FlashPlan, PlannedRegion, plan_flash

__all__ = [
    "BootImage",
    "ContentInfo",
    "Finding",
    "FlashItem",
    "FlashPlan",
    "Kfpkg",
    "KfpkgEntry",
    "PlannedRegion",
    "check_layout",
    "detect_content",
    "image_info",
    "load_items",
    "pack",
    "parse_boot_image",
    "plan_flash",
    "read_kfpkg",
    "unpack",
    "unwrap_boot_image",
    "wrap_boot_image",
    "write_kfpkg",
]
