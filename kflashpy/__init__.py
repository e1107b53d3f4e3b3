"""kflashpy: a toolchain for Kendryte K210 boards.

The library is the product; the ``kflashpy`` command is a thin layer on it. Public
functions never print or exit: they return typed results, raise
:class:`kflashpy.errors.KflashError` subclasses, and report progress through a
callback (:mod:`kflashpy.progress`).
"""

__version__ = "0.1.0"

#: public names -> the module defining them, imported on first use so that
#: ``import kflashpy`` stays cheap. Each area adds its own names here.
_LAZY: dict[str, str] = {
    "run_demo": "kflashpy.demo",
    # images, packages and layouts
    "wrap_boot_image": "kflashpy.image.bootimage",
    "unwrap_boot_image": "kflashpy.image.bootimage",
    "parse_boot_image": "kflashpy.image.bootimage",
    "image_info": "kflashpy.image.api",
    "check_layout": "kflashpy.image.api",
    "pack": "kflashpy.image.api",
    "unpack": "kflashpy.image.api",
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
    # kmodels: detect, parse, describe, load_flash preparation, sealing
    "detect_kmodel": "kflashpy.model.detect",
    "parse_kmodel": "kflashpy.model.dispatch",
    "model_info": "kflashpy.model.info",
    "prep_flash": "kflashpy.model.prep",
    "seal_bytes": "kflashpy.model.seal",
    "unseal_bytes": "kflashpy.model.seal",
    # the board: connect, burn, erase, load-ram, reboot
    "connect": "kflashpy.isp.connect",
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
    # flash read-back through kflashpy's own flasher
    "read_flash": "kflashpy.isp.flashops",
    "verify_flash": "kflashpy.isp.flashops",
    "flash_id": "kflashpy.isp.flashops",
    # MaixPy side: REPL driver and board-vs-host comparison
    "open_repl": "kflashpy.maixpy.repl",
    "MaixPyRepl": "kflashpy.maixpy.repl",
    "compare": "kflashpy.maixpy.compare",
    "LoadSpec": "kflashpy.maixpy.compare",
    "board_info": "kflashpy.maixpy.board",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kflashpy' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
