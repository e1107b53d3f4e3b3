"""Interpreter for kmodel V3 (nncase v0.1 / MaixPy), following the SDK's ``kpu.c``.

Memory model (docs/runtime.md, "Memory model"): one main buffer of ``main_mem_usage`` bytes that
layers address by byte offset, plus the 2 MiB KPU RAM addressed in 64-byte rows. Layers
run in file order and read/write those bytes exactly where the device does, so stale
bytes left by one layer are visible to the next as on the board (K210_ADD_PADDING).

Board quirks reproduced on purpose (each named where it happens):
* QUANTIZED_ADD processes ALIGN_UP(count, 8) elements (bytes past ``count`` change);
* QUANTIZED_ADD uses ``kpu_carry_shift`` (off by one on some negative values);
* SOFTMAX starts its running max at FLT_MIN, not -inf;
* AVERAGE_POOL2D ignores its ``act`` field;
* RESIZE_NEAREST_NEIGHBOR ignores ``align_corners``.
"""

from __future__ import annotations

import numpy as np

from ..errors import FormatError, NotImplementedOpError
from ..model.v3 import K210_CONV, KModelV3
from .kpu import KPU_ROW, ConvLayer, KpuRam, TieRules, run_conv_in_ram
from .model import (
    DAMAGE_ERRORS,
    DAMAGED_HINT,
    LayerOutput,
    Model,
    TensorSpec,
    check_size,
    check_spec,
    damaged,
)
from .ops import nn

#: bytes past main_mem_usage that the board's 8-element / DMA overruns may touch
MAIN_SLACK = 8

_FLOAT_OUT = {1, 5, 9, 12, 14, 15, 16, 18, 20, 22, 24, 25}


class V3Model(Model):
    """A V3 kmodel loaded for host execution (see module docstring)."""

    version = 3

    def __init__(self, parsed: KModelV3) -> None:
        self.parsed = parsed
        self.name = parsed.source
        if not parsed.layers:
            raise FormatError(f"{parsed.source}: V3 model has no layers", "the file is empty")
        if not parsed.eight_bit and any(op.opcode == K210_CONV for op in parsed.layers):
            raise NotImplementedOpError(
                f"{parsed.source}: 16-bit KPU weights (V3 flags bit0 = 0)",
                "no public model uses 16-bit mode; re-export with 8-bit quantisation",
            )
        #: header byte offsets (kpu_kmodel_header_t): main_mem_usage, the output table
        check_size(parsed.main_mem_usage, parsed.source, "header main_mem_usage", 20)
        self._convs: dict[int, ConvLayer] = {}
        for op in parsed.layers:
            if op.opcode == K210_CONV:
                self._convs[op.index] = ConvLayer.from_tables(
                    op.kpu,
                    np.frombuffer(parsed.view(op.arrays["weights"]), np.uint8),
                    parsed.view(op.arrays["bn"]),
                    parsed.view(op.arrays["act"]),
                    f"{parsed.source}: layer {op.index} (K210_CONV)",
                )
        first = parsed.layers[0]
        if first.opcode == K210_CONV:
            assert first.kpu is not None  # the parser decodes every conv's register block
            c, h, w = first.kpu.in_shape
            self.inputs = [TensorSpec("input", (1, c, h, w), np.dtype(np.uint8))]
        elif first.opcode == 18:
            self.inputs = [TensorSpec("input", (1, first.in_channels), np.dtype(np.float32))]
        else:
            raise FormatError(
                f"{parsed.source}: first layer is {first.name}; the SDK runtime accepts only "
                "K210_CONV or FULLY_CONNECTED first",
                "this model cannot run on MaixPy either",
            )
        check_spec(self.inputs[0], f"{parsed.source}: layer 0 ({first.name})", first.offset)
        self._shapes = self._infer_shapes()
        self.outputs = self._output_specs()
        for i, (spec, out) in enumerate(zip(self.outputs, parsed.outputs, strict=True)):
            if out.address + spec.size * spec.dtype.itemsize > parsed.main_mem_usage + MAIN_SLACK:
                raise FormatError(
                    f"{parsed.source}: output {i} at byte {28 + 8 * i:#x}: {out.size} bytes at "
                    f"main+{out.address:#x} run past the {parsed.main_mem_usage}-byte main buffer "
                    "(header main_mem_usage)",
                    DAMAGED_HINT,
                )

    # --- static shape bookkeeping ------------------------------------------------

    def _infer_shapes(self) -> dict[int, tuple[int, ...]]:
        """Shape (CHW-ish, without batch) of the tensor each main-memory address holds."""
        shapes: dict[int, tuple[int, ...]] = {}
        for op in self.parsed.layers:
            p = op.params
            if op.opcode == K210_CONV:
                assert op.kpu is not None  # the parser decodes every conv's register block
                if p["flags"] & 1:
                    shapes[p["main_mem_out_address"]] = op.kpu.out_shape
            elif op.opcode in (11, 12, 13, 25, 14, 15):
                src = shapes.get(p["main_mem_in_address"])
                count = p["count"] if "count" in p else p["channels"]
                shapes[p["main_mem_out_address"]] = src or (count,)
            elif op.opcode == 24:
                src = shapes.get(p["main_mem_in_address"])
                if src and int(np.prod(src)) == p["channels"] * p["channel_size"]:
                    shapes[p["main_mem_out_address"]] = src
                else:
                    shapes[p["main_mem_out_address"]] = (p["channels"], p["channel_size"])
            elif op.opcode == 18:
                shapes[p["main_mem_out_address"]] = (p["out_channels"],)
            elif op.opcode in (20, 21):
                w, h, c = p["shape"]
                shapes[p["main_mem_out_address"]] = (h * w * c,)
            elif op.opcode in (22, 23):
                c = p["in_shape"][2]
                shapes[p["main_mem_out_address"]] = (c, p["out_height"], p["out_width"])
            elif op.opcode in (8, 9):
                w, h, c = p["out_shape"]
                shapes[p["main_mem_out_address"]] = (c, h, w)
            elif op.opcode == 5:
                shapes[p["main_mem_out_address"]] = (p["channels"], 1, 1)
            elif op.opcode == 10242:
                shapes[p["main_mem_out_address"]] = (p["channels"],)
        return shapes

    def _output_specs(self) -> list[TensorSpec]:
        last = self.parsed.layers[-1]
        specs = []
        for i, out in enumerate(self.parsed.outputs):
            if last.opcode == K210_CONV:  # MaixPy returns the raw u8 map
                dtype: np.dtype = np.dtype(np.uint8)
                count = out.size
            elif last.opcode in _FLOAT_OUT:
                dtype = np.dtype(np.float32)
                count = out.size // 4
            else:
                dtype = np.dtype(np.uint8)
                count = out.size
            shape = self._shapes.get(out.address)
            if shape is None or int(np.prod(shape)) != count:
                shape = (count,)
            specs.append(TensorSpec(f"output{i}", (1, *shape), dtype))
        return specs

    # --- execution ------------------------------------------------------------------

    def _execute(
        self, inputs: list[np.ndarray], rules: TieRules, dump: list[LayerOutput] | None
    ) -> list[np.ndarray]:
        main = np.zeros(self.parsed.main_mem_usage + MAIN_SLACK, dtype=np.uint8)
        ram = KpuRam()
        first = self.parsed.layers[0]
        if first.opcode == K210_CONV:
            assert first.kpu is not None  # the parser decodes every conv's register block
            ram.write_map(first.kpu.image_src_addr, inputs[0][0], "model input")
        else:
            self._put(main, first.main_mem_in_address, inputs[0].astype("<f4"))
        for op in self.parsed.layers:
            handler = _HANDLERS.get(op.opcode)
            if handler is None:
                raise NotImplementedOpError(
                    f"{self.name}: layer {op.index} is {op.name} (type {op.opcode}), "
                    "which the host runtime does not implement",
                    "the SDK runtime does not implement it either; re-export the model",
                )
            try:
                result = handler(self, op, main, ram, rules)
            except DAMAGE_ERRORS as e:
                raise damaged(f"{self.name}: layer {op.index} ({op.name})", op.offset, e) from e
            if dump is not None:
                dump.append(LayerOutput(op.index, op.name, np.array(result)))
        outs = []
        for spec, out in zip(self.outputs, self.parsed.outputs, strict=True):
            raw = main[out.address : out.address + spec.size * spec.dtype.itemsize]
            outs.append(
                raw.view(spec.dtype.newbyteorder("<")).astype(spec.dtype).reshape(spec.shape)
            )
        return outs

    def _get(self, main: np.ndarray, addr: int, count: int, dtype: str, what: str) -> np.ndarray:
        nbytes = count * np.dtype(dtype).itemsize
        if addr < 0 or addr + nbytes > main.size:
            raise FormatError(
                f"{self.name}: {what} reads {nbytes} bytes at main+{addr:#x}, past the "
                f"{self.parsed.main_mem_usage}-byte main buffer",
                "the model's main_mem_usage or layer addresses are inconsistent",
            )
        return main[addr : addr + nbytes].view(dtype).copy()

    def _put(self, main: np.ndarray, addr: int, arr: np.ndarray, what: str = "output") -> None:
        raw = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        if addr < 0 or addr + raw.size > main.size:
            raise FormatError(
                f"{self.name}: {what} writes {raw.size} bytes at main+{addr:#x}, past the "
                f"{self.parsed.main_mem_usage}-byte main buffer",
                "the model's main_mem_usage or layer addresses are inconsistent",
            )
        main[addr : addr + raw.size] = raw


# --- layer handlers: (model, op, main, ram, rules) -> output array -------------------


def _k210_conv(m: V3Model, op, main, ram, rules):
    layer = m._convs[op.index]
    out = run_conv_in_ram(ram, layer, rules)
    if op.flags & 1:
        m._put(main, op.main_mem_out_address, out, f"layer {op.index} main-memory output")
    return out


def _upload(m: V3Model, op, main, ram, rules):
    c, h, w = op.channels, op.height, op.width
    fmap = m._get(main, op.main_mem_in_address, c * h * w, "u1", "K210_UPLOAD").reshape(c, h, w)
    ram.write_map(op.kpu_mem_out_address, fmap, f"layer {op.index} K210_UPLOAD")
    return fmap


def _add_padding(m: V3Model, op, main, ram, rules):
    """Each channel's byte goes to pixel (0,0) of a 4x4 map; the other 15 stay stale."""
    c = op.channels
    src = m._get(main, op.main_mem_in_address, c, "u1", "K210_ADD_PADDING")
    idx = np.arange(c)
    addr = op.kpu_mem_out_address * KPU_ROW + (idx // 4) * 4 * KPU_ROW + (idx % 4) * 16
    ram.data[addr] = src
    return src


def _remove_padding(m: V3Model, op, main, ram, rules):
    c = op.channels
    src = m._get(main, op.main_mem_in_address, 16 * c, "u1", "K210_REMOVE_PADDING")
    out = src[::16].copy()
    m._put(main, op.main_mem_out_address, out)
    return out


def _quantize(m: V3Model, op, main, ram, rules):
    x = m._get(main, op.main_mem_in_address, op.count, "<f4", "QUANTIZE")
    out = nn.v3_quantize(x, op.scale, op.bias)
    m._put(main, op.main_mem_out_address, out)
    return out


def _dequantize(m: V3Model, op, main, ram, rules):
    q = m._get(main, op.main_mem_in_address, op.count, "u1", "DEQUANTIZE")
    out = nn.v3_dequantize(q, op.scale, op.bias)
    m._put(main, op.main_mem_out_address, out)
    return out


def _channelwise_dequantize(m: V3Model, op, main, ram, rules):
    c, n = op.channels, op.channel_size
    q = m._get(main, op.main_mem_in_address, c * n, "u1", "CHANNELWISE_DEQUANTIZE").reshape(c, n)
    params = np.frombuffer(m.parsed.view(op.arrays["quant"]), "<f4").reshape(c, 2)
    out = q.astype(np.float32) * params[:, :1] + params[:, 1:]
    m._put(main, op.main_mem_out_address, out.astype("<f4"))
    return out


def _requantize(m: V3Model, op, main, ram, rules):
    q = m._get(main, op.main_mem_in_address, op.count, "u1", "REQUANTIZE")
    table = np.frombuffer(m.parsed.view(op.arrays["table"]), np.uint8)
    out = table[q]
    m._put(main, op.main_mem_out_address, out)
    return out


def _add(m: V3Model, op, main, ram, rules):
    a = m._get(main, op.main_mem_in_a_address, op.count, "<f4", "ADD")
    b = m._get(main, op.main_mem_in_b_address, op.count, "<f4", "ADD")
    out = (a + b).astype("<f4")
    m._put(main, op.main_mem_out_address, out)
    return out


def _quantized_add(m: V3Model, op, main, ram, rules):
    """Board quirk: the SDK loop handles ALIGN_UP(count, 8) elements."""
    n8 = (op.count + 7) // 8 * 8
    a = m._get(main, op.main_mem_in_a_address, n8, "u1", "QUANTIZED_ADD")
    b = m._get(main, op.main_mem_in_b_address, n8, "u1", "QUANTIZED_ADD")
    out = nn.v3_quantized_add(a, b, op.params)
    m._put(main, op.main_mem_out_address, out)
    return out[: op.count]


def _global_avg_pool(m: V3Model, op, main, ram, rules):
    k, c = op.kernel_size, op.channels
    x = m._get(main, op.main_mem_in_address, k * c, "<f4", "GLOBAL_AVERAGE_POOL2D").reshape(c, k)
    out = (x.sum(axis=1, dtype=np.float32) / np.float32(k)).astype("<f4")
    m._put(main, op.main_mem_out_address, out)
    return out


def _pool(m: V3Model, op, main, ram, rules):
    """QUANTIZED_MAX_POOL2D (u8, max starts at 0) / AVERAGE_POOL2D (float, act ignored)."""
    iw, ih, ic = op.in_shape
    ow, oh, oc = op.out_shape
    quant = op.opcode == 8
    dt = "u1" if quant else "<f4"
    x = m._get(main, op.main_mem_in_address, ic * ih * iw, dt, op.name).reshape(ic, ih, iw)
    pad = (op.padding_height, 0, op.padding_width, 0)
    out = nn.pool2d(
        x,
        (op.kernel_height, op.kernel_width),
        (op.stride_height, op.stride_width),
        pad,
        (oh, ow),
        "max" if quant else "mean",
        init=0 if quant else None,
    )
    m._put(main, op.main_mem_out_address, out)
    return out


def _vector_op(fn):
    """Handler for the float layers that map ``channels`` floats to as many floats."""

    def handler(m: V3Model, op, main, ram, rules):
        x = m._get(main, op.main_mem_in_address, op.channels, "<f4", op.name)
        out = fn(x)
        m._put(main, op.main_mem_out_address, out)
        return out

    return handler


_l2norm = _vector_op(nn.l2_normalize)
#: board quirk: the SDK softmax starts its running max at FLT_MIN
_softmax = _vector_op(lambda x: nn.softmax(x, sdk_flt_min=True))
_logistic = _vector_op(nn.logistic)


def _concat(m: V3Model, op, main, ram, rules):
    parts = [m._get(main, start, size, "u1", op.name) for start, size in op.inputs]
    out = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    m._put(main, op.main_mem_out_address, out)
    return out.view("<f4") if op.opcode == 16 and out.size % 4 == 0 else out


def _fully_connected(m: V3Model, op, main, ram, rules):
    n_in, n_out = op.in_channels, op.out_channels
    x = m._get(main, op.main_mem_in_address, n_in, "<f4", "FULLY_CONNECTED")
    w = np.frombuffer(m.parsed.view(op.arrays["weights"]), "<f4").reshape(n_out, n_in)
    b = np.frombuffer(m.parsed.view(op.arrays["bias"]), "<f4")
    out = nn.fully_connected(x, w, b, op.act)
    m._put(main, op.main_mem_out_address, out)
    return out


def _flatten(m: V3Model, op, main, ram, rules):
    """TENSORFLOW_FLATTEN: CHW -> HWC (u8 variant for type 21)."""
    w, h, c = op.shape
    dt = "<f4" if op.opcode == 20 else "u1"
    x = m._get(main, op.main_mem_in_address, c * h * w, dt, op.name).reshape(c, h, w)
    out = np.ascontiguousarray(x.transpose(1, 2, 0))
    m._put(main, op.main_mem_out_address, out)
    return out.reshape(-1)


def _resize_nearest(m: V3Model, op, main, ram, rules):
    """Board quirk: align_corners is ignored by the SDK kernel."""
    iw, ih, c = op.in_shape
    dt = "<f4" if op.opcode == 22 else "u1"
    x = m._get(main, op.main_mem_in_address, c * ih * iw, dt, op.name).reshape(c, ih, iw)
    out = np.ascontiguousarray(nn.resize_nearest(x, op.out_height, op.out_width))
    m._put(main, op.main_mem_out_address, out)
    return out


_HANDLERS = {
    1: _add,
    2: _quantized_add,
    5: _global_avg_pool,
    8: _pool,
    9: _pool,
    11: _quantize,
    12: _dequantize,
    13: _requantize,
    14: _l2norm,
    15: _softmax,
    16: _concat,
    17: _concat,
    18: _fully_connected,
    20: _flatten,
    21: _flatten,
    22: _resize_nearest,
    23: _resize_nearest,
    24: _channelwise_dequantize,
    25: _logistic,
    K210_CONV: _k210_conv,
    10241: _add_padding,
    10242: _remove_padding,
    10243: _upload,
}
