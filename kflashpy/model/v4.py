"""kmodel V4 (nncase v0.2.x; MaixPy builds with kmodel V4 support, SDK ``lib/nncase/v0``).

Layout: ``header (40) | input memory ranges | input shapes | output memory ranges |
constants | node headers | bodies``. Bodies are raw C structs (natural alignment),
each padded to 8 bytes; the final padding may be missing from the file. Unknown
opcodes are refused rather than guessed. Byte tables are in docs/kmodel.md.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ._binary import Kinds, NamedRange, Op, OpList, Reader, Span, read_bodies, read_fields
from .kpu_args import ACT_TABLE_SIZE, KPU_ARGS_SIZE, decode_kpu_args
from .v3 import TensorInfo

__all__ = ["OPCODES", "MEMORY_TYPES", "DATATYPES", "MemoryRange", "KModelV4", "parse_v4"]

HEADER_SIZE = 40
KMDL = 0x4B4D444C
MEMORY_TYPES = {0: "const", 1: "main", 2: "kpu"}
DATATYPES = {0: "float32", 1: "uint8"}
TARGETS = {0: "cpu", 1: "k210"}
BINARY_OPS = {0: "add", 1: "sub", 2: "mul", 3: "div", 4: "min", 5: "max"}
UNARY_OPS = {0: "abs", 1: "ceil", 2: "cos", 3: "exp", 4: "floor", 5: "log", 6: "neg",
             7: "rsqrt", 8: "sin", 9: "square"}  # fmt: skip
REDUCE_OPS = {0: "mean", 1: "min", 2: "max", 3: "sum"}
RESIZE_MODES = {0: "bilinear", 1: "nearest_neighbor"}
OPCODES: dict[int, str] = {
    0x00: "binary", 0x01: "concat", 0x02: "conv2d", 0x03: "dequantize", 0x04: "matmul",
    0x05: "pad", 0x06: "quantize", 0x07: "reduce", 0x08: "reduce_window2d",
    0x09: "memory_copy", 0x0A: "resize_image", 0x0B: "softmax", 0x0C: "transpose",
    0x0D: "strided_slice", 0x0E: "unary", 0x0F: "quantized_conv2d",
    0x10: "quantized_matmul", 0x11: "quantized_binary", 0x12: "table_lookup1d",
    0x13: "conv2d_transpose", 0x14: "nnil_unary_method",
    0x1001: "cpu_conv2d", 0x1002: "cpu_depthwise_conv2d", 0x1003: "cpu_reduce_window2d",
    0x1004: "cpu_quantized_conv2d", 0x1005: "cpu_quantized_depthwise_conv2d",
    0x2001: "kpu_upload", 0x2002: "kpu_conv2d",
}  # fmt: skip


@dataclass(frozen=True)
class MemoryRange(NamedRange):
    """``memory_range``: where a tensor lives (const blob, main memory or KPU RAM)."""

    memory_type: int
    datatype: int
    start: int
    size: int

    _LOCATIONS = MEMORY_TYPES
    _DATATYPES = DATATYPES

    @property
    def _location(self) -> int:
        return self.memory_type


def _scalar(v: tuple) -> tuple[int, float | int]:
    dtype, raw = v
    value = struct.unpack("<f", raw)[0] if dtype == 0 else raw[0]
    return (dtype, value)


KINDS: Kinds = {
    "mr": ("4I", lambda v: MemoryRange(*v)),
    "shape": ("4i", None),
    "pad": ("2i", None),  # (before, after)
    "range": ("2f", None),  # fused activation (min, max)
    "quant": ("if", None),  # (zero_point, scale)
    "scalar": ("I4s", _scalar),  # (datatype, value)
}

_IO = [("input", "mr"), ("output", "mr")]
_AB = [("input_a", "mr"), ("input_b", "mr"), ("output", "mr")]
_CONV_GEOM = [
    ("padding_h", "pad"), ("padding_w", "pad"), ("filter_h", "i"), ("filter_w", "i"),
    ("stride_h", "i"), ("stride_w", "i"), ("dilation_h", "i"), ("dilation_w", "i"),
]  # fmt: skip
_Q_OUT = [("input_offset", "i"), ("filter_offset", "i"), ("output_mul", "i"),
          ("output_shift", "i"), ("output_offset", "i")]  # fmt: skip
_CONV2D = [*_IO, ("in_shape", "shape"), ("groups", "i"), ("out_channels", "i"), *_CONV_GEOM]
_REDUCE_WINDOW = [*_IO, ("reduce_op", "I"), ("in_shape", "shape"), *_CONV_GEOM,
                  ("init_value", "f"), ("fused_activation", "range")]  # fmt: skip
_CPU_CONV = [*_IO, ("in_shape", "shape"), ("out_channels", "i"), *_CONV_GEOM]
_CPU_DW = [*_IO, ("in_shape", "shape"), *_CONV_GEOM]
_BINARY = [*_AB, ("binary_op", "I"), ("in_a_shape", "shape"), ("in_b_shape", "shape"),
           ("out_shape", "shape")]  # fmt: skip
_MATMUL = [*_AB, ("a_rows", "i"), ("a_cols", "i"), ("b_cols", "i")]
#: fixed part of each node body
_SPECS: dict[int, list[tuple[str, str]]] = {
    0x00: [*_BINARY, ("fused_activation", "range")],
    0x01: [("output", "mr"), ("inner_size", "I"), ("outer_size", "I"), ("input_count", "I")],
    0x02: [*_CONV2D, ("fused_activation", "range")],
    0x03: [*_IO, ("quant_param", "quant")],
    0x04: [*_MATMUL, ("fused_activation", "range")],
    0x05: [*_IO, ("in_shape", "shape"), ("paddings", "8i"), ("pad_value", "scalar")],
    0x06: [*_IO, ("quant_param", "quant")],
    0x07: [*_IO, ("reduce_op", "I"), ("in_shape", "shape"), ("out_shape", "shape"),
           ("init_value", "f")],
    0x08: _REDUCE_WINDOW,
    0x09: _IO,
    0x0A: [*_IO, ("in_shape", "shape"), ("out_h", "i"), ("out_w", "i"), ("mode", "I"),
           ("align_corners", "?3x")],
    0x0B: [*_IO, ("inner_size", "i"), ("outer_size", "i"), ("beta", "f")],
    0x0C: [*_IO, ("in_shape", "shape"), ("perm", "4i")],
    0x0D: [*_IO, ("in_shape", "shape"), ("begin", "4i"), ("end", "4i"), ("strides", "4i"),
           ("begin_mask", "i"), ("end_mask", "i"), ("ellipsis_mask", "i"),
           ("new_axis_mask", "i"), ("shrink_axis_mask", "i")],
    0x0E: [*_IO, ("unary_op", "I")],
    0x0F: [*_CONV2D, *_Q_OUT],
    0x10: [*_MATMUL, ("input_a_offset", "i"), ("input_b_offset", "i"), ("output_mul", "i"),
           ("output_shift", "i"), ("output_offset", "i")],
    0x11: [*_BINARY, ("input_a_offset", "i"), ("input_a_mul", "i"), ("input_a_shift", "i"),
           ("input_b_offset", "i"), ("input_b_mul", "i"), ("input_b_shift", "i"),
           ("output_offset", "i"), ("output_mul", "i"), ("output_shift", "i")],
    0x12: [("input", "mr"), ("table", "mr"), ("output", "mr")],
    0x13: [*_IO, ("in_shape", "shape"), ("out_shape", "shape"), ("groups", "i"), *_CONV_GEOM,
           ("fused_activation", "range")],
    0x14: _IO,
    0x1001: [*_CPU_CONV, ("fused_activation", "range")],
    0x1002: [*_CPU_DW, ("fused_activation", "range")],
    0x1003: _REDUCE_WINDOW,
    0x1004: [*_CPU_CONV, *_Q_OUT],
    0x1005: [*_CPU_DW, *_Q_OUT],
    0x2001: [*_IO, ("in_shape", "shape")],
    0x2002: [("main_mem_output", "mr"), ("batches", "i"), ("reserved0", "i")],
}  # fmt: skip


def _per_oc_weights(p: dict, in_channel_axis: int) -> tuple[int, int]:
    """(weight count, bias count) of a convolution from its shape fields.

    Depthwise bodies have no ``out_channels``: one k x k filter per input channel.
    """
    k = p["filter_h"] * p["filter_w"]
    ic = p["in_shape"][in_channel_axis]
    if "out_channels" not in p:
        return ic * k, ic
    oc = p["out_channels"]
    return oc * k * (ic // (p.get("groups", 1) or 1)), oc


#: variable parts: opcode -> list of (array name, dtype, count function); in order
_ARRAYS = {
    0x02: [("weights", "<f4", lambda p: _per_oc_weights(p, 1)[0]),
           ("bias", "<f4", lambda p: p["out_channels"])],
    0x04: [("bias", "<f4", lambda p: p["b_cols"])],
    0x0F: [("bias", "<i4", lambda p: p["out_channels"]),
           ("weights", "u1", lambda p: _per_oc_weights(p, 1)[0])],
    0x10: [("bias", "<i4", lambda p: p["b_cols"])],
    0x13: [("weights", "<f4", lambda p: p["out_shape"][1] * (p["in_shape"][1] // (p["groups"] or 1))
            * p["filter_h"] * p["filter_w"]),
           ("bias", "<f4", lambda p: p["out_shape"][1])],
    0x1001: [("weights", "<f4", lambda p: _per_oc_weights(p, 3)[0]),
             ("bias", "<f4", lambda p: p["out_channels"])],
    0x1002: [("weights", "<f4", lambda p: _per_oc_weights(p, 3)[0]),
             ("bias", "<f4", lambda p: p["in_shape"][3])],
    0x1004: [("weights", "u1", lambda p: _per_oc_weights(p, 3)[0]),
             ("bias", "<i4", lambda p: p["out_channels"])],
    0x1005: [("weights", "u1", lambda p: _per_oc_weights(p, 3)[0]),
             ("bias", "<i4", lambda p: p["in_shape"][3])],
}  # fmt: skip


@dataclass
class KModelV4(OpList):
    """A parsed V4 kmodel. ``nodes`` are :class:`Op` s in execution order."""

    version: int
    flags: int
    target: int
    constants_size: int
    main_mem: int
    reserved0: int
    inputs: list[MemoryRange]
    input_shapes: list[tuple[int, int, int, int]]
    outputs: list[MemoryRange]
    constants: Span
    nodes: list[Op]
    header_end: int
    source: str = "kmodel"
    data: bytes = field(default=b"", repr=False)

    @property
    def target_name(self) -> str:
        return TARGETS.get(self.target, f"unknown({self.target})")

    @property
    def ops(self) -> list[Op]:
        return self.nodes

    def input_tensors(self) -> list[TensorInfo]:
        return [
            TensorInfo(f"input{i}", tuple(s), m.dtype, m.memory, m.start, m.size)
            for i, (m, s) in enumerate(zip(self.inputs, self.input_shapes, strict=True))
        ]

    def output_tensors(self) -> list[TensorInfo]:
        """Outputs (V4 stores no output shape: a flat element count is given)."""
        out = []
        for i, m in enumerate(self.outputs):
            n = m.size // (4 if m.datatype == 0 else 1)
            out.append(TensorInfo(f"output{i}", (n,), m.dtype, m.memory, m.start, m.size))
        return out


def _kpu_conv(r: Reader, op: Op, pos: int, limit: int, what: str) -> None:
    r.need(pos, KPU_ARGS_SIZE, f"{what} register block", limit)
    op.kpu = args = decode_kpu_args(r.data[pos : pos + KPU_ARGS_SIZE])
    if args.kernel_size is None:
        raise r.fail(f"{what} register kernel_type", pos + 32,
                     f"value {args.kernel_type} is not 0 (1x1) or 1 (3x3)")  # fmt: skip
    pos += KPU_ARGS_SIZE + args.bwsx_base_addr
    op.arrays["bn"] = bn = r.span(pos, args.out_channels, "<u8", f"{what} bn table", limit)
    pos = bn.end + args.active_addr
    op.arrays["act"] = act = r.span(pos, ACT_TABLE_SIZE, "u1", f"{what} activation table", limit)
    pos = act.end + args.para_start_addr
    op.arrays["weights"] = r.span(pos, args.weight_count, "u1", f"{what} weights", limit)


def _body(r: Reader, op: Op) -> None:
    what = f"node {op.index} ({op.name})"
    limit = op.offset + op.available
    op.params, pos = read_fields(r, op.offset, _SPECS[op.opcode], what, limit, KINDS)
    p = op.params
    if op.opcode == 0x01:
        n = p["input_count"]
        if 20 * n > limit - pos:
            raise r.fail(f"{what} inputs", pos, f"{n} inputs cannot fit in the body")
        p["inputs"] = [read_fields(r, pos + 16 * i, [("in", "mr")], what, limit, KINDS)[0]["in"]
                       for i in range(n)]  # fmt: skip
        p["dims"] = list(r.unpack(f"{n}i", pos + 16 * n, f"{what} dims", limit))
    elif op.opcode == 0x14:
        op.arrays["bytecode"] = r.span(pos, limit - pos, "u1", f"{what} bytecode", limit)
    elif op.opcode == 0x2002:
        _kpu_conv(r, op, pos, limit, what)
    for name, dtype, count in _ARRAYS.get(op.opcode, ()):
        n = count(p)
        op.arrays[name] = span = r.span(pos, n, dtype, f"{what} {name}", limit)
        pos = span.end


def parse_v4(data: bytes | bytearray | memoryview, source: str = "kmodel") -> KModelV4:
    """Parse a plain (not word-swapped) V4 kmodel.

    Raises :class:`~kflashpy.errors.FormatError` naming the offset and field for any
    truncation, impossible count, unknown opcode or offset outside the file.
    """
    r = Reader(data, source, "V4")
    ident, version, flags, target, n_const, main_mem, n_nodes, n_in, n_out, res0 = r.unpack(
        "10I", 0, "V4 header"
    )
    if ident != KMDL:
        raise r.fail("header field identifier", 0, f"is 0x{ident:08x}, not 'KMDL' (LDMK)")
    if version != 4:
        raise r.fail("header field version", 4, f"is {version}, a V4 kmodel has 4")
    if target not in TARGETS:
        raise r.fail("header field target", 12, f"is {target}; loaders accept 0 (cpu) or 1 (k210)")
    pos = HEADER_SIZE
    shapes_at = r.table(pos, n_in, 16, "input table (inputs)")
    outs_at = r.table(shapes_at, n_in, 16, "input shape table (inputs)")
    const_at = r.table(outs_at, n_out, 16, "output table (outputs)")
    inputs = [MemoryRange(*r.unpack("4I", pos + 16 * i, f"input {i}")) for i in range(n_in)]
    shapes = [r.unpack("4i", shapes_at + 16 * i, f"input shape {i}") for i in range(n_in)]
    outputs = [MemoryRange(*r.unpack("4I", outs_at + 16 * i, f"output {i}")) for i in range(n_out)]
    constants = r.span(const_at, n_const, "u1", "constants (header field constants)")
    headers_at = constants.end
    header_end = r.table(headers_at, n_nodes, 8, "node header table (nodes)")
    nodes = read_bodies(r, headers_at, n_nodes, header_end, OPCODES, "node", _body, hex_codes=True,
                        code_name="opcode")  # fmt: skip
    return KModelV4(
        version, flags, target, n_const, main_mem, res0, inputs, [tuple(s) for s in shapes],
        outputs, constants, nodes, header_end, source, r.data,
    )  # fmt: skip
