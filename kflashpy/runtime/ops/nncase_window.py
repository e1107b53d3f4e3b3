"""nncase 1.x's reduce_window2d with dilation, fold for fold.

nncase's reference kernel (``src/kernels/cpu/reference/reduce_window.cpp``) starts each
output at the pushed init value and folds the taps that fall inside the input, row by
row (``std::max``/``std::min``/``+`` in float32); mean divides by the number of those
taps. The undilated windows run through :func:`kflashpy.runtime.ops.nn.pool2d`.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def reduce_window2d_dilated(x, init, mode, filt, stride, dilation, ph, pw, out_hw):
    """nncase reference reduce_window2d with dilation (NCHW float32): per output, a
    fold from ``init`` over the in-range taps, row by row; mean divides by their count."""
    (fh, fw), (sh, sw), (dh, dw), (oh, ow) = filt, stride, dilation, out_hw
    h, w = x.shape[2:]
    value = np.full((*x.shape[:2], oh, ow), F32(init), F32)
    count = np.zeros((oh, ow), np.int32)
    oy = np.arange(oh) * sh - ph[0]
    ox = np.arange(ow) * sw - pw[0]
    for ky in range(fh):
        iy = oy + ky * dh
        vy = (iy >= 0) & (iy < h)
        for kx in range(fw):
            ix = ox + kx * dw
            valid = vy[:, None] & ((ix >= 0) & (ix < w))[None, :]
            tap = x[:, :, np.clip(iy, 0, h - 1)[:, None], np.clip(ix, 0, w - 1)[None, :]]
            if mode == "max":
                new = np.where(value < tap, tap, value)
            elif mode == "min":
                new = np.where(tap < value, tap, value)
            else:
                new = (value + tap).astype(F32)
            value = np.where(valid, new, value)
            count += valid
    if mode == "mean":
        with np.errstate(all="ignore"):  # a window with no tap in range: 0/0, as in C
            value = (value / count.astype(F32)).astype(F32)
    return value
