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
