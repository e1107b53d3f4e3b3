"""nncase 1.x's GRU kernel (``src/kernels/cpu/reference/gru.cpp``), bit for bit.

Per time step and gate (z, r, h, ONNX's order), nncase sums x*W from 0 over the input
in order and adds the W bias, sums h*R from 0 over the hidden state and adds the R bias
(for h without ``linear_before_reset``: (r*h)*R), then z and r go through
``1 / (1 + expf(-x))`` and h through ``tanhf``; h' = (1 - z)*h~ + z*h. A second
direction runs the steps in the other order. The hidden state is updated in place, in
the buffer the initial state came from. Everything is float32, summed in that order
(vectorised over batch and hidden units; the loops run over the summed axis).
"""

from __future__ import annotations

import numpy as np

from .nncase_math import libm

F32 = np.float32


def _ordered_dot(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """sum_k a[b, k] * w[h, k] from 0 in k order, float32: (B, H)."""
    acc = np.zeros((a.shape[0], w.shape[0]), F32)
    for k in range(a.shape[1]):
        acc = (acc + (a[:, k, None] * w[None, :, k]).astype(F32)).astype(F32)
    return acc


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (F32(1) / (F32(1) + libm("expf", -x))).astype(F32)


def gru(x, w, r, b, h0, reverse: bool, linear_before_reset: bool):
    """x (seq, batch, input), w (dirs, 3H, input), r (dirs, 3H, H), b (dirs, 6H),
    h0 (dirs, batch, H), updated in place -> output (seq, dirs, batch, H)."""
    seq, dirs, hidden = x.shape[0], w.shape[0], w.shape[1] // 3
    out = np.zeros((seq, dirs, x.shape[1], hidden), F32)
    steps = list(range(seq))[::-1] if reverse else list(range(seq))
    for d in range(dirs):
        if d == 1:
            steps.reverse()
        wz, wr, wh = np.split(w[d], 3)
        rz, rr, rh = np.split(r[d], 3)
        bias = np.split(b[d], 6)
        for i in steps:
            h = h0[d]
            xi = x[i]
            z = _sigmoid((_ordered_dot(xi, wz) + bias[0]) + (_ordered_dot(h, rz) + bias[3]))
            g = _sigmoid((_ordered_dot(xi, wr) + bias[1]) + (_ordered_dot(h, rr) + bias[4]))
            a = _ordered_dot(xi, wh) + bias[2]
            if linear_before_reset:
                hh = a + g * (_ordered_dot(h, rh) + bias[5])
            else:
                acc = np.zeros_like(a)
                for k in range(hidden):
                    acc = acc + ((g[:, k] * h[:, k])[:, None] * rh[None, :, k]).astype(F32)
                hh = a + (acc + bias[5])
            hh = libm("tanhf", hh.astype(F32))
            h0[d] = (F32(1) - z) * hh + z * h
            out[i, d] = h0[d]
    return out
