"""One entry point for every supported kmodel version.

:func:`parse` recognises the version from the header and hands the bytes to the
matching parser. It refuses, with a clear :class:`~kflashpy.errors.FormatError`,
what cannot be parsed: not a kmodel, a MaixHub encrypted model (opaque by design),
V1 (recognised but not parsed), a later non-K210 version, or the load_flash
word-swapped form (unless ``allow_swapped``).
"""

from __future__ import annotations

from typing import Union

from ..errors import FormatError
from .detect import detect, swap_words
from .v3 import KModelV3, parse_v3
from .v4 import KModelV4, parse_v4
from .v5 import KModelV5, parse_v5

__all__ = ["KModel", "parse", "unswap"]

KModel = Union[KModelV3, KModelV4, KModelV5]  # noqa: UP007 (runtime alias on 3.10)


def unswap(data: bytes) -> bytes:
    """Undo the load_flash word swap (pads a ragged tail with zeros first)."""
    if len(data) % 4:
        data = bytes(data) + bytes(4 - len(data) % 4)
    return swap_words(bytes(data))


def parse(
    data: bytes | bytearray | memoryview,
    source: str = "kmodel",
    *,
    allow_swapped: bool = False,
) -> KModel:
    """Parse a kmodel of any supported version (V3, V4, V5).

    ``source`` names the file in error messages (a path also enables MaixHub
    ``.smodel``/``.emodel`` recognition). With ``allow_swapped`` a load_flash
    word-swapped file is swapped back before parsing.
    """
    data = bytes(data)
    sig = detect(data, source)
    if sig is None:
        raise FormatError(
            f"{source}: not a kmodel (first bytes {data[:8].hex(' ')})",
            "expected a V3 (03 00 00 00) or V4/V5 (LDMK) kmodel file",
        )
    if sig.opaque:
        raise FormatError(
            f"{source}: MaixHub .{sig.opaque} models are encrypted for one board and opaque",
            "kflashpy can burn or copy it but never parses or preprocesses it",
        )
    if sig.swapped:
        if not allow_swapped:
            raise FormatError(
                f"{source}: this is the load_flash word-swapped form of a kmodel V{sig.version}",
                "parse the original file, or swap it back with `kflashpy model prep-flash --unswap`",
            )
        data = unswap(data)
    if sig.version == 3:
        return parse_v3(data, source)
    if sig.version == 4:
        return parse_v4(data, source)
    if sig.version == 5:
        return parse_v5(data, source)
    if sig.version == 1:
        raise FormatError(
            f"{source}: kmodel V1 (pre-nncase Kendryte model compiler) is recognised but not parsed",
            "recompile the model with nncase v0.1 (V3) or v0.2 (V4) for MaixPy",
        )
    raise FormatError(
        f"{source}: kmodel V{sig.version} is not a K210 format (K210 uses V3, V4 or V5)",
        "compile the model for the k210 target with nncase <= 1.9",
    )


#: name under which the package root exports :func:`parse`
parse_kmodel = parse
