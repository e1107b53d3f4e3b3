"""Registry of stage-2 flasher programs: what to upload to SRAM and how to talk to it.

A stage-2 program ("stub") is uploaded by the mask ROM to SRAM and then speaks the
flash-mode protocol. Which opcodes it understands depends on the program, so each entry
binds a program to the client class (and capability set) that drives it:

* ``"kflash"``: the flasher inside the PyPI ``kflash`` 1.1.6 package, read from the
  installed module at run time (never stored in this repository);
* ``"kflashpy"``: this project's own flasher (added by its own module when present);
* a file path: any kflash-compatible program (``--stub FILE``). If its SHA-256 is one we
  know, the known capabilities apply; otherwise only the common D2-D7 set is assumed.
"""

from __future__ import annotations

import binascii
import hashlib
import importlib.util
import re
import zlib
from collections.abc import Callable
from pathlib import Path

from ..errors import FormatError, InputError
from ..target import k210
from .kfpy_stage2 import kflashpy_program
from .link import Link
from .stage2 import KflashStage2, Stage2, StubProgram

#: where kflash-family stubs are linked and entered
KFLASH_STUB_ADDRESS = k210.SRAM_BASE

#: SHA-256 of the PyPI kflash 1.1.6 stub (vowstar/kflash.py 550828c): handles D2-D9
KFLASH_116_SHA256 = "757776d0055048262ef92bd04a9f8cbad13647ec4f5c1f59494489a88d571129"


def kflash_package_stub() -> bytes:
    """The stub embedded in the installed ``kflash`` module (hex of zlib data in its source)."""
    spec = importlib.util.find_spec("kflash")
    if spec is None or not spec.origin:
        raise InputError(
            "the kflash stub needs the `kflash` Python package, which is not installed",
            "pip install kflash==1.1.6, or pass --stub FILE",
        )
    source = Path(spec.origin).read_text(encoding="utf-8", errors="replace")
    m = re.search(r"ISP_PROG\s*=\s*'([0-9a-fA-F]+)'", source)
    if not m:
        raise FormatError(
            f"{spec.origin}: no ISP_PROG stub found in this kflash version",
            "install kflash==1.1.6, or pass --stub FILE",
        )
    try:
        return zlib.decompress(binascii.unhexlify(m.group(1)))
    except (binascii.Error, zlib.error) as e:
        raise FormatError(f"{spec.origin}: the embedded stub cannot be decoded: {e}") from e


def _kflash_client(image: bytes) -> Callable[[Link], Stage2]:
    variant = (
        "kflash-1.1.6"
        if hashlib.sha256(image).hexdigest() == KFLASH_116_SHA256
        else "kflash-compatible"
    )
    return lambda link: KflashStage2(link, variant)


#: named stubs: name -> loader returning a StubProgram. Other modules (our own flasher)
#: register themselves here.
REGISTRY: dict[str, Callable[[], StubProgram]] = {}


def register(name: str, loader: Callable[[], StubProgram]) -> None:
    REGISTRY[name] = loader


def _load_kflash() -> StubProgram:
    image = kflash_package_stub()
    return StubProgram(
        "kflash", image, KFLASH_STUB_ADDRESS, KFLASH_STUB_ADDRESS, _kflash_client(image)
    )


register("kflash", _load_kflash)


register("kflashpy", kflashpy_program)

DEFAULT_STUB = "kflashpy"  # ours: hashes, verifies, skips unchanged sectors


def load_stub(spec: str | None = None) -> StubProgram:
    """Resolve a stub name or a file path to a program (default: :data:`DEFAULT_STUB`)."""
    spec = spec or DEFAULT_STUB
    if spec in REGISTRY:
        return REGISTRY[spec]()
    path = Path(spec)
    if not path.is_file():
        names = ", ".join(sorted(REGISTRY))
        raise InputError(
            f"--stub {spec!r}: neither a known stub ({names}) nor an existing file",
            "give a stub name or the path of a kflash-compatible flasher binary",
        )
    image = path.read_bytes()
    if not image or len(image) > 0x600000:
        raise FormatError(f"{path}: {len(image)} bytes is not a plausible stage-2 program")
    return StubProgram(
        path.name, image, KFLASH_STUB_ADDRESS, KFLASH_STUB_ADDRESS, _kflash_client(image)
    )
