"""Bytes destined for flash: boot images, kfpkg packages, content kinds, the plan checker.

* :mod:`.bootimage` — wrap/unwrap the ROM boot image (flag, length, payload, SHA-256;
  optional AES-128-CBC for OTP-keyed chips).
* :mod:`.kfpkg` — read packages from every producer, write the portable dialect.
* :mod:`.content` — what a binary is, from its bytes.
* :mod:`.plan` — the layout checker used by ``check-layout``, ``pack`` and ``burn``.
* :mod:`.flatten` — one flat flash image from a plan (``merge``).

Boards and firmware layouts are K210 facts: they live in :mod:`kflashpy.target`, and key
loading in :mod:`kflashpy.keys`. Pure: never imports the serial, simulator, MaixPy or CLI
layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .api import check_layout, image_info, load_items, merge, pack, unpack
    from .bootimage import BootImage, parse_boot_image, unwrap_boot_image, wrap_boot_image
    from .content import ContentInfo, detect_content
    from .kfpkg import Kfpkg, KfpkgEntry, read_kfpkg, write_kfpkg
    from .plan import Finding, FlashItem, FlashPlan, PlannedRegion, plan_flash

#: public name -> the module defining it, imported on first use (kflashpy/_lazy.py)
EXPORTS: dict[str, str] = {
    "check_layout": ".api",
    "image_info": ".api",
    "load_items": ".api",
    "merge": ".api",
    "pack": ".api",
    "unpack": ".api",
    "BootImage": ".bootimage",
    "parse_boot_image": ".bootimage",
    "unwrap_boot_image": ".bootimage",
    "wrap_boot_image": ".bootimage",
    "ContentInfo": ".content",
    "detect_content": ".content",
    "Kfpkg": ".kfpkg",
    "KfpkgEntry": ".kfpkg",
    "read_kfpkg": ".kfpkg",
    "write_kfpkg": ".kfpkg",
    "Finding": ".plan",
    "FlashItem": ".plan",
    "FlashPlan": ".plan",
    "PlannedRegion": ".plan",
    "plan_flash": ".plan",
}

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

__getattr__, __dir__ = lazy_exports(__name__, EXPORTS, globals())
