"""Run kflash.py 1.1.6's own code (the installed ``kflash`` module) without a board.

kflash.py defines its AES, its firmware wrapper (``MAIXLoader.flash_firmware``) and its
kfpkg loader inside ``KFlash.process``, so they cannot be imported. This helper finds
those definitions in the module's syntax tree at test time, compiles them unchanged
and runs them against a fake flash that records every write. Nothing of kflash.py is
copied into this repository.
"""

from __future__ import annotations

import ast
import tempfile
import types
from collections import defaultdict
from functools import lru_cache

import kflash

_WANTED = {
    "AES",
    "AES_128_CBC",
    "chunks",
    "MAIXLoader",
    "ISP_FLASH_SECTOR_SIZE",
    "ISP_FLASH_DATA_FRAME_SIZE",
}


def _process_node() -> ast.FunctionDef:
    with open(kflash.__file__, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KFlash")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "process")


def _raise(e):
    raise e


def _quiet(*args, **kwargs):
    return None


def _base_namespace() -> dict:
    ns = dict(vars(kflash))  # the module's own imports (copy, struct, hashlib, re, json...)
    ns.update(
        {
            "KFlash": kflash.KFlash,
            "INFO_MSG": "",
            "WARN_MSG": "",
            "ERROR_MSG": "",
            "BASH_TIPS": defaultdict(str),
            "MAX_RETRY_TIMES": 10,
            "raise_exception": _raise,
            "tuple2str": str,
            "printProgressBar": _quiet,
            "TerminalSize": types.SimpleNamespace(get_terminal_size=lambda *a, **k: (100, 24)),
            "terminal": False,
            "TemporaryDirectory": tempfile.TemporaryDirectory,
        }
    )
    return ns


@lru_cache(maxsize=1)
def _namespace() -> dict:
    proc = _process_node()
    nodes = [
        n
        for n in proc.body
        if (isinstance(n, ast.ClassDef | ast.FunctionDef) and n.name in _WANTED)
        or (isinstance(n, ast.Assign) and any(getattr(t, "id", None) in _WANTED for t in n.targets))
    ]
    ns = _base_namespace()
    exec(compile(ast.Module(body=nodes, type_ignores=[]), kflash.__file__, "exec"), ns)
    assert set(ns) >= _WANTED, "kflash.py 1.1.6 layout changed"
    return ns


@lru_cache(maxsize=1)
def _kfpkg_block():
    """The ``with TemporaryDirectory() as tmpdir:`` block that loads a kfpkg."""
    for node in ast.walk(_process_node()):
        if isinstance(node, ast.With) and any(
            isinstance(n, ast.Name) and n.id == "sFlashList" for n in ast.walk(node)
        ):
            return compile(ast.Module(body=[node], type_ignores=[]), kflash.__file__, "exec")
    raise AssertionError("kflash.py kfpkg loader not found")


class _FakeLoaderMixin:
    def __init__(self):
        self.writes: list[tuple[int, bytes]] = []

    def checkKillExit(self):  # noqa: N802 - kflash's name
        return None

    def dump_to_flash(self, data, address=0, size=None):
        self.writes.append((address, bytes(data)))


def _fake_loader():
    cls = type("FakeLoader", (_FakeLoaderMixin, _namespace()["MAIXLoader"]), {})
    return cls()


def _silenced(fn):
    saved = kflash.KFlash.print_callback
    kflash.KFlash.print_callback = _quiet
    try:
        return fn()
    finally:
        kflash.KFlash.print_callback = saved


def kflash_firmware_image(firmware: bytes, key: bytes | None = None, io_mode: str = "dio") -> bytes:
    """The bytes kflash.py 1.1.6 writes at address 0 for ``firmware`` (and ``key``)."""
    loader = _fake_loader()
    _silenced(lambda: loader.flash_firmware(firmware, key, 0, True, io_mode=io_mode))
    assert [a for a, _ in loader.writes] == sorted(a for a, _ in loader.writes)
    return b"".join(d for _, d in loader.writes)


def kflash_load_kfpkg(path: str, io_mode: str = "dio") -> list[tuple[int, bytes]]:
    """Run kflash.py's kfpkg loader on ``path``; return (address, bytes) per file written."""
    loader = _fake_loader()
    ns = _base_namespace()
    ns["args"] = types.SimpleNamespace(firmware=path, iomode=io_mode)
    ns["self"] = types.SimpleNamespace(loader=loader, checkKillExit=_quiet)
    marks: list[int] = []
    real = loader.flash_firmware

    def flash_firmware(data, aes_key=None, address_offset=0, sha256Prefix=True, **kw):  # noqa: N803
        marks.append(len(loader.writes))
        return real(data, aes_key, address_offset, sha256Prefix, **kw)

    loader.flash_firmware = flash_firmware
    _silenced(lambda: exec(_kfpkg_block(), ns))
    marks.append(len(loader.writes))
    files = []
    for a, b in zip(marks, marks[1:], strict=False):
        chunk = loader.writes[a:b]
        files.append((chunk[0][0] if chunk else -1, b"".join(d for _, d in chunk)))
    return files
