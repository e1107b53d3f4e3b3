"""nncase_math: fma32 against the C library's fmaf, on the cases that trip a naive
float64 evaluation (a float64 sum exactly halfway between two float32 values), and
which convs nncase 1.0-1.1 run with their Halide kernels."""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np

from kflashpy.runtime.ops.nncase_math import fma32, halide_conv

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


def test_halide_conv_dispatch_follows_nncase_1_1() -> None:
    """The convs nncase 1.0-1.1 send to Halide: square 1/3/5/7 filters, equal strides 1
    or 2, no dilation, plain or depthwise, contiguous input; later releases never."""
    plain = ((4, 3, 3, 3), 1, 3, True, (1, 1), (1, 1))
    assert halide_conv("1.1", *plain) and halide_conv("1.0-beta1", *plain)
    assert not halide_conv("1.2", *plain) and not halide_conv("1.9", *plain)
    assert halide_conv("1.0", (3, 1, 5, 5), 3, 3, True, (2, 2), (1, 1))  # depthwise
    for w, groups, contiguous, stride, dilation in [
        ((6, 1, 3, 3), 3, True, (1, 1), (1, 1)),  # channel multiplier 2: not depthwise
        ((4, 3, 2, 2), 1, True, (1, 1), (1, 1)),  # 2x2
        ((4, 3, 1, 3), 1, True, (1, 1), (1, 1)),  # not square
        ((4, 3, 3, 3), 1, False, (1, 1), (1, 1)),  # strided input
        ((4, 3, 3, 3), 1, True, (3, 3), (1, 1)),
        ((4, 3, 3, 3), 1, True, (1, 2), (1, 1)),
        ((4, 3, 3, 3), 1, True, (1, 1), (2, 2)),
    ]:
        assert not halide_conv("1.1", w, groups, 3, contiguous, stride, dilation)
