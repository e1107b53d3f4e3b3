"""CPU kernels against slow, obviously-correct loops (and the documented board quirks)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kflashpy.runtime.ops import nn


def test_sdk_carry_shift_literal_quirk() -> None:
    # kpu_carry_shift: t = v >> (s-1); odd t -> (t >> 1) + sign(v); -1 >> 1 gives -2
    v = np.array([-1, -3, 3, 5, 6, 7, 0], dtype=np.int64)
    assert list(nn.sdk_carry_shift(v, 1)) == [-2, -3, 2, 3, 3, 4, 0]
    assert list(nn.sdk_carry_shift(v, 0)) == list(v)


def test_mul_and_carry_shift_rounds_half_up() -> None:
    v = np.array([1, 3, -1, -3, 5], dtype=np.int64)
    assert list(nn.mul_and_carry_shift(v, 1, 1)) == [1, 2, 0, -1, 3]
    assert list(nn.mul_and_carry_shift(v, 3, 258)) == list(nn.mul_and_carry_shift(v, 3, 2))


def test_roundf_is_half_away_from_zero() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 2.4], dtype=np.float32)
    assert list(nn.roundf(x)) == [1, 2, 3, -1, -3, 2]


def test_v3_quantize_and_dequantize() -> None:
    x = np.array([-1.0, 0.0, 0.25, 1.0, 9.0], dtype=np.float32)
    q = nn.v3_quantize(x, scale=1 / 255, bias=0.0)
    assert list(q) == [0, 0, 64, 255, 255]  # 0.25*255 = 63.75 -> 64
    np.testing.assert_allclose(nn.v3_dequantize(q, 0.5, -1.0), q * 0.5 - 1.0)


def test_v3_quantized_add_matches_scalar_formula() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, 64).astype(np.uint8), rng.integers(0, 256, 64).astype(np.uint8)
    p = dict(in_a_offset=-10, in_a_mul=3000, in_a_shift=4, in_b_offset=5, in_b_mul=-2000,
             in_b_shift=6, out_offset=7, out_mul=1500, out_shift=9)  # fmt: skip
    got = nn.v3_quantized_add(a, b, p)
    for i in range(64):
        va = ((int(a[i]) - 10) * 3000) >> 4
        vb = ((int(b[i]) + 5) * -2000) >> 6
        v = (va + vb) * 1500
        t = v >> 8
        r = (t >> 1) + ((-1 if v < 0 else 1) if t & 1 else 0)
        assert got[i] == min(255, max(0, r + 7))


def test_pool2d_against_loops() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 7, 9)).astype(np.float32)
    for mode, (kh, kw), (sh, sw), pad in itertools.product(
        ["max", "mean", "sum"], [(2, 2), (3, 2)], [(1, 1), (2, 3)], [(0, 0, 0, 0), (1, 1, 0, 2)]
    ):
        oh = (7 + pad[0] + pad[1] - kh) // sh + 1
        ow = (9 + pad[2] + pad[3] - kw) // sw + 1
        got = nn.pool2d(x, (kh, kw), (sh, sw), pad, (oh, ow), mode)
        for c, oy, ox in itertools.product(range(2), range(oh), range(ow)):
            taps = [x[c, y, xx] for y in range(oy * sh - pad[0], oy * sh - pad[0] + kh)
                    for xx in range(ox * sw - pad[2], ox * sw - pad[2] + kw)
                    if 0 <= y < 7 and 0 <= xx < 9]  # fmt: skip
            if not taps:  # a window entirely in the padding: no defined reference
                continue
            want = {"max": max(taps), "sum": sum(taps), "mean": sum(taps) / len(taps)}[mode]
            assert got[c, oy, ox] == pytest.approx(want, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("mode", ["max", "mean", "sum"])
def test_pool2d_empty_window_is_a_value_error(mode: str) -> None:
    # a damaged model's 0-tap window: a ValueError the runtime reports as damage
    x = np.ones((1, 4, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="0x2 taps"):
        nn.pool2d(x, (0, 2), (1, 1), (0, 0, 0, 0), (5, 3), mode, init=0.0)


def test_conv2d_nchw_against_loops() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 4, 6, 7)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    pad, stride, dil = (1, 0, 2, 1), (2, 1), (1, 2)
    oh = (6 + 1 - 3) // 2 + 1
    ow = (7 + 3 - ((2 - 1) * 2 + 1)) // 1 + 1
    got = nn.conv2d_nchw(x, w, b, 2, stride, pad, dil, (oh, ow))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 0), (2, 1)))
    for o, y, xx in itertools.product(range(6), range(oh), range(ow)):
        g = o // 3
        acc = b[o]
        for ci, ky, kx in itertools.product(range(2), range(3), range(2)):
            acc += xp[0, g * 2 + ci, y * 2 + ky, xx + kx * 2] * w[o, ci, ky, kx]
        assert got[0, o, y, xx] == pytest.approx(acc, rel=1e-4, abs=1e-4)


def test_softmax_flt_min_quirk_and_resize() -> None:
    x = np.array([-5.0, -6.0], dtype=np.float32)
    plain = nn.softmax(x)
    quirk = nn.softmax(x, sdk_flt_min=True)  # max starts at FLT_MIN: exp(x - ~0)
    np.testing.assert_allclose(plain, quirk, rtol=1e-6)  # normalised: same ratio
    img = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    np.testing.assert_array_equal(nn.resize_nearest(img, 6, 2)[0, :, 0], [0, 0, 4, 4, 8, 8])
    up = nn.resize_bilinear(img, 3, 7, align_corners=True)
    np.testing.assert_allclose(up[0, :, 0], [0, 4, 8])
    np.testing.assert_allclose(up[0, 0, ::2], [0, 1, 2, 3])
