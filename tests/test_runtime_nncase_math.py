"""nncase_math.fma32 against the C library's fmaf, on the cases that trip a naive
float64 evaluation (a float64 sum exactly halfway between two float32 values)."""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np

from kflashpy.runtime.ops.nncase_math import fma32

F32 = np.float32


def _fmaf(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    lib = ctypes.CDLL(ctypes.util.find_library("m"))
    fn = lib.fmaf
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float] * 3
    return np.array(
        [fn(float(x), float(y), float(z)) for x, y, z in zip(a, b, c, strict=True)], F32
    )


def test_fma32_rounds_once_like_fmaf() -> None:
    rng = np.random.default_rng(15)
    n = 4000
    # (1 + k/2**12)(1 + 2**-12) has bit 2**-24 set: halfway between two float32 values
    # near 1; a tiny c of either sign decides the rounding, which float64 loses
    a = (1 + rng.integers(1, 2**11, n) * 2.0**-12).astype(F32)
    b = np.full(n, 1 + 2.0**-12, F32)
    c = (rng.choice([-1, 1], n) * 2.0 ** -rng.integers(60, 90, n)).astype(F32)
    naive = (a.astype(np.float64) * b + c).astype(F32)
    want = _fmaf(a, b, c)
    assert np.any(naive != want)  # the case is a real one
    np.testing.assert_array_equal(fma32(a, b, c).view(np.uint32), want.view(np.uint32))
    # ordinary values, cancellation, zeros and infinities
    x, y = rng.standard_normal((2, n)).astype(F32)
    z = np.concatenate([rng.standard_normal(n // 2), -(x * y.astype(np.float64))[n // 2 :]])
    special = np.array([np.inf, -np.inf, 0.0, -0.0, 3e38, 1e-30], F32)
    for a, b, c in [(x, y, z.astype(F32)), (special, special[::-1], special)]:
        got, want = fma32(a, b, c), _fmaf(a, b, c)
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        assert same.all()
