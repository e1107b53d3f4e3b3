"""The KPU emulation against a slow, obviously-correct scalar reference.

The reference below is written independently of ``kflashpy.runtime.kpu`` from the
prose of docs/runtime.md ("KPU arithmetic"): plain Python integers, one output element at a
time, every register field read from the 96 bytes with explicit shifts. The test builds
small V3 kmodels in memory (random KPU conv layers, chained through KPU RAM) and runs
them through ``kflashpy.runtime.load``.
"""

from __future__ import annotations

import random
import struct

import numpy as np
import pytest

from kflashpy.runtime import kpu, load

# ---------------------------------------------------------------- scalar reference


def field(words: list[int], reg: int, lo: int, hi: int, signed: bool = False) -> int:
    v = (words[reg] >> lo) & ((1 << (hi - lo)) - 1)
    if signed and v >= 1 << (hi - lo - 1):
        v -= 1 << (hi - lo)
    return v


def ref_address(c: int, y: int, x: int, h: int, w: int) -> int:
    """Byte offset of element (c, y, x) of a map, straight from the §3.3 formula."""
    if w <= 16:
        groups, row_len, pitch = 4, 1, 16
    elif w <= 32:
        groups, row_len, pitch = 2, 1, 32
    else:
        groups, row_len, pitch = 1, (w + 63) // 64, 64
    return (c // groups) * row_len * h * 64 + (c % groups) * pitch + y * row_len * 64 + x


def ref_shift_round(v: int, s: int, rule: str) -> int:
    if s <= 0:
        return v
    if rule == "nncase":
        integral = v >> s
        frac = v & ((1 << s) - 1)
        half = 1 << (s - 1)
        sign = -1 if v < 0 else 1
        if frac < half:
            return integral
        if frac > half:
            return integral + sign
        return integral + sign if integral & 1 else integral
    t = v >> (s - 1)
    return (t >> 1) + ((-1 if v < 0 else 1) if t & 1 else 0)


def ref_layer(
    ram: bytearray, regs: bytes, weights: bytes, bn: bytes, act: bytes, rules, seen=None
) -> None:
    """Run one KPU layer on a bytearray KPU RAM, one element at a time.

    ``seen`` (a list) collects every batch-norm output, so the test can put segment
    boundaries exactly on values that occur (the tie cases).
    """
    w = list(struct.unpack("<12Q", regs))
    depthwise = field(w, 0, 3, 4)
    src, dst = field(w, 1, 0, 15) * 64, field(w, 1, 32, 47) * 64
    ic, oc = field(w, 2, 0, 10) + 1, field(w, 2, 32, 42) + 1
    iw, ih = field(w, 3, 0, 10) + 1, field(w, 3, 10, 19) + 1
    ow, oh = field(w, 3, 32, 42) + 1, field(w, 3, 42, 51) + 1
    k = 3 if field(w, 4, 0, 3) == 1 else 1
    pool_type, pad_value = field(w, 4, 4, 8), field(w, 4, 24, 32)
    shr_w, shr_x = field(w, 9, 0, 4), field(w, 9, 4, 8)
    arg_w, arg_x = field(w, 9, 8, 32, True), field(w, 9, 32, 56, True)
    arg_add = field(w, 10, 0, 40, True)
    bnw = struct.unpack(f"<{oc}Q", bn[: 8 * oc])
    aw = struct.unpack("<16Q", act[:128])
    seg_start = [field([a], 0, 24, 60, True) for a in aw]
    seg_mul = [field([a], 0, 8, 24, True) for a in aw]
    seg_shift = [field([a], 0, 0, 8) for a in aw]
    seg_bias = list(act[128:144])

    def x_at(c: int, y: int, x: int) -> int:
        if 0 <= y < ih and 0 <= x < iw:
            return ram[src + ref_address(c, y, x, ih, iw)]
        return pad_value

    full = [[[0] * iw for _ in range(ih)] for _ in range(oc)]
    r = k // 2
    for o in range(oc):
        chans = [o] if depthwise else list(range(ic))
        mul = field([bnw[o]], 0, 0, 24, True)
        add = field([bnw[o]], 0, 24, 56, True)
        nshift = field([bnw[o]], 0, 56, 60)
        for y in range(ih):
            for x in range(iw):
                s = sx = sw = 0
                for n, c in enumerate(chans):
                    for dy in range(k):
                        for dx in range(k):
                            wv = weights[((o if depthwise else o * ic + n) * k + dy) * k + dx]
                            xv = x_at(c, y + dy - r, x + dx - r)
                            s += xv * wv
                            sx += xv
                            sw += wv
                acc = s + ((arg_x * sx) >> shr_x) + ((arg_w * sw) >> shr_w) + arg_add * len(chans)
                v = ((acc * mul) >> nshift) + add
                if seen is not None:
                    seen.append(v)
                seg = 0
                for i in range(16):
                    if (v > seg_start[i]) if rules.segment == ">" else (v >= seg_start[i]):
                        seg = i
                y8 = ref_shift_round(
                    (v - seg_start[seg]) * seg_mul[seg], seg_shift[seg], rules.rounding
                )
                full[o][y][x] = min(255, max(0, y8 + seg_bias[seg]))
    win, stride = {0: (1, 1), 1: (2, 2), 2: (2, 2), 3: (4, 4), 4: (4, 4), 5: (2, 2),
                   6: (2, 2), 7: (4, 4), 8: (2, 1), 9: (2, 1)}[pool_type]  # fmt: skip
    for o in range(oc):
        for y in range(oh):
            for x in range(ow):
                taps = [(y * stride + a, x * stride + b) for a in range(win) for b in range(win)]
                inside = [full[o][p][q] for p, q in taps if p < ih and q < iw]
                clamped = [full[o][min(p, ih - 1)][min(q, iw - 1)] for p, q in taps]
                if pool_type == 0:
                    val = full[o][y][x]
                elif pool_type in (1, 3, 9):
                    val = max(inside)
                elif pool_type in (2, 4, 8):
                    val = sum(clamped) // (win * win)
                else:
                    p, q = y * stride, x * stride + (1 if pool_type == 6 else 0)
                    val = full[o][p][q] if p < ih and q < iw else 0
                ram[dst + ref_address(o, y, x, oh, ow)] = val


# ------------------------------------------------------------ random V3 models


def pack_regs(f: dict) -> bytes:
    w = [0] * 12
    w[0] = f["depthwise"] << 3
    w[1] = f["src"] | (f["dst"] << 32)
    w[2] = (f["ic"] - 1) | ((f["oc"] - 1) << 32) | ((f["oc"] - 1) << 48)
    w[3] = (f["iw"] - 1) | ((f["ih"] - 1) << 10) | ((f["ow"] - 1) << 32) | ((f["oh"] - 1) << 42)
    w[4] = f["ktype"] | (f["pool"] << 4) | (1 << 10) | (15 << 16) | (f["pad"] << 24)
    w[9] = f["shr_w"] | (f["shr_x"] << 4) | ((f["arg_w"] & 0xFFFFFF) << 8)
    w[9] |= (f["arg_x"] & 0xFFFFFF) << 32
    w[10] = f["arg_add"] & ((1 << 40) - 1)
    w[11] = ((f["ow"] * f["oh"] - 1) << 16) | ((f["ow"] * f["oh"] * f["oc"] - 1) << 32)
    return struct.pack("<12Q", *w)


def random_layer(rng: random.Random, shape: tuple[int, int, int], src: int, dst: int, oc: int):
    ic, ih, iw = shape
    depthwise = int(rng.random() < 0.3)
    if depthwise:
        oc = ic
    ktype = rng.randrange(2)
    pool = rng.choice([t for t, (_w, st) in kpu.POOL_GEOMETRY.items() if st <= min(ih, iw)])
    _, stride = kpu.POOL_GEOMETRY[pool]
    # "narrow" layers keep values small so outputs land inside 0..255 and ties happen;
    # "wide" layers use the full register ranges (mostly saturating outputs)
    narrow = rng.random() < 0.6
    arg_bits, add_bits = (10, 12) if narrow else (23, 26)
    f = dict(
        depthwise=depthwise, src=src, dst=dst, ic=ic, oc=oc, iw=iw, ih=ih,
        ow=iw // stride, oh=ih // stride, ktype=ktype, pool=pool, pad=rng.randrange(256),
        shr_w=rng.randrange(8, 16) if narrow else rng.randrange(16),
        shr_x=rng.randrange(8, 16) if narrow else rng.randrange(16),
        arg_w=rng.randrange(-(1 << arg_bits), 1 << arg_bits),
        arg_x=rng.randrange(-(1 << arg_bits), 1 << arg_bits),
        arg_add=rng.randrange(-(1 << add_bits), 1 << add_bits),
    )  # fmt: skip
    k = 3 if ktype else 1
    n_w = oc * k * k * (1 if depthwise else ic)
    weights = bytes(rng.randrange(256) for _ in range(n_w))
    mul_bits = 4 if narrow else 12
    bn = b"".join(
        struct.pack(
            "<Q",
            (rng.randrange(-(1 << mul_bits), 1 << mul_bits) & 0xFFFFFF)
            | (
                (
                    rng.randrange(-(1 << (9 if narrow else 31)), 1 << (9 if narrow else 31))
                    & 0xFFFFFFFF
                )
                << 24
            )
            | ((15 if narrow else rng.randrange(16)) << 56),
        )
        for _ in range(oc)
    )
    act = act_table(rng, sorted(rng.sample(range(-(1 << 30), 1 << 30), 15)), narrow)
    return f, pack_regs(f), weights, bn, act


def act_table(rng: random.Random, starts: list[int], narrow: bool = True) -> bytes:
    """Segment 0 at -2**35 (as compilers write it) then the 15 given starts; narrow
    tables use small multipliers and shifts so that rounding ties (fraction exactly one
    half) occur inside the u8 range."""
    mul_bits = 4 if narrow else 15
    words = [
        (rng.choice([1, 2, 3]) if narrow else rng.randrange(40))
        | ((rng.randrange(-(1 << mul_bits), 1 << mul_bits) & 0xFFFF) << 8)
        | ((s & ((1 << 36) - 1)) << 24)
        for s in [1 << 35, *starts]
    ]
    return struct.pack("<16Q", *words) + bytes(rng.randrange(256) for _ in range(16))


def align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def build_v3(layers: list, out_size: int) -> bytes:
    """A V3 kmodel of K210_CONV layers; the last one writes its map to main memory."""
    header_len = 28 + 8 + 8 * len(layers)
    bodies, offset = [], header_len
    for n, (_f, regs, weights, bn, act) in enumerate(layers):
        last = n == len(layers) - 1
        body_start = offset
        regs_at = align(body_start + 24, 8)
        w_at = align(regs_at + 96, 128)
        bn_at = align(w_at + len(weights), 128)
        act_at = align(bn_at + len(bn), 256)
        end = align(act_at + 144, 8)
        body = bytearray(end - body_start)
        struct.pack_into("<6I", body, 0, int(last), 0, regs_at, w_at, bn_at, act_at)
        for at, blob in ((regs_at, regs), (w_at, weights), (bn_at, bn), (act_at, act)):
            body[at - body_start : at - body_start + len(blob)] = blob
        bodies.append(bytes(body))
        offset = end
    head = struct.pack("<7I", 3, 1, 0, len(layers), 0, max(out_size, 8), 1)
    head += struct.pack("<2I", 0, out_size)
    head += b"".join(struct.pack("<2I", 10240, len(b)) for b in bodies)
    return head + b"".join(bodies)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("rules", [kpu.TieRules(), kpu.TieRules(">=", "sdk")])
def test_random_v3_models_match_scalar_reference(seed: int, rules: kpu.TieRules) -> None:
    rng = random.Random(seed)
    ic = rng.randrange(1, 5)
    shape = (ic, rng.randrange(4, 13), rng.choice([4, 7, 16, 17, 31, 33, 40]))
    layers, src = [], rng.randrange(0, 64)
    for _ in range(rng.randrange(1, 3)):
        dst = src + 100 + rng.randrange(20)
        layer = random_layer(rng, shape, src, dst, rng.randrange(1, 6))
        layers.append(layer)
        f = layer[0]
        shape, src = (f["oc"], f["oh"], f["ow"]), dst
    f0 = layers[0][0]
    n_in = f0["ic"] * f0["ih"] * f0["iw"]
    x = np.array([rng.randrange(256) for _ in range(n_in)], dtype=np.uint8)
    x = x.reshape(1, f0["ic"], f0["ih"], f0["iw"])

    ram = bytearray(kpu.KPU_RAM_SIZE)
    for c in range(f0["ic"]):
        for y in range(f0["ih"]):
            for xx in range(f0["iw"]):
                ram[f0["src"] * 64 + ref_address(c, y, xx, f0["ih"], f0["iw"])] = x[0, c, y, xx]
    # put the first layer's segment boundaries on values its batch norm produces
    seen: list[int] = []
    f, regs, weights, bn, _act = layers[0]
    ref_layer(bytearray(ram), regs, weights, bn, _act, rules, seen)
    values = sorted(set(seen))
    if len(values) >= 15:
        layers[0] = (f, regs, weights, bn, act_table(rng, sorted(rng.sample(values, 15))))
    for _f, regs, weights, bn, act in layers:
        ref_layer(ram, regs, weights, bn, act, rules)
    fl = layers[-1][0]
    expect = np.array(
        [
            ram[fl["dst"] * 64 + ref_address(c, y, xx, fl["oh"], fl["ow"])]
            for c in range(fl["oc"])
            for y in range(fl["oh"])
            for xx in range(fl["ow"])
        ],
        dtype=np.uint8,
    ).reshape(1, fl["oc"], fl["oh"], fl["ow"])

    model = load(build_v3(layers, int(expect.size)))
    (got,) = model.run([x], segment=rules.segment, rounding=rules.rounding)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got.reshape(expect.shape), expect)


def test_kpu_ram_layout_matches_address_formula() -> None:
    rng = np.random.default_rng(1)
    for c, h, w in [(5, 3, 7), (3, 4, 16), (3, 2, 17), (5, 2, 32), (2, 3, 33), (2, 2, 130)]:
        ram = kpu.KpuRam()
        fmap = rng.integers(0, 256, (c, h, w), dtype=np.uint8)
        ram.write_map(10, fmap)
        for ci in range(c):
            for y in range(h):
                for x in range(w):
                    assert ram.data[640 + ref_address(ci, y, x, h, w)] == fmap[ci, y, x]
        assert np.count_nonzero(ram.data) <= fmap.size
        np.testing.assert_array_equal(ram.read_map(10, c, h, w), fmap)


def test_round_shift_rules_differ_on_negative_values() -> None:
    v = np.array([-5, -3, -1, 5, 6, 7], dtype=np.int64)
    for rule in ("nncase", "sdk"):
        got = kpu.round_shift(v, np.full(6, 2), rule)
        assert list(got) == [ref_shift_round(int(a), 2, rule) for a in v]
    assert kpu.round_shift(np.array([-5]), np.array([2]), "nncase")[0] == -3  # quirk kept


def _layer_with(
    rng: random.Random,
    ic: int,
    oc: int,
    hw: tuple[int, int],
    mul_bits: int = 4,
    bn_shift: int = 15,
    **regs,
):
    """A 3x3 layer over (ic, *hw) at row 0 -> row 200 with the given register values
    (BN multipliers below 2**mul_bits, BN shift bn_shift)."""
    h, w = hw
    f = dict(depthwise=0, src=0, dst=200, ic=ic, oc=oc, iw=w, ih=h, ow=w, oh=h, ktype=1,
             pool=0, pad=rng.randrange(256), shr_w=8, arg_w=rng.randrange(-999, 999),
             arg_add=rng.randrange(-9999, 9999))  # fmt: skip
    f.update(regs)
    weights = bytes(rng.randrange(256) for _ in range(oc * ic * 9 // (ic if f["depthwise"] else 1)))
    bn = b"".join(
        struct.pack(
            "<Q",
            rng.randrange(1, 1 << mul_bits)
            | ((rng.randrange(512) & 0xFFFFFFFF) << 24)
            | bn_shift << 56,
        )
        for _ in range(oc)
    )
    act = act_table(rng, sorted(rng.sample(range(-(1 << 20), 1 << 20), 15)))
    return f, pack_regs(f), weights, bn, act


def _input_at_row0(rng: random.Random, ic: int, hw: tuple[int, int]):
    """A random (1, ic, *hw) u8 input and a scalar-reference KPU RAM holding it at row 0."""
    x = np.array([rng.randrange(256) for _ in range(ic * hw[0] * hw[1])], np.uint8)
    x = x.reshape(1, ic, *hw)
    ram = bytearray(kpu.KPU_RAM_SIZE)
    for c in range(ic):
        for y in range(hw[0]):
            for xx in range(hw[1]):
                ram[ref_address(c, y, xx, *hw)] = x[0, c, y, xx]
    return x, ram


def _map_at_row200(ram: bytearray, c: int, h: int, w: int) -> np.ndarray:
    """The (1, c, h, w) map the scalar reference left at KPU row 200."""
    flat = [ram[200 * 64 + ref_address(ci, y, xx, h, w)]
            for ci in range(c) for y in range(h) for xx in range(w)]  # fmt: skip
    return np.array(flat, np.uint8).reshape(1, c, h, w)


@pytest.mark.parametrize(
    "case",
    [
        # arg_x a multiple of 2**shr_x: folded into the weights; 360 taps -> chunked BLAS
        dict(ic=40, oc=2, hw=(4, 4), arg_x=100 << 15, shr_x=15, path=(True, "chunks", "float64")),
        # folded, one float32 BLAS call (the common case of real models)
        dict(ic=3, oc=4, hw=(6, 20), arg_x=-130 << 15, shr_x=15, path=(True, "one", "float32")),
        # folded with a huge offset: even one product passes 2**24, float64 BLAS
        dict(ic=2, oc=3, hw=(5, 5), arg_x=-(1 << 22) + 5, shr_x=0, path=(True, "f64", "float64")),
        # not a multiple: input sums and a float64 accumulator
        dict(ic=8, oc=2, hw=(4, 6), arg_x=(1 << 23) - 77, shr_x=3, path=(False, "one", "float64")),
        # depthwise, folded
        dict(
            ic=3,
            oc=3,
            hw=(5, 17),
            arg_x=-5 << 4,
            shr_x=4,
            depthwise=1,
            path=(True, "one", "float32"),
        ),
    ],
)
@pytest.mark.parametrize("gather", [True, False])
def test_conv_arithmetic_paths_match_scalar_reference(
    case: dict, gather: bool, monkeypatch
) -> None:
    """Each exact-arithmetic path of kpu.convolve (folded x offset, chunked / float64
    BLAS, gathered or sliced im2col) against the scalar reference."""
    if not gather:
        monkeypatch.setattr(kpu, "_GATHER_MAX", 0)
    rng = random.Random(str(case))
    regs = dict(case)
    ic, oc, hw, path = regs.pop("ic"), regs.pop("oc"), regs.pop("hw"), regs.pop("path")
    layer = _layer_with(rng, ic, oc, hw, **regs)
    f = layer[0]
    x, ram = _input_at_row0(rng, ic, hw)
    ref_layer(ram, *layer[1:], kpu.TieRules())
    expect = _map_at_row200(ram, f["oc"], *hw)
    model = load(build_v3([layer], int(expect.size)))
    conv = next(iter(model._convs.values()))
    taps = conv.weights[0].size
    chunking = "f64" if conv.chunk == 0 else "chunks" if conv.chunk < taps else "one"
    assert (conv.x_fold is not None, chunking, conv.acc_dtype.__name__) == path
    (got,) = model.run([x])
    np.testing.assert_array_equal(got.reshape(expect.shape), expect)


def monotone_act(rng: random.Random, starts: list[int], shift: int) -> bytes:
    """A non-decreasing activation: each piece starts at or above where the previous
    one ended (its bias is the previous end + 1), slopes m / 2**shift with 0 <= m < 8."""
    muls = [0] + [rng.randrange(0, 8) for _ in starts]
    bias, points = [0], [-(1 << 35), *starts]
    for i in range(1, 16):
        end = ((points[i] - points[i - 1]) * muls[i - 1]) >> shift if i > 1 else 0
        bias.append(min(255, bias[-1] + end + 1))
    words = [
        shift | ((m & 0xFFFF) << 8) | ((s & ((1 << 36) - 1)) << 24)
        for s, m in zip(points, muls, strict=True)
    ]
    return struct.pack("<16Q", *words) + bytes(bias)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("rules", [kpu.TieRules(), kpu.TieRules(">=", "sdk")])
def test_monotone_activation_fast_paths_match_scalar_reference(seed: int, rules) -> None:
    """The fused paths (step lookup, max pooling before BN, AffineLookup) on monotone
    activations whose segment starts sit on BN values that occur (ties)."""
    rng = random.Random(seed)
    ic, hw = rng.randrange(1, 5), (rng.choice([4, 6, 8]), rng.choice([8, 16, 20, 40]))
    pool_type = [0, 1, 5, 9, 2, 6, 0, 3][seed]
    # odd seeds: activation thresholds spread over more than 2**16 BN values (coarse bins
    # wider than one value, so the lookup's comparison steps decide); seeds 3 and 7: BN
    # shift 0, so BN values fall exactly on thresholds inside those bins (ties)
    mul_bits, bn_shift, act_shift = [(4, 15, 1), (4, 15, 12), (2, 0, 16)][
        seed % 2 + (seed % 4 == 3)
    ]
    layer = _layer_with(rng, ic, rng.randrange(1, 5), hw, mul_bits, bn_shift, pool=pool_type,
                        arg_x=-rng.randrange(200) << 15, shr_x=15)  # fmt: skip
    f, regs, weights, bn, _act = layer
    _, stride = kpu.POOL_GEOMETRY[pool_type]
    f["oh"], f["ow"] = hw[0] // stride, hw[1] // stride
    regs = pack_regs(f)
    x, ram = _input_at_row0(rng, ic, hw)
    seen: list[int] = []
    ref_layer(bytearray(ram), regs, weights, bn, _act, rules, seen)
    act = monotone_act(rng, sorted(rng.sample(sorted(set(seen)), 15)), act_shift)
    layer = (f, regs, weights, bn, act)
    ref_layer(ram, regs, weights, bn, act, rules)
    expect = _map_at_row200(ram, f["oc"], f["oh"], f["ow"])
    model = load(build_v3([layer], int(expect.size)))
    conv = next(iter(model._convs.values()))
    look, affine = kpu.step_lookup(conv, rules), kpu.affine_lookup(conv, rules)
    assert look is not None  # a fused path is the one tested: AffineLookup, or the
    if look.steps is None:  # binary search when thresholds cluster (then no affine)
        assert affine is None
    else:
        assert affine is not None and (len(affine.bounds) > 0) == bool(seed % 2)
    (got,) = model.run([x], segment=rules.segment, rounding=rules.rounding)
    np.testing.assert_array_equal(got.reshape(expect.shape), expect)
    assert len(set(got.reshape(-1).tolist())) > 2  # not a saturated, trivial output


@pytest.mark.parametrize("rules", [kpu.TieRules(), kpu.TieRules(">=", "sdk")])
def test_fast_path_ignores_activation_segments_no_bn_value_reaches(rules) -> None:
    """A decreasing piece beyond the largest BN value the layer can produce (real V3
    tables have such tail segments) keeps the fused path, with identical results; the
    same piece inside the reachable range turns it off."""
    rng = random.Random(15)
    ic, hw = 3, (8, 16)
    layer = _layer_with(rng, ic, 2, hw, 4, 15, pool=0, arg_x=-rng.randrange(200) << 15, shr_x=15)
    f, regs, weights, bn, _act = layer
    f["oh"], f["ow"] = hw
    regs = pack_regs(f)
    x, ram = _input_at_row0(rng, ic, hw)
    seen: list[int] = []
    ref_layer(bytearray(ram), regs, weights, bn, _act, rules, seen)
    base = monotone_act(rng, sorted(rng.sample(sorted(set(seen)), 15)), 1)
    words = list(struct.unpack("<16Q", base[:128]))

    def with_last_piece(start: int) -> bytes:
        mul = -3 & 0xFFFF  # decreasing
        w = words[:]
        w[15] = 1 | (mul << 8) | ((start & ((1 << 36) - 1)) << 24)
        return struct.pack("<16Q", *w) + base[128:]

    far = with_last_piece(1 << 34)
    ref_layer(ram, regs, weights, bn, far, rules)
    expect = _map_at_row200(ram, f["oc"], f["oh"], f["ow"])
    model = load(build_v3([(f, regs, weights, bn, far)], int(expect.size)))
    conv = next(iter(model._convs.values()))
    assert conv.bn_range[1] < 1 << 34
    assert kpu.step_lookup(conv, rules) is not None
    (got,) = model.run([x], segment=rules.segment, rounding=rules.rounding)
    np.testing.assert_array_equal(got.reshape(expect.shape), expect)
    near = with_last_piece(conv.bn_range[1] - 1)  # reachable: not monotone any more
    conv_near = next(
        iter(load(build_v3([(f, regs, weights, bn, near)], int(expect.size)))._convs.values())
    )
    assert kpu.step_lookup(conv_near, rules) is None


@pytest.mark.parametrize("pool_type", [1, 3, 9])
@pytest.mark.parametrize("dtype", [np.uint8, np.float32])
def test_max_pool_matches_window_by_window_maximum(pool_type: int, dtype) -> None:
    """Max pooling (computed separably, rows then columns) against each window's max,
    on odd sizes where windows run past the edge (those taps never win)."""
    win, stride = kpu.POOL_GEOMETRY[pool_type]
    rng = np.random.default_rng(pool_type)
    fmap = rng.integers(0, 256, (3, 7, 9)).astype(dtype)
    oh, ow = -(-7 // stride), -(-9 // stride)
    got = kpu.pool(fmap, pool_type, (oh, ow))
    want = np.empty((3, oh, ow), dtype)
    for y in range(oh):
        for x in range(ow):
            window = fmap[:, y * stride : y * stride + win, x * stride : x * stride + win]
            want[:, y, x] = window.max(axis=(1, 2))
    np.testing.assert_array_equal(got, want)
