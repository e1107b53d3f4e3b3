"""Interpreter for kmodel V4 (nncase v0.2), following the nncase 0.2 / SDK ``lib/nncase/v0``
runtime (layouts: docs/kmodel.md, "V4 (nncase v0.2)").

Memory model: three byte regions addressed by ``memory_range`` — the constants blob,
main memory (``main_mem`` bytes) and the 2 MiB KPU RAM — and every node reads and writes
its ranges there, byte for byte. Shapes are NCHW except the ``cpu_*`` nodes (NHWC).

Board quirks reproduced on purpose (the K210 build uses ``kernels/riscv``):
* quantize rounds half-to-even for elements taken in pairs and with ``roundf`` (half
  away from zero) for the odd last element;
* dequantize computes ``q*(1/scale) + (-zp*(1/scale))`` in float32;
* quantized ops use ``mul_and_carry_shift`` (round half up, shift taken as a uint8).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import FormatError, NotImplementedOpError
from ..model.v4 import BINARY_OPS, REDUCE_OPS, UNARY_OPS, KModelV4, MemoryRange
from .kpu import (
    KPU_RAM_SIZE,
    KPU_ROW,
    ConvLayer,
    KpuRam,
    TieRules,
    batches,
    check_batches,
    fmap_rows,
    run_conv_in_ram,
)
from .model import (
    DAMAGE_ERRORS,
    DAMAGED_HINT,
    LayerOutput,
    Model,
    TensorSpec,
    check_size,
    check_spec,
    damaged,
    limit,
)
from .ops import nn

F32 = np.float32
_DTYPES: dict[int, np.dtype] = {0: np.dtype("<f4"), 1: np.dtype(np.uint8)}
#: bytes past main memory that a board DMA may touch (see kpu_conv2d main-memory output)
MAIN_SLACK = 8


def _dtype(mr: MemoryRange, what: str) -> np.dtype:
    dt = _DTYPES.get(mr.datatype)
    if dt is None:
        raise FormatError(f"{what}: unknown datatype {mr.datatype}", "the kmodel is corrupt")
    return dt


def _out_hw(size: int, pad: tuple[int, int], f: int, stride: int, dilation: int) -> int:
    return (size + pad[0] + pad[1] - ((f - 1) * dilation + 1) + stride) // stride


def _clamp(y: np.ndarray, act: tuple[float, float]) -> np.ndarray:
    return np.clip(y, F32(act[0]), F32(act[1])).astype(F32)


#: memory range -> the shape field(s) a handler reads it with (matmul: rows x cols)
_SHAPED = {
    0x04: (("input_a", ("a_rows", "a_cols")), ("input_b", ("a_cols", "b_cols"))),
    0x10: (("input_a", ("a_rows", "a_cols")), ("input_b", ("a_cols", "b_cols"))),
    0x0B: (("input", ("outer_size", "inner_size")),),
}
_SHAPED_DEFAULT = (
    ("input", ("in_shape",)),
    ("input_a", ("in_a_shape",)),
    ("input_b", ("in_b_shape",)),
)


class _Memory:
    """The three regions of a V4 model during one run."""

    def __init__(self, model: V4Model) -> None:
        self.model = model
        self.const = model.constants
        self.main = np.zeros(model.parsed.main_mem + MAIN_SLACK, dtype=np.uint8)
        self.kpu = KpuRam()

    def region(self, mr: MemoryRange, what: str) -> np.ndarray:
        if mr.memory_type == 0:
            return self.const
        if mr.memory_type == 1:
            return self.main
        if mr.memory_type == 2:
            return self.kpu.data
        raise FormatError(
            f"{self.model.name}: {what}: unknown memory type {mr.memory_type}",
            "the kmodel is corrupt",
        )

    def _bounds(self, buf: np.ndarray, mr: MemoryRange, nbytes: int, what: str) -> None:
        if mr.start + nbytes > buf.size:
            raise FormatError(
                f"{self.model.name}: {what}: {nbytes} bytes at {mr.start:#x} of {mr.memory} memory "
                f"run past its {buf.size} bytes",
                "the model's memory ranges are inconsistent",
            )

    def shaped(self, mr: MemoryRange, shape, what: str) -> np.ndarray:
        """The range read as an array of ``shape`` (a field of the node's, named by ``what``)."""
        arr = self.read(mr, what)
        if arr.size != np.prod(shape):
            raise ValueError(
                f"{what} {tuple(shape)} needs {np.prod(shape)} elements, its memory range "
                f"holds {arr.size}"
            )
        return arr.reshape(shape)

    def read(self, mr: MemoryRange, what: str, count: int | None = None) -> np.ndarray:
        """The range as a 1-D array of its datatype (a copy)."""
        dt = _dtype(mr, what)
        n = mr.size // dt.itemsize if count is None else count
        buf = self.region(mr, what)
        self._bounds(buf, mr, n * dt.itemsize, what)
        return buf[mr.start : mr.start + n * dt.itemsize].view(dt).copy()

    def write(self, mr: MemoryRange, arr: np.ndarray, what: str) -> np.ndarray:
        dt = _dtype(mr, what)
        raw = np.ascontiguousarray(arr, dtype=dt).reshape(-1).view(np.uint8)
        buf = self.region(mr, what)
        self._bounds(buf, mr, raw.size, what)
        buf[mr.start : mr.start + raw.size] = raw
        return arr


class V4Model(Model):
    """A V4 kmodel loaded for host execution (see module docstring)."""

    version = 4

    def __init__(self, parsed: KModelV4) -> None:
        self.parsed = parsed
        self.name = parsed.source
        self.constants = np.frombuffer(parsed.view(parsed.constants), np.uint8).copy()
        check_size(parsed.main_mem, self.name, "header field main_mem", 20)
        for node in parsed.nodes:
            if node.opcode not in _HANDLERS:
                raise NotImplementedOpError(
                    f"{self.name}: node {node.index} is {node.name} (0x{node.opcode:x}), which the "
                    "host runtime does not implement",
                    "report it with the model attached",
                )
        self._validate()
        self._convs = {
            n.index: ConvLayer.from_tables(
                n.kpu,
                np.frombuffer(parsed.view(n.arrays["weights"]), np.uint8),
                parsed.view(n.arrays["bn"]),
                parsed.view(n.arrays["act"]),
                f"{self.name}: node {n.index} (kpu_conv2d)",
            )
            for n in parsed.nodes
            if n.opcode == 0x2002
        }
        self.inputs = [
            TensorSpec(f"input{i}", tuple(int(d) for d in shape), _dtype(mr, f"input {i}"))
            for i, (mr, shape) in enumerate(zip(parsed.inputs, parsed.input_shapes, strict=True))
        ]
        for i, spec in enumerate(self.inputs):  # header, input table, input shape table
            check_spec(spec, f"{self.name}: input shape table", 40 + 16 * (len(self.inputs) + i))
        self._out_shapes: list[tuple[int, ...]] | None = None

    def _validate(self) -> None:
        """Check at load what the node handlers index with: every memory range inside
        its region, op codes inside their tables, transpose permutations."""
        sizes = {0: self.constants.size, 1: self.parsed.main_mem + MAIN_SLACK, 2: KPU_RAM_SIZE}
        for node in self.parsed.nodes:
            where = f"{self.name}: node {node.index} ({node.name}) at byte {node.offset:#x}"
            for key, value in node.params.items():
                for mr in value if isinstance(value, list) else [value]:
                    if isinstance(mr, MemoryRange) and mr.start + mr.size > sizes.get(
                        mr.memory_type, -1
                    ):
                        raise FormatError(
                            f"{where}: field {key} ({mr.size} bytes at {mr.start:#x} of memory "
                            f"type {mr.memory_type}) is outside its memory region",
                            DAMAGED_HINT,
                        )
            for key, table in (
                ("binary_op", BINARY_OPS),
                ("unary_op", UNARY_OPS),
                ("reduce_op", REDUCE_OPS),
            ):
                if key in node.params and node.params[key] not in table:
                    raise FormatError(
                        f"{where}: field {key} is {node.params[key]}, not one of {sorted(table)}",
                        DAMAGED_HINT,
                    )
            self._validate_shapes(node, where)
            if node.opcode == 0x0C and sorted(node.params["perm"]) != [0, 1, 2, 3]:
                raise FormatError(
                    f"{where}: field perm {tuple(node.params['perm'])} is not a permutation "
                    "of the 4 axes",
                    DAMAGED_HINT,
                )

    @staticmethod
    def _validate_shapes(node, where: str) -> None:
        """Each shape a handler reads a memory range with must cover exactly its bytes."""
        p = node.params
        for key, fields in _SHAPED.get(node.opcode, _SHAPED_DEFAULT):
            if key not in p or any(f not in p for f in fields):
                continue
            shape = [int(d) for f in fields for d in np.atleast_1d(p[f])]
            mr = p[key]
            dt = _DTYPES.get(mr.datatype)
            if dt is None:
                raise FormatError(f"{where}: field {key} has unknown datatype {mr.datatype}",
                                  DAMAGED_HINT)  # fmt: skip
            if min(shape) < 0 or math.prod(shape) * dt.itemsize != mr.size:
                raise FormatError(
                    f"{where}: field {' x '.join(fields)} {tuple(shape)} does not match the "
                    f"{mr.size} bytes of field {key}",
                    DAMAGED_HINT,
                )

    @property
    def outputs(self) -> list[TensorSpec]:  # type: ignore[override]
        """Output specs. V4 files store no output shape; it is taken from the node that
        writes each output (found by one dry run on zero inputs, done once)."""
        if self._out_shapes is None:
            shapes: dict[tuple[int, int], tuple[int, ...]] = {}
            zeros = [np.zeros(s.shape, s.dtype) for s in self.inputs]
            self._run(zeros, TieRules(), None, shapes)
            self._out_shapes = [self._shape_for(mr, shapes) for mr in self.parsed.outputs]
        return [
            TensorSpec(f"output{i}", shape, _dtype(mr, f"output {i}"))
            for i, (mr, shape) in enumerate(zip(self.parsed.outputs, self._out_shapes, strict=True))
        ]

    @staticmethod
    def _shape_for(mr: MemoryRange, shapes: dict) -> tuple[int, ...]:
        n = mr.size // _DTYPES.get(mr.datatype, np.dtype(np.uint8)).itemsize
        shape = shapes.get((mr.memory_type, mr.start))
        return shape if shape is not None and int(np.prod(shape)) == n else (n,)

    def _execute(
        self, inputs: list[np.ndarray], rules: TieRules, dump: list[LayerOutput] | None
    ) -> list[np.ndarray]:
        self.outputs  # noqa: B018 - settles the output shapes (one dry run, first time only)
        return self._run(inputs, rules, dump, None)

    def _run(self, inputs, rules, dump, shapes) -> list[np.ndarray]:
        mem = _Memory(self)
        for i, (mr, arr) in enumerate(zip(self.parsed.inputs, inputs, strict=True)):
            if mr.memory_type == 2:  # input lives in KPU RAM: upload with the row layout
                _upload_batches(mem.kpu, mr.start // KPU_ROW, arr.reshape(self.inputs[i].shape))
            else:
                mem.write(mr, arr, f"input {i}")
        for node in self.parsed.nodes:
            try:
                out = _HANDLERS[node.opcode](self, node, mem, rules)
            except DAMAGE_ERRORS as e:
                raise damaged(
                    f"{self.name}: node {node.index} ({node.name})", node.offset, e
                ) from e
            if shapes is not None:
                _note_shape(node.params, out, shapes)
            if dump is not None:
                dump.append(LayerOutput(node.index, node.name, np.array(out)))
        outs = []
        for i, mr in enumerate(self.parsed.outputs):
            arr = mem.read(mr, f"output {i}")
            shape = self._out_shapes[i] if self._out_shapes else (arr.size,)
            outs.append(arr.astype(arr.dtype.newbyteorder("=")).reshape(shape))
        return outs


def _note_shape(p: dict, out: np.ndarray, shapes: dict) -> None:
    """Remember the shape written at an output range; flat results of elementwise
    nodes (quantize, dequantize, unary...) inherit their input's shape."""
    target = p.get("output") or p.get("main_mem_output")
    if target is None:
        return
    shape = tuple(out.shape)
    src = p.get("input")
    if out.ndim == 1 and src is not None:
        known = shapes.get((src.memory_type, src.start))
        if known is not None and int(np.prod(known)) == out.size:
            shape = known
    shapes[(target.memory_type, target.start)] = shape


def _upload_batches(ram: KpuRam, row: int, x: np.ndarray) -> None:
    n, c, h, w = x.shape
    check_batches(n, fmap_rows(c, h, w), "in_shape")
    for b in range(n):
        ram.write_map(row + b * fmap_rows(c, h, w), x[b], "kpu_upload")


# --- node handlers: (model, node, memory, rules) -> output array (shaped) ---------------


def _in4(m, node, mem, key="input", shape_key="in_shape"):
    return mem.shaped(node.params[key], node.params[shape_key], shape_key)


def _binary(m, node, mem, rules):
    p = node.params
    a = mem.shaped(p["input_a"], p["in_a_shape"], "in_a_shape")
    b = mem.shaped(p["input_b"], p["in_b_shape"], "in_b_shape")
    limit(p["out_shape"], "out_shape")
    y = nn.broadcast_binary(BINARY_OPS[p["binary_op"]], a.astype(F32), b.astype(F32))
    y = _clamp(np.broadcast_to(y, p["out_shape"]), p["fused_activation"])
    return mem.write(p["output"], y, "binary")


def _concat(m, node, mem, rules):
    p = node.params
    outer, inner = p["outer_size"], p["inner_size"]
    parts = []
    for mr, dim in zip(p["inputs"], p["dims"], strict=True):
        raw = mem.region(mr, "concat input")[mr.start : mr.start + outer * dim * inner]
        parts.append(raw.reshape(outer, dim * inner))
    out = np.concatenate(parts, axis=1).reshape(-1)
    buf = mem.region(p["output"], "concat output")
    buf[p["output"].start : p["output"].start + out.size] = out
    dt = _dtype(p["output"], "concat")
    return out.view(dt) if out.size % dt.itemsize == 0 else out


def _conv_out(p, n, h, w, oc):
    oh = _out_hw(h, p["padding_h"], p["filter_h"], p["stride_h"], p["dilation_h"])
    ow = _out_hw(w, p["padding_w"], p["filter_w"], p["stride_w"], p["dilation_w"])
    limit((n, oc, oh, ow), "padding/stride output")
    return oh, ow


def _float_conv(x, weights, bias, p, groups):
    n, c, h, w = x.shape
    oc = bias.size
    oh, ow = _conv_out(p, n, h, w, oc)
    wts = weights.reshape(oc, c // groups, p["filter_h"], p["filter_w"])
    pad = (*p["padding_h"], *p["padding_w"])
    return nn.conv2d_nchw(
        x,
        wts,
        bias,
        groups,
        (p["stride_h"], p["stride_w"]),
        pad,
        (p["dilation_h"], p["dilation_w"]),
        (oh, ow),
    )


def _conv2d(m, node, mem, rules):
    p = node.params
    x = _in4(m, node, mem)
    wts = np.frombuffer(m.parsed.view(node.arrays["weights"]), "<f4")
    bias = np.frombuffer(m.parsed.view(node.arrays["bias"]), "<f4")
    y = _clamp(_float_conv(x, wts, bias, p, p["groups"]), p["fused_activation"])
    return mem.write(p["output"], y, "conv2d")


def _cpu_conv2d(m, node, mem, rules):
    """NHWC float conv; weights [oc][fh][fw][ic]; depthwise when there is no out_channels."""
    p = node.params
    x = _in4(m, node, mem).transpose(0, 3, 1, 2)
    c = x.shape[1]
    wts = np.frombuffer(m.parsed.view(node.arrays["weights"]), "<f4")
    bias = np.frombuffer(m.parsed.view(node.arrays["bias"]), "<f4")
    if node.opcode == 0x1002:
        w4, groups = wts.reshape(c, p["filter_h"], p["filter_w"], 1), c
    else:
        w4, groups = wts.reshape(-1, p["filter_h"], p["filter_w"], c), 1
    y = _float_conv(x, w4.transpose(0, 3, 1, 2).reshape(-1), bias, p, groups)
    y = _clamp(y, p["fused_activation"]).transpose(0, 2, 3, 1)
    return mem.write(p["output"], y, node.name)


def _quantized_conv(x, w4, bias, p, groups, x_off, w_off):
    """Integer conv: sum((x + x_off)*(w + w_off)) + bias, then mul_and_carry_shift."""
    xi = x.astype(np.float64) + x_off
    wi = w4.astype(np.float64) + w_off
    n, c, h, w = x.shape
    oh, ow = _conv_out(p, n, h, w, bias.size)
    pad = (*p["padding_h"], *p["padding_w"])
    acc = nn.conv2d_nchw(xi, wi, np.zeros(bias.size), groups, (p["stride_h"], p["stride_w"]), pad,
                         (p["dilation_h"], p["dilation_w"]), (oh, ow), dtype=np.float64)  # fmt: skip
    acc = np.rint(acc).astype(np.int64) + bias.astype(np.int64)[None, :, None, None]
    y = nn.mul_and_carry_shift(acc, p["output_mul"], p["output_shift"]) + p["output_offset"]
    return np.clip(y, 0, 255).astype(np.uint8)


def _q_conv2d(m, node, mem, rules):
    p = node.params
    x = _in4(m, node, mem)
    c = x.shape[1]
    g = p["groups"]
    wts = np.frombuffer(m.parsed.view(node.arrays["weights"]), np.uint8)
    bias = np.frombuffer(m.parsed.view(node.arrays["bias"]), "<i4")
    w4 = wts.reshape(bias.size, c // g, p["filter_h"], p["filter_w"])
    y = _quantized_conv(x, w4, bias, p, g, p["input_offset"], p["filter_offset"])
    return mem.write(p["output"], y, node.name)


def _cpu_q_conv2d(m, node, mem, rules):
    """NHWC quantized conv: (x - input_offset)*(w - filter_offset) (cpu_* sign convention)."""
    p = node.params
    x = _in4(m, node, mem).transpose(0, 3, 1, 2)
    c = x.shape[1]
    wts = np.frombuffer(m.parsed.view(node.arrays["weights"]), np.uint8)
    bias = np.frombuffer(m.parsed.view(node.arrays["bias"]), "<i4")
    if node.opcode == 0x1005:
        w4, groups = wts.reshape(c, p["filter_h"], p["filter_w"], 1), c
    else:
        w4, groups = wts.reshape(-1, p["filter_h"], p["filter_w"], c), 1
    y = _quantized_conv(
        x, w4.transpose(0, 3, 1, 2), bias, p, groups, -p["input_offset"], -p["filter_offset"]
    )
    return mem.write(p["output"], y.transpose(0, 2, 3, 1), node.name)


def _dequantize(m, node, mem, rules):
    """Board quirk: q*(1/scale) + (-zp*(1/scale)) in float32 (riscv kernel)."""
    p = node.params
    zp, scale = p["quant_param"]
    inv = F32(1) / F32(scale)
    q = mem.read(p["input"], "dequantize")
    y = (q.astype(F32) * inv + F32(-zp) * inv).astype(F32)
    return mem.write(p["output"], y, "dequantize")


def _quantize(m, node, mem, rules):
    """Board quirk: half-to-even for elements in pairs, roundf for an odd last element."""
    p = node.params
    zp, scale = p["quant_param"]
    x = mem.read(p["input"], "quantize").astype(F32)
    v = (x * F32(scale) + F32(zp)).astype(F32)
    r = np.rint(v)
    if v.size % 2:
        r[-1] = nn.roundf(v[-1:])[0]
    y = np.clip(r, 0, 255).astype(np.uint8)
    return mem.write(p["output"], y, "quantize")


def _matmul(m, node, mem, rules):
    p = node.params
    a = mem.shaped(p["input_a"], (p["a_rows"], p["a_cols"]), "a_rows x a_cols")
    b = mem.shaped(p["input_b"], (p["a_cols"], p["b_cols"]), "a_cols x b_cols")
    bias = np.frombuffer(m.parsed.view(node.arrays["bias"]), "<f4")
    y = _clamp(a.astype(F32) @ b.astype(F32) + bias, p["fused_activation"])
    return mem.write(p["output"], y, "matmul")


def _q_matmul(m, node, mem, rules):
    p = node.params
    a = mem.shaped(p["input_a"], (p["a_rows"], p["a_cols"]), "a_rows x a_cols").astype(np.int64)
    b = mem.shaped(p["input_b"], (p["a_cols"], p["b_cols"]), "a_cols x b_cols").astype(np.int64)
    bias = np.frombuffer(m.parsed.view(node.arrays["bias"]), "<i4").astype(np.int64)
    acc = (a + p["input_a_offset"]) @ (b + p["input_b_offset"]) + bias
    y = nn.mul_and_carry_shift(acc, p["output_mul"], p["output_shift"]) + p["output_offset"]
    return mem.write(p["output"], np.clip(y, 0, 255).astype(np.uint8), "quantized_matmul")


def _pad(m, node, mem, rules):
    p = node.params
    x = _in4(m, node, mem)
    pads = list(zip(p["paddings"][0::2], p["paddings"][1::2], strict=True))
    limit([d + max(0, b) + max(0, a) for d, (b, a) in zip(x.shape, pads, strict=False)], "paddings")
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -a)) for i, (b, a) in enumerate(pads))
    x = x[crop]
    value = p["pad_value"][1]
    y = np.pad(x, [(max(0, b), max(0, a)) for b, a in pads], constant_values=value)
    return mem.write(p["output"], y, "pad")


def _reduce(m, node, mem, rules):
    p = node.params
    x = _in4(m, node, mem).astype(F32)
    out_shape = p["out_shape"]
    axes = tuple(i for i in range(4) if out_shape[i] != x.shape[i])
    op = REDUCE_OPS[p["reduce_op"]]
    init = F32(p["init_value"])
    if op in ("mean", "sum"):
        y = x.sum(axis=axes, keepdims=True, dtype=F32) + init
        if op == "mean":
            y = y * (F32(np.prod(out_shape)) / F32(x.size))
    elif op == "min":
        y = np.minimum(x.min(axis=axes, keepdims=True), init)
    else:
        y = np.maximum(x.max(axis=axes, keepdims=True), init)
    return mem.write(p["output"], y.astype(F32).reshape(out_shape), "reduce")


def _reduce_window(m, node, mem, rules):
    p = node.params
    x = _in4(m, node, mem)
    nhwc = node.opcode == 0x1003
    if nhwc:
        x = x.transpose(0, 3, 1, 2)
    if p["dilation_h"] != 1 or p["dilation_w"] != 1:
        raise NotImplementedOpError(
            f"{m.name}: node {node.index} ({node.name}) with dilation != 1",
            "report it with the model",
        )
    h, w = x.shape[2:]
    oh = _out_hw(h, p["padding_h"], p["filter_h"], p["stride_h"], 1)
    ow = _out_hw(w, p["padding_w"], p["filter_w"], p["stride_w"], 1)
    limit((*x.shape[:2], oh, ow), "padding/stride output")
    mode = REDUCE_OPS[p["reduce_op"]]
    y = nn.pool2d(
        x.astype(F32), (p["filter_h"], p["filter_w"]), (p["stride_h"], p["stride_w"]),
        (*p["padding_h"], *p["padding_w"]), (oh, ow), mode,
        init=None if mode == "mean" else p["init_value"],
    )  # fmt: skip
    y = _clamp(y, p["fused_activation"])
    if nhwc:
        y = y.transpose(0, 2, 3, 1)
    return mem.write(p["output"], y, node.name)


def _memory_copy(m, node, mem, rules):
    p = node.params
    src, dst = p["input"], p["output"]
    n = min(src.size, dst.size)
    data = mem.region(src, "memory_copy")[src.start : src.start + n].copy()
    mem.region(dst, "memory_copy")[dst.start : dst.start + n] = data
    return data


def _resize(m, node, mem, rules):
    p = node.params
    x = _in4(m, node, mem)
    limit((*x.shape[:2], p["out_h"], p["out_w"]), "out_h x out_w")
    if p["mode"] == 1:
        y = nn.resize_nearest(x, p["out_h"], p["out_w"])
    else:
        y = nn.resize_bilinear(x, p["out_h"], p["out_w"], bool(p["align_corners"]))
    return mem.write(p["output"], y, "resize_image")


def _softmax(m, node, mem, rules):
    p = node.params
    x = mem.shaped(p["input"], (p["outer_size"], p["inner_size"]), "outer_size x inner_size")
    return mem.write(p["output"], nn.softmax(x, axis=1, beta=p["beta"]), "softmax")


def _transpose(m, node, mem, rules):
    p = node.params
    y = np.ascontiguousarray(_in4(m, node, mem).transpose(p["perm"]))
    return mem.write(p["output"], y, "transpose")


def _strided_slice(m, node, mem, rules):
    """Kernel semantics: begin/end/strides only (the masks are stored but unused)."""
    p = node.params
    x = _in4(m, node, mem)
    sl = tuple(slice(b, e, s) for b, e, s in zip(p["begin"], p["end"], p["strides"], strict=True))
    return mem.write(p["output"], np.ascontiguousarray(x[sl]), "strided_slice")


def _unary(m, node, mem, rules):
    p = node.params
    x = mem.read(p["input"], "unary").astype(F32)
    with np.errstate(all="ignore"):
        y = nn.UNARY[UNARY_OPS[p["unary_op"]]](x).astype(F32)
    return mem.write(p["output"], y, "unary")


def _q_binary(m, node, mem, rules):
    """a' = mcs(a + a_off, a_mul, a_shift), same for b; out = mcs(op(a', b')) + out_off."""
    p = node.params
    a = mem.shaped(p["input_a"], p["in_a_shape"], "in_a_shape").astype(np.int64)
    b = mem.shaped(p["input_b"], p["in_b_shape"], "in_b_shape").astype(np.int64)
    limit(p["out_shape"], "out_shape")
    a = nn.mul_and_carry_shift(a + p["input_a_offset"], p["input_a_mul"], p["input_a_shift"])
    b = nn.mul_and_carry_shift(b + p["input_b_offset"], p["input_b_mul"], p["input_b_shift"])
    op = BINARY_OPS[p["binary_op"]]
    if op == "div":
        b = np.where(b == 0, 1, b)
        v = np.trunc((a + b // 2) / b).astype(np.int64)
    else:
        v = nn.broadcast_binary(op, a, b)
    y = nn.mul_and_carry_shift(
        np.broadcast_to(v, p["out_shape"]), p["output_mul"], p["output_shift"]
    )
    y = np.clip(y + p["output_offset"], 0, 255).astype(np.uint8)
    return mem.write(p["output"], y, "quantized_binary")


def _table_lookup(m, node, mem, rules):
    p = node.params
    x = mem.read(p["input"], "table_lookup1d")
    table = mem.read(p["table"], "table_lookup1d table")
    return mem.write(p["output"], table[x.astype(np.int64)], "table_lookup1d")


def _conv2d_transpose(m, node, mem, rules):
    p = node.params
    x = _in4(m, node, mem).astype(F32)
    n, c, h, w = x.shape
    out_shape = p["out_shape"]
    oc, g = out_shape[1], p["groups"]
    fh, fw = p["filter_h"], p["filter_w"]
    sh, sw, dh, dw = p["stride_h"], p["stride_w"], p["dilation_h"], p["dilation_w"]
    wts = np.frombuffer(m.parsed.view(node.arrays["weights"]), "<f4").reshape(oc, c // g, fh, fw)
    bias = np.frombuffer(m.parsed.view(node.arrays["bias"]), "<f4")
    full_h, full_w = (h - 1) * sh + (fh - 1) * dh + 1, (w - 1) * sw + (fw - 1) * dw + 1
    limit((n, oc, full_h, full_w), "filter/stride/dilation")
    y = np.zeros((n, oc, full_h, full_w), dtype=F32)
    icg, ocg = c // g, oc // g
    for gi in range(g):
        xs = x[:, gi * icg : (gi + 1) * icg]
        for ky in range(fh):
            for kx in range(fw):
                contrib = np.einsum("nchw,oc->nohw", xs, wts[gi * ocg : (gi + 1) * ocg, :, ky, kx])
                y[:, gi * ocg : (gi + 1) * ocg, ky * dh : ky * dh + (h - 1) * sh + 1 : sh,
                  kx * dw : kx * dw + (w - 1) * sw + 1 : sw] += contrib  # fmt: skip
    top, left = p["padding_h"][0], p["padding_w"][0]
    y = y[:, :, top : top + out_shape[2], left : left + out_shape[3]] + bias[None, :, None, None]
    return mem.write(p["output"], _clamp(y, p["fused_activation"]), "conv2d_transpose")


#: nnil opcodes: (name, stack inputs)
_NNIL = {
    0x20: np.abs, 0x21: np.ceil, 0x22: np.cos, 0x23: np.exp, 0x24: np.floor, 0x25: np.log,
    0x26: np.negative, 0x27: lambda v: F32(1) / np.sqrt(v), 0x28: np.sin, 0x29: np.square,
    0x40: np.add, 0x41: np.subtract, 0x42: np.multiply, 0x43: np.divide, 0x44: np.minimum,
    0x45: np.maximum,
}  # fmt: skip


def _nnil(m, node, mem, rules):
    """The tiny per-element stack VM of nnil_unary_method, run on whole arrays at once."""
    p = node.params
    x = mem.read(p["input"], "nnil_unary_method").astype(F32)
    code = bytes(m.parsed.view(node.arrays["bytecode"]))
    stack: list = []
    pc = 0
    with np.errstate(all="ignore"):
        while pc < len(code):
            op = code[pc]
            pc += 1
            if op == 0x00:
                continue
            if op == 0x01:
                stack.append(stack[-1])
            elif op == 0x02:
                stack.pop()
            elif op == 0x03:
                stack.append(x)
            elif op in (0x04, 0x05):
                stack.append(F32(op - 0x04))
            elif op == 0x06:
                stack.append(np.frombuffer(code, "<f4", 1, pc)[0])
                pc += 4
            elif op in _NNIL and op < 0x40:
                stack.append(_NNIL[op](stack.pop()).astype(F32))
            elif op in _NNIL:
                b, a = stack.pop(), stack.pop()
                stack.append(np.asarray(_NNIL[op](a, b), dtype=F32))
            elif op == 0x80:
                hi, lo, v = stack.pop(), stack.pop(), stack.pop()
                stack.append(np.clip(v, lo, hi).astype(F32))
            elif op == 0xA0:
                break
            else:
                raise NotImplementedOpError(
                    f"{m.name}: node {node.index} nnil opcode 0x{op:02x} at byte {pc - 1}",
                    "report it with the model attached",
                )
    y = np.broadcast_to(np.asarray(stack[-1], dtype=F32), x.shape)
    return mem.write(p["output"], y, "nnil_unary_method")


def _kpu_upload(m, node, mem, rules):
    p = node.params
    x = mem.shaped(p["input"], p["in_shape"], "in_shape")
    _upload_batches(mem.kpu, p["output"].start // KPU_ROW, x)
    return x


def _kpu_conv2d(m, node, mem, rules):
    p = node.params
    layer = m._convs[node.index]
    check_batches(p["batches"], fmap_rows(*layer.in_shape), "batches")
    y = batches(
        run_conv_in_ram(mem.kpu, layer, rules, batch=b) for b in range(max(1, p["batches"]))
    )
    if p["main_mem_output"].size:
        mem.write(p["main_mem_output"], y, "kpu_conv2d main-memory output")
    return y


_HANDLERS = {
    0x00: _binary, 0x01: _concat, 0x02: _conv2d, 0x03: _dequantize, 0x04: _matmul,
    0x05: _pad, 0x06: _quantize, 0x07: _reduce, 0x08: _reduce_window, 0x09: _memory_copy,
    0x0A: _resize, 0x0B: _softmax, 0x0C: _transpose, 0x0D: _strided_slice, 0x0E: _unary,
    0x0F: _q_conv2d, 0x10: _q_matmul, 0x11: _q_binary, 0x12: _table_lookup,
    0x13: _conv2d_transpose, 0x14: _nnil, 0x1001: _cpu_conv2d, 0x1002: _cpu_conv2d,
    0x1003: _reduce_window, 0x1004: _cpu_q_conv2d, 0x1005: _cpu_q_conv2d,
    0x2001: _kpu_upload, 0x2002: _kpu_conv2d,
}  # fmt: skip
