"""Elementwise math as nncase 1.x's CPU kernels compute it, bit for bit.

nncase's reference kernels call the C library (``expf``, ``sinf``, ``powf``...) on
each float and write ``std::min``/``std::max``/``clamp`` with C++'s comparison
semantics. NumPy's float32 ufuncs use their own vectorised approximations, which
differ from the C library by an ulp or more, so the transcendental functions here
call the process's C math library through ctypes, once per distinct input value
(quantised models have few), and everything else is vectorised NumPy that rounds
exactly as IEEE float32 does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import numpy as np

from kflashpy.model.stackvm import HALIDE_CONV_RELEASES

F32 = np.float32


@functools.cache
def _libm() -> ctypes.CDLL:
    name = ctypes.util.find_library("m")
    lib = ctypes.CDLL(name) if name else ctypes.CDLL(None)
    return lib


@functools.cache
def _cfunc(name: str, nargs: int):
    fn = getattr(_libm(), name)
    fn.restype = ctypes.c_float
    fn.argtypes = [ctypes.c_float] * nargs
    return fn


def libm(name: str, *args: np.ndarray) -> np.ndarray:
    """Apply the C library's float function ``name`` elementwise (broadcasting)."""
    fn = _cfunc(name, len(args))
    arrays = np.broadcast_arrays(*(np.asarray(a, F32) for a in args))
    if not arrays[0].size:
        return np.zeros(arrays[0].shape, F32)
    if len(arrays) == 1:
        uniq, inverse = np.unique(arrays[0], return_inverse=True)
        vals = np.array([fn(float(u)) for u in uniq], F32)
        return vals[inverse].reshape(arrays[0].shape)
    pairs = np.stack([a.reshape(-1) for a in arrays], axis=1)
    uniq, inverse = np.unique(pairs.view(np.uint32), axis=0, return_inverse=True)
    vals = np.array([fn(*(float(v) for v in row.view(F32))) for row in uniq], F32)
    return vals[inverse.reshape(-1)].reshape(arrays[0].shape)


def c_min(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``std::min(a, b)``: b if b < a else a (NaN-aware like C++, unlike np.minimum)."""
    return np.where(b < a, b, a)


def c_max(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``std::max(a, b)``: b if a < b else a."""
    return np.where(a < b, b, a)


def clamp(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """nncase kernels' fused activation: ``std::max(std::min(x, high), low)``."""
    return c_max(c_min(x, F32(high)), F32(low))


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C integer division (truncates toward zero)."""
    if np.any(b == 0):
        raise ValueError("integer division by zero in tensor.binary div")
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


#: binary ops nncase 1.9's reference kernel implements (others: not_supported there too)
BINARY = ("add", "sub", "mul", "div", "min", "max", "pow", "logical_and")


def binary(name: str, a: np.ndarray, b: np.ndarray, shape, low: float, high: float) -> np.ndarray:
    """nncase ``kernels::binary``: op, then ``clamp`` in float, cast back to the type."""
    integer = a.dtype.kind in "iu"
    with np.errstate(all="ignore"):
        if name == "add":
            y = a + b
        elif name == "sub":
            y = a - b
        elif name == "mul":
            y = a * b
        elif name == "div":
            y = _int_div(a, b) if integer else a / b
        elif name == "min":
            y = c_min(a, b)
        elif name == "max":
            y = c_max(a, b)
        elif name == "pow":
            y = libm("powf", a.astype(F32), b.astype(F32))
        else:  # logical_and
            y = ((a != 0) & (b != 0)).astype(a.dtype)
    y = np.broadcast_to(y, tuple(shape))
    out = clamp(y.astype(F32), low, high)
    if integer:
        with np.errstate(all="ignore"):
            return out.astype(a.dtype)  # C float -> integer truncates
    return out.astype(a.dtype)


_LIBM_UNARY = {"acos": "acosf", "asin": "asinf", "cos": "cosf", "exp": "expf", "log": "logf",
               "sin": "sinf", "tanh": "tanhf", "erf": "erff"}  # fmt: skip
#: unary ops of nncase 1.x's reference kernel
UNARY = (*_LIBM_UNARY, "abs", "ceil", "floor", "neg", "round", "rsqrt", "sign", "sqrt",
         "square", "logical_not")  # fmt: skip


def unary(name: str, x: np.ndarray) -> np.ndarray:
    """nncase ``kernels::unary`` on float32 ``x``."""
    x = x.astype(F32)
    if name in _LIBM_UNARY:
        return libm(_LIBM_UNARY[name], x)
    with np.errstate(all="ignore"):
        if name == "abs":
            return np.abs(x)
        if name == "ceil":
            return np.ceil(x)
        if name == "floor":
            return np.floor(x)
        if name == "neg":
            return -x
        if name == "round":
            return np.rint(x)  # rintf: the current (nearest-even) rounding mode
        if name == "rsqrt":
            return (F32(1) / np.sqrt(x)).astype(F32)
        if name == "sign":
            return ((x > 0).astype(F32) - (x < 0).astype(F32)).astype(F32)
        if name == "sqrt":
            return np.sqrt(x)
        if name == "square":
            return x * x
        if name == "logical_not":
            return (x == 0).astype(F32)
    raise ValueError(f"unary op {name}")


def fold(x: np.ndarray, axes, fn, init) -> np.ndarray:
    """Reduce ``axes`` of ``x`` one element at a time in row-major order, as nncase's
    reference kernels do (``dest = fn(dest, v)`` from ``init``); keeps the reduced
    axes as size 1. Vectorised over the kept elements, one NumPy step per reduced one.
    """
    axes = tuple(sorted(a % x.ndim for a in axes))
    kept = [a for a in range(x.ndim) if a not in axes]
    moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
    flat = moved.reshape(*moved.shape[: len(kept)], -1)
    acc = np.full(flat.shape[:-1], init, dtype=x.dtype)
    for j in range(flat.shape[-1]):
        acc = fn(acc, flat[..., j])
    keep_shape = tuple(1 if a in axes else x.shape[a] for a in range(x.ndim))
    return np.asarray(acc, x.dtype).reshape(keep_shape)


def softmax(x: np.ndarray, axis: int, beta: float) -> np.ndarray:
    """nncase reference softmax: max fold, (x - max)*beta, C ``expf``, sequential sum,
    divide."""
    x = x.astype(F32)
    m = fold(x, (axis,), c_max_first, np.finfo(F32).min)
    e = libm("expf", ((x - m) * F32(beta)).astype(F32))
    s = fold(e, (axis,), np.add, F32(0))
    return (e / s).astype(F32)


def c_max_first(dest: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``std::max(v, dest)`` (the argument order nncase's softmax uses)."""
    return c_max(v, dest)


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 fused multiply-add ``a * b + c`` with one rounding (C ``fmaf``), vectorised.

    a*b of two float32 values is exact in float64; the float64 sum s = a*b + c is
    rounded once more, so s is corrected with its exact error e (TwoSum): rounding s
    to float32 is already right unless s lies exactly halfway between two float32
    values (then rounding to nearest-even may go the wrong way, and the sign of e says
    which float32 the exact sum is nearer). Halfway points are float64 values, so no
    other s can be on the wrong side of one.
    """
    with np.errstate(all="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        c64 = np.asarray(c, np.float64)
        s = p + c64
        bb = s - p
        e = (p - (s - bb)) + (c64 - bb)  # s + e == p + c exactly (TwoSum)
        r = s.astype(F32)
        r64 = r.astype(np.float64)
        other = np.nextafter(r, np.where(s > r64, F32(np.inf), F32(-np.inf))).astype(F32)
        half = (r64 != s) & (r64 + other.astype(np.float64) == 2 * s) & (e != 0)
        toward = (e > 0) == (other > r)  # the exact sum lies past s, nearer ``other``
        fixed = np.where(half & toward & np.isfinite(e), other, r)
    return fixed.astype(F32)


def halide_conv(release: str, w_shape, groups: int, in_channels: int, contiguous: bool,
                stride, dilation) -> bool:  # fmt: skip
    """Whether nncase ``release`` runs this conv2d with its Halide kernel (the shapes
    its optimized dispatch sends there: square 1/3/5/7 filters, equal strides 1 or 2,
    no dilation, plain or depthwise, over a ``contiguous`` input, one whose strides
    are nncase's default ones for its shape)."""
    oc, _, kh, kw = w_shape
    return (
        release in HALIDE_CONV_RELEASES
        and contiguous
        and kh == kw
        and kh in (1, 3, 5, 7)
        and stride[0] == stride[1]
        and stride[0] in (1, 2)
        and tuple(dilation) == (1, 1)
        and (groups == 1 or groups == in_channels == oc)
    )


def conv2d(x, w, bias, groups: int, stride, pads, dilation, out_hw, fused: bool = False):
    """nncase conv2d on NCHW float32, tap by tap (input channel, then kernel row, then
    column).

    Reference kernel (``fused`` False): each output starts at its bias and adds
    ``input * weight``, product and sum each rounded to float32. Halide kernel of
    nncase 1.0-1.1 (``fused``): the sum starts at zero, each tap is one fused
    multiply-add (:func:`fma32`) and the bias is added last, as measured against those
    wheels' simulators (docs/runtime.md); depthwise convs have their own orders
    (:func:`_halide_depthwise`). Taps in the padding are skipped (not added as zeros,
    which could turn a -0.0 sum into +0.0; the fused sum, starting at +0.0, never
    holds -0.0)."""
    n, c, h, wd = x.shape
    oc, icg, kh, kw = w.shape
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    pt, pl = pads[0], pads[2]
    ocg = oc // groups
    ys = np.arange(oh) * sh - pt
    xs = np.arange(ow) * sw - pl
    # a zero-padded copy makes every tap a strided view; the mask says which are real
    top, left = max(0, -int(ys.min(initial=0))), max(0, -int(xs.min(initial=0)))
    bottom = max(0, int(ys.max(initial=0)) + (kh - 1) * dh + 1 - h)
    right = max(0, int(xs.max(initial=0)) + (kw - 1) * dw + 1 - wd)
    xp = np.pad(x.astype(F32), ((0, 0), (0, 0), (top, bottom), (left, right)))
    w = w.astype(F32)
    taps = []  # (row, column in xp, ky, kx, mask of real taps or None when all are)
    for ky in range(kh):
        vy = ((ys + ky * dh) >= 0) & ((ys + ky * dh) < h)
        for kx in range(kw):
            vx = ((xs + kx * dw) >= 0) & ((xs + kx * dw) < wd)
            valid = None if vy.all() and vx.all() else (vy[:, None] & vx[None, :])[None, None]
            taps.append((top + ky * dh - pt, left + kx * dw - pl, ky, kx, valid))
    if fused and groups == c == oc:  # depthwise: every channel at once
        views = [
            (xp[:, :, y0 : y0 + (oh - 1) * sh + 1 : sh, x0 : x0 + (ow - 1) * sw + 1 : sw],
             w[None, :, 0, ky, kx, None, None])
            for y0, x0, ky, kx, _valid in taps
        ]  # fmt: skip
        return _halide_depthwise(views, bias.astype(F32)[None, :, None, None])
    out = np.empty((n, oc, oh, ow), F32)
    for g in range(groups):
        b = bias[g * ocg : (g + 1) * ocg].astype(F32)[None, :, None, None]
        acc = np.zeros((n, ocg, oh, ow), F32)
        acc[...] = F32(0) if fused else b
        wg = w[g * ocg : (g + 1) * ocg, :, :, :, None, None]
        for ic in range(icg):
            plane = xp[:, g * icg + ic]
            for y0, x0, ky, kx, valid in taps:
                tap = plane[:, y0 : y0 + (oh - 1) * sh + 1 : sh, x0 : x0 + (ow - 1) * sw + 1 : sw]
                if fused:
                    step = fma32(tap[:, None], wg[None, :, ic, ky, kx], acc)
                    acc = step if valid is None else np.where(valid, step, acc)
                elif valid is None:
                    acc += tap[:, None] * wg[None, :, ic, ky, kx]
                else:
                    np.add(acc, tap[:, None] * wg[None, :, ic, ky, kx], out=acc, where=valid)
        out[:, g * ocg : (g + 1) * ocg] = acc + b if fused else acc
    return out


def _halide_depthwise(views: list, bias: np.ndarray) -> np.ndarray:
    """nncase 1.0-1.1's Halide depthwise kernels on (input view, weight) taps in
    row-major order, padding taps included as zeros, as measured against those wheels
    (docs/runtime.md): 1x1 is one fused ``x*w + bias``; 5x5 sums the first 16 rounded
    products as a vector reduction (halves added lane-wise: 8, 4, 2, 1) and fuses the
    other 9 in order; 3x3 and 7x7 fuse the first product onto the rounded second, then
    every later one. The bias comes last (except 1x1)."""
    shape = np.broadcast_shapes(views[0][0].shape, views[0][1].shape)
    if len(views) == 1:
        x, w = views[0]
        return fma32(x, w, np.broadcast_to(bias, shape))
    if len(views) == 25:
        lanes = [(x * w).astype(F32) for x, w in views[:16]]
        while len(lanes) > 1:
            half = len(lanes) // 2
            lanes = [lanes[i] + lanes[i + half] for i in range(half)]
        acc, rest = lanes[0], views[16:]
    else:
        (x0, w0), (x1, w1) = views[:2]
        acc, rest = fma32(x0, w0, (x1 * w1).astype(F32)), views[2:]
    for x, w in rest:
        acc = fma32(x, w, acc)
    return (acc + bias).astype(F32)


def int_div(a: np.ndarray, b) -> np.ndarray:
    """C integer division (truncates toward zero)."""
    return _int_div(np.asarray(a), np.asarray(b))


COMPARE = {
    "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
    "greater_equal": np.greater_equal, "less": np.less, "less_equal": np.less_equal,
}  # fmt: skip


def pad(x: np.ndarray, pads: list[tuple[int, int]], mode: str, value) -> np.ndarray:
    """nncase's pad index rule per axis; negative pads crop."""
    index, inside = [], []
    for d, (before, after) in zip(x.shape, pads, strict=True):
        i = np.arange(d + before + after) - before
        low, high = i < 0, i > d - 1
        if mode == "reflect":
            src = np.where(low, -i, np.where(high, 2 * d - 2 - i, i))
        elif mode == "symmetric":
            src = np.where(low, -i - 1, np.where(high, 2 * d - 1 - i, i))
        else:  # edge, and constant (whose padded elements are overwritten)
            src = np.clip(i, 0, d - 1)
        if src.size and (src.min() < 0 or src.max() > d - 1):
            raise ValueError(f"{mode} padding {before},{after} is wider than the axis ({d})")
        index.append(src)
        inside.append(~(low | high))
    y = x[np.ix_(*index)] if x.ndim else x.copy()
    if mode == "constant" and x.ndim:
        n = len(inside)  # np.ix_ would turn boolean vectors into index lists
        axes = [m.reshape([-1 if k == i else 1 for k in range(n)]) for i, m in enumerate(inside)]
        mask = functools.reduce(np.logical_and, axes)
        y = np.where(mask, y, np.asarray(value).astype(x.dtype))
    return y


def reduce_arg(x: np.ndarray, axis: int, largest: bool, last: bool) -> np.ndarray:
    """Index of the best value along ``axis`` with nncase's rule: a strictly better value
    restarts the list of candidates; one within 1e-6 of the best so far joins it."""
    moved = np.moveaxis(x.astype(F32), axis, -1)
    best = np.full(moved.shape[:-1], np.finfo(F32).min if largest else np.finfo(F32).max, F32)
    first = np.zeros(best.shape, np.int64)
    final = np.zeros(best.shape, np.int64)
    for j in range(moved.shape[-1]):
        v = moved[..., j]
        better = v > best if largest else v < best
        tie = ~better & (np.abs(v - best) < F32(1e-6))
        first = np.where(better, j, first)
        final = np.where(better | tie, j, final)
        best = np.where(better, v, best)
    return np.expand_dims(final if last else first, axis)


def _resize_scale(n_in: int, n_out: int, align_corners: bool) -> np.float32:
    if align_corners and n_out > 1:
        return F32(n_in - 1) / F32(n_out - 1)
    return F32(n_in) / F32(n_out)


def resize_bilinear(x: np.ndarray, out_h: int, out_w: int, align: bool, half: bool) -> np.ndarray:
    """nncase resize_bilinear on (N, C, H, W): float32 source positions and weights,
    ``v0*a0 + v1*a1 + v2*a2 + v3*a3`` summed left to right, integers rounded by adding
    0.5 and truncating."""

    def axis(n_in: int, n_out: int):
        scale = _resize_scale(n_in, n_out, align)
        o = np.arange(n_out).astype(F32)
        pos = ((o + F32(0.5)) * scale - F32(0.5)) if half else o * scale
        pos = pos.astype(F32)
        lo = np.maximum(np.floor(pos).astype(np.int64), 0)
        hi = np.minimum(np.ceil(pos).astype(np.int64), n_in - 1)
        return lo, hi, (pos - lo.astype(F32)).astype(F32)

    y0, y1, fy = axis(x.shape[2], out_h)
    x0, x1, fx = axis(x.shape[3], out_w)
    fy, fx = fy[:, None], fx[None, :]
    a0 = (F32(1) - fy) * (F32(1) - fx)
    a1 = fy * (F32(1) - fx)
    a2 = (F32(1) - fy) * fx
    a3 = fy * fx
    v = x.astype(F32)
    r0, r1 = v[:, :, y0], v[:, :, y1]
    out = r0[..., x0] * a0 + r1[..., x0] * a1 + r0[..., x1] * a2 + r1[..., x1] * a3
    if x.dtype.kind in "iu":
        with np.errstate(all="ignore"):
            return (out + F32(0.5)).astype(x.dtype)
    return out.astype(x.dtype)


def resize_nearest(x: np.ndarray, out_h: int, out_w: int, align: bool, half: bool) -> np.ndarray:
    """nncase resize_nearest_neighbor: source = min(floor or roundf((o + 0.5?) * scale),
    n - 1), at least 0 with half-pixel centres."""

    def axis(n_in: int, n_out: int):
        scale = _resize_scale(n_in, n_out, align)
        pos = ((np.arange(n_out).astype(F32) + F32(0.5 if half else 0)) * scale).astype(F32)
        src = (
            np.where(pos >= 0, np.floor(pos + F32(0.5)), np.ceil(pos - F32(0.5)))
            if align
            else np.floor(pos)
        )
        src = np.minimum(src.astype(np.int64), n_in - 1)
        return np.maximum(src, 0) if half else src

    return x[:, :, axis(x.shape[2], out_h)][..., axis(x.shape[3], out_w)]


def cumsum(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """nncase reference cumsum: a running sum from zero along ``axis`` (in the input's
    type, one addition at a time), from the end when ``reverse``, each output taken
    before its own element when ``exclusive``."""
    v = np.flip(x, axis) if reverse else x
    total = np.cumsum(v, axis=axis, dtype=x.dtype)  # add.accumulate: left to right
    if exclusive:
        total = np.concatenate(
            [np.zeros_like(np.take(total, [0], axis=axis)), np.delete(total, -1, axis=axis)],
            axis=axis,
        )
    return np.flip(total, axis) if reverse else total


def hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    """nncase reference hardmax: 1 at the first element strictly above the running
    best, which starts at FLT_MIN (the smallest positive float, so a slice with no
    value above it is all zeros), 0 elsewhere."""
    best = np.max(x, axis=axis, keepdims=True)
    first = np.argmax(x, axis=axis)
    hit = (
        np.expand_dims(first, axis)
        == np.expand_dims(
            np.arange(x.shape[axis]).reshape([-1 if i == axis else 1 for i in range(x.ndim)]), 0
        )[0]
    )
    return (hit & (best > np.finfo(F32).tiny)).astype(x.dtype)


def topk(x: np.ndarray, k: int, axis: int, largest: bool, sort: bool):
    """nncase reference topk along ``axis``: (values, int64 indices).

    Sorted: a heap of (value, index) pairs keeps the first k and replaces its least
    (largest=True) or greatest member when a strictly better value arrives; the kept
    pairs are written best pair first. Unsorted: nncase's quickselect order.
    """
    import heapq

    moved = np.moveaxis(x, axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    values = np.empty((rows.shape[0], k), x.dtype)
    index = np.empty((rows.shape[0], k), np.int64)
    for r, row in enumerate(rows):
        pairs = [(float(v), i) for i, v in enumerate(row)]
        if sort:
            sign = 1 if largest else -1
            heap: list = []
            for v, i in pairs:
                key = (sign * v, sign * i)
                if len(heap) < k:
                    heapq.heappush(heap, key)
                elif sign * v > heap[0][0]:
                    heapq.heapreplace(heap, key)
            kept = sorted(heap, reverse=True)
            chosen = [(sign * v, sign * i) for v, i in kept]
        else:
            chosen = _quick_select(pairs, k, largest)[:k]
        values[r] = [v for v, _ in chosen]
        index[r] = [i for _, i in chosen]
    shape = (*moved.shape[:-1], k)
    return (
        np.moveaxis(values.reshape(shape), -1, axis),
        np.moveaxis(index.reshape(shape), -1, axis),
    )


def _quick_select(nums: list, k: int, largest: bool) -> list:
    """nncase's quick_select (Hoare partition on the first element), in place order."""
    nums = list(nums)

    def partition(lo: int, hi: int) -> int:
        i, j, pivot = lo, hi + 1, nums[lo][0]
        while True:
            i += 1
            while i < hi and (nums[i][0] > pivot if largest else nums[i][0] < pivot):
                i += 1
            j -= 1
            while j > lo and (nums[j][0] < pivot if largest else nums[j][0] > pivot):
                j -= 1
            if i >= j:
                break
            nums[i], nums[j] = nums[j], nums[i]
        nums[lo], nums[j] = nums[j], nums[lo]
        return j

    lo, hi = 0, len(nums) - 1
    while lo < hi:
        idx = partition(lo, hi)
        if idx == k:
            break
        lo, hi = (lo, idx - 1) if idx > k else (idx + 1, hi)
    return nums


def matmul(a: np.ndarray, b: np.ndarray, bias: np.ndarray, low: float, high: float) -> np.ndarray:
    """nncase reference matmul: each output starts at its column's bias and adds
    ``a[m, k] * b[k, n]`` for k in order, in float32; then the fused clamp."""
    acc = np.broadcast_to(bias.astype(F32), (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]),
                                             a.shape[-2], b.shape[-1])).copy()  # fmt: skip
    a32, b32 = a.astype(F32), b.astype(F32)
    for k in range(a.shape[-1]):
        acc = acc + a32[..., :, k, None] * b32[..., None, k, :]
    return clamp(acc, low, high)


def layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, axis: int, eps: float):
    """nncase reference layernorm over the axes from ``axis`` on, in float32: the means
    are sums of ``v / n`` in order, then ``(x - mean) / sqrt(var + eps) * scale + bias``."""
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    v = x.astype(F32).reshape(outer, -1)
    n = F32(v.shape[1])
    mean = np.zeros((outer, 1), F32)
    for i in range(v.shape[1]):
        mean = mean + v[:, i : i + 1] / n
    sub = v - mean
    sq = sub * sub
    var = np.zeros((outer, 1), F32)
    for i in range(v.shape[1]):
        var = var + sq[:, i : i + 1] / n
    div = sub / np.sqrt(var + F32(eps))
    return (div * scale.astype(F32).reshape(1, -1) + bias.astype(F32).reshape(1, -1)).reshape(
        x.shape
    )
