"""A virtual board that boots 'MaixPy': its flash image, its ``sim://`` URL, a REPL on it."""

from __future__ import annotations

from pathlib import Path

from kflashpy.image.bootimage import wrap_boot_image
from kflashpy.isp.ports import open_port
from kflashpy.maixpy.repl import MaixPyRepl

FLASH_SIZE = 4 << 20


def make_flash(
    tmp_path: Path,
    regions: dict[int, bytes] | None = None,
    size: int = FLASH_SIZE,
    name: str = "flash.img",
) -> str:
    """A flash file (4 MiB unless told) with a valid boot image at 0 (so the board boots
    'MaixPy')."""
    img = bytearray(b"\xff" * size)
    fw = wrap_boot_image(b"\x13\x00\x00\x00" * 1024)
    img[: len(fw)] = fw
    for addr, data in (regions or {}).items():
        img[addr : addr + len(data)] = data
    path = tmp_path / name
    path.write_bytes(img)
    return str(path)


def flash16(tmp_path: Path) -> str:
    """A 16 MiB flash with a bootable image: MaixPy's /flash lives at 0xD00000 in it."""
    return make_flash(tmp_path, size=16 << 20, name="flash16.img")


def sim_url(flash: str, **opts: str) -> str:
    """The ``sim://`` URL of a virtual board on ``flash`` (extra URL options as keywords)."""
    query = "&".join(f"{k}={v}" for k, v in opts.items())
    return f"sim://?flash={flash}&flash_size=4M" + (f"&{query}" if query else "")


def connect(url: str, **kw) -> MaixPyRepl:
    """A REPL driver on ``url``, at the raw prompt."""
    repl = MaixPyRepl(open_port(url), **kw)
    repl.connect()
    return repl
