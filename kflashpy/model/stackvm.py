"""The stackvm instruction set of every nncase 1.x release (numbers and field layouts).

nncase renumbered its stackvm tensor functions and unary ops several times within 1.x
(functions inserted mid-enum, fields added to instructions), and a V5 file does not
record which release wrote it. Each table below names the releases it holds for; the
facts come from the public headers of each release tag of kendryte/nncase
(``include/nncase/runtime/stackvm/opcode.h`` for ``opcode_t`` and
``tensor_function_t``, ``include/nncase/runtime/stackvm/op_reader.h`` for each
instruction's fields, ``include/nncase/runtime/datatypes.h`` for the op enums); the
tests check every entry against a transcription of those headers (see
tests/fixtures/nncase_isa/README.md). Nothing is mapped by guesswork: a number a
release does not define is an error naming the release (see :class:`Isa`).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

#: every nncase 1.x numbering, oldest first: 1.0's pre-release tags and commit 42e77dc
#: (2021-10-20; the compilers that wrote the example models of the v1.0.0 tag: yolox
#: the beta/rc numbering, benchmark/models/cpu/*.kmodel that commit's), then releases
RELEASES = ("1.0-beta1", "1.0-beta2", "1.0-rc1", "1.0-42e77dc", "1.0", "1.1", "1.2", "1.3",
            "1.4", "1.5", "1.6", "1.7", "1.7.1", "1.8", "1.9")  # fmt: skip
#: nncase 1.x releases published as Python wheels (1.2 has no wheel)
#: (1.7 has two: 1.7.0 and 1.7.1, which appended gru and tflite_detection_postprocess)
WHEEL_RELEASES = ("1.0-beta1", "1.1", "1.3", "1.4", "1.5", "1.6", "1.7", "1.7.1", "1.8", "1.9")
#: releases whose runtime sends float conv2d to Halide-generated kernels first: the
#: kernels came in July 2021 (every 1.0 pre-release has them) and v1.1.0's
#: src/kernels/convolution.cpp still dispatches to them; from v1.2.0 that dispatch
#: also requires the output shape to be contiguous under the *weights'* strides, so
#: the reference kernel runs (the 1.3-1.9 wheels measure so). The two kernels add in
#: different orders, so the same file gives different float results under each.
HALIDE_CONV_RELEASES = ("1.0-beta1", "1.0-beta2", "1.0-rc1", "1.0-42e77dc", "1.0", "1.1")

# --- base opcodes (identical in every 1.x release) -----------------------------------
#: opcode -> (name, operands after the opcode byte as "field:struct-format ...")
OPCODES: dict[int, tuple[str, str]] = {
    0x00: ("nop", ""), 0x01: ("ldnull", ""), 0x02: ("ldc.i4", "imm:i"), 0x03: ("ldc.i4.0", ""),
    0x04: ("ldc.i4.1", ""), 0x05: ("ldc.r4", "imm:f"),
    0x06: ("ldind.i1", ""), 0x07: ("ldind.i2", ""), 0x08: ("ldind.i4", ""), 0x09: ("ldind.i", ""),
    0x0A: ("ldind.u1", ""), 0x0B: ("ldind.u2", ""), 0x0C: ("ldind.u4", ""), 0x0D: ("ldind.u", ""),
    0x0E: ("ldind.br2", ""), 0x0F: ("ldind.r4", ""),
    0x10: ("stind.i1", ""), 0x11: ("stind.i2", ""), 0x12: ("stind.i4", ""), 0x13: ("stind.i", ""),
    0x14: ("stind.br2", ""), 0x15: ("stind.r4", ""),
    0x16: ("lea.gp", "gpid:B offset:i"), 0x17: ("lea.buffer", "location:B subres_id:B offset:I"),
    0x18: ("ldelem.i1", ""), 0x19: ("ldelem.i2", ""), 0x1A: ("ldelem.i4", ""),
    0x1B: ("ldelem.i", ""), 0x1C: ("ldelem.u1", ""), 0x1D: ("ldelem.u2", ""),
    0x1E: ("ldelem.u4", ""), 0x1F: ("ldelem.u", ""), 0x20: ("ldelem.br2", ""),
    0x21: ("ldelem.r4", ""),
    0x22: ("stelem.i1", ""), 0x23: ("stelem.i2", ""), 0x24: ("stelem.i4", ""),
    0x25: ("stelem.i", ""), 0x26: ("stelem.br2", ""), 0x27: ("stelem.r4", ""),
    0x28: ("ldarg", "index:I"), 0x29: ("ldarg.0", ""), 0x2A: ("ldarg.1", ""), 0x2B: ("ldarg.2", ""),
    0x2C: ("ldarg.3", ""), 0x2D: ("ldarg.4", ""), 0x2E: ("ldarg.5", ""),
    0x2F: ("dup", ""), 0x30: ("pop", ""), 0x31: ("stshape", "rshape:B rank:B"), 0x32: ("stpaddings", "rpaddings:B rank:B"),
    0x33: ("neg", ""), 0x34: ("add", ""), 0x35: ("sub", ""), 0x36: ("mul", ""), 0x37: ("div", ""),
    0x38: ("div.u", ""), 0x39: ("rem", ""), 0x3A: ("rem.u", ""), 0x3B: ("and", ""),
    0x3C: ("or", ""), 0x3D: ("xor", ""), 0x3E: ("not", ""), 0x3F: ("shl", ""), 0x40: ("shr", ""),
    0x41: ("shr.u", ""),
    0x42: ("clt", ""), 0x43: ("clt.u", ""), 0x44: ("cle", ""), 0x45: ("cle.u", ""),
    0x46: ("ceq", ""), 0x47: ("cge", ""), 0x48: ("cge.u", ""), 0x49: ("cgt", ""),
    0x4A: ("cgt.u", ""), 0x4B: ("cne", ""),
    0x4C: ("conv.i1", ""), 0x4D: ("conv.i2", ""), 0x4E: ("conv.i4", ""), 0x4F: ("conv.i", ""),
    0x50: ("conv.u1", ""), 0x51: ("conv.u2", ""), 0x52: ("conv.u4", ""), 0x53: ("conv.u", ""),
    0x54: ("conv.br2", ""), 0x55: ("conv.r4", ""),
    0x56: ("br", "target:i"), 0x57: ("br.true", "target:i"), 0x58: ("br.false", "target:i"), 0x59: ("ret", ""),
    0x5A: ("call", "args:B target:i"), 0x5B: ("ecall", "args:B"), 0x5C: ("throw", ""), 0x5D: ("break", ""),
    0x5E: ("tensor", "funct:H"),
}  # fmt: skip
TENSOR_OPCODE = 0x5E

# --- tensor functions: numbering per release ------------------------------------------
#: 1.0's pre-releases: no cumsum, hardmax or reduce_arg yet
_T_1_0_PRE = (
    "batch_to_space", "binary", "broadcast", "call", "clamp", "conv2d", "conv2d_transpose",
    "convert", "copy", "dequantize", "gather", "gather_nd", "logistic", "lut1d", "matmul",
    "onehot", "pad", "quantize", "reduce", "reduce_window2d", "resize_image", "slice",
    "softmax", "space_to_batch", "take", "transpose", "unary",
)  # fmt: skip
_T_1_0 = (
    "batch_to_space", "binary", "broadcast", "call", "clamp", "conv2d", "conv2d_transpose",
    "convert", "copy", "cumsum", "dequantize", "gather", "gather_nd", "hardmax", "logistic",
    "lut1d", "matmul", "onehot", "pad", "quantize", "reduce", "reduce_arg", "reduce_window2d",
    "resize_image", "slice", "softmax", "space_to_batch", "take", "transpose", "unary",
)  # fmt: skip
_T_1_0_DEV = tuple(f for f in _T_1_0 if f != "hardmax")  # commit 42e77dc: no hardmax yet
_T_1_1 = (
    *_T_1_0[:20], "random_normal", "random_uniform", "reduce", "reduce_arg", "reduce_prod",
    "reduce_window2d", "resize_image", "slice", "softmax", "space_to_batch", "take", "ternary",
    "transpose", "unary",
)  # fmt: skip
_T_1_2 = (
    *_T_1_1[:27], "roi_align", "sigmoid", "slice", "softmax", "space_to_batch", "take",
    "ternary", "topk", "transpose", "trilu", "unary",
)  # fmt: skip
_T_1_3 = (*_T_1_2[:11], "equal", *_T_1_2[11:])
_T_1_6 = (*_T_1_2[:4], "compare", *_T_1_2[4:])
_T_1_7_1 = (*_T_1_6, "gru", "tflite_detection_postprocess")
_T_1_8 = (*_T_1_6, "gru", "tflite_detection_postprocess", "layer_normalization", "compress",
          "gather_elements")  # fmt: skip
TENSOR_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "1.0-beta1": _T_1_0_PRE, "1.0-beta2": _T_1_0_PRE, "1.0-rc1": _T_1_0_PRE,
    "1.0-42e77dc": _T_1_0_DEV, "1.0": _T_1_0,
    "1.1": _T_1_1, "1.2": _T_1_2, "1.3": _T_1_3, "1.4": _T_1_3, "1.5": _T_1_3,
    "1.6": _T_1_6, "1.7": _T_1_6, "1.7.1": _T_1_7_1, "1.8": _T_1_8, "1.9": _T_1_8,
}  # fmt: skip

# --- instruction fields (after opcode u8 and function u16), per first release ---------
#: function -> [(first release, "field:fmt ...")]; a release before the first entry
#: has no such instruction (nncase's runtime of that release cannot read it either)
_S = "datatype:B rshape_src:B rstride_src:B rstride_dest:B"
_LAYOUTS: dict[str, list[tuple[str, str]]] = {
    "batch_to_space": [("1.0-beta1", _S + " rshape_block:B rpad_crops:B")],
    "binary": [
        ("1.0-beta1", "datatype:B rshape_src1:B rstride_src1:B rshape_src2:B rstride_src2:B "
                "rstride_dest:B binary_op:B fused_clamp_low:f fused_clamp_high:f"),
        ("1.4", "datatype:B rshape_src1:B rstride_src1:B rshape_src2:B rstride_src2:B "
                "rshape_dest:B rstride_dest:B binary_op:B fused_clamp_low:f fused_clamp_high:f"),
    ],
    "broadcast": [("1.0-beta1", "datatype:B rshape_src:B rstride_src:B rshape_dest:B rstride_dest:B")],
    "call": [("1.0-beta1", "function_id:I module_id:H num_src:B num_dst:B")],
    "compare": [("1.6", "datatype:B rshape_src1:B rstride_src1:B rshape_src2:B rstride_src2:B "
                        "rshape_dest:B rstride_dest:B compare_op:B")],
    "compress": [("1.8", "input_shape_src:B condition_shape_src:B axis:f")],
    "conv2d": [("1.0-beta1", "datatype:B rshape_src:B rstride_src:B rshape_kernel:B rstride_kernel:B "
                       "rstride_bias:B rstride_dest:B groups:H stride_h:H stride_w:H "
                       "dilation_h:H dilation_w:H fused_clamp_low:f fused_clamp_high:f")],
    "convert": [("1.0-beta1", "in_datatype:B dst_datatype:B rshape_src:B rstride_src:B rstride_dest:B")],
    "copy": [("1.0-beta1", "datatype:B rshape:B rstride_src:B rstride_dest:B")],
    "cumsum": [("1.0-42e77dc", "datatype:B rshape_src:B axis:i exclusive:? reverse:?")],
    "dequantize": [("1.0-beta1", "in_datatype:B dst_datatype:B rshape_src:B rstride_src:B "
                           "rstride_dest:B")],
    "equal": [("1.3", "datatype:B rshape_src1:B rstride_src1:B rshape_src2:B rstride_src2:B "
                      "rstride_dest:B")],
    "gather": [("1.0-beta1", "datatype:B rshape_src:B rshape_dest:B rstride_src:B rstride_dest:B "
                       "rshape_indices:B axis:B")],
    "gather_elements": [("1.8", "input_shape_src:B indices_shape_src:B axis:i")],
    "gather_nd": [("1.0-beta1", "datatype:B rshape_src:B rshape_dest:B rstride_src:B rstride_dest:B "
                          "rshape_indices:B batch_dims:B")],
    "gru": [("1.7.1", "input_shape_src:B w_shape_src:B direction:B"),
            ("1.9", "input_shape_src:B w_shape_src:B direction:B linear_before_reset:?")],
    "hardmax": [("1.0", "datatype:B rshape_src:B rstride_src:B axis:i")],
    "layer_normalization": [("1.8", "datatype:B input_shape:B axis:i epsilon:f")],
    "lut1d": [("1.0-beta1", "datatype:B rshape_src:B rstride_src:B rstride_dest:B table_len:H")],
    "matmul": [
        ("1.3", "rshape_src1:B rshape_src2:B fused_clamp_low:f fused_clamp_high:f"),
        ("1.4", "rshape_src1:B rstride_src1:B rshape_src2:B rstride_src2:B rshape_dest:B "
                "rstride_dest:B fused_clamp_low:f fused_clamp_high:f"),
    ],
    "onehot": [("1.0-beta1", "datatype:B rshape_indices:B rshape_dest:B rstride_dest:B axis:B "
                       "onehot_mode:B")],
    "pad": [("1.0-beta1", _S + " rpaddings:B pad_mode:B")],
    "quantize": [("1.0-beta1", "in_datatype:B dst_datatype:B rshape_src:B rstride_src:B rstride_dest:B")],
    "random_normal": [("1.1", "datatype_dest:B rshape_dest:B mean:f std:f seed:f")],
    "random_uniform": [("1.1", "datatype_dest:B rshape_dest:B low:f high:f seed:f")],
    "reduce": [("1.0-beta1", _S + " reduce_op:B rshape_axis:B keep_dims:?")],
    "reduce_arg": [("1.0-42e77dc", "datatype_src:B rshape_src:B rstride_src:B datatype_dest:B "
                           "rstride_dest:B reduce_arg_op:B rshape_axis:B keep_dims:? "
                           "select_last_idx:?")],
    "reduce_prod": [("1.1", "rshape_src:B rstride_src:B rstride_dest:B rshape_axes:B keep_dims:?"),
                    ("1.6", _S + " rshape_axes:B keep_dims:?")],
    "reduce_window2d": [("1.0-beta1", "datatype:B reduce_op:B rshape_src:B rstride_src:B "
                                "rstride_dest:B filter_h:H filter_w:H stride_h:H stride_w:H "
                                "dilation_h:H dilation_w:H fused_clamp_low:f fused_clamp_high:f")],
    "resize_image": [("1.0-beta1", _S + " align_corners:? half_pixel_centers:? image_resize_mode:B")],
    "roi_align": [("1.2", "datatype:B rshape_src:B rshape_dest:B mode:B spatial_scale:f "
                          "sampling_ratio:q")],
    "sigmoid": [("1.2", "datatype:B rshape_src:B rstride_src:B"), ("1.3", _S)],
    "slice": [("1.0-beta1", _S + " rbegins:B rends:B rstrides:B")],
    "softmax": [("1.6", _S + " axis:i beta:f")],
    "space_to_batch": [("1.8", _S + " rshape_block:B rpad_crops:B")],
    "ternary": [("1.1", "datatype:B rshape_src1:B rstride_src1:B rshape_src2:B rstride_src2:B "
                        "rshape_src3:B rstride_src3:B rstride_dest:B")],
    "tflite_detection_postprocess": [
        ("1.7.1", "box_shape_src:B score_shape_src:B anchor_shape_src:B max_detections:i "
                "max_classes_per_detection:i detections_per_class:i "
                "use_regular_non_max_suppression:? nms_score_threshold:f nms_iou_threshold:f "
                "num_classes:i y_scale:f x_scale:f h_scale:f w_scale:f")],
    "topk": [("1.2", "datatype:B rshape_src:B rstride_src:B rshape_dest1:B rstride_dest1:B "
                     "rshape_dest2:B rstride_dest2:B k:q axis:i largest:? sorted:?")],
    "transpose": [("1.0-beta1", _S + " rshape_perm:B")],
    "trilu": [("1.2", "datatype:B rshape_src:B upper:? k:q")],
    "unary": [("1.0-beta1", _S + " unary_op:B")],
}  # fmt: skip

#: what each tensor function's handler pops, in order (a: address, s: scalar,
#: p: padding = three scalars), the same in every 1.x release that has the function
#: (``src/runtime/stackvm/ops/``); ``call`` pops "sssa" per source and destination
POPS = {
    "batch_to_space": "aa", "binary": "aaa", "broadcast": "aa", "call": "sssa", "compare": "aaa",
    "compress": "aaa", "conv2d": "ppaaaa", "convert": "aa", "copy": "aa", "cumsum": "aa",
    "dequantize": "ssaa", "equal": "aaa", "gather": "aaa", "gather_elements": "aaa",
    "gather_nd": "aaa", "gru": "aaaaaaa", "hardmax": "aa", "layer_normalization": "aaaa",
    "lut1d": "ssaaa", "matmul": "aaaa", "onehot": "aaaaa", "pad": "saa", "quantize": "ssaa",
    "random_normal": "a", "random_uniform": "a", "reduce": "saa", "reduce_arg": "aa",
    "reduce_prod": "aa", "reduce_window2d": "ppasa", "resize_image": "aass", "roi_align": "aaaa",
    "sigmoid": "aa", "slice": "aa", "softmax": "aa", "space_to_batch": "aa", "ternary": "aaaa",
    "tflite_detection_postprocess": "aaaaaaa", "topk": "aaa", "transpose": "aa", "trilu": "aa",
    "unary": "aa",
}  # fmt: skip

# --- op enums (datatypes.h) -----------------------------------------------------------
BINARY_OPS = ("add", "sub", "mul", "div", "min", "max", "pow", "floor_div", "floor_mod",
              "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or",
              "logical_xor")  # fmt: skip
_U_1_0 = ("abs", "acos", "asin", "ceil", "cos", "exp", "floor", "log", "neg", "round", "rsqrt",
          "sin", "sqrt", "square", "tanh", "bitwise_not", "logical_not")  # fmt: skip
_U_1_1 = (*_U_1_0[:11], "sign", *_U_1_0[11:])
#: 1.0-beta1/beta2: no acos, asin
_U_BETA = (_U_1_0[0], *_U_1_0[3:])
UNARY_OPS: dict[str, tuple[str, ...]] = {
    "1.0-beta1": _U_BETA, "1.0-beta2": _U_BETA, "1.0-rc1": _U_1_0, "1.0-42e77dc": _U_1_0,
    "1.0": _U_1_0,
    **{r: _U_1_1 for r in ("1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.7.1")},
    "1.8": (*_U_1_1, "erf"), "1.9": (*_U_1_1, "erf"),
}  # fmt: skip
REDUCE_OPS = ("mean", "min", "max", "sum")
REDUCE_ARG_OPS = ("arg_min", "arg_max")
COMPARE_OPS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")
PAD_MODES = ("constant", "reflect", "symmetric", "edge")
RESIZE_MODES = ("bilinear", "nearest_neighbor")
ONEHOT_MODES = ("normal", "process_neg")
#: roi_align_mode_t (from 1.2) and lstm_direction (from 1.4; GRU reads it from 1.8)
ROI_ALIGN_MODES = ("avg", "max")
LSTM_DIRECTIONS = ("Forward", "Reverse", "Bidirectional")


class UnknownNumber(ValueError):
    """A number the release's headers do not define (the message names all three)."""


@dataclass(frozen=True)
class Layout:
    """An instruction's fields after its opcode and function number."""

    names: tuple[str, ...]
    struct: struct.Struct

    def read(self, code: bytes, pos: int) -> dict:
        return dict(zip(self.names, self.struct.unpack_from(code, pos), strict=True))


@functools.cache
def _layout(spec: str) -> Layout:
    pairs = [f.split(":") for f in spec.split()]
    return Layout(tuple(n for n, _ in pairs), struct.Struct("<" + "".join(t for _, t in pairs)))


class Isa:
    """The stackvm numbering of one nncase release (see the module docstring)."""

    def __init__(self, release: str) -> None:
        if release not in RELEASES:
            raise ValueError(f"nncase {release} is not a 1.x release ({', '.join(RELEASES)})")
        self.release = release
        self.functions = TENSOR_FUNCTIONS[release]
        self.unary_ops = UNARY_OPS[release]
        self.compare_ops = COMPARE_OPS if self.at_least("1.6") else ()
        self.reduce_arg_ops = REDUCE_ARG_OPS if self.at_least("1.0-42e77dc") else ()
        self.roi_align_modes = ROI_ALIGN_MODES if self.at_least("1.2") else ()
        self.lstm_directions = LSTM_DIRECTIONS if self.at_least("1.4") else ()
        #: stack values per padding: (before, after), and interior from 1.1 on
        self.padding_values = 3 if self.at_least("1.1") else 2

    def at_least(self, release: str) -> bool:
        """Whether this release is ``release`` or a later one."""
        return RELEASES.index(self.release) >= RELEASES.index(release)

    def function(self, number: int) -> str:
        """The name of tensor function ``number``."""
        if number >= len(self.functions):
            raise UnknownNumber(
                f"tensor function {number:#04x} does not exist in nncase {self.release} "
                f"(it numbers 0..{len(self.functions) - 1:#04x})"
            )
        return self.functions[number]

    def layout(self, name: str) -> Layout | None:
        """Fields of tensor function ``name`` in this release (None: the release's
        runtime has no reader for it, so no file of that release can hold it)."""
        spec = None
        for first, fields in _LAYOUTS.get(name, ()):
            if self.at_least(first):
                spec = fields
        return _layout(spec) if spec else None

    def name_of(self, table: str, number: int) -> str:
        """Entry ``number`` of one of the op enums (binary, unary, reduce, ...)."""
        names = {
            "binary": BINARY_OPS, "unary": self.unary_ops, "reduce": REDUCE_OPS,
            "reduce_arg": self.reduce_arg_ops, "compare": self.compare_ops, "pad_mode": PAD_MODES,
            "resize_mode": RESIZE_MODES, "onehot_mode": ONEHOT_MODES,
            "roi_align_mode": self.roi_align_modes, "lstm_direction": self.lstm_directions,
        }[table]  # fmt: skip
        if not 0 <= number < len(names):
            raise UnknownNumber(
                f"{table} op {number} does not exist in nncase {self.release} "
                f"(it numbers 0..{len(names) - 1})"
            )
        return names[number]


@functools.cache
def isa(release: str) -> Isa:
    return Isa(release)


#: fields holding an op enum value, checked when decoding (field -> enum table)
_ENUM_FIELDS = {
    "binary_op": "binary", "unary_op": "unary", "reduce_op": "reduce",
    "reduce_arg_op": "reduce_arg", "compare_op": "compare", "pad_mode": "pad_mode",
    "image_resize_mode": "resize_mode", "onehot_mode": "onehot_mode",
    "mode": "roi_align_mode", "direction": "lstm_direction",
}  # fmt: skip
_DATATYPE_FIELDS = ("datatype", "in_datatype", "dst_datatype", "datatype_src", "datatype_dest")
#: datatype_t values of every 1.x release (int8 0 .. float64 10, bfloat16 11)
DATATYPE_COUNT = 12


@dataclass(frozen=True)
class Instruction:
    """One decoded stackvm instruction: ``name`` is ``tensor.<function>`` for tensor
    ones; ``fields`` holds the operands by their header names."""

    pc: int
    name: str
    fields: dict
    next_pc: int


def decode(code: bytes, release: str) -> list[Instruction]:
    """Decode a stackvm function's code with ``release``'s numbering.

    Raises :class:`UnknownNumber` (naming the release, the byte and the number) for an
    opcode, tensor function or op number the release does not define, an instruction
    cut by the end of the code, or a branch outside the code.
    """
    table = isa(release)
    out: list[Instruction] = []
    pc, end = 0, len(code)
    while pc < end:
        op = code[pc]
        entry = OPCODES.get(op)
        if entry is None:
            raise UnknownNumber(f"byte {pc}: opcode {op:#04x} does not exist in nncase {release}")
        name, spec = entry
        layout = _layout(spec)
        if pc + 1 + layout.struct.size > end:
            raise UnknownNumber(f"byte {pc}: {name} is cut by the end of the code")
        fields = layout.read(code, pc + 1)
        nxt = pc + 1 + layout.struct.size
        if op == TENSOR_OPCODE:
            funct = fields["funct"]
            try:
                fn = table.function(funct)
            except UnknownNumber as e:
                raise UnknownNumber(f"byte {pc}: {e}") from None
            tl = table.layout(fn)
            if tl is None:
                raise UnknownNumber(
                    f"byte {pc}: tensor function {funct:#04x} ({fn}) has no instruction "
                    f"in nncase {release} (its runtime cannot read one)"
                )
            if nxt + tl.struct.size > end:
                raise UnknownNumber(f"byte {pc}: tensor.{fn} is cut by the end of the code")
            fields = {"funct": funct, **tl.read(code, nxt)}
            nxt += tl.struct.size
            _check_fields(table, fn, fields, pc)
            name = f"tensor.{fn}"
        elif name.startswith("br"):
            target = nxt + fields["target"]
            if not 0 <= target < end:
                raise UnknownNumber(f"byte {pc}: {name} to byte {target}, outside the code")
        out.append(Instruction(pc, name, fields, nxt))
        pc = nxt
    return out


#: tensor instruction fields naming a shape register / a paddings register
_SHAPE_FIELDS = ("rshape", "rstride", "rbegins", "rends", "rstrides", "rperm", "rblock",
                 "input_shape", "w_shape_src", "condition_shape_src", "indices_shape_src",
                 "box_shape_src", "score_shape_src", "anchor_shape_src")  # fmt: skip
_PADDING_FIELDS = ("rpaddings", "rpad_crops")
_ADDRESS_OPS = ("lea.buffer", "lea.gp")


def check_stack(program: list[Instruction], release: str) -> str | None:
    """Follow the evaluation stack through straight-line code, tracking only whether
    each entry is an address or a number, and the registers ``stshape``/``stpaddings``
    set. Returns why the code cannot be what the numbering says (an instruction pops
    a number where its handler takes an address, a register never set, values left
    over at the end), or None. Code with branches is not followed (None)."""
    stack: list[str] = []
    shapes: set[int] = set()
    paddings: set[int] = set()

    def pop(kind: str, ins: Instruction) -> str | None:
        if not stack:
            return f"byte {ins.pc}: {ins.name} pops an empty stack"
        got = stack.pop()
        if kind != "any" and got != kind:
            want = "an address" if kind == "a" else "a number"
            return f"byte {ins.pc}: {ins.name} takes {want} from the stack, finds the other"
        return None

    for ins in program:
        name, f = ins.name, ins.fields
        if name == "nop":  # op_builder::nop_ exists but no 1.x code generator calls it
            return f"byte {ins.pc}: decodes into nop, which nncase 1.x never emits"
        if name.startswith("br") or name in ("call", "ret"):
            return None
        pops, push = "", None
        if name.startswith("tensor."):
            fn = name[7:]
            calls = f["num_src"] + f["num_dst"] if fn == "call" else 0
            pops = "sssa" * calls if calls else POPS.get(fn, "")
            for key, reg in f.items():
                if key.startswith(_PADDING_FIELDS) and reg not in paddings:
                    return f"byte {ins.pc}: {name} reads paddings register {reg}, never set"
                if key.startswith(_SHAPE_FIELDS) and reg not in shapes:
                    return f"byte {ins.pc}: {name} reads shape register {reg}, never set"
            pops = pops.replace("p", "s" * isa(release).padding_values)
        elif name in ("stshape", "stpaddings"):
            each = isa(release).padding_values if name == "stpaddings" else 1
            pops = "s" * f["rank"] * each
            (shapes if name == "stshape" else paddings).add(
                f["rshape" if name == "stshape" else "rpaddings"]
            )
        elif name in _ADDRESS_OPS:
            push = "a"
        elif name.startswith("ld") and not name.startswith(("ldind", "ldelem")):
            push = "s"  # ldc.*, ldnull, ldarg.*
        elif name.startswith("ldind"):
            pops, push = "a", "s"
        elif name.startswith("ldelem"):
            pops, push = "sa", "s"
        elif name.startswith("stind"):
            pops = "sa"
        elif name.startswith("stelem"):
            pops = "ssa"
        elif name == "dup":
            if not stack:
                return f"byte {ins.pc}: dup of an empty stack"
            stack.append(stack[-1])
            continue
        elif name == "pop":
            pops = "x"
        elif name in ("neg", "not") or name.startswith("conv."):
            pops, push = "s", "s"
        else:  # two-operand arithmetic and comparisons
            b = pop("any", ins) or None
            if b:
                return b
            if not stack:
                return f"byte {ins.pc}: {name} pops an empty stack"
            a = stack.pop()
            stack.append("a" if a == "a" and name in ("add", "sub") else "s")
            continue
        for kind in pops:
            why = pop({"a": "a", "s": "s", "x": "any"}[kind], ins)
            if why:
                return why
        if push:
            stack.append(push)
    if stack:
        return f"{len(stack)} value(s) left on the stack at the end of the code"
    return None


def _check_fields(table: Isa, fn: str, fields: dict, pc: int) -> None:
    for key, value in fields.items():
        try:
            if key in _ENUM_FIELDS:
                table.name_of(_ENUM_FIELDS[key], value)
        except UnknownNumber as e:
            raise UnknownNumber(f"byte {pc}: tensor.{fn}: {e}") from None
        if key in _DATATYPE_FIELDS and value >= DATATYPE_COUNT:
            raise UnknownNumber(f"byte {pc}: tensor.{fn}: datatype {value} does not exist")


@dataclass(frozen=True)
class ReleaseGuess:
    """Which nncase 1.x release(s) a V5 file's stackvm code is consistent with.

    ``candidates``: every release whose numbering decodes all the code into
    instructions whose stack operands and registers fit together; ``release``:
    the one the runtime uses (named by the caller, else the newest candidate);
    ``ambiguous``: candidates decode the code into different instructions, or the
    code has a float conv2d and the candidates run it with different kernels (see
    :data:`HALIDE_CONV_RELEASES`; ``conv_differs``), so the choice matters;
    ``reasons``: per rejected release, the first thing it cannot read (a
    :class:`Reason`).
    """

    candidates: tuple[str, ...]
    release: str | None
    named: bool
    ambiguous: bool
    reasons: dict
    conv_differs: bool = False

    def describe(self) -> str:
        """One line for ``model info`` / ``run``."""
        if self.release is None:
            return "no nncase 1.x release can read this stackvm code"
        if self.named:
            tail = (
                ""
                if self.release in self.candidates
                else " (its numbering does not decode the code)"
            )
            return f"nncase {self.release} (named by the caller){tail}"
        span = _span(self.candidates)
        if len(self.candidates) == len(RELEASES) and not self.ambiguous:
            return "any nncase 1.x (the code reads the same under every release)"
        if len(self.candidates) == 1:
            return f"nncase {span} (the only release whose numbering reads this code)"
        if not self.ambiguous:
            return f"nncase {span} (the code reads the same under each)"
        if self.conv_differs:
            return (
                f"ambiguous: nncase {span} read this code the same way, but compute its "
                f"float conv2d in different orders (Halide kernels up to 1.1); assumed "
                f"{self.release} (name the release to override)"
            )
        return (
            f"ambiguous: nncase {span} can all read this code, differently; assumed "
            f"{self.release} (name the release to override)"
        )


@dataclass(frozen=True)
class Reason:
    """Why a release's numbering cannot be the file's: the stackvm function (its index
    among the file's stackvm functions), the byte in its code, what is wrong."""

    function: int
    pc: int
    message: str


def _pc_of(message: str, end: int) -> int:
    """The code byte a decode/stack message starts with ("byte N: ..."), else ``end``."""
    head = message.split(":", 1)[0]
    return int(head[5:]) if head.startswith("byte ") and head[5:].isdigit() else end


def _span(releases: tuple[str, ...]) -> str:
    """'1.6-1.9' for a run of consecutive releases, else a comma list."""
    idx = [RELEASES.index(r) for r in releases]
    if len(idx) > 1 and idx == list(range(idx[0], idx[-1] + 1)):
        sep = " to " if "-" in releases[0] + releases[-1] else "-"
        return f"{releases[0]}{sep}{releases[-1]}"
    return ", ".join(releases)


def guess_release(codes: list[bytes], named: str | None = None) -> ReleaseGuess:
    """Test every release's numbering against the stackvm functions' ``codes``."""
    if named is not None and named not in RELEASES:
        raise ValueError(f"nncase {named} is not a 1.x release ({', '.join(RELEASES)})")
    decodings: dict[str, tuple] = {}
    reasons: dict[str, Reason] = {}
    for rel in RELEASES:
        programs = []
        for index, code in enumerate(codes):
            try:
                program = decode(code, rel)
                why = check_stack(program, rel)
            except UnknownNumber as e:
                why = str(e)
            if why:
                reasons[rel] = Reason(index, _pc_of(why, len(code)), why)
                break
            programs.append(program)
        else:
            decodings[rel] = tuple(
                tuple((i.name, tuple(sorted(i.fields.items()))) for i in p) for p in programs
            )
    candidates = tuple(decodings)
    conv = any(
        name == "tensor.conv2d" for code in decodings.values() for p in code for name, _ in p
    )
    halide = {rel in HALIDE_CONV_RELEASES for rel in candidates}
    conv_differs = conv and len(halide) > 1
    ambiguous = len(set(decodings.values())) > 1 or conv_differs
    release = named or (candidates[-1] if candidates else None)
    return ReleaseGuess(candidates, release, named is not None, ambiguous, reasons, conv_differs)
