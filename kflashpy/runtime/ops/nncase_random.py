"""nncase 1.x's random_normal and random_uniform, number for number.

nncase's reference kernels (``src/kernels/cpu/reference/random.cpp``) draw from
``std::default_random_engine`` seeded with the op's ``seed`` and a
``std::normal_distribution<float>`` / ``std::uniform_real_distribution<float>``. The
nncase wheels are built with GCC's libstdc++, where those are:

- the engine: ``minstd_rand0``, x' = 16807 x mod (2^31 - 1), seeded with
  ``seed mod (2^31 - 1)`` (1 when that is 0; the float seed is truncated to an
  integer first);
- a canonical float in [0, 1): ``float(x - 1) / 2^31`` (one draw gives 24 bits; a
  result that rounds to 1 becomes the float just below 1);
- uniform: ``u * (high - low) + low`` in float;
- normal: Marsaglia's polar method on pairs (x, y) = (2u - 1, 2v - 1), redrawn while
  r2 = x*x + y*y is 0 or above 1; with m = sqrtf(-2 logf(r2) / r2) the pair gives
  y*m, then x*m (kept for the next call); each value is then ``v * std + mean``.

The engine's sequence is computed without a Python loop (x_n = 16807^n x_0 mod m),
and the polar method's pairs are independent of which earlier ones were rejected, so
everything is vectorised; ``logf`` comes from the C library (nncase_math.libm).
"""

from __future__ import annotations

import numpy as np

from .nncase_math import libm

F32 = np.float32
_A, _M = 16807, 2147483647


def _engine(seed: float, n: int) -> np.ndarray:
    """The first ``n`` outputs of minstd_rand0 seeded with ``seed`` (int64)."""
    s = int(seed) % _M or 1
    powers = np.empty(max(n, 1), np.int64)
    powers[0] = _A
    filled = 1
    while filled < n:  # powers[k] = 16807^(k+1) mod m, doubling the filled prefix
        take = min(filled, n - filled)
        powers[filled : filled + take] = powers[:take] * powers[filled - 1] % _M
        filled += take
    return powers[:n] * s % _M


def _canonical(seed: float, n: int) -> np.ndarray:
    u = (_engine(seed, n) - 1).astype(F32) / F32(2.0**31)
    return np.where(u >= F32(1), np.nextafter(F32(1), F32(0)), u).astype(F32)


def check_seed(seed: float) -> str | None:
    """Why nncase's result for ``seed`` is not defined (a negative or non-finite float
    converted to the engine's unsigned seed), else None."""
    if not np.isfinite(seed) or seed < 0 or seed >= 2.0**64:
        return f"seed {seed} (C++ leaves its conversion to the engine's unsigned seed undefined)"
    return None


def uniform(n: int, low: float, high: float, seed: float) -> np.ndarray:
    """``n`` floats of std::uniform_real_distribution<float>(low, high)."""
    low, high = F32(low), F32(high)
    return (_canonical(seed, n) * (high - low) + low).astype(F32)


def normal(n: int, mean: float, std: float, seed: float) -> np.ndarray:
    """``n`` floats of std::normal_distribution<float>(mean, std)."""
    draws = 2 * n + 64  # pairs the polar method rejects need more draws: doubled
    while True:
        u = _canonical(seed, draws)
        x = ((F32(2) * u[0::2]).astype(np.float64) - 1.0).astype(F32)  # "2.0f*u - 1.0"
        y = ((F32(2) * u[1::2]).astype(np.float64) - 1.0).astype(F32)
        r2 = (x * x + y * y).astype(F32)
        ok = (r2 <= F32(1)) & (r2 != F32(0))
        x, y, r2 = x[ok], y[ok], r2[ok]
        if 2 * r2.size >= n:
            break
        draws *= 2
    with np.errstate(all="ignore"):
        mult = np.sqrt((F32(-2) * libm("logf", r2)).astype(F32) / r2).astype(F32)
    values = np.stack([y * mult, x * mult], axis=1).reshape(-1)[:n]
    return (values * F32(std) + F32(mean)).astype(F32)
