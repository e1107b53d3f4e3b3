"""A small assembler for V5 kmodels with one stackvm function.

nncase 1.x's ONNX importer never emits some stackvm tensor functions (batch_to_space,
space_to_batch, gather_nd, tflite_detection_postprocess, reduce_window2d with
dilation): it lowers them to other functions, fails on them or drops the attribute. To
test those kernels, and every base instruction, against nncase's own simulator,
tests/fixtures/v5corpus/make_asm_corpus.py writes the instructions by hand with this
module and runs the file through ``nncase.Simulator``. Numbers and field layouts come
from :mod:`kflashpy.model.stackvm` (the release's own tables); the container layout is
the one :mod:`kflashpy.model.v5` reads (docs/kmodel.md).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from kflashpy.model.stackvm import OPCODES, TENSOR_OPCODE, isa

#: NumPy dtype -> nncase datatype_t
DATATYPE = {
    np.dtype("i1"): 0, np.dtype("<i2"): 1, np.dtype("<i4"): 2, np.dtype("<i8"): 3,
    np.dtype("u1"): 4, np.dtype("<u2"): 5, np.dtype("<u4"): 6, np.dtype("<u8"): 7,
    np.dtype("<f2"): 8, np.dtype("<f4"): 9, np.dtype("<f8"): 10,
}  # fmt: skip
LOC_INPUT, LOC_OUTPUT, LOC_RDATA, LOC_DATA = 0, 1, 2, 3
_BY_NAME = {name: (op, spec) for op, (name, spec) in OPCODES.items()}


def _align(n: int, a: int = 8) -> int:
    return (n + a - 1) // a * a


@dataclass
class Program:
    """Stackvm code for one nncase ``release`` (its opcode and tensor numbering)."""

    release: str
    code: bytearray = field(default_factory=bytearray)

    def op(self, name: str, **fields) -> Program:
        """A base instruction (``ldc.i4``, ``lea.buffer``, ``stshape`` ...)."""
        opcode, spec = _BY_NAME[name]
        names = [f.split(":") for f in spec.split()]
        fmt = "<B" + "".join(t for _, t in names)
        self.code += struct.pack(fmt, opcode, *(fields[n] for n, _ in names))
        return self

    def tensor(self, function: str, **fields) -> Program:
        """``tensor.<function>`` with its fields, laid out as the release reads them."""
        table = isa(self.release)
        layout = table.layout(function)
        if layout is None:
            raise ValueError(f"nncase {self.release} has no tensor.{function}")
        funct = table.functions.index(function)
        self.code += struct.pack("<BH", TENSOR_OPCODE, funct)
        self.code += layout.struct.pack(*(fields[n] for n in layout.names))
        return self

    def i4(self, *values: int) -> Program:
        for v in values:
            self.op("ldc.i4", imm=int(v))
        return self

    def r4(self, value: float) -> Program:
        return self.op("ldc.r4", imm=float(value))

    def shape(self, reg: int, values) -> Program:
        """Shape register ``reg`` := ``values`` (pushed first to last, as nncase does)."""
        values = [int(v) for v in values]
        return self.i4(*values).op("stshape", rshape=reg, rank=len(values))

    def padding(self, before: int, after: int, interior: int = 0) -> Program:
        """One padding on the stack (nncase 1.0 pushes no interior)."""
        three = isa(self.release).padding_values == 3
        return self.i4(before, after, *([interior] if three else []))

    def paddings(self, reg: int, pads) -> Program:
        """Paddings register ``reg`` := [(before, after, interior)] per axis."""
        for pad in pads:
            self.padding(*pad)
        return self.op("stpaddings", rpaddings=reg, rank=len(pads))

    def addr(self, location: int, offset: int = 0) -> Program:
        return self.op("lea.buffer", location=location, subres_id=0, offset=offset)


def strides(shape) -> list[int]:
    """Dense row-major strides in elements."""
    out, acc = [], 1
    for d in reversed(list(shape)):
        out.append(acc)
        acc *= int(d)
    return out[::-1]


@dataclass
class Tensor:
    """An entry-function input or output: dtype, shape and its offset in its pool."""

    dtype: np.dtype
    shape: tuple[int, ...]
    start: int = 0

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def place(specs) -> list[Tensor]:
    """Lay ``(dtype, shape)`` tensors one after another in a pool (8-byte aligned)."""
    out, at = [], 0
    for dt, shape in specs:
        t = Tensor(np.dtype(dt), tuple(int(s) for s in shape), at)
        out.append(t)
        at = _align(at + t.size)
    return out


def _pool(ts: list[Tensor]) -> int:
    return max((_align(t.start + t.size) for t in ts), default=0)


def _ranges(ts: list[Tensor], location: int) -> bytes:
    rows = b"".join(
        struct.pack("<BBHII", location, DATATYPE[t.dtype], 0, t.start, t.size) for t in ts
    )
    shapes = b"".join(struct.pack(f"<I{len(t.shape)}I", len(t.shape), *t.shape) for t in ts)
    return rows + shapes


def _section(name: str, body: bytes) -> bytes:
    return (
        struct.pack("<16s4I", name.encode(), 0, 0, len(body), 0)
        + body
        + bytes(_align(len(body)) - len(body))
    )


def kmodel(
    program: Program, inputs: list[Tensor], outputs: list[Tensor], rdata: bytes = b"",
    data_size: int = 0,
) -> bytes:  # fmt: skip
    """A V5 kmodel whose only module is stackvm with one function running ``program``."""
    code = bytes(program.code)
    body = _ranges(inputs, LOC_INPUT) + _ranges(outputs, LOC_OUTPUT)
    fn = struct.pack(
        "<8I", 32, 32 + len(body), _pool(inputs), _pool(outputs), len(inputs), len(outputs),
        0, len(code),
    ) + body  # fmt: skip
    pools = struct.pack("<B3xIB3xI", LOC_RDATA, len(rdata), LOC_DATA, data_size)
    sections = _section(".rdata", rdata) + _section(".text", code)
    size = 48 + len(pools) + len(fn) + len(sections)
    module = struct.pack("<16s8I", b"stackvm", 1, 48, size, 2, 0, 2, 1, 0) + pools + fn + sections
    header = struct.pack("<4s7I", b"LDMK", 5, 32, 0, 8, 1, 0, 0)
    return header + module
