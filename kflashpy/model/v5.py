"""kmodel V5 (nncase v1.x; SDK ``lib/nncase/v1`` and CanMV; MaixPy cannot load it).

A V5 file is a container: ``model header (32)`` then ``modules`` back to back. Each
module (``"k210"``, ``"stackvm"``...) has a header, memory pools, functions (with
their input/output ranges and shapes) and named sections (``.text``, ``.rdata``).
The K210 module's ``.text`` is a packed stream of fixed-size ops (upload, download,
KPU conv2d, copy) whose weights and tables live in ``.rdata``; it is decoded here.
Other modules (the stackvm bytecode) are listed but their code is not decoded.
Byte tables are in docs/kmodel.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import FormatError
from ._binary import Kinds, NamedRange, Op, Reader, Span, read_fields
from .kpu_args import ACT_TABLE_SIZE, KPU_ARGS_SIZE, decode_kpu_args
from .v3 import TensorInfo

__all__ = [
    "LOCATIONS",
    "DATATYPES",
    "K210_OPCODES",
    "MemoryRangeV5",
    "K210Op",
    "V5Function",
    "V5Section",
    "V5Module",
    "KModelV5",
    "parse_v5",
    "stackvm_codes",
    "placement_note",
]

KMDL = 0x4B4D444C
MODEL_HEADER = 32
MODULE_HEADER = 48
FUNCTION_HEADER = 32
SECTION_HEADER = 32
SECTION_MERGED = 1
LOCATIONS = {0: "input", 1: "output", 2: "rdata", 3: "data", 4: "shared_data", 64: "kpu"}
DATATYPES = {0: "int8", 1: "int16", 2: "int32", 3: "int64", 4: "uint8", 5: "uint16",
             6: "uint32", 7: "uint64", 8: "float16", 9: "float32", 10: "float64",
             11: "bfloat16"}  # fmt: skip
RDATA = 2

#: K210 module op stream: opcode -> (name, total size in bytes including the 4-byte op header)
K210_OPCODES: dict[int, tuple[str, int]] = {
    0: ("kpu_upload", 44),
    1: ("kpu_download", 44),
    2: ("kpu_conv2d", 152),
    3: ("copy", 76),
}


@dataclass(frozen=True)
class MemoryRangeV5(NamedRange):
    """``memory_range`` (12 bytes): location, datatype, shared module, start, size."""

    location: int
    datatype: int
    shared_module: int
    start: int
    size: int

    _LOCATIONS = LOCATIONS
    _DATATYPES = DATATYPES

    @property
    def _location(self) -> int:
        return self.location


KINDS: Kinds = {"mr": ("BBHII", lambda v: MemoryRangeV5(*v)), "shape4": ("4I", None)}
_IO = [("input", "mr"), ("output", "mr")]
_OP_SPECS: dict[int, list[tuple[str, str]]] = {
    0: [*_IO, ("in_shape", "shape4")],
    1: [*_IO, ("in_shape", "shape4")],
    2: [("weights", "mr"), ("batch_norm", "mr"), ("activation", "mr"),
        ("main_mem_output", "mr"), ("batches", "I")],
    3: [*_IO, ("shape", "shape4"), ("in_strides", "shape4"), ("out_strides", "shape4")],
}  # fmt: skip


class K210Op(Op):
    """One op of a K210 function (an :class:`Op` whose body is the fixed-size op record).

    For ``kpu_conv2d``, ``kpu`` is the decoded register block and ``arrays`` holds the
    weights, batch-norm and activation spans (absolute file offsets, inside .rdata).
    """

    @property
    def size(self) -> int:
        return self.body_size


@dataclass
class V5Function:
    """A function of a module: its I/O ranges and shapes; ``ops`` for K210 modules."""

    index: int
    offset: int
    header_size: int
    size: int
    input_pool_size: int
    output_pool_size: int
    entrypoint: int
    text_size: int
    inputs: list[MemoryRangeV5]
    input_shapes: list[tuple[int, ...]]
    outputs: list[MemoryRangeV5]
    output_shapes: list[tuple[int, ...]]
    ops: list[K210Op] | None = None


@dataclass
class V5Section:
    """A named section; ``body`` is its bytes in the file (None if merged and unresolved)."""

    name: str
    offset: int
    flags: int
    body_start: int
    body_size: int
    body: Span | None


@dataclass
class V5Module:
    """A module: type ("k210", "stackvm"...), pools, functions and sections."""

    index: int
    type: str
    offset: int
    version: int
    header_size: int
    size: int
    mempools: list[tuple[int, int]]  # (location, size)
    shared_mempools: list[tuple[int, int]]  # (module, size)
    functions: list[V5Function]
    sections: list[V5Section]

    def section(self, name: str) -> V5Section | None:
        return next((s for s in self.sections if s.name == name), None)

    def mempool(self, location: int) -> int:
        """Size of the pool at ``location`` (0 if absent)."""
        return sum(size for loc, size in self.mempools if loc == location)


@dataclass
class KModelV5:
    """A parsed V5 kmodel."""

    version: int
    header_size: int
    flags: int
    alignment: int
    modules: list[V5Module]
    entry_module: int
    entry_function: int
    source: str = "kmodel"
    data: bytes = field(default=b"", repr=False)

    @property
    def model_size(self) -> int:
        return self.header_size + sum(m.size for m in self.modules)

    @property
    def entry(self) -> V5Function | None:
        if self.entry_module < len(self.modules):
            funcs = self.modules[self.entry_module].functions
            if self.entry_function < len(funcs):
                return funcs[self.entry_function]
        return None

    def _tensors(self, kind: str) -> list[TensorInfo]:
        fn = self.entry
        if fn is None:
            return []
        ranges = fn.inputs if kind == "input" else fn.outputs
        shapes = fn.input_shapes if kind == "input" else fn.output_shapes
        return [
            TensorInfo(f"{kind}{i}", tuple(s), m.dtype, m.memory, m.start, m.size)
            for i, (m, s) in enumerate(zip(ranges, shapes, strict=True))
        ]

    def input_tensors(self) -> list[TensorInfo]:
        return self._tensors("input")

    def output_tensors(self) -> list[TensorInfo]:
        return self._tensors("output")

    def view(self, span: Span) -> memoryview:
        return memoryview(self.data)[span.offset : span.end]


def _ranges_and_shapes(r: Reader, pos: int, n: int, limit: int, what: str):
    if 12 * n > limit - pos:
        raise r.fail(what, pos, f"{n} memory ranges cannot fit in the function")
    ranges = [read_fields(r, pos + 12 * i, [("mr", "mr")], what, limit, KINDS)[0]["mr"]
              for i in range(n)]  # fmt: skip
    pos += 12 * n
    return ranges, pos


def _shapes(r: Reader, pos: int, n: int, limit: int, what: str):
    shapes = []
    for i in range(n):
        ndim = r.u32(pos, f"{what} shape {i} ndim", limit)
        if 4 * ndim > limit - pos - 4:
            raise r.fail(f"{what} shape {i}", pos, f"ndim {ndim} cannot fit in the function")
        shapes.append(r.unpack(f"{ndim}I", pos + 4, f"{what} shape {i}", limit))
        pos += 4 + 4 * ndim
    return shapes, pos


def _function(r: Reader, pos: int, index: int, end: int, what: str) -> V5Function:
    what = f"{what} function {index}"
    hs, size, in_pool, out_pool, n_in, n_out, entry, text_size = r.unpack("8I", pos, what, end)
    if size < FUNCTION_HEADER or size > end - pos:
        raise r.fail(f"{what} size", pos + 4, f"{size} does not fit in the module")
    limit = pos + size
    p = pos + hs
    inputs, p = _ranges_and_shapes(r, p, n_in, limit, f"{what} inputs")
    in_shapes, p = _shapes(r, p, n_in, limit, f"{what} inputs")
    outputs, p = _ranges_and_shapes(r, p, n_out, limit, f"{what} outputs")
    out_shapes, p = _shapes(r, p, n_out, limit, f"{what} outputs")
    return V5Function(index, pos, hs, size, in_pool, out_pool, entry, text_size,
                      inputs, in_shapes, outputs, out_shapes)  # fmt: skip


def _rdata_span(r: Reader, rdata: Span | None, mr: MemoryRangeV5, dtype: str, what: str) -> Span:
    if mr.location != RDATA or rdata is None:
        raise r.fail(what, rdata.offset if rdata else 0, f"is in {mr.memory}, expected .rdata")
    if mr.start + mr.size > rdata.size:
        raise r.fail(what, rdata.offset + mr.start,
                     f"range {mr.start}+{mr.size} runs past .rdata ({rdata.size} bytes)")  # fmt: skip
    return Span(rdata.offset + mr.start, mr.size, dtype)


def _k210_ops(r: Reader, text: Span, rdata: Span | None, fn: V5Function, what: str) -> list[K210Op]:
    what = f"{what} function {fn.index}"
    if fn.entrypoint + fn.text_size > text.size:
        raise r.fail(f"{what} text", text.offset + fn.entrypoint,
                     f"entrypoint {fn.entrypoint} + text_size {fn.text_size} runs past .text")  # fmt: skip
    pos, end = text.offset + fn.entrypoint, text.offset + fn.entrypoint + fn.text_size
    ops: list[K210Op] = []
    while pos < end:
        opcode = r.unpack("B", pos, f"{what} op {len(ops)} opcode", end)[0]
        if opcode not in K210_OPCODES:
            raise r.fail(f"{what} op {len(ops)} opcode", pos, f"unknown K210 opcode {opcode}")
        name, size = K210_OPCODES[opcode]
        op_what = f"{what} op {len(ops)} ({name})"
        r.need(pos, size, op_what, end)
        params, p = read_fields(r, pos + 4, _OP_SPECS[opcode], op_what, end, KINDS)
        op = K210Op(len(ops), opcode, name, pos, size, size, params,
                    raw=memoryview(r.data)[pos : pos + size])  # fmt: skip
        if opcode == 2:
            op.kpu = args = decode_kpu_args(r.data[p : p + KPU_ARGS_SIZE])
            op.arrays["weights"] = _rdata_span(
                r, rdata, params["weights"], "u1", f"{op_what} weights"
            )
            op.arrays["bn"] = _rdata_span(r, rdata, params["batch_norm"], "<u8", f"{op_what} bn")
            op.arrays["act"] = _rdata_span(r, rdata, params["activation"], "u1", f"{op_what} act")
            if (
                op.arrays["act"].size != ACT_TABLE_SIZE
                or op.arrays["bn"].count != args.out_channels
            ):
                raise r.fail(f"{op_what} tables", pos,
                             "weights/batch-norm/activation sizes do not match the register block")  # fmt: skip
        ops.append(op)
        pos += size
    return ops


def _module(r: Reader, pos: int, index: int) -> V5Module:
    what = f"module {index}"
    r.need(pos, MODULE_HEADER, f"{what} header")
    mtype = r.data[pos : pos + 16].split(b"\0", 1)[0].decode("ascii", "replace")
    what = f"module {index} ({mtype})"
    version, hs, size, n_pools, n_shared, n_sections, n_funcs, _res = r.unpack(
        "8I", pos + 16, f"{what} header"
    )
    if size < MODULE_HEADER or size > len(r) - pos:
        raise r.fail(f"{what} size", pos + 24, f"{size} does not fit in the file")
    end = pos + size
    if hs < MODULE_HEADER or hs > size:
        raise r.fail(f"{what} header_size", pos + 20, f"{hs} is impossible")
    p = pos + hs
    p_end = r.table(p, n_pools, 8, f"{what} mempools")
    pools = [r.unpack("B3xI", p + 8 * i, f"{what} mempool {i}", end) for i in range(n_pools)]
    s_end = r.table(p_end, n_shared, 8, f"{what} shared mempools")
    shared = [r.unpack("II", p_end + 8 * i, f"{what} shared mempool {i}", end)
              for i in range(n_shared)]  # fmt: skip
    p = s_end
    r.table(p, n_funcs, FUNCTION_HEADER, f"{what} functions")
    functions = []
    for i in range(n_funcs):
        fn = _function(r, p, i, end, what)
        functions.append(fn)
        p += fn.size
    r.table(p, n_sections, SECTION_HEADER, f"{what} sections")
    sections: list[V5Section] = []
    for i in range(n_sections):
        r.need(p, SECTION_HEADER, f"{what} section {i} header", end)
        header_at = p
        name = r.data[p : p + 16].split(b"\0", 1)[0].decode("ascii", "replace")
        flags, start, bsize, _ = r.unpack("4I", p + 16, f"{what} section {name}", end)
        body_at = p + SECTION_HEADER + start
        if flags & SECTION_MERGED:  # body lives inside .rdata
            rd = next((s.body for s in sections if s.name == ".rdata"), None)
            body = Span(rd.offset + start, bsize) if rd and start + bsize <= rd.size else None
            p += SECTION_HEADER
        else:
            body = r.span(body_at, bsize, "u1", f"{what} section {name} body", end)
            p = body.end
        sections.append(V5Section(name, header_at, flags, start, bsize, body))
    module = V5Module(index, mtype, pos, version, hs, size, pools, shared, functions, sections)
    if mtype == "k210":
        text, rdata = module.section(".text"), module.section(".rdata")
        if text is None or text.body is None:
            raise r.fail(f"{what} sections", pos, "K210 module has no .text section")
        for fn in functions:
            fn.ops = _k210_ops(r, text.body, rdata.body if rdata else None, fn, what)
    return module


def parse_v5(data: bytes | bytearray | memoryview, source: str = "kmodel") -> KModelV5:
    """Parse a V5 kmodel: header, modules, functions, sections, K210 op streams.

    Raises :class:`~kflashpy.errors.FormatError` naming the offset and field for any
    truncation, impossible size or count, or unknown K210 opcode.
    """
    r = Reader(data, source)
    ident, version, hs, flags, align, n_mod, entry_mod, entry_fn = r.unpack("8I", 0, "V5 header")
    if ident != KMDL:
        raise r.fail("header field identifier", 0, f"is 0x{ident:08x}, not 'KMDL' (LDMK)")
    if version != 5:
        raise r.fail("header field version", 4, f"is {version}, a V5 kmodel has 5")
    if hs < MODEL_HEADER or hs > len(r):
        raise r.fail("header field header_size", 8, f"{hs} is impossible")
    r.table(hs, n_mod, MODULE_HEADER, "module table (modules)")
    modules, pos = [], hs
    for i in range(n_mod):
        m = _module(r, pos, i)
        modules.append(m)
        pos += m.size
    if n_mod and entry_mod >= n_mod:
        raise r.fail("header field entry_module", 24, f"{entry_mod} but only {n_mod} modules")
    return KModelV5(version, hs, flags, align, modules, entry_mod, entry_fn, source, r.data)


def stackvm_codes(model: KModelV5) -> list[tuple[V5Module, V5Function, bytes]]:
    """Every stackvm function with its code (its slice of the module's ``.text``)."""
    out = []
    for mod in model.modules:
        if mod.type != "stackvm":
            continue
        text = mod.section(".text")
        body = model.view(text.body) if text and text.body else memoryview(b"")
        for fn in mod.functions:
            if fn.entrypoint + fn.text_size > len(body):
                raise FormatError(
                    f"{model.source}: stackvm function {fn.index} at byte {fn.offset:#x}: code "
                    f"{fn.entrypoint}+{fn.text_size} runs past .text ({len(body)} bytes)",
                    "the model is truncated or damaged: re-export or re-download it",
                )
            out.append((mod, fn, bytes(body[fn.entrypoint : fn.entrypoint + fn.text_size])))
    return out


def placement_note(model: KModelV5) -> str | None:
    """What runs where, when it is not the usual KPU + CPU split (shared by ``model
    info`` and ``run`` so that both say the same)."""
    if not any(m.type == "k210" for m in model.modules):
        return "no K210 module: the model runs entirely on the CPU (stackvm), not the KPU"
    return None
