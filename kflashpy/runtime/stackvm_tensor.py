"""The stackvm tensor functions (``tensor.<name>`` instructions) of nncase 1.x.

Each handler takes the interpreter (:class:`~.stackvm.StackVM`) and the instruction's
fields, named as in nncase's ``op_reader.h`` of the release that wrote the file (so
one handler serves every release whose layout has those fields), pops its operands
in the order nncase's runtime pops them, and returns ``(step name, output)`` for the
per-layer dump. Op numbers (binary, unary, ...) are resolved through the release's
own enum (:class:`~kflashpy.model.stackvm.Isa`); a number without a kernel here is
refused by name, never run as another op.
"""

from __future__ import annotations

import numpy as np

from ..model.stackvm import isa
from .model import limit
from .ops import nn, nncase_math, nncase_window
from .stackvm import F32, StackVM, strided

I32 = np.dtype("<i4")
F32D = np.dtype("<f4")


def _op(vm: StackVM, table: str, number: int) -> str:
    return isa(vm.release).name_of(table, number)


def _call(vm: StackVM, f: dict):
    model = vm.run_.model
    module_id, function_id = f["module_id"], f["function_id"]
    if module_id >= len(model.parsed.modules):
        raise ValueError(f"module_id {module_id}: the model has {len(model.parsed.modules)}")
    mod = model.parsed.modules[module_id]
    if function_id >= len(mod.functions):
        raise ValueError(f"function_id {function_id}: module {module_id} has {len(mod.functions)}")
    if mod.type != "k210":  # nncase's stackvm calls K210 functions (and a loop never ends)
        raise ValueError(f"module_id {module_id} is a {mod.type} module, not a k210 one")
    fn = mod.functions[function_id]

    def pop_tensor():
        rstride, rshape, dt = vm.pop_int(), vm.pop_int(), vm.pop_int()
        addr = vm.pop_addr()
        return strided(addr, vm.dtype(dt), vm.shape(rshape), vm.shape(rstride))

    outs = [pop_tensor() for _ in range(f["num_dst"])][::-1]
    ins = [pop_tensor() for _ in range(f["num_src"])][::-1]
    in_pool = np.zeros(max(fn.input_pool_size, 1), np.uint8)
    out_pool = np.zeros(max(fn.output_pool_size, 1), np.uint8)
    for mr, t in zip(fn.inputs, ins, strict=True):
        raw = np.ascontiguousarray(t).view(np.uint8).reshape(-1)
        in_pool[mr.start : mr.start + raw.size] = raw
    vm.run_.call(mod, fn, in_pool, out_pool)
    for mr, t in zip(fn.outputs, outs, strict=True):
        n = t.size * t.dtype.itemsize
        t[...] = out_pool[mr.start : mr.start + n].view(t.dtype).reshape(t.shape)
    return f"call {mod.type}.{function_id}", outs[0] if outs else np.zeros(0)


def _dequantize(vm: StackVM, f: dict):
    """y = q*scale + bias in float32 (scale and bias popped from the stack)."""
    bias, scale = F32(vm.pop_num()), F32(vm.pop_num())
    output, inp = vm.pop_addr(), vm.pop_addr()
    q = vm.view(inp, f["in_datatype"], f["rshape_src"], f["rstride_src"])
    y = (q.astype(F32) * scale).astype(F32) + bias
    out_dt = vm.dtype(f["dst_datatype"])
    return "dequantize", vm.out(output, y.astype(out_dt), out_dt, f["rstride_dest"])


def _quantize(vm: StackVM, f: dict):
    """q = saturate(round_half_even(x*scale + bias)) (nncase 1.x quantize)."""
    bias, scale = F32(vm.pop_num()), F32(vm.pop_num())
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["in_datatype"], f["rshape_src"], f["rstride_src"]).astype(F32)
    dt = vm.dtype(f["dst_datatype"])
    info = np.iinfo(dt)
    q = np.clip(np.rint((x * scale).astype(F32) + bias), info.min, info.max).astype(dt)
    return "quantize", vm.out(output, q, dt, f["rstride_dest"])


def _copy(vm: StackVM, f: dict):
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape"], f["rstride_src"]).copy()
    return "copy", vm.out(output, x, f["datatype"], f["rstride_dest"])


def _convert(vm: StackVM, f: dict):
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["in_datatype"], f["rshape_src"], f["rstride_src"])
    dt = vm.dtype(f["dst_datatype"])
    return "convert", vm.out(output, x.astype(dt), dt, f["rstride_dest"])


def _pad(vm: StackVM, f: dict):
    """nncase reference pad: constant/reflect/symmetric/edge per axis (one reflection,
    as nncase computes it); interior padding (ConvTranspose) spreads the input over the
    last two axes first, then pads the edges."""
    value = vm.pop_num()
    output, inp = vm.pop_addr(), vm.pop_addr()
    mode = _op(vm, "pad_mode", f["pad_mode"])
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    pads = vm.padding(f["rpaddings"])
    if len(pads) != x.ndim:
        raise ValueError(f"{len(pads)} paddings for a {x.ndim}-d tensor")
    if any(p[2] for p in pads):
        if mode != "constant" or any(p[2] for p in pads[:-2]) or x.ndim < 2:
            raise vm.fail("tensor.pad with interior padding outside the last two axes")
        shape = [d + (d - 1) * p[2] if d else 0 for d, p in zip(x.shape, pads, strict=True)]
        limit(shape, "padded output")
        spread = np.full(shape, value, x.dtype)
        spread[..., :: pads[-2][2] + 1, :: pads[-1][2] + 1] = x
        x, pads = spread, [(b, a, 0) for b, a, _ in pads]
    limit([d + b + a for d, (b, a, _) in zip(x.shape, pads, strict=True)], "padded output")
    y = nncase_math.pad(x, [(b, a) for b, a, _ in pads], mode, value)
    return f"pad.{mode}", vm.out(output, y, f["datatype"], f["rstride_dest"])


def _conv2d(vm: StackVM, f: dict):
    pw, ph = vm.pop_padding(), vm.pop_padding()
    output, bias, weights, inp = vm.pop_addr(), vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    dt = f["datatype"]
    x = vm.view(inp, dt, f["rshape_src"], f["rstride_src"])
    w = vm.view(weights, dt, f["rshape_kernel"], f["rstride_kernel"])
    b = strided(bias, F32D, (w.shape[0],), vm.shape(f["rstride_bias"])[-1:])
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    sh, sw, dh, dw = f["stride_h"], f["stride_w"], f["dilation_h"], f["dilation_w"]
    oh = (h + ph[0] + ph[1] - ((kh - 1) * dh + 1)) // sh + 1
    ow = (wd + pw[0] + pw[1] - ((kw - 1) * dw + 1)) // sw + 1
    limit((n, w.shape[0], oh, ow), "output")
    # nncase's default strides (as its compiler writes them): dense, 0 along size-1 axes
    dense = _dense_strides(x.shape)
    default = tuple(0 if d == 1 else s for d, s in zip(x.shape, dense, strict=True))
    contiguous = tuple(vm.shape(f["rstride_src"])) == default
    fused = nncase_math.halide_conv(
        vm.release, w.shape, f["groups"], c, contiguous, (sh, sw), (dh, dw)
    )
    y = nncase_math.conv2d(
        x, w, b, f["groups"], (sh, sw), (ph[0], ph[1], pw[0], pw[1]), (dh, dw), (oh, ow), fused
    )
    y = nncase_math.clamp(y, f["fused_clamp_low"], f["fused_clamp_high"])
    return "conv2d", vm.out(output, y, dt, f["rstride_dest"])


def _matmul(vm: StackVM, f: dict):
    output, bias, b_addr, a_addr = vm.pop_addr(), vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    if "rstride_src1" in f:
        a = vm.view(a_addr, F32D, f["rshape_src1"], f["rstride_src1"])
        b = vm.view(b_addr, F32D, f["rshape_src2"], f["rstride_src2"])
    else:  # nncase 1.3's short form: dense operands (its kernel ignores strides)
        sa, sb = vm.shape(f["rshape_src1"]), vm.shape(f["rshape_src2"])
        a, b = (
            strided(a_addr, F32D, sa, _dense_strides(sa)),
            strided(b_addr, F32D, sb, _dense_strides(sb)),
        )
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul of shapes {a.shape} and {b.shape}")
    limit((*a.shape[:-1], b.shape[-1]), "output")
    bias_row = strided(bias, F32D, (b.shape[-1],), (1,))
    y = nncase_math.matmul(a, b, bias_row, f["fused_clamp_low"], f["fused_clamp_high"])
    if "rstride_dest" in f:
        return "matmul", vm.out(output, y, F32D, f["rstride_dest"])
    strided(output, F32D, y.shape, _dense_strides(y.shape))[...] = y
    return "matmul", y


def _equal(vm: StackVM, f: dict):
    """nncase 1.3-1.5 equal: broadcast ``a == b`` written as bool bytes."""
    output, b_addr, a_addr = vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    dt = vm.dtype(f["datatype"])
    a = vm.view(a_addr, dt, f["rshape_src1"], f["rstride_src1"])
    b = vm.view(b_addr, dt, f["rshape_src2"], f["rstride_src2"])
    shape = np.broadcast_shapes(a.shape, b.shape)
    limit(shape, "output")
    y = np.broadcast_to(a == b, shape).astype(np.uint8)
    return "equal", vm.out(output, y, np.dtype("u1"), f["rstride_dest"])


def _binary(vm: StackVM, f: dict):
    output, b_addr, a_addr = vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    name = _op(vm, "binary", f["binary_op"])
    if name not in nncase_math.BINARY:
        raise vm.fail(f"tensor.binary op {name}")
    dt = vm.dtype(f["datatype"])
    a = vm.view(a_addr, dt, f["rshape_src1"], f["rstride_src1"])
    b = vm.view(b_addr, dt, f["rshape_src2"], f["rstride_src2"])
    # nncase 1.0-1.3 name no output shape: the kernel writes the broadcast shape
    shape = (
        vm.shape(f["rshape_dest"]) if "rshape_dest" in f else np.broadcast_shapes(a.shape, b.shape)
    )
    limit(shape, "output")
    y = nncase_math.binary(name, a, b, shape, f["fused_clamp_low"], f["fused_clamp_high"])
    return f"binary.{name}", vm.out(output, y, dt, f["rstride_dest"])


def _unary(vm: StackVM, f: dict):
    output, inp = vm.pop_addr(), vm.pop_addr()
    name = _op(vm, "unary", f["unary_op"])
    if name not in nncase_math.UNARY:
        raise vm.fail(f"tensor.unary op {name}")
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    y = nncase_math.unary(name, x.astype(F32)).astype(x.dtype)
    return f"unary.{name}", vm.out(output, y, f["datatype"], f["rstride_dest"])


def _sigmoid(vm: StackVM, f: dict):
    output, inp = vm.pop_addr(), vm.pop_addr()
    if "rstride_dest" not in f:
        raise vm.fail("tensor.sigmoid in its nncase 1.2 form (no output strides)")
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    return "sigmoid", vm.out(output, nn.logistic(x), f["datatype"], f["rstride_dest"])


def _softmax(vm: StackVM, f: dict):
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    y = nncase_math.softmax(x, f["axis"] % max(x.ndim, 1), f["beta"])
    return "softmax", vm.out(output, y, f["datatype"], f["rstride_dest"])


def _transpose(vm: StackVM, f: dict):
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    y = np.ascontiguousarray(x.transpose(vm.shape(f["rshape_perm"])))
    return "transpose", vm.out(output, y, f["datatype"], f["rstride_dest"])


def _slice(vm: StackVM, f: dict):
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    sl = tuple(
        slice(b, e, s)
        for b, e, s in zip(
            vm.shape(f["rbegins"]), vm.shape(f["rends"]), vm.shape(f["rstrides"]), strict=True
        )
    )
    return "slice", vm.out(output, np.ascontiguousarray(x[sl]), f["datatype"], f["rstride_dest"])


def _reduce_window2d(vm: StackVM, f: dict):
    pw, ph = vm.pop_padding(), vm.pop_padding()
    output = vm.pop_addr()
    init = vm.pop_num()
    inp = vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    h, w = x.shape[2:]
    fh, fw, sh, sw = f["filter_h"], f["filter_w"], f["stride_h"], f["stride_w"]
    dh, dw = f["dilation_h"], f["dilation_w"]
    if min(fh, fw, sh, sw, dh, dw) < 1:
        raise ValueError(f"reduce_window2d filter {fh}x{fw} stride {sh}x{sw} dilation {dh}x{dw}")
    oh = (h + ph[0] + ph[1] - ((fh - 1) * dh + 1)) // sh + 1
    ow = (w + pw[0] + pw[1] - ((fw - 1) * dw + 1)) // sw + 1
    limit((*x.shape[:2], oh, ow), "output")
    mode = _op(vm, "reduce", f["reduce_op"])
    if (dh, dw) == (1, 1):
        y = nn.pool2d(x.astype(F32), (fh, fw), (sh, sw), (ph[0], ph[1], pw[0], pw[1]), (oh, ow),
                      mode, init=None if mode == "mean" else float(init))  # fmt: skip
    else:
        y = nncase_window.reduce_window2d_dilated(
            x.astype(F32), init, mode, (fh, fw), (sh, sw), (dh, dw), ph, pw, (oh, ow)
        )
    y = np.clip(y, F32(f["fused_clamp_low"]), F32(f["fused_clamp_high"])).astype(F32)
    return f"reduce_window2d.{mode}", vm.out(output, y, f["datatype"], f["rstride_dest"])


def _reduce(vm: StackVM, f: dict):
    """nncase reference reduce: a row-major fold from the pushed init (min and max start
    at the type's extremes instead), mean divides the sum by the reduced count."""
    init = vm.pop_num()
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    axes = tuple(int(a) for a in vm.shape(f["rshape_axis"]))
    mode = _op(vm, "reduce", f["reduce_op"])
    lim = np.finfo(x.dtype) if x.dtype.kind == "f" else np.iinfo(x.dtype)
    if mode in ("sum", "mean"):
        y = nncase_math.fold(x, axes, np.add, x.dtype.type(init))
        if mode == "mean":
            count = x.dtype.type(np.prod([x.shape[a] for a in axes]))
            y = y / count if x.dtype.kind == "f" else nncase_math.int_div(y, count)
    elif mode == "max":
        y = nncase_math.fold(x, axes, nncase_math.c_max, lim.min)
    else:
        y = nncase_math.fold(x, axes, nncase_math.c_min, lim.max)
    if not f["keep_dims"]:
        y = y.reshape([d for i, d in enumerate(y.shape) if i not in axes])
    return f"reduce.{mode}", vm.out(output, y.astype(x.dtype), f["datatype"], f["rstride_dest"])


def _reduce_prod(vm: StackVM, f: dict):
    """nncase reference reduce_prod: a row-major product from 1."""
    output, inp = vm.pop_addr(), vm.pop_addr()
    dt = f.get("datatype", 9)  # nncase 1.1-1.5 have no datatype field: float32 only
    x = vm.view(inp, dt, f["rshape_src"], f["rstride_src"])
    axes = tuple(int(a) for a in vm.shape(f["rshape_axes"]))
    with np.errstate(all="ignore"):
        y = nncase_math.fold(x, axes, np.multiply, x.dtype.type(1))
    if not f["keep_dims"]:
        y = y.reshape([d for i, d in enumerate(y.shape) if i not in axes])
    return "reduce_prod", vm.out(output, y, dt, f["rstride_dest"])


def _lut1d(vm: StackVM, f: dict):
    """nncase lut1d: out = table[in] for uint8 (the pushed min/max are unused)."""
    vm.pop_num(), vm.pop_num()
    output, table, inp = vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    if f["datatype"] != 4:
        raise vm.fail(f"tensor.lut1d of datatype {f['datatype']} (nncase runs uint8 only)")
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    tab = strided(table, np.dtype("u1"), (f["table_len"],), (1,))
    return "lut1d", vm.out(output, tab[x], f["datatype"], f["rstride_dest"])


def _compare(vm: StackVM, f: dict):
    """nncase compare: a broadcast elementwise comparison writing bool bytes."""
    output, b_addr, a_addr = vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    name = _op(vm, "compare", f["compare_op"])
    dt = vm.dtype(f["datatype"])
    a = vm.view(a_addr, dt, f["rshape_src1"], f["rstride_src1"])
    b = vm.view(b_addr, dt, f["rshape_src2"], f["rstride_src2"])
    shape = vm.shape(f["rshape_dest"])
    limit(shape, "output")
    y = np.broadcast_to(nncase_math.COMPARE[name](a, b), shape).astype(np.uint8)
    return f"compare.{name}", vm.out(output, y, np.dtype("u1"), f["rstride_dest"])


def _broadcast(vm: StackVM, f: dict):
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    shape = vm.shape(f["rshape_dest"])
    limit(shape, "output")
    return "broadcast", vm.out(output, np.broadcast_to(x, shape), f["datatype"], f["rstride_dest"])


def _reduce_arg(vm: StackVM, f: dict):
    """nncase reference reduce_arg: first (or last) index of the min/max along one axis,
    where values within 1e-6 of the running best count as ties."""
    output, inp = vm.pop_addr(), vm.pop_addr()
    name = _op(vm, "reduce_arg", f["reduce_arg_op"])
    x = vm.view(inp, f["datatype_src"], f["rshape_src"], f["rstride_src"]).astype(F32)
    axes = tuple(int(a) for a in vm.shape(f["rshape_axis"]))
    if len(axes) != 1:
        raise vm.fail(f"tensor.reduce_arg over {len(axes)} axes")
    y = nncase_math.reduce_arg(x, axes[0], name == "arg_max", bool(f["select_last_idx"]))
    if not f["keep_dims"]:
        y = y.reshape([d for i, d in enumerate(y.shape) if i != axes[0]])
    dt = vm.dtype(f["datatype_dest"])
    return f"reduce_{name}", vm.out(output, y.astype(dt), dt, f["rstride_dest"])


def _resize_image(vm: StackVM, f: dict):
    output, inp = vm.pop_addr(), vm.pop_addr()
    out_w, out_h = vm.pop_int(), vm.pop_int()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    if x.ndim != 4:
        raise ValueError(f"resize_image of a {x.ndim}-d tensor")
    limit((*x.shape[:2], out_h, out_w), "output")
    mode = _op(vm, "resize_mode", f["image_resize_mode"])
    resize = (
        nncase_math.resize_nearest if mode == "nearest_neighbor" else nncase_math.resize_bilinear
    )
    y = resize(x, out_h, out_w, bool(f["align_corners"]), bool(f["half_pixel_centers"]))
    return f"resize_image.{mode}", vm.out(
        output, np.ascontiguousarray(y), f["datatype"], f["rstride_dest"]
    )


def _gather(vm: StackVM, f: dict):
    indices, output, inp = vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    ishape = vm.shape(f["rshape_indices"])
    idx = strided(indices, I32, ishape, _dense_strides(ishape))
    axis = f["axis"]
    limit((*x.shape[:axis], *idx.shape, *x.shape[axis + 1 :]), "output")
    y = np.take(x, idx.astype(np.int64), axis=axis)
    return "gather", vm.out(output, y, f["datatype"], f["rstride_dest"])


def _dense_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= int(d)
    return tuple(reversed(strides))


def _ternary(vm: StackVM, f: dict):
    """nncase ternary (Where): ``a ? b : c`` with a float32 condition, broadcast."""
    output, c_addr, b_addr, a_addr = vm.pop_addr(), vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    dt = vm.dtype(f["datatype"])
    a = vm.view(a_addr, F32D, f["rshape_src1"], f["rstride_src1"])
    b = vm.view(b_addr, dt, f["rshape_src2"], f["rstride_src2"])
    c = vm.view(c_addr, dt, f["rshape_src3"], f["rstride_src3"])
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    limit(shape, "output")
    return "ternary", vm.out(output, np.where(a != 0, b, c), dt, f["rstride_dest"])


def _cumsum(vm: StackVM, f: dict):
    output, inp = vm.pop_addr(), vm.pop_addr()
    shape = vm.shape(f["rshape_src"])
    dt = vm.dtype(f["datatype"])
    x = strided(inp, dt, shape, _dense_strides(shape))  # nncase reads it densely
    y = nncase_math.cumsum(x, f["axis"] % max(x.ndim, 1), bool(f["exclusive"]), bool(f["reverse"]))
    strided(output, dt, shape, _dense_strides(shape))[...] = y
    return "cumsum", y


def _hardmax(vm: StackVM, f: dict):
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    y = nncase_math.hardmax(x, f["axis"] % max(x.ndim, 1))
    target = strided(output, x.dtype, x.shape, vm.shape(f["rstride_src"]))  # input strides
    target[...] = y
    return "hardmax", y


def _topk(vm: StackVM, f: dict):
    out_b, out_a, inp = vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    axis = f["axis"] % max(x.ndim, 1)
    if not 0 < f["k"] <= x.shape[axis]:
        raise ValueError(f"topk k {f['k']} for an axis of {x.shape[axis]}")
    values, index = nncase_math.topk(x, f["k"], axis, bool(f["largest"]), bool(f["sorted"]))
    vm.out(out_a, values, x.dtype, f["rstride_dest1"])
    vm.out(out_b, index, np.dtype("<i8"), f["rstride_dest2"])
    return "topk", values


def _dense(vm: StackVM, addr, dt, reg: int) -> np.ndarray:
    """A tensor nncase's kernel reads densely (it is given no strides)."""
    shape = vm.shape(reg)
    return strided(addr, vm.dtype(dt) if isinstance(dt, int) else dt, shape, _dense_strides(shape))


def _write_dense(addr, value: np.ndarray) -> np.ndarray:
    strided(addr, value.dtype, value.shape, _dense_strides(value.shape))[...] = value
    return value


def _gather_elements(vm: StackVM, f: dict):
    """nncase gather_elements: float input, int64 indices (negative ones count from the
    end), dense tensors; the output has the indices' shape."""
    output, indices, inp = vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    x = _dense(vm, inp, F32D, f["input_shape_src"])
    idx = _dense(vm, indices, np.dtype("<i8"), f["indices_shape_src"])
    axis = f["axis"] % max(x.ndim, 1)
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return "gather_elements", _write_dense(output, np.take_along_axis(x, idx, axis=axis))


def _trilu(vm: StackVM, f: dict):
    """nncase trilu on dense float32: keep the upper (or lower) triangle from diagonal k."""
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = _dense(vm, inp, F32D, f["rshape_src"])
    if x.ndim < 2:
        raise ValueError(f"trilu of a {x.ndim}-d tensor")
    y = np.triu(x, f["k"]) if f["upper"] else np.tril(x, f["k"])
    return "trilu", _write_dense(output, y.astype(F32))


def _onehot(vm: StackVM, f: dict):
    """nncase onehot: on_value where the (int32) index equals the position on ``axis``
    (negative indices count from the end in process_neg mode), off_value elsewhere."""
    output, off, on, _depth, indices = (vm.pop_addr() for _ in range(5))
    dt = vm.dtype(f["datatype"])
    idx = _dense(vm, indices, I32, f["rshape_indices"]).astype(np.int64)
    shape = vm.shape(f["rshape_dest"])
    limit(shape, "output")
    axis = f["axis"]
    if _op(vm, "onehot_mode", f["onehot_mode"]) == "process_neg":
        idx = np.where(idx < 0, idx + shape[axis], idx)
    along = np.arange(shape[axis]).reshape([-1 if i == axis else 1 for i in range(len(shape))])
    hit = np.expand_dims(idx, axis) == along
    on_v, off_v = strided(on, dt, (), ()), strided(off, dt, (), ())
    y = np.where(hit, on_v, off_v).astype(dt)
    return "onehot", vm.out(output, np.broadcast_to(y, shape), dt, f["rstride_dest"])


def _layer_normalization(vm: StackVM, f: dict):
    output, bias, scale, inp = vm.pop_addr(), vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    x = _dense(vm, inp, F32D, f["input_shape"])
    axis = f["axis"] % max(x.ndim, 1)
    n = int(np.prod(x.shape[axis:], dtype=np.int64))
    sc, bi = strided(scale, F32D, (n,), (1,)), strided(bias, F32D, (n,), (1,))
    y = nncase_math.layer_norm(x, sc, bi, axis, f["epsilon"])
    return "layer_normalization", _write_dense(output, y)


#: tensor function name -> handler (functions absent here are refused by name)
TENSOR = {
    "binary": _binary, "call": _call, "conv2d": _conv2d, "convert": _convert, "copy": _copy,
    "dequantize": _dequantize, "gather": _gather, "matmul": _matmul, "pad": _pad,
    "quantize": _quantize, "reduce": _reduce, "reduce_window2d": _reduce_window2d,
    "resize_image": _resize_image, "sigmoid": _sigmoid, "slice": _slice, "softmax": _softmax,
    "transpose": _transpose, "unary": _unary, "lut1d": _lut1d, "reduce_prod": _reduce_prod,
    "compare": _compare, "broadcast": _broadcast, "reduce_arg": _reduce_arg,
    "ternary": _ternary, "cumsum": _cumsum, "hardmax": _hardmax, "topk": _topk,
    "equal": _equal, "gather_elements": _gather_elements, "trilu": _trilu, "onehot": _onehot,
    "layer_normalization": _layer_normalization,
}  # fmt: skip
