"""Bounded little-endian reading shared by the kmodel parsers.

Every read names the field and the absolute file offset, so a truncated or hostile
file produces a :class:`~kflashpy.errors.FormatError` such as
``yolo.kmodel: layer 3 (K210_CONV) weights at 0x1f40: needs 4608 bytes, file has 12``
instead of an ``IndexError`` or ``struct.error``. Counts read from the file are checked
against the bytes actually available *before* anything is allocated for them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError
from .kpu_args import KpuLayerArgs

#: the last body may lack this many bytes of its declared (8-byte) padding
BODY_SLACK = 7
_HINT = "the file is truncated or is not a valid kmodel; re-export it from the compiler"


@dataclass(frozen=True)
class Span:
    """A region of the model file: absolute ``offset``, ``size`` in bytes, element ``dtype``.

    ``dtype`` is a NumPy dtype string ("u1", "<f4", "<i4", "<u8"), so a consumer can
    write ``np.frombuffer(model.data, span.dtype, span.count, span.offset)``.
    """

    offset: int
    size: int
    dtype: str = "u1"

    @property
    def count(self) -> int:
        """Number of elements of ``dtype`` in the span."""
        return self.size // int(self.dtype[-1])

    @property
    def end(self) -> int:
        return self.offset + self.size


class Reader:
    """Bounds-checked view of a kmodel file.

    ``source`` (usually the file name) prefixes every error message.
    """

    def __init__(self, data: bytes | bytearray | memoryview, source: str, kind: str = "") -> None:
        self.data = bytes(data)
        self.source = source
        #: format name used in messages ("V3", "V4"...)
        self.kind = kind

    def __len__(self) -> int:
        return len(self.data)

    def fail(self, what: str, offset: int, problem: str, hint: str = _HINT) -> FormatError:
        """Build (not raise) the error for ``what`` at ``offset``."""
        return FormatError(f"{self.source}: {what} at 0x{offset:x}: {problem}", hint)

    def need(self, offset: int, size: int, what: str, limit: int | None = None) -> None:
        """Require ``size`` bytes at ``offset`` inside the file (and before ``limit``)."""
        end = len(self.data) if limit is None else min(limit, len(self.data))
        if offset < 0 or size < 0 or offset > end or size > end - offset:
            avail = max(0, end - offset)
            raise self.fail(what, offset, f"needs {size} bytes, only {avail} available")

    def unpack(self, fmt: str, offset: int, what: str, limit: int | None = None) -> tuple:
        """``struct.unpack_from("<" + fmt)`` after a bounds check."""
        st = struct.Struct("<" + fmt)
        self.need(offset, st.size, what, limit)
        return st.unpack_from(self.data, offset)

    def u32(self, offset: int, what: str, limit: int | None = None) -> int:
        return self.unpack("I", offset, what, limit)[0]

    def span(
        self, offset: int, count: int, dtype: str, what: str, limit: int | None = None
    ) -> Span:
        """A checked :class:`Span` of ``count`` elements of ``dtype`` at ``offset``."""
        if count < 0:
            raise self.fail(what, offset, f"negative element count {count}")
        size = count * int(dtype[-1])
        self.need(offset, size, what, limit)
        return Span(offset, size, dtype)

    def table(self, offset: int, count: int, entry: int, what: str) -> int:
        """Check that ``count`` entries of ``entry`` bytes fit; return the end offset.

        Used before looping over a count read from the file, so a hostile count fails
        fast instead of looping (or allocating) billions of times.
        """
        if count * entry > len(self.data) - offset:
            raise self.fail(
                what,
                offset,
                f"{count} entries of {entry} bytes cannot fit in a {len(self.data)}-byte file",
            )
        return offset + count * entry

    def view(self, span: Span) -> memoryview:
        """Zero-copy view of a span's bytes."""
        return memoryview(self.data)[span.offset : span.end]


#: field kinds usable in a spec besides plain struct codes: kind -> (struct fmt, converter)
Kinds = dict[str, tuple[str, Callable[[tuple], Any] | None]]


def read_fields(
    r: Reader,
    offset: int,
    spec: Sequence[tuple[str, str]],
    what: str,
    limit: int | None = None,
    kinds: Kinds | None = None,
) -> tuple[dict[str, Any], int]:
    """Decode consecutive fields described by ``spec`` = [(name, kind), ...].

    ``kind`` is a struct code ("I", "i", "f", "4i"...) or a key of ``kinds``. Returns
    the decoded values (single values unwrapped, several as a tuple) and the offset
    after the last field.
    """
    out: dict[str, Any] = {}
    for name, kind in spec:
        fmt, conv = (kinds or {}).get(kind, (kind, None))
        vals = r.unpack(fmt, offset, f"{what} field {name}", limit)
        out[name] = conv(vals) if conv else (vals[0] if len(vals) == 1 else vals)
        offset += struct.calcsize("<" + fmt)
    return out, offset


class ParamAccess:
    """Read decoded body fields as attributes: ``op.in_channels`` is ``op.params[...]``."""

    def __getattr__(self, name: str) -> Any:
        params = self.__dict__.get("params", {})
        if name in params:
            return params[name]
        raise AttributeError(
            f"{type(self).__name__} {self.__dict__.get('name')!r} has no field {name!r}"
        )


class NamedRange:
    """Names for a memory range's location code (``_LOCATIONS``) and ``datatype``."""

    _LOCATIONS: dict[int, str] = {}
    _DATATYPES: dict[int, str] = {}
    datatype: int
    start: int
    size: int

    @property
    def _location(self) -> int:
        raise NotImplementedError

    @property
    def memory(self) -> str:
        return self._LOCATIONS.get(self._location, f"unknown({self._location})")

    @property
    def dtype(self) -> str:
        return self._DATATYPES.get(self.datatype, f"unknown({self.datatype})")

    def to_dict(self) -> dict[str, object]:
        return {"memory": self.memory, "dtype": self.dtype, "start": self.start, "size": self.size}


class OpList:
    """Size facts shared by V3 (``layers``) and V4 (``nodes``) models."""

    header_end: int
    data: bytes

    @property
    def ops(self) -> list[Op]:
        raise NotImplementedError

    @property
    def model_size(self) -> int:
        """Header end plus declared body sizes (MaixPy's ``model_size``)."""
        return self.header_end + sum(op.body_size for op in self.ops)

    @property
    def max_body(self) -> int:
        """The largest declared body (sizes kpu.load_flash's layer buffers)."""
        return max((op.body_size for op in self.ops), default=0)

    def view(self, span: Span) -> memoryview:
        """Bytes of a span of this file (zero copy)."""
        return memoryview(self.data)[span.offset : span.end]


@dataclass
class Op(ParamAccess):
    """One V3 layer or V4 node: header, decoded body fields and array spans.

    ``params`` holds the scalar/struct fields of the body in file order (also readable
    as attributes: ``op.in_channels``); ``arrays`` the variable-size parts (weights,
    bias, tables) as absolute :class:`Span` s; ``kpu`` the decoded KPU layer argument
    block of a KPU convolution; ``raw`` the body bytes present in the file (the last
    body may lack up to 7 bytes of declared padding, see ``available``).
    """

    index: int
    opcode: int
    name: str
    offset: int
    body_size: int
    available: int
    params: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, Span] = field(default_factory=dict)
    kpu: KpuLayerArgs | None = None
    raw: memoryview = field(default=memoryview(b""), repr=False)


def read_bodies(
    r: Reader,
    headers_at: int,
    count: int,
    first_body: int,
    names: dict[int, str],
    what: str,
    decode: Callable[[Reader, Op], None],
    hex_codes: bool = False,
    code_name: str = "type",
) -> list[Op]:
    """Walk a (u32 code, u32 body_size) header table and the bodies that follow it.

    Bodies are back to back from ``first_body``; only the last may run up to
    :data:`BODY_SLACK` bytes past the end of the file (writers pad each body to 8 bytes
    by seeking, so the final padding is often missing). ``decode`` fills each Op.
    """
    ops: list[Op] = []
    pos = first_body
    for i in range(count):
        at = headers_at + 8 * i
        code, size = r.unpack("II", at, f"{what} header {i}")
        name = names.get(code)
        if name is None:
            shown = f"0x{code:x}" if hex_codes else str(code)
            raise r.fail(f"{what} header {i}", at, f"unknown {r.kind} {what} {code_name} {shown}")
        avail = len(r) - pos
        if size > avail + (BODY_SLACK if i == count - 1 else 0):
            raise r.fail(
                f"{what} {i} ({name}) body", pos,
                f"declares {size} bytes, only {max(avail, 0)} left in the file",
            )  # fmt: skip
        avail = min(size, avail)
        op = Op(i, code, name, pos, size, avail, raw=memoryview(r.data)[pos : pos + avail])
        decode(r, op)
        ops.append(op)
        pos += size
    return ops
