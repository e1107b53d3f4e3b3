"""kflashpy's own stage-2 flasher, shipped prebuilt (source and build in ``stub/``).

Two programs, both built bit-reproducibly by ``python stub/build.py`` with the pinned
ziglang toolchain and checked in CI (``--check``):

* ``kflashpy_boot.bin`` (< 2 KiB): uploaded through the mask ROM at 115200; it moves the
  line to the transfer baud rate and loads the flasher at that rate;
* ``kflashpy_flasher.bin``: the flasher itself (linked high in SRAM; it also runs when
  a kflash-style host uploads it to 0x80000000, by copying itself up first).

``flasher.json`` records load address, entry, size and SHA-256 of both, the protocol
version and the capabilities; :func:`load` checks the files against it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from ..errors import FormatError

#: offset of the u32 parameter in both programs' header (bootstrap: its baud rate)
PARAM_OFFSET = 8
HEADER_MAGIC = b"KFPY"


@dataclass(frozen=True)
class Program:
    """One built program and its metadata."""

    name: str
    image: bytes
    load_address: int
    entry: int

    def with_param(self, value: int) -> bytes:
        """The image with its header parameter set (the bootstrap's start baud)."""
        return (
            self.image[:PARAM_OFFSET] + value.to_bytes(4, "little") + self.image[PARAM_OFFSET + 4 :]
        )


@dataclass(frozen=True)
class FlasherBuild:
    protocol_version: int
    capabilities: tuple[str, ...]
    boot: Program
    flasher: Program


@lru_cache(maxsize=1)
def load() -> FlasherBuild:
    """Read and check the shipped binaries (cached)."""
    pkg = resources.files(__name__)
    meta = json.loads((pkg / "flasher.json").read_text(encoding="utf-8"))
    progs = {}
    for name, info in meta["programs"].items():
        image = (pkg / info["file"]).read_bytes()
        if hashlib.sha256(image).hexdigest() != info["sha256"] or image[4:8] != HEADER_MAGIC:
            raise FormatError(
                f"kflashpy/stub/{info['file']}: does not match flasher.json",
                "reinstall kflashpy, or rebuild with `python stub/build.py`",
            )
        progs[name] = Program(name, image, info["load_address"], info["entry"])
    return FlasherBuild(
        meta["protocol_version"], tuple(meta["capabilities"]), progs["boot"], progs["flasher"]
    )
