"""kmodel V3 (nncase v0.1, Sipeed Maix-EMC; loaded by every MaixPy build).

Layout: ``header (28) | outputs[output_count] (8) | layer headers[layers_length] (8) |
bodies``. Bodies follow back to back; each was padded to 8 bytes but writers seek
instead of writing the final padding, so the last body may end up to 7 bytes past
the end of the file. K210_CONV bodies refer to their register block, weights,
batch-norm and activation tables by *absolute file offsets*. Byte tables of every
header and body are in docs/kmodel.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._binary import Op, OpList, Reader, read_bodies, read_fields
from .kpu_args import ACT_TABLE_SIZE, KPU_ARGS_SIZE, decode_kpu_args

__all__ = ["LAYER_TYPES", "KModelV3", "V3Output", "TensorInfo", "parse_v3"]

HEADER_SIZE = 28

#: kpu_model_layer_type_t
LAYER_TYPES: dict[int, str] = {
    0: "INVALID",
    1: "ADD",
    2: "QUANTIZED_ADD",
    3: "GLOBAL_MAX_POOL2D",
    4: "QUANTIZED_GLOBAL_MAX_POOL2D",
    5: "GLOBAL_AVERAGE_POOL2D",
    6: "QUANTIZED_GLOBAL_AVERAGE_POOL2D",
    7: "MAX_POOL2D",
    8: "QUANTIZED_MAX_POOL2D",
    9: "AVERAGE_POOL2D",
    10: "QUANTIZED_AVERAGE_POOL2D",
    11: "QUANTIZE",
    12: "DEQUANTIZE",
    13: "REQUANTIZE",
    14: "L2_NORMALIZATION",
    15: "SOFTMAX",
    16: "CONCAT",
    17: "QUANTIZED_CONCAT",
    18: "FULLY_CONNECTED",
    19: "QUANTIZED_FULLY_CONNECTED",
    20: "TENSORFLOW_FLATTEN",
    21: "QUANTIZED_TENSORFLOW_FLATTEN",
    22: "RESIZE_NEAREST_NEIGHBOR",
    23: "QUANTIZED_RESIZE_NEAREST_NEIGHBOR",
    24: "CHANNELWISE_DEQUANTIZE",
    25: "LOGISTIC",
    10240: "K210_CONV",
    10241: "K210_ADD_PADDING",
    10242: "K210_REMOVE_PADDING",
    10243: "K210_UPLOAD",
}
K210_CONV = 10240
#: activation enum of FULLY_CONNECTED / AVERAGE_POOL2D
ACTIVATIONS = {0: "linear", 1: "relu", 2: "relu6"}

_IO = [("flags", "I"), ("main_mem_in_address", "I"), ("main_mem_out_address", "I")]
_POOL = [
    *_IO,
    ("in_shape", "3I"),
    ("out_shape", "3I"),
    ("kernel_width", "I"),
    ("kernel_height", "I"),
    ("stride_width", "I"),
    ("stride_height", "I"),
    ("padding_width", "I"),
    ("padding_height", "I"),
]
_QUANT = [*_IO, ("count", "I"), ("scale", "f"), ("bias", "f")]
_CHANNELS = [*_IO, ("channels", "I")]
_RESIZE = [
    *_IO,
    ("in_shape", "3I"),
    ("out_width", "I"),
    ("out_height", "I"),
    ("align_corners", "I"),
]
#: fixed part of each body; shapes are (width, height, channels)
_SPECS: dict[int, list[tuple[str, str]]] = {
    1: [("flags", "I"), ("main_mem_in_a_address", "I"), ("main_mem_in_b_address", "I"),
        ("main_mem_out_address", "I"), ("count", "I")],
    2: [("flags", "I"), ("main_mem_in_a_address", "I"), ("main_mem_in_b_address", "I"),
        ("main_mem_out_address", "I"), ("count", "I"),
        ("in_a_offset", "i"), ("in_a_mul", "i"), ("in_a_shift", "i"),
        ("in_b_offset", "i"), ("in_b_mul", "i"), ("in_b_shift", "i"),
        ("out_offset", "i"), ("out_mul", "i"), ("out_shift", "i")],
    5: [*_IO, ("kernel_size", "I"), ("channels", "I")],
    8: _POOL,
    9: [*_POOL, ("act", "I")],
    11: _QUANT,
    12: _QUANT,
    13: [*_IO, ("count", "I")],
    14: _CHANNELS,
    15: _CHANNELS,
    16: [("flags", "I"), ("main_mem_out_address", "I"), ("input_count", "I")],
    17: [("flags", "I"), ("main_mem_out_address", "I"), ("input_count", "I")],
    18: [*_IO, ("in_channels", "I"), ("out_channels", "I"), ("act", "I")],
    20: [*_IO, ("shape", "3I")],
    21: [*_IO, ("shape", "3I")],
    22: _RESIZE,
    23: _RESIZE,
    24: [*_IO, ("channels", "I"), ("channel_size", "I")],
    25: _CHANNELS,
    10240: [("flags", "I"), ("main_mem_out_address", "I"), ("layer_offset", "I"),
            ("weights_offset", "I"), ("bn_offset", "I"), ("act_offset", "I")],
    10241: [("flags", "I"), ("main_mem_in_address", "I"), ("kpu_mem_out_address", "I"),
            ("channels", "I")],
    10242: [("flags", "I"), ("main_mem_in_address", "I"), ("main_mem_out_address", "I"),
            ("channels", "I")],
    10243: [("flags", "I"), ("main_mem_in_address", "I"), ("kpu_mem_out_address", "I"),
            ("width", "I"), ("height", "I"), ("channels", "I")],
}  # fmt: skip


@dataclass(frozen=True)
class V3Output:
    """``kpu_model_output_t``: a region of the main buffer (byte offset and size)."""

    address: int
    size: int


@dataclass(frozen=True)
class TensorInfo:
    """A model input or output as ``model info`` and the runtime see it.

    ``shape`` is NCHW-like as far as the format tells it; ``memory`` is "main",
    "kpu" or "const" (V4) / a V5 location name; ``start``/``size`` in bytes.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    memory: str
    start: int
    size: int


@dataclass
class KModelV3(OpList):
    """A parsed V3 kmodel. ``layers`` are :class:`Op` s in execution order."""

    version: int
    flags: int
    arch: int
    layers_length: int
    max_start_address: int
    main_mem_usage: int
    outputs: list[V3Output]
    layers: list[Op]
    header_end: int
    source: str = "kmodel"
    data: bytes = field(default=b"", repr=False)

    @property
    def eight_bit(self) -> bool:
        """Weights are 8-bit (flags bit 0); 16-bit otherwise."""
        return bool(self.flags & 1)

    @property
    def ops(self) -> list[Op]:
        return self.layers

    @property
    def inputs(self) -> list[TensorInfo]:
        """The input tensor, derived from the first layer (V3 has no input table).

        K210_CONV first: u8 planar (1, C, H, W) uploaded to KPU RAM; FULLY_CONNECTED
        first: float32 (1, in_channels) at its main-memory input address.
        """
        if not self.layers:
            return []
        first = self.layers[0]
        if first.kpu is not None:
            c, h, w = first.kpu.in_shape
            start = first.kpu.image_src_addr * 64
            return [TensorInfo("input", (1, c, h, w), "uint8", "kpu", start, c * h * w)]
        if first.opcode == 18:
            n = first.in_channels
            return [
                TensorInfo("input", (1, n), "float32", "main", first.main_mem_in_address, 4 * n)
            ]
        return []

    def output_tensors(self) -> list[TensorInfo]:
        """Outputs as :class:`TensorInfo` (V3 outputs are float32 by construction)."""
        return [
            TensorInfo(f"output{i}", (o.size // 4,), "float32", "main", o.address, o.size)
            for i, o in enumerate(self.outputs)
        ]


def _conv_arrays(r: Reader, op: Op, eight_bit: bool, what: str) -> None:
    p = op.params
    r.need(p["layer_offset"], KPU_ARGS_SIZE, f"{what} layer_offset (register block)")
    block = r.data[p["layer_offset"] : p["layer_offset"] + KPU_ARGS_SIZE]
    op.kpu = args = decode_kpu_args(block)
    if args.kernel_size is None:
        raise r.fail(f"{what} register kernel_type", p["layer_offset"] + 32,
                     f"value {args.kernel_type} is not 0 (1x1) or 1 (3x3)")  # fmt: skip
    wdt = "u1" if eight_bit else "<u2"
    op.arrays["weights"] = r.span(p["weights_offset"], args.weight_count, wdt, f"{what} weights")
    op.arrays["bn"] = r.span(p["bn_offset"], args.out_channels, "<u8", f"{what} bn table")
    op.arrays["act"] = r.span(p["act_offset"], ACT_TABLE_SIZE, "u1", f"{what} activation table")


def _body(r: Reader, op: Op, eight_bit: bool) -> None:
    """Decode one body in place (fields, arrays, KPU block)."""
    what = f"layer {op.index} ({op.name})"
    spec = _SPECS.get(op.opcode)
    if spec is None:  # a known enum value whose body no public source documents
        return
    limit = op.offset + op.available
    op.params, pos = read_fields(r, op.offset, spec, what, limit)
    p = op.params
    if op.opcode == 13:
        op.arrays["table"] = r.span(pos, 256, "u1", f"{what} table", limit)
    elif op.opcode in (16, 17):
        end = r.table(pos, p["input_count"], 8, f"{what} inputs")
        if end > limit:
            raise r.fail(f"{what} inputs", pos, f"{p['input_count']} inputs overrun the body")
        p["inputs"] = [r.unpack("II", pos + 8 * i, f"{what} input {i}") for i in range(p["input_count"])]  # fmt: skip
    elif op.opcode == 18:
        n_w = p["in_channels"] * p["out_channels"]
        op.arrays["weights"] = r.span(pos, n_w, "<f4", f"{what} weights", limit)
        op.arrays["bias"] = r.span(pos + 4 * n_w, p["out_channels"], "<f4", f"{what} bias", limit)
    elif op.opcode == 24:
        op.arrays["quant"] = r.span(pos, 2 * p["channels"], "<f4", f"{what} quant params", limit)
    elif op.opcode == K210_CONV:
        _conv_arrays(r, op, eight_bit, what)


def parse_v3(data: bytes | bytearray | memoryview, source: str = "kmodel") -> KModelV3:
    """Parse a plain (not word-swapped) V3 kmodel.

    Raises :class:`~kflashpy.errors.FormatError` naming the offset and field for any
    truncation, impossible count or offset outside the file.
    """
    r = Reader(data, source, "V3")
    version, flags, arch, n_layers, max_start, main_mem, n_out = r.unpack("7I", 0, "V3 header")
    if version != 3:
        raise r.fail("header field version", 0, f"is {version}, a V3 kmodel has 3")
    if arch != 0:
        raise r.fail("header field arch", 8, f"is {arch}; every V3 loader requires 0")
    out_end = r.table(HEADER_SIZE, n_out, 8, "output table (output_count)")
    header_end = r.table(out_end, n_layers, 8, "layer header table (layers_length)")
    outputs = [V3Output(*r.unpack("II", HEADER_SIZE + 8 * i, "output")) for i in range(n_out)]
    eight_bit = bool(flags & 1)
    layers = read_bodies(r, out_end, n_layers, header_end, LAYER_TYPES, "layer",
                         lambda rd, op: _body(rd, op, eight_bit))  # fmt: skip
    return KModelV3(
        version, flags, arch, n_layers, max_start, main_mem, outputs, layers, header_end,
        source, r.data,
    )  # fmt: skip
