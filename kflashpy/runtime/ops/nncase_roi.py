"""nncase 1.x's roi_align kernel (``src/kernels/cpu/reference/roi_align.cpp``), bit
for bit.

Per ROI (x1, y1, x2, y2 scaled by ``spatial_scale``, at least 1x1), each output bin
samples a grid of ``sampling_ratio`` (else ceil(roi size / bins)) points per axis at
start + bin*size + (i + 0.5)*size/grid; a point outside [-1, size] weighs 0 at pixel 0,
others are clamped to the map and interpolated bilinearly with weights
(1-ly)(1-lx), (1-ly)lx, ly(1-lx), ly*lx. avg sums w1*v1 + w2*v2 + w3*v3 + w4*v4 over the
grid in row order from 0 and divides by the grid size; max takes ``std::max`` of the
four products, then over the grid. float32 throughout, in that order; vectorised over
channels and bins.
"""

from __future__ import annotations

import math

import numpy as np

F32 = np.float32


def _axis(start, bin_size, bins: int, grid: int, size: int):
    """Sample positions along one axis: (low, high, l) per (bin, grid point), and
    whether the point is outside [-1, size]."""
    p = np.arange(bins, dtype=F32)[:, None]
    i = np.arange(grid, dtype=F32)[None, :] + F32(0.5)
    pos = (start + (p * bin_size).astype(F32)) + ((i * bin_size).astype(F32) / F32(grid))
    pos = pos.astype(F32)
    out = (pos < -1.0) | (pos > size)
    pos = np.where(pos <= 0, F32(0), pos)
    low = pos.astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, low, low + 1)
    pos = np.where(edge, low.astype(F32), pos)
    frac = (pos - low.astype(F32)).astype(F32)
    return low, high, frac, out


def roi_align(x, rois, batch, out_shape, avg: bool, scale: float, sampling: int):
    """x (N, C, H, W) dense; rois (R, 4); batch (R,) int64 -> (R, C, PH, PW)."""
    n_rois, channels, ph, pw = (int(v) for v in out_shape)
    height, width = x.shape[2:]
    flat = x.reshape(-1)
    plane = channels * height * width  # nncase steps the input by the output's channels
    out = np.zeros((n_rois, channels, ph, pw), F32)
    scale = F32(scale)
    for n in range(n_rois):
        x1, y1, x2, y2 = (F32(v) * scale for v in rois[n])
        roi_w, roi_h = max(F32(x2 - x1), F32(1)), max(F32(y2 - y1), F32(1))
        bin_h, bin_w = F32(roi_h / F32(ph)), F32(roi_w / F32(pw))
        gh = sampling if sampling > 0 else math.ceil(F32(roi_h / F32(ph)))
        gw = sampling if sampling > 0 else math.ceil(F32(roi_w / F32(pw)))
        ylo, yhi, ly, yout = _axis(y1, bin_h, ph, gh, height)  # (PH, GH)
        xlo, xhi, lx, xout = _axis(x1, bin_w, pw, gw, width)  # (PW, GW)
        base = int(batch[n]) * plane
        img = flat[base : base + plane].reshape(channels, -1)
        hy, hx = (F32(1) - ly).astype(F32), (F32(1) - lx).astype(F32)
        acc = np.zeros((channels, ph, pw), F32)
        for iy in range(gh):
            for ix in range(gw):
                outside = yout[:, iy, None] | xout[None, :, ix]  # (PH, PW)
                y_pick, x_pick = (slice(None), iy), (slice(None), ix)
                t1, t2, t3, t4 = (
                    _tap(img, width, outside, yy[y_pick], xx[x_pick], wy[y_pick], wx[x_pick])
                    for yy, xx, wy, wx in (
                        (ylo, xlo, hy, hx), (ylo, xhi, hy, lx), (yhi, xlo, ly, hx), (yhi, xhi, ly, lx),
                    )
                )  # fmt: skip
                if avg:
                    acc = (acc + (((t1 + t2) + t3) + t4)).astype(F32)
                else:
                    val = _cmax(_cmax(_cmax(t1, t2), t3), t4)
                    acc = val if iy == ix == 0 else _cmax(acc, val)
        out[n] = (acc / F32(gh * gw)).astype(F32) if avg else acc
    return out


def _tap(img, width: int, outside, yy, xx, wy, wx) -> np.ndarray:
    """weight * value of one bilinear corner for every bin: (C, PH, PW); a sample
    outside the map weighs 0 at pixel 0, as nncase's precalculation sets it."""
    pos = np.where(outside, 0, yy[:, None] * width + xx[None, :])
    weight = np.where(outside, F32(0), (wy[:, None] * wx[None, :]).astype(F32))
    return (weight[None] * img[:, pos]).astype(F32)


def _cmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """std::max(a, b): b when a < b, else a."""
    return np.where(a < b, b, a)
