"""Float and quantised CPU kernels (NCHW unless a name says NHWC).

Float kernels compute in float32 like the K210 FPU and the nncase simulators; results
may differ from the board by an ulp where the C compiler contracts to FMA or sums in a
different order (docs/runtime.md, "Coverage"), so tests compare them with a tolerance.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32

# --- rounding helpers -------------------------------------------------------------


def roundf(x: np.ndarray) -> np.ndarray:
    """C ``roundf``: round half away from zero."""
    return np.where(x >= 0, np.floor(x + F32(0.5)), np.ceil(x - F32(0.5))).astype(x.dtype)


def sdk_carry_shift(v: np.ndarray, shift: int) -> np.ndarray:
    """SDK ``kpu_carry_shift`` (board quirk: wrong by one for some negative values).

    t = v >> (shift-1); if t is odd the result is (t >> 1) + sign(v), else t >> 1.
    """
    if shift <= 0:
        return v
    t = v >> (shift - 1)
    return (t >> 1) + np.where((t & 1) == 1, np.where(v < 0, -1, 1), 0)


def mul_and_carry_shift(v: np.ndarray, mul: int, shift: int) -> np.ndarray:
    """nncase 0.2 ``mul_and_carry_shift``: v*mul, then add 2**(shift-1) and floor-shift.

    The shift is a uint8 in that function, so it is taken modulo 256.
    """
    r = v.astype(np.int64) * np.int64(mul)
    shift &= 0xFF
    if shift > 0:
        r = (r + (np.int64(1) << np.int64(shift - 1))) >> np.int64(shift)
    return r


# --- V3 (SDK kpu.c) ----------------------------------------------------------------


def v3_quantize(x: np.ndarray, scale: float, bias: float) -> np.ndarray:
    """q = clamp(roundf((x - bias) * (1/scale)), 0, 255), reciprocal in float32."""
    inv = F32(1) / F32(scale)
    return np.clip(roundf((x.astype(F32) - F32(bias)) * inv), 0, 255).astype(np.uint8)


def v3_dequantize(q: np.ndarray, scale: float, bias: float) -> np.ndarray:
    """x = q*scale + bias in float32."""
    return q.astype(F32) * F32(scale) + F32(bias)


def v3_quantized_add(a: np.ndarray, b: np.ndarray, p: dict) -> np.ndarray:
    """SDK KL_QUANTIZED_ADD (int64), with ``kpu_carry_shift`` on the output scale."""
    a = a.astype(np.int64) + p["in_a_offset"]
    b = b.astype(np.int64) + p["in_b_offset"]
    if p["in_a_shift"] == p["in_b_shift"]:
        v = (a * p["in_a_mul"] + b * p["in_b_mul"]) >> p["in_a_shift"]
    else:
        v = ((a * p["in_a_mul"]) >> p["in_a_shift"]) + ((b * p["in_b_mul"]) >> p["in_b_shift"])
    v = sdk_carry_shift(v * p["out_mul"], p["out_shift"]) + p["out_offset"]
    return np.clip(v, 0, 255).astype(np.uint8)


def pool2d(
    x: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int, int, int],
    out_hw: tuple[int, int],
    mode: str,
    init: float | None = None,
) -> np.ndarray:
    """Window reduction over the last two axes of (..., H, W).

    Window origin (oy*sh - pad_top, ox*sw - pad_left); taps outside the input are
    skipped. ``mode``: "max", "min", "sum", "mean" (divides by the in-range tap
    count). ``init`` starts the fold (V4 reduce_window2d init_value; default the
    identity of the fold; SDK QUANTIZED_MAX_POOL2D starts at 0).
    """
    kh, kw = kernel
    sh, sw = stride
    pt, pl = padding[0], padding[2]
    oh, ow = out_hw
    h, w = x.shape[-2:]
    need_h = (oh - 1) * sh + kh
    need_w = (ow - 1) * sw + kw
    pb = max(0, need_h - h - pt)
    pr = max(0, need_w - w - pl)
    lead = [(0, 0)] * (x.ndim - 2)
    valid = np.pad(np.ones((h, w), dtype=np.int32), ((pt, pb), (pl, pr)))
    if mode in ("max", "min"):
        fill = -np.inf if mode == "max" else np.inf
        xf = np.pad(x.astype(np.float64), lead + [(pt, pb), (pl, pr)], constant_values=fill)
    else:
        xf = np.pad(x.astype(F32 if x.dtype.kind == "f" else np.int64), lead + [(pt, pb), (pl, pr)])
    acc = None
    count = np.zeros((oh, ow), dtype=np.int32)
    for dy in range(kh):
        for dx in range(kw):
            tap = xf[..., dy : dy + (oh - 1) * sh + 1 : sh, dx : dx + (ow - 1) * sw + 1 : sw]
            count += valid[dy : dy + (oh - 1) * sh + 1 : sh, dx : dx + (ow - 1) * sw + 1 : sw]
            if acc is None:
                acc = tap.copy()
            elif mode == "max":
                np.maximum(acc, tap, out=acc)
            elif mode == "min":
                np.minimum(acc, tap, out=acc)
            else:
                acc += tap
    if acc is None:  # a damaged model's 0-tap window: nothing to fold
        raise ValueError(f"pooling window of {kh}x{kw} taps")
    if init is not None:
        if mode == "max":
            acc = np.maximum(acc, init)
        elif mode == "min":
            acc = np.minimum(acc, init)
        else:
            acc = acc + F32(init)
    if mode == "mean":
        acc = acc / np.maximum(count, 1).astype(acc.dtype)
    return acc.astype(x.dtype)


def softmax(
    x: np.ndarray, axis: int = -1, beta: float = 1.0, sdk_flt_min: bool = False
) -> np.ndarray:
    """exp((x - max)*beta) / sum along ``axis`` in float32.

    Board quirk (SDK KL_SOFTMAX, ``sdk_flt_min=True``): the running max starts at
    FLT_MIN (the smallest *positive* float), so an all-negative row subtracts ~0.
    """
    x = x.astype(F32)
    m = np.max(x, axis=axis, keepdims=True)
    if sdk_flt_min:
        m = np.maximum(m, np.finfo(F32).tiny)
    e = np.exp((x - m) * F32(beta)).astype(F32)
    return (e / e.sum(axis=axis, keepdims=True, dtype=F32)).astype(F32)


def fully_connected(x: np.ndarray, w: np.ndarray, b: np.ndarray, act: int) -> np.ndarray:
    """V3 FULLY_CONNECTED: out = W @ x + b then linear/relu/relu6 (act 0/1/2)."""
    y = (w.astype(F32) @ x.astype(F32) + b.astype(F32)).astype(F32)
    if act == 1:
        y = np.maximum(y, F32(0))
    elif act == 2:
        y = np.clip(y, F32(0), F32(6))
    return y


def resize_nearest(x: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """Nearest neighbour on (..., H, W): in = min(floor(o * (in/out)), in-1), float32 scale."""
    h, w = x.shape[-2:]
    ys = np.minimum(np.floor(np.arange(out_h, dtype=F32) * (F32(h) / F32(out_h))), h - 1)
    xs = np.minimum(np.floor(np.arange(out_w, dtype=F32) * (F32(w) / F32(out_w))), w - 1)
    return x[..., ys.astype(np.int64)[:, None], xs.astype(np.int64)[None, :]]


def resize_bilinear(x: np.ndarray, out_h: int, out_w: int, align_corners: bool) -> np.ndarray:
    """nncase bilinear on (..., H, W): float32 weights, result cast with truncation."""
    h, w = x.shape[-2:]

    def axis(n_in: int, n_out: int):
        if align_corners and n_out > 1:
            scale = F32(n_in - 1) / F32(n_out - 1)
        else:
            scale = F32(n_in) / F32(n_out)
        pos = np.arange(n_out, dtype=F32) * scale
        lo = np.minimum(np.floor(pos).astype(np.int64), n_in - 1)
        hi = np.minimum(lo + 1, n_in - 1)
        frac = (pos - lo.astype(F32)).astype(F32)
        return lo, hi, frac

    y0, y1, fy = axis(h, out_h)
    x0, x1, fx = axis(w, out_w)
    xf = x.astype(F32)
    top = xf[..., y0, :] * (1 - fy)[:, None] + xf[..., y1, :] * fy[:, None]
    out = top[..., x0] * (1 - fx) + top[..., x1] * fx
    if x.dtype == np.uint8:
        return np.clip(out, 0, 255).astype(np.uint8)
    return out.astype(x.dtype)


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """SDK KL_L2_NORMALIZATION: x / sqrt(max(sum x^2, 1e-10))."""
    x = x.astype(F32)
    s = np.maximum((x * x).sum(dtype=F32), F32(1e-10))
    return x * (F32(1) / np.sqrt(s))


def logistic(x: np.ndarray) -> np.ndarray:
    return (F32(1) / (F32(1) + np.exp(-x.astype(F32)))).astype(F32)


def conv2d_nchw(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray,
    groups: int,
    stride: tuple[int, int],
    padding: tuple[int, int, int, int],
    dilation: tuple[int, int],
    out_hw: tuple[int, int],
    dtype: type[np.floating] = F32,
) -> np.ndarray:
    """Grouped conv on (N, C, H, W) with OIHW weights (zero padding), in ``dtype``
    (float64 keeps integer sums exact for the quantized kernels)."""
    n, c, _, _ = x.shape
    oc, icg, kh, kw = w.shape
    pt, pb, pl, pr = padding
    xp = np.pad(
        x.astype(dtype), ((0, 0), (0, 0), (max(pt, 0), max(pb, 0)), (max(pl, 0), max(pr, 0)))
    )
    oh, ow = out_hw
    sh, sw = stride
    dh, dw = dilation
    out = np.empty((n, oc, oh, ow), dtype=dtype)
    ocg = oc // groups
    for g in range(groups):
        cols = np.empty((n, icg, kh, kw, oh, ow), dtype=dtype)
        xs = xp[:, g * icg : (g + 1) * icg]
        for dy in range(kh):
            for dx in range(kw):
                y0, x0 = dy * dh, dx * dw
                cols[:, :, dy, dx] = xs[
                    :, :, y0 : y0 + (oh - 1) * sh + 1 : sh, x0 : x0 + (ow - 1) * sw + 1 : sw
                ]
        wg = w[g * ocg : (g + 1) * ocg].reshape(ocg, -1).astype(dtype)
        out[:, g * ocg : (g + 1) * ocg] = np.einsum(
            "ok,nkp->nop", wg, cols.reshape(n, icg * kh * kw, oh * ow)
        ).reshape(n, ocg, oh, ow)
    return out + bias.astype(dtype)[None, :, None, None]


def broadcast_binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise binary op with NumPy broadcasting (equal to nncase's clamped indexing)."""
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if op == "div":
        return a / b
    if op == "min":
        return np.minimum(a, b)
    if op == "max":
        return np.maximum(a, b)
    if op == "pow":
        return np.power(a, b)
    raise ValueError(op)


UNARY = {
    "abs": np.abs,
    "ceil": np.ceil,
    "cos": np.cos,
    "exp": np.exp,
    "floor": np.floor,
    "log": np.log,
    "neg": np.negative,
    "rsqrt": lambda v: 1 / np.sqrt(v),
    "sin": np.sin,
    "square": np.square,
    "sqrt": np.sqrt,
    "round": np.rint,
    "tanh": np.tanh,
    "sign": np.sign,
    "logical_not": np.logical_not,
}
