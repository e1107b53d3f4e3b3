"""kflashpy: a toolchain for Kendryte K210 boards.

The library is the product; the ``kflashpy`` command is a thin layer on it. Public
functions never print or exit: they return typed results, raise
:class:`kflashpy.errors.KflashError` subclasses, and report progress through a
callback (:mod:`kflashpy.progress`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

__version__ = "0.1.0"

if TYPE_CHECKING:
    from kflashpy.demo import run_demo
    from kflashpy.image.api import check_layout, image_info, merge, pack, unpack
    from kflashpy.image.bootimage import parse_boot_image, unwrap_boot_image, wrap_boot_image
    from kflashpy.image.flashmap import flash_map_svg
    from kflashpy.image.kfpkg import read_kfpkg, write_kfpkg
    from kflashpy.image.plan import FlashItem, FlashPlan, plan_flash
    from kflashpy.isp.api import burn, burn_plan, erase, load_ram, plan_burn, reboot
    from kflashpy.isp.burn import BurnResult, WriteRegion, burn_on, erase_on
    from kflashpy.isp.connect import ConnectOptions, connect
    from kflashpy.isp.flashops import flash_id, read_flash, verify_flash
    from kflashpy.keys import load_key
    from kflashpy.maixpy.board import board_info
    from kflashpy.maixpy.compare import LoadSpec, compare
    from kflashpy.maixpy.repl import MaixPyRepl, open_repl
    from kflashpy.model.detect import detect_kmodel
    from kflashpy.model.dispatch import parse_kmodel
    from kflashpy.model.info import model_info
    from kflashpy.model.prep import prep_flash
    from kflashpy.model.seal import seal_bytes, unseal_bytes
    from kflashpy.target.boards import get_board, get_firmware, load_boards, load_firmwares

#: public name -> the module defining it, imported on first use (kflashpy/_lazy.py)
EXPORTS: dict[str, str] = {
    "run_demo": "kflashpy.demo",
    "wrap_boot_image": "kflashpy.image.bootimage",
    "unwrap_boot_image": "kflashpy.image.bootimage",
    "parse_boot_image": "kflashpy.image.bootimage",
    "image_info": "kflashpy.image.api",
    "check_layout": "kflashpy.image.api",
    "pack": "kflashpy.image.api",
    "unpack": "kflashpy.image.api",
    "merge": "kflashpy.image.api",
    "read_kfpkg": "kflashpy.image.kfpkg",
    "write_kfpkg": "kflashpy.image.kfpkg",
    "plan_flash": "kflashpy.image.plan",
    "FlashItem": "kflashpy.image.plan",
    "FlashPlan": "kflashpy.image.plan",
    "flash_map_svg": "kflashpy.image.flashmap",
    "load_boards": "kflashpy.target.boards",
    "load_firmwares": "kflashpy.target.boards",
    "get_board": "kflashpy.target.boards",
    "get_firmware": "kflashpy.target.boards",
    "load_key": "kflashpy.keys",
    "detect_kmodel": "kflashpy.model.detect",
    "parse_kmodel": "kflashpy.model.dispatch",
    "model_info": "kflashpy.model.info",
    "prep_flash": "kflashpy.model.prep",
    "seal_bytes": "kflashpy.model.seal",
    "unseal_bytes": "kflashpy.model.seal",
    "connect": "kflashpy.isp.connect",
    "ConnectOptions": "kflashpy.isp.connect",
    "burn": "kflashpy.isp.api",
    "burn_plan": "kflashpy.isp.api",
    "plan_burn": "kflashpy.isp.api",
    "erase": "kflashpy.isp.api",
    "load_ram": "kflashpy.isp.api",
    "reboot": "kflashpy.isp.api",
    "burn_on": "kflashpy.isp.burn",
    "erase_on": "kflashpy.isp.burn",
    "WriteRegion": "kflashpy.isp.burn",
    "BurnResult": "kflashpy.isp.burn",
    "read_flash": "kflashpy.isp.flashops",
    "verify_flash": "kflashpy.isp.flashops",
    "flash_id": "kflashpy.isp.flashops",
    "open_repl": "kflashpy.maixpy.repl",
    "MaixPyRepl": "kflashpy.maixpy.repl",
    "compare": "kflashpy.maixpy.compare",
    "LoadSpec": "kflashpy.maixpy.compare",
    "board_info": "kflashpy.maixpy.board",
}

__all__ = [
    "BurnResult",
    "ConnectOptions",
    "FlashItem",
    "FlashPlan",
    "LoadSpec",
    "MaixPyRepl",
    "WriteRegion",
    "board_info",
    "burn",
    "burn_on",
    "burn_plan",
    "check_layout",
    "compare",
    "connect",
    "detect_kmodel",
    "erase",
    "erase_on",
    "flash_id",
    "flash_map_svg",
    "get_board",
    "get_firmware",
    "image_info",
    "load_boards",
    "load_firmwares",
    "load_key",
    "load_ram",
    "merge",
    "model_info",
    "open_repl",
    "pack",
    "parse_boot_image",
    "parse_kmodel",
    "plan_burn",
    "plan_flash",
    "prep_flash",
    "read_flash",
    "read_kfpkg",
    "reboot",
    "run_demo",
    "seal_bytes",
    "unpack",
    "unseal_bytes",
    "unwrap_boot_image",
    "verify_flash",
    "wrap_boot_image",
    "write_kfpkg",
]

__getattr__, __dir__ = lazy_exports(__name__, EXPORTS, globals())
