"""The K210 KPU as the host sees it: its 2 MiB RAM and the arithmetic of one conv layer.

Everything here follows docs/runtime.md, "KPU arithmetic" (register fields, row layout, integer
arithmetic). The functions are pure over already-decoded fields so that the V3, V4 and
V5 interpreters share one implementation and the randomised test can check it against an
independent scalar reference.

Two details are not documented by Kendryte and two public emulators disagree on them
(§0 item 4, §11 item 3); they are :class:`TieRules` options whose defaults follow the
nncase >= 0.2 simulator (the one nncase 1.9 still uses):

* ``segment``: which of the 16 activation segments a value on a boundary belongs to
  (``">"``: last segment with ``x > x_start``; ``">="``: last with ``x >= x_start``).
* ``rounding``: how the activation's right shift rounds (``"nncase"``: nncase's
  ``carry_shift<Banker=true>``, reproduced literally including its off-by-one for
  negative values; ``"sdk"``: the SDK / nncase 0.1 ``kpu_carry_shift``, also literal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..errors import FormatError, InputError
from ..model.kpu_args import (
    KPU_RAM_SIZE,
    KPU_ROW,
    POOL_TYPES,
    ActivationTable,
    KpuLayerArgs,
    decode_activation,
    decode_batchnorm,
)
from ..model.kpu_args import kpu_map_bytes as fmap_bytes
from ..model.kpu_args import kpu_row_layout as row_layout

#: pool_type -> (window, stride)
POOL_GEOMETRY = {t: (win, stride) for t, (_name, win, stride) in POOL_TYPES.items()}


@dataclass(frozen=True)
class TieRules:
    """Undocumented tie-breaking of the activation stage (see module docstring)."""

    segment: str = ">"
    rounding: str = "nncase"

    def __post_init__(self) -> None:
        if self.segment not in (">", ">="):
            raise InputError(
                f"unknown activation segment rule {self.segment!r}",
                "use '>' (nncase >= 0.2, default) or '>=' (nncase 0.1 emulator)",
            )
        if self.rounding not in ("nncase", "sdk"):
            raise InputError(
                f"unknown activation rounding rule {self.rounding!r}",
                "use 'nncase' (carry_shift<Banker>, default) or 'sdk' (kpu_carry_shift)",
            )


# --- KPU RAM layout (§3.3) ---------------------------------------------------------


def fmap_rows(c: int, h: int, w: int) -> int:
    """Rows a (C, H, W) map occupies (batches are stacked this many rows apart)."""
    return fmap_bytes(c, h, w) // KPU_ROW


def check_batches(n: int, rows: int, what: str) -> None:
    """Refuse (ValueError, located by the op boundary) ``n`` batches of ``rows`` rows
    each that cannot fit the KPU RAM: a damaged count would otherwise loop for hours
    over empty maps."""
    if not 0 <= n * max(rows, 1) <= KPU_RAM_SIZE // KPU_ROW:
        raise ValueError(f"{what}: {n} batches of {rows} rows do not fit the KPU RAM")


class KpuRam:
    """The 2 MiB KPU RAM as a byte array, with the feature-map row layout of §3.3.

    Maps are written and read through strided NumPy views of the byte array, so
    bytes outside a map (the tail of a row past W, other maps) keep whatever the
    device would have left there, as real models rely on (ADD_PADDING, §11 item 2).
    """

    def __init__(self) -> None:
        self.data = np.zeros(KPU_RAM_SIZE, dtype=np.uint8)
        #: byte range [lo, hi) accessed since the last reset (see :meth:`reset`)
        self._used = (KPU_RAM_SIZE, 0)

    def touch(self, start: int, end: int) -> None:
        """Note that bytes [start, end) are accessed other than through this class."""
        lo, hi = self._used
        self._used = (min(lo, start), max(hi, end))

    def reset(self) -> None:
        """Zero the RAM again for reuse by another run; clearing only the bytes accessed
        through :meth:`write_map`, :meth:`read_map` or :meth:`touch` is much cheaper
        than a new 2 MiB array for small models (V5 keeps its RAMs between runs)."""
        lo, hi = self._used
        if lo < hi:
            self.data[lo:hi] = 0
        self._used = (KPU_RAM_SIZE, 0)

    def _region(self, row: int, c: int, h: int, w: int, what: str) -> np.ndarray:
        start = row * KPU_ROW
        end = start + fmap_bytes(c, h, w)
        if row < 0 or end > KPU_RAM_SIZE:
            raise FormatError(
                f"{what}: map {c}x{h}x{w} at KPU row {row} ends at byte {end:#x}, "
                f"past the {KPU_RAM_SIZE // 1024} KiB KPU RAM",
                "the model's KPU addresses are inconsistent; check it with `kflashpy model info`",
            )
        self.touch(start, end)
        return self.data[start:end]

    def _grid(self, row: int, c: int, h: int, w: int, what: str) -> np.ndarray:
        """View (blocks, groups, H, W) of a map's bytes: channel b*groups + j is [b, j]
        (groups channels share each 64-byte row, §3.3; blocks = ceil(C / groups))."""
        groups, row_len, pitch = row_layout(w)
        region = self._region(row, c, h, w, what)
        if groups == 1:
            return region.reshape(c, 1, h, row_len * KPU_ROW)[..., :w]
        grid = region.reshape(-(-c // groups), h, groups, pitch)
        return grid[..., :w].transpose(0, 2, 1, 3)

    def write_map(self, row: int, fmap: np.ndarray, what: str = "kpu upload") -> None:
        """Store a (C, H, W) u8 map at ``row`` with the layout its width implies."""
        c, h, w = fmap.shape
        grid = self._grid(row, c, h, w, what)
        groups = grid.shape[1]
        full, rest = divmod(c, groups)
        if full:
            grid[:full] = fmap[: full * groups].reshape(full, groups, h, w)
        if rest:
            grid[full, :rest] = fmap[full * groups :]

    def read_map(self, row: int, c: int, h: int, w: int, what: str = "kpu read") -> np.ndarray:
        """Return a copy of the (C, H, W) u8 map stored at ``row``."""
        grid = self._grid(row, c, h, w, what)
        out = np.empty(grid.shape, dtype=np.uint8)
        out[...] = grid
        return out.reshape(-1, h, w)[:c]


# --- decoded parameters --------------------------------------------------------------


@dataclass(frozen=True)
class BatchNorm:
    """Per-output-channel BN: ``((acc * mul) >> shift) + add`` (§3.2, §3.4 step 2)."""

    mul: np.ndarray
    add: np.ndarray
    shift: np.ndarray


@dataclass(frozen=True, eq=False)
class ConvLayer:
    """What one KPU layer computes, in plain numbers (the subset of §3.1 that matters).

    ``weights`` is u8 OIHW: (OC, IC, k, k), or (OC, 1, k, k) when ``depthwise``.
    """

    in_shape: tuple[int, int, int]
    out_shape: tuple[int, int, int]
    kernel: int
    depthwise: bool
    pool_type: int
    pad_value: int
    arg_x: int
    shr_x: int
    arg_w: int
    shr_w: int
    arg_add: int
    src_row: int
    dst_row: int
    weights: np.ndarray
    bn: BatchNorm
    act: ActivationTable
    #: per-TieRules activation lookups (see :func:`step_lookup`)
    _fused: dict = field(default_factory=dict, repr=False)
    #: per-Grid im2col gather indices (see :func:`_gather_index`)
    _index: dict = field(default_factory=dict, repr=False)
    #: everything below is derived once from the fields above (see __post_init__)
    #: float32 weight matrix for BLAS: (OC, K), or (C, k*k) when depthwise; when the x
    #: offset is linear (see ``x_fold``) it is folded into the weights; otherwise a row
    #: of ones is appended (non-depthwise) so the matmul also yields the input sums
    w_mat: np.ndarray = field(init=False, repr=False)
    #: arg_x >> shr_x when arg_x is a multiple of 2**shr_x: then
    #: (arg_x * sum x) >> shr_x == sum(x * x_fold), folded into ``w_mat``; else None
    x_fold: int | None = field(init=False, repr=False)
    #: per-channel constant of step 1, int64 (OC, 1, 1): the arg_w and arg_add terms
    acc_bias: np.ndarray = field(init=False, repr=False)
    #: taps per BLAS call so that float32 partial sums stay exact (K when one call is)
    chunk: int = field(init=False, repr=False)
    #: dtype of :func:`convolve`'s result: float32 when every value is provably below
    #: 2**24 (exact), else float64 (exact below 2**53, always the case for the KPU)
    acc_dtype: type = field(init=False, repr=False)
    #: bound on |accumulator| (without ``acc_bias``) for any input
    acc_bound: int = field(init=False, repr=False)
    #: every norm_mul >= 0: BN is non-decreasing (max pooling may run before it)
    bn_monotone: bool = field(init=False, repr=False)
    #: BN values provably inside the fast path's range for any input (no check per run)
    bn_bounded: bool = field(init=False, repr=False)
    #: (lowest, highest) BN value any u8 input can produce, over all channels: the
    #: activation only matters there (see :func:`step_lookup`)
    bn_range: tuple[int, int] = field(init=False, repr=False)

    @property
    def macs(self) -> int:
        """Multiply-accumulates the layer performs (the KPU convolves at stride 1)."""
        taps = self.weights[0].size
        return self.out_shape[0] * taps * self.in_shape[1] * self.in_shape[2]

    def __post_init__(self) -> None:
        # Exactness: all products are integers; a float sum of integers is exact when
        # every partial sum is below 2**24 (float32) or 2**53 (float64) in magnitude.
        # Any partial sum, in any order BLAS adds, is bounded by sum(|w|) * 255.
        oc = self.weights.shape[0]
        flat = self.weights.reshape(oc, -1).astype(np.int64)
        taps = flat.shape[1]
        g_ic = 1 if self.depthwise else self.in_shape[0]
        bias = ((self.arg_w * flat.sum(axis=1)) >> self.shr_w) + self.arg_add * g_ic
        fold = self.arg_x >> self.shr_x if self.arg_x % (1 << self.shr_x) == 0 else None
        eff = flat + fold if fold is not None else flat
        mm_bound = int(np.abs(eff).sum(axis=1).max(initial=0)) * 255
        w_max = max(1, int(np.abs(eff).max(initial=0)))
        if fold is None:  # the floor-shifted x term is added separately
            mm_bound = max(mm_bound, taps * 255)
            acc_bound = mm_bound + ((abs(self.arg_x) * taps * 255) >> self.shr_x) + 1
        else:
            acc_bound = mm_bound
        w_mat = eff.astype(np.float32)
        if fold is None and not self.depthwise:
            w_mat = np.vstack([w_mat, np.ones((1, taps), np.float32)])
        # w_max < 2**23 + 256 (24-bit arg_x), so float32 holds every weight exactly;
        # a chunk of taps whose products sum below 2**24 is exact in float32 and the
        # chunk sums are added in float64 (|acc| < 2**45 for the KPU's 9216 taps);
        # chunk 0: even one product may reach 2**24, the matmul runs in float64
        chunk = taps if mm_bound < 1 << 24 else ((1 << 24) - 1) // (255 * w_max)
        derived = {
            "w_mat": np.ascontiguousarray(w_mat),
            "x_fold": fold,
            "acc_bias": bias[:, None, None],
            "chunk": chunk,
            "acc_dtype": np.float32 if acc_bound < 1 << 24 else np.float64,
            "acc_bound": acc_bound,
            "bn_monotone": not np.any(self.bn.mul < 0),
        }
        lo, hi = derived["bn_range"] = _bn_range(acc_bound, bias, self.bn)
        derived["bn_bounded"] = lo >= _BN_MIN and hi <= _BN_MAX
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @classmethod
    def from_tables(
        cls,
        args: KpuLayerArgs | None,
        weights: np.ndarray,
        bn_table: bytes | memoryview,
        act_table: bytes | memoryview,
        what: str = "KPU layer",
    ) -> ConvLayer:
        """Build from the decoded register block and the raw parameter tables."""
        if args is None:  # the model parsers decode one for every conv: a caller's bug
            raise FormatError(f"{what}: no layer-argument block", "report it with the model")
        k = kernel_size(args.kernel_type, what)
        oc, ic = args.out_channels, args.in_channels
        if weights.size != args.weight_count:
            raise FormatError(
                f"{what}: {weights.size} weights, the registers imply {args.weight_count}",
                "the kmodel is truncated or its layer arguments are corrupt",
            )
        if len(bn_table) < 8 * oc:
            raise FormatError(
                f"{what}: batch-norm table has {len(bn_table)} bytes, needs {8 * oc}",
                "the kmodel is truncated",
            )
        in_shape, out_shape = args.in_shape, args.out_shape
        expect = pooled_size(in_shape[1:], args.pool_type, what)
        if expect != out_shape[1:]:
            raise FormatError(
                f"{what}: pool {args.pool_name} maps {in_shape[1]}x{in_shape[2]} to "
                f"{expect[0]}x{expect[1]}, the registers say {out_shape[1]}x{out_shape[2]}",
                "the layer arguments are corrupt",
            )
        mul, add, shift = decode_batchnorm(bytes(bn_table[: 8 * oc]))
        return cls(
            in_shape=in_shape,
            out_shape=out_shape,
            kernel=k,
            depthwise=args.depthwise,
            pool_type=args.pool_type,
            pad_value=args.pad_value,
            arg_x=args.arg_x,
            shr_x=args.shr_x,
            arg_w=args.arg_w,
            shr_w=args.shr_w,
            arg_add=args.arg_add,
            src_row=args.image_src_addr,
            dst_row=args.image_dst_addr,
            weights=weights.reshape(oc, 1 if args.depthwise else ic, k, k),
            bn=BatchNorm(mul, add, shift),
            act=decode_activation(bytes(act_table)),
        )


def _bn_range(acc_bound: int, bias: np.ndarray, bn: BatchNorm) -> tuple[int, int]:
    """Lowest and highest BN value over every channel for accumulators (with their
    channel constant) in [bias - acc_bound, bias + acc_bound]: BN is monotone in the
    accumulator per channel, so the ends of that interval bound it (exact ints)."""
    lo = hi = None
    for b, m, sh, a in zip(bias, bn.mul, bn.shift, bn.add, strict=True):
        ends = [(((int(b) + d) * int(m)) >> int(sh)) + int(a) for d in (-acc_bound, acc_bound)]
        lo = min(ends) if lo is None else min(lo, *ends)
        hi = max(ends) if hi is None else max(hi, *ends)
    return (lo, hi) if lo is not None and hi is not None else (0, 0)


def kernel_size(kernel_type: int, what: str = "KPU layer") -> int:
    """Filter size from ``kernel_type`` (§3.1: 0 -> 1x1, 1 -> 3x3)."""
    if kernel_type == 0:
        return 1
    if kernel_type == 1:
        return 3
    raise FormatError(
        f"{what}: kernel_type {kernel_type} is not 0 (1x1) or 1 (3x3)",
        "the layer-argument block is corrupt",
    )


def pooled_size(in_hw: tuple[int, int], pool_type: int, what: str = "KPU layer") -> tuple[int, int]:
    """Output (H, W) of a pool type applied to (H, W) (§3.1 pool table)."""
    if pool_type not in POOL_GEOMETRY:
        raise FormatError(
            f"{what}: pool_type {pool_type} is not one of 0..9",
            "the layer-argument block is corrupt",
        )
    _, stride = POOL_GEOMETRY[pool_type]
    return in_hw[0] // stride, in_hw[1] // stride


# --- arithmetic (§3.4) -----------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """Output positions at which a conv is evaluated: rows y0, y0+step, ... (n_y of
    them), likewise columns. The full map is Grid(0, 0, 1, H, W); pick pooling only
    needs every 2nd or 4th position, so the conv is evaluated there only."""

    y0: int
    x0: int
    step: int
    n_y: int
    n_x: int

    def taps(self, plane: np.ndarray, k: int):
        """Yield (dy, dx, window) for each of the k*k filter taps over a padded plane."""
        s = self.step
        for dy in range(k):
            for dx in range(k):
                y, x = self.y0 + dy, self.x0 + dx
                yield (
                    dy,
                    dx,
                    plane[
                        ..., y : y + (self.n_y - 1) * s + 1 : s, x : x + (self.n_x - 1) * s + 1 : s
                    ],
                )


def _matmul(layer: ConvLayer, cols: np.ndarray) -> np.ndarray:
    """``layer.w_mat`` @ float32 cols (K, N) of u8 values, exactly (see
    ConvLayer.__post_init__): one float32 BLAS call, float32 chunks summed in float64,
    or float64 BLAS."""
    w, k, step = layer.w_mat, cols.shape[0], layer.chunk
    if step >= k:
        return w @ cols
    if step == 0:
        return w.astype(np.float64) @ cols.astype(np.float64)
    out = np.zeros((w.shape[0], cols.shape[1]), dtype=np.float64)
    for lo in range(0, k, step):
        out += w[:, lo : lo + step] @ cols[lo : lo + step]
    return out


def _padded(x: np.ndarray, value: int) -> np.ndarray:
    """(C, H, W) u8 -> float32 (C, H+2, W+2) bordered with the KPU ``pad_value``."""
    c, h, w = x.shape
    out = np.full((c, h + 2, w + 2), value, dtype=np.float32)
    out[:, 1:-1, 1:-1] = x
    return out


#: im2col is one gather through a cached index when the columns have at most this many
#: elements: small layers are dominated by NumPy's per-call cost, big ones by memory
#: traffic, where k*k strided slice copies are faster
_GATHER_MAX = 1 << 16


def _gather_index(layer: ConvLayer, g: Grid) -> np.ndarray:
    """Flat indices into the padded (IC, H+2, W+2) input giving the (IC, 9, N)
    columns of a 3x3 conv at ``g``'s positions (built once per layer and grid)."""
    idx = layer._index.get(g)
    if idx is None:
        ic, h, w = layer.in_shape
        pitch = w + 2
        rows = g.y0 + g.step * np.arange(g.n_y)
        cols = g.x0 + g.step * np.arange(g.n_x)
        pos = (rows[:, None] * pitch + cols[None, :]).reshape(-1)
        taps = (np.arange(3)[:, None] * pitch + np.arange(3)[None, :]).reshape(-1)
        chans = np.arange(ic) * (h + 2) * pitch
        idx = chans[:, None, None] + taps[None, :, None] + pos[None, None, :]
        layer._index[g] = idx
    return idx


def _columns(layer: ConvLayer, x: np.ndarray, g: Grid) -> np.ndarray:
    """The conv's input columns: float32 (IC, k*k, N) of u8 values at ``g``'s
    N = n_y*n_x positions (3x3: bordered with the KPU ``pad_value``)."""
    ic = x.shape[0]
    n = g.n_y * g.n_x
    if layer.kernel == 1:  # only the grid positions are ever read
        sub = x[:, g.y0 :: g.step, g.x0 :: g.step][:, : g.n_y, : g.n_x]
        return sub.astype(np.float32).reshape(ic, 1, n)
    xp = _padded(x, layer.pad_value)
    if ic * 9 * n <= _GATHER_MAX:
        return xp.reshape(-1).take(_gather_index(layer, g), mode="clip")
    cols = np.empty((ic, 3, 3, g.n_y, g.n_x), dtype=np.float32)
    for dy, dx, win in g.taps(xp, 3):
        cols[:, dy, dx] = win
    return cols.reshape(ic, 9, n)


def convolve(layer: ConvLayer, x: np.ndarray, grid: Grid | None = None) -> np.ndarray:
    """Step 1 without its per-channel constant (``layer.acc_bias``, added by
    :func:`batch_norm`, as max and pick pooling commute with it): the conv accumulator
    at ``grid`` positions (default: every input position, the KPU convolves at stride
    1), shape (OC, n_y, n_x), integer values held exactly in ``layer.acc_dtype``
    (einsum and BLAS may add in any order: every partial sum is exact, see
    ConvLayer.__post_init__).
    """
    g = grid or Grid(0, 0, 1, *layer.in_shape[1:])
    cols = _columns(layer, x, g)
    sx = None
    if layer.depthwise:
        acc = np.einsum("ct,ctn->cn", layer.w_mat, cols)
        if layer.x_fold is None:
            sx = cols.sum(axis=1)
    else:
        mm = _matmul(layer, cols.reshape(-1, cols.shape[2]))
        if layer.x_fold is None:
            sx, mm = mm[-1], mm[:-1]
        acc = mm
    acc = acc.astype(layer.acc_dtype, copy=False)
    if sx is not None:  # (arg_x * sum x) >> shr_x, exact in float64 (< 2**44 / 2**shr_x)
        term = np.floor(sx.astype(np.float64) * (layer.arg_x / (1 << layer.shr_x)))
        out = acc if layer.acc_dtype == np.float32 else None
        acc = np.add(acc, term, out=out, casting="unsafe")
    return acc.reshape(-1, g.n_y, g.n_x)


def batch_norm(layer: ConvLayer, acc: np.ndarray) -> np.ndarray:
    """Step 1's per-channel constant, then step 2: per-channel fixed-point scale and
    offset (floor shift), in int64 like the direct formula always was."""
    bn = layer.bn
    v = acc.astype(np.int64)
    v += layer.acc_bias
    v *= bn.mul[:, None, None]
    v >>= bn.shift[:, None, None]
    v += bn.add[:, None, None]
    return v


def round_shift(v: np.ndarray, s: np.ndarray, rounding: str) -> np.ndarray:
    """Right shift with the activation's rounding rule, elementwise (see TieRules).

    ``"nncase"``: integral = v >> s (floor), fraction = v mod 2**s; fraction < half
    keeps the integral, > half adds sign(v), == half adds sign(v) only if the integral
    is odd. For negative v "adds sign(v)" moves away from the true value: nncase's
    quirk, reproduced on purpose. ``"sdk"``: SDK ``kpu_carry_shift``: t = v >> (s-1);
    odd t gives (t >> 1) + sign(v), else t >> 1 (again literal, wrong for negatives).
    """
    s = np.asarray(s, dtype=np.int64)
    pos = s > 0
    s1 = np.where(pos, s, 1)
    sign = np.where(v < 0, -1, 1)
    if rounding == "nncase":
        integral = v >> s1
        frac = v & ((np.int64(1) << s1) - 1)
        half = np.int64(1) << (s1 - 1)
        up = (frac > half) | ((frac == half) & ((integral & 1) == 1))
        out = integral + np.where(up, sign, 0)
    else:
        t = v >> (s1 - 1)
        out = (t >> 1) + np.where((t & 1) == 1, sign, 0)
    return np.where(pos, out, v)


def activate(act: ActivationTable, bn: np.ndarray, rules: TieRules) -> np.ndarray:
    """Step 3: segment choice, linear piece, rounding, clamp to u8."""
    seg = _segment(act.x_start, bn, rules)
    v = (bn - act.x_start[seg]) * act.y_mul[seg]
    y = round_shift(v, act.shift[seg], rules.rounding) + act.bias[seg]
    return np.clip(y, 0, 255).astype(np.uint8)


def _window_taps(src: np.ndarray, win: int, stride: int, oh: int, ow: int):
    for dy in range(win):
        for dx in range(win):
            yield src[
                :,
                dy : dy + (oh - 1) * stride + 1 : stride,
                dx : dx + (ow - 1) * stride + 1 : stride,
            ]


def pool(fmap: np.ndarray, pool_type: int, out_hw: tuple[int, int]) -> np.ndarray:
    """Step 4: KPU pooling of a (C, H, W) map to (C, OH, OW) (nncase >= 0.2 rules).

    Windows start at (oy*stride, ox*stride). Max ignores taps outside the map, mean
    replicates the edge and divides the integer sum by window**2 (truncating), the
    pick types read one tap (0 outside the map). Max and pick also accept the
    accumulator (they commute with a non-decreasing activation, see :func:`run_conv`).
    """
    if pool_type == 0:
        return fmap
    win, stride = POOL_GEOMETRY[pool_type]
    c, h, w = fmap.shape
    oh, ow = out_hw
    pad_h = max(0, (oh - 1) * stride + win - h)
    pad_w = max(0, (ow - 1) * stride + win - w)
    if pool_type in (5, 6, 7):
        dx = 1 if pool_type == 6 else 0
        src = np.pad(fmap, ((0, 0), (0, pad_h), (0, pad_w))) if pad_h or pad_w else fmap
        return np.ascontiguousarray(
            src[:, 0 : oh * stride : stride, dx : dx + ow * stride : stride][:, :oh, :ow]
        )
    if pool_type in (1, 3, 9):
        src = fmap
        if pad_h or pad_w:  # taps past the edge never win: pad with the type's minimum
            low = -np.inf if fmap.dtype.kind == "f" else np.iinfo(fmap.dtype).min
            src = np.pad(fmap, ((0, 0), (0, pad_h), (0, pad_w)), constant_values=low)
        # separable (every max type has win >= 2): the max over each window's rows,
        # read as whole contiguous rows, then over its columns
        rows, cols = (oh - 1) * stride + 1, (ow - 1) * stride + 1
        band = np.maximum(src[:, 0:rows:stride], src[:, 1 : 1 + rows : stride])
        for dy in range(2, win):
            np.maximum(band, src[:, dy : dy + rows : stride], out=band)
        out = np.maximum(band[:, :, 0:cols:stride], band[:, :, 1 : 1 + cols : stride])
        for dx in range(2, win):
            np.maximum(out, band[:, :, dx : dx + cols : stride], out=out)
        return out
    src = np.pad(fmap, ((0, 0), (0, pad_h), (0, pad_w)), mode="edge")
    acc = np.zeros((c, oh, ow), dtype=np.uint32)
    for tap in _window_taps(src, win, stride, oh, ow):
        acc += tap
    return (acc // (win * win)).astype(np.uint8)


# --- fast path: the activation as a monotone step function of the BN value -------------

#: BN values the fast path covers (far wider than the KPU's asserted 36 bits); a run
#: whose BN values fall outside takes the direct path, so results never change
_BN_MIN, _BN_MAX = -(1 << 46), (1 << 46) - 1
#: most correction steps allowed after the coarse guess (else binary search)
_MAX_STEPS = 6
#: size of the coarse guess table
_COARSE_BITS = 16


@dataclass(frozen=True, eq=False)
class StepLookup:
    """A non-decreasing activation as ``out = #{t : T[t] <= bn}`` over 255 thresholds.

    ``table`` = [-inf, T1..T255, +inf]. A coarse table over bins of 2**``shift`` BN
    values starting at ``base`` gives the count at each bin's start; at most ``steps``
    comparisons then finish the count (``steps`` is the most thresholds any bin holds,
    computed when the lookup is built). ``steps`` None: binary search instead.
    """

    table: np.ndarray
    base: int
    shift: int
    coarse: np.ndarray
    steps: int | None

    def __call__(self, bn: np.ndarray) -> np.ndarray:
        if self.steps is None:
            return (np.searchsorted(self.table, bn, side="right") - 1).astype(np.uint8)
        idx = bn - self.base  # clamp to the table (two ufuncs: np.clip costs more per call)
        np.maximum(idx, 0, out=idx)
        np.minimum(idx, (len(self.coarse) << self.shift) - 1, out=idx)
        if self.shift:
            np.right_shift(idx, self.shift, out=idx)
        # indices are in range by construction: mode="clip" skips numpy's bounds check;
        # the coarse table is u8 (64 KiB stays in cache), gathers index with intp
        g = self.coarse.take(idx, mode="clip")
        upper = self.table[1:]  # upper[g] = the next threshold after g
        for _ in range(self.steps):
            g += upper.take(g.astype(np.intp), mode="clip") <= bn
        return g

    @classmethod
    def build(cls, thr: np.ndarray, lo: int = _BN_MIN, hi: int = _BN_MAX) -> StepLookup:
        """From thresholds over the BN range [lo, hi] (see _activation_thresholds)."""
        big = np.iinfo(np.int64).max
        table = np.concatenate([[-big - 1], thr, [big]]).astype(np.int64)
        finite = thr[(thr > lo) & (thr <= hi)]
        if finite.size == 0:
            return cls(table, 0, 0, np.zeros(1, np.uint8), None)
        base = int(finite.min()) - 1
        span = int(finite.max()) - base + 1
        shift = max(0, (span - 1).bit_length() - _COARSE_BITS)
        starts = base + (np.arange(((span - 1) >> shift) + 1, dtype=np.int64) << shift)
        coarse = (np.searchsorted(table, starts, side="right") - 1).astype(np.uint8)
        ends = np.append(starts[1:], big) - 1
        inside = np.searchsorted(thr, ends, side="right") - np.searchsorted(
            thr, starts, side="right"
        )
        worst = int(inside.max())
        return cls(table, base, shift, coarse, worst if worst <= _MAX_STEPS else None)


def _activation_thresholds(
    act: ActivationTable, rules: TieRules, lo_bn: int = _BN_MIN, hi_bn: int = _BN_MAX
) -> np.ndarray | None:
    """T[t-1] = smallest BN value in [lo_bn, hi_bn] whose activation output is >= t
    (t = 1..255; hi_bn + 1 when none), or None when the activation is not
    non-decreasing over that range (the BN values a layer can reach).

    Between consecutive segment starts the chosen segment is fixed, so the function is
    non-decreasing iff every reachable piece has y_mul >= 0 (its shifted value is then
    >= 0, where both rounding rules are monotone) and no piece starts below where the
    previous one ended. Pieces outside the range (table segments no input reaches) do
    not count.
    """
    edge = 1 if rules.segment == ">" else 0
    starts = np.unique(np.clip(np.concatenate([[lo_bn], act.x_start + edge]), lo_bn, hi_bn))
    ends = np.append(starts[1:] - 1, hi_bn)
    f_start = activate(act, starts, rules).astype(np.int64)
    f_end = activate(act, ends, rules).astype(np.int64)
    seg = _segment(act.x_start, starts, rules)
    if np.any((act.y_mul[seg] < 0) & (starts < ends)) or np.any(f_start[1:] < f_end[:-1]):
        return None
    lo = np.full(255, lo_bn, dtype=np.int64)
    hi = np.full(255, hi_bn + 1, dtype=np.int64)  # hi = "never reaches t"
    t = np.arange(1, 256)
    while np.any(lo < hi):
        mid = lo + (hi - lo) // 2
        ok = activate(act, np.minimum(mid, hi_bn), rules).astype(np.int64) >= t
        ok &= mid <= hi_bn
        hi = np.where(ok & (lo < hi), mid, hi)
        lo = np.where(~ok & (lo < hi), mid + 1, lo)
    return lo


def step_lookup(layer: ConvLayer, rules: TieRules) -> StepLookup | None:
    """The layer's activation as a :class:`StepLookup` over the BN values the layer can
    reach (``bn_range``), or None when it is not monotone there (then the direct path
    runs). Cached on the layer per rules."""
    if rules in layer._fused:
        return layer._fused[rules]
    lo, hi = layer.bn_range
    thr = None
    if lo >= _BN_MIN and hi <= _BN_MAX:  # always, for the KPU's 36-bit values
        thr = _activation_thresholds(layer.act, rules, lo, hi)
    result = None if thr is None else StepLookup.build(thr, lo, hi)
    layer._fused[rules] = result
    return result


@dataclass(frozen=True, eq=False)
class AffineLookup:
    """Steps 2-3 straight from a float32 accumulator, for a :class:`StepLookup`.

    With u = (acc + acc_bias) * mul / 2**shift, BN = floor(u) + add, and for integers
    n and k > 0 floor((floor(u) + n) / k) = floor((u + n) / k) and floor(u) >= n iff
    u >= n. So with w = acc * alpha + beta = (u + add - base) / 2**cshift per channel,
    the coarse bin is clamp(floor(w)) and BN >= T iff w >= (T - base) / 2**cshift.
    All of it is float64 arithmetic on dyadic numbers whose numerators stay below
    2**53 (checked per layer by :func:`affine_lookup`), hence exact.

    The thresholds rise, so the count past bin i's start c = coarse[i] is the number of
    k < steps with w >= upper[c + k]: ``bounds[k][i]`` holds that value per bin, and
    every gather is indexed by the bin (the int64 truncation of w, clamped by
    ``mode="clip"``; truncation and floor differ only on (-1, 0), which clamps to 0).
    """

    alpha: np.ndarray  # float64 (OC, 1, 1)
    beta: np.ndarray  # float64 (OC, 1, 1)
    coarse: np.ndarray  # StepLookup.coarse
    bounds: tuple[np.ndarray, ...]  # float64: (T[coarse + k + 1] - base) / 2**cshift

    def __call__(self, acc: np.ndarray) -> np.ndarray:
        w = acc * self.alpha
        w += self.beta
        idx = w.astype(np.intp)
        g = self.coarse.take(idx, mode="clip")
        for bound in self.bounds:
            g += bound.take(idx, mode="clip") <= w
        return g


def affine_lookup(layer: ConvLayer, rules: TieRules) -> AffineLookup | None:
    """The :class:`AffineLookup` of a layer, or None when its exactness conditions do
    not hold (float32 accumulator, monotone BN and activation, BN values in range,
    numerators below 2**53). Cached on the layer per rules."""
    key = (rules, "affine")
    if key in layer._fused:
        return layer._fused[key]
    look = step_lookup(layer, rules)
    result = None
    if (
        look is not None
        and look.steps is not None
        and layer.acc_dtype == np.float32
        and layer.bn_monotone
        and layer.bn_bounded
    ):
        limit = 1 << 53
        exact = True
        alpha, beta = [], []
        for b, m, sh, a in zip(
            layer.acc_bias.ravel(), layer.bn.mul, layer.bn.shift, layer.bn.add, strict=True
        ):
            b, m, sh, a = int(b), int(m), int(sh), int(a)
            lead = (layer.acc_bound + abs(b)) * m
            tail = (a - look.base) << sh
            exact &= lead < limit and lead + abs(tail) < limit and abs(b * m + tail) < limit
            scale = 2.0 ** -(sh + look.shift)
            alpha.append(m * scale)
            beta.append((b * m + tail) * scale)
        upper = (look.table[1:].astype(np.float64) - look.base) * 2.0**-look.shift
        if exact and np.all(np.abs(look.table[1:-1] - look.base) < limit):
            col = (-1, 1, 1)
            last = len(upper) - 1
            bounds = tuple(
                upper[np.minimum(look.coarse.astype(np.intp) + k, last)] for k in range(look.steps)
            )
            result = AffineLookup(
                np.array(alpha).reshape(col), np.array(beta).reshape(col), look.coarse, bounds
            )
    layer._fused[key] = result
    return result


def _segment(xs: np.ndarray, bn: np.ndarray, rules: TieRules) -> np.ndarray:
    """Index of the activation segment each BN value falls in (TieRules.segment)."""
    if np.all(np.diff(xs) > 0):
        side: Literal["left", "right"] = "left" if rules.segment == ">" else "right"
        return np.maximum(np.searchsorted(xs, bn, side=side) - 1, 0)
    shape = (-1,) + (1,) * bn.ndim
    hit = bn[None] > xs.reshape(shape) if rules.segment == ">" else bn[None] >= xs.reshape(shape)
    seg = len(xs) - 1 - np.argmax(hit[::-1], axis=0)
    return np.where(hit.any(axis=0), seg, 0)


#: pick pools: pool_type -> (row offset, column offset, stride)
_PICKS = {5: (0, 0, 2), 6: (0, 1, 2), 7: (0, 0, 4)}


def run_conv(layer: ConvLayer, x: np.ndarray, rules: TieRules, fused: bool = True) -> np.ndarray:
    """Steps 1-4 on an input map: returns the (OC, OH, OW) u8 output.

    Pick pooling commutes with any function, so the conv is evaluated only at the picked
    positions. Fast path (``fused``), identical results: a monotone activation becomes
    a :class:`StepLookup`; when BN is non-decreasing too (every norm_mul >= 0), max
    pooling runs on the accumulator first, so only pooled elements are activated.
    """
    out_hw = layer.out_shape[1:]
    look = step_lookup(layer, rules) if fused else None
    if layer.pool_type in _PICKS:
        y0, x0, step = _PICKS[layer.pool_type]
        acc, pool_type = convolve(layer, x, Grid(y0, x0, step, *out_hw)), 0
    else:
        acc, pool_type = convolve(layer, x), layer.pool_type
    if look is not None and pool_type in (1, 3, 9) and layer.bn_monotone:
        acc, pool_type = pool(acc, pool_type, out_hw), 0
    affine = affine_lookup(layer, rules) if fused else None
    if affine is not None:
        return pool(affine(acc), pool_type, out_hw)
    bn = batch_norm(layer, acc)
    # a lookup is built over every BN value the layer can reach
    y = look(bn) if look is not None else activate(layer.act, bn, rules)
    return pool(y, pool_type, out_hw)


def batches(maps) -> np.ndarray:
    """Stack per-batch (C, H, W) maps to (N, C, H, W) (one batch: a view, no copy)."""
    maps = list(maps)
    return maps[0][None] if len(maps) == 1 else np.stack(maps)


def run_conv_in_ram(
    ram: KpuRam, layer: ConvLayer, rules: TieRules, batch: int = 0, fused: bool = True
) -> np.ndarray:
    """Read the input map from KPU RAM, compute, write the output map back (step 5)."""
    ic, ih, iw = layer.in_shape
    oc, oh, ow = layer.out_shape
    src = layer.src_row + batch * fmap_rows(ic, ih, iw)
    dst = layer.dst_row + batch * fmap_rows(oc, oh, ow)
    x = ram.read_map(src, ic, ih, iw, "kpu conv input")
    out = run_conv(layer, x, rules, fused)
    ram.write_map(dst, out, "kpu conv output")
    return out
