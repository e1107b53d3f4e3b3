"""Cheap kmodel recognition from the first bytes of a file or flash region.

Several tools need to know "is this a kmodel, which version, and is it the
word-swapped form that ``kpu.load_flash`` wants?" without parsing the whole model
(``image-info``, ``check-layout``, ``pack``, ``model prep-flash``). This module answers
from the header alone and never raises on arbitrary bytes: anything it does not
recognise is ``None``.

Signatures (all integers little-endian in the plain form):

* V1: u32 ``1`` (pre-nncase Kendryte model compiler), then flags, layer count...
* V3: u32 ``3``, flags, arch ``0`` (nncase v0.1).
* V4/V5: bytes ``LDMK`` (u32 0x4B4D444C, C multichar ``'KMDL'``), then u32 version.
* Swapped: the same with the byte order of every 32-bit word reversed, which is the
  form ``kpu.load_flash`` reads (``00 00 00 03`` / ``KMDL`` ``00 00 00 04``).
* MaixHub ``.smodel``/``.emodel``: encrypted with a per-board key; their format is not
  public, so they are recognised by name only and treated as opaque.
"""

from __future__ import annotations

import os
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

__all__ = [
    "KMDL_MAGIC",
    "OPAQUE_SUFFIXES",
    "KmodelSignature",
    "detect",
    "detect_path",
    "swap_words",
]

#: u32 identifier of V4+ kmodels ('KMDL' as a C multichar constant; bytes b"LDMK")
KMDL_MAGIC = 0x4B4D444C
#: file-name suffixes of MaixHub encrypted models (content format not public)
OPAQUE_SUFFIXES = {".smodel": "smodel", ".emodel": "emodel"}
#: array typecode of a 32-bit unsigned word on this platform
_U32 = next(t for t in "IL" if array(t).itemsize == 4)
#: how many leading bytes :func:`detect` looks at
HEADER_PROBE = 64
# sanity bounds that keep random data (and erased flash) from looking like a model
_MAX_LAYERS = 1 << 16
_MAX_OUTPUTS = 1 << 12


@dataclass(frozen=True)
class KmodelSignature:
    """What the first bytes say about a kmodel.

    ``version``: 1, 3, 4 or 5 for K210 kmodels (a later ``KMDL`` version such as 6 or 7
    is reported as is, so callers can say "not a K210 model"); 0 only for an opaque
    file whose header is not readable. ``swapped``: the bytes are in the load_flash
    word-swapped form. ``opaque``: "smodel"/"emodel" for MaixHub encrypted models,
    which must never be parsed or preprocessed.
    """

    version: int
    swapped: bool = False
    opaque: str | None = None

    @property
    def label(self) -> str:
        """Short human description, e.g. ``kmodel V3 (load_flash word-swapped)``."""
        if self.opaque:
            return f"MaixHub .{self.opaque} (encrypted, opaque)"
        text = f"kmodel V{self.version}"
        return text + " (load_flash word-swapped)" if self.swapped else text


def swap_words(data: bytes) -> bytes:
    """Reverse the byte order of every 32-bit word (``len(data)`` must be a multiple of 4).

    This is the load_flash preprocessing transform; it is its own inverse.
    """
    if len(data) % 4:
        raise ValueError("swap_words needs a length that is a multiple of 4")
    words = array(_U32)
    words.frombytes(bytes(data))
    words.byteswap()
    return words.tobytes()


def _plain_version(head: bytes) -> int | None:
    """Version of a plain (not swapped) header, or None when it is not a kmodel."""
    if len(head) < 8:
        return None
    w0, w1 = struct.unpack_from("<II", head)
    if w0 == KMDL_MAGIC:
        return w1 if 4 <= w1 < 256 else None
    if w0 == 3 and len(head) >= 28:
        flags, arch, layers, _max_start, _main, outputs = struct.unpack_from("<6I", head, 4)
        if flags <= 1 and arch == 0 and 0 < layers < _MAX_LAYERS and outputs < _MAX_OUTPUTS:
            return 3
        return None
    if w0 == 1 and len(head) >= 20:
        flags, layers, _max_start, args_start = struct.unpack_from("<4I", head, 4)
        if flags <= 1 and 0 < layers < _MAX_LAYERS and args_start >= 20 + 28 * layers:
            return 1
    return None


def detect(data: bytes, name: str | os.PathLike[str] | None = None) -> KmodelSignature | None:
    """Recognise a kmodel from its first bytes; ``None`` when it is not one.

    ``name`` (optional, a file name or path) is only used to recognise MaixHub
    ``.smodel``/``.emodel`` files, whose encrypted content has no public signature.
    Only the first :data:`HEADER_PROBE` bytes are examined, so passing a whole file or
    just its beginning gives the same answer.
    """
    head = bytes(data[:HEADER_PROBE])
    opaque = None
    if name is not None:
        opaque = OPAQUE_SUFFIXES.get(Path(os.fspath(name)).suffix.lower())
    version = _plain_version(head)
    swapped = False
    if version is None:
        whole = len(head) // 4 * 4
        version = _plain_version(swap_words(head[:whole]))
        swapped = version is not None
    if opaque is not None:
        return KmodelSignature(version or 0, swapped, opaque)
    if version is None:
        return None
    return KmodelSignature(version, swapped, None)


def detect_path(path: str | os.PathLike[str]) -> KmodelSignature | None:
    """:func:`detect` on a file, reading only its first bytes.

    Raises :class:`~kflashpy.errors.InputError` when the file cannot be read.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_PROBE)
    except OSError as e:
        raise InputError(
            f"{path}: cannot read: {e.strerror or e}", "check the path and permissions"
        ) from e
    return detect(head, path)


#: name under which the package root exports :func:`detect`
detect_kmodel = detect
