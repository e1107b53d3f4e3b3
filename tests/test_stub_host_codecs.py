"""The flasher's DEFLATE decoder and SHA-256, compiled for the host and checked in bulk.

On the virtual board each decode costs seconds of emulation; natively it costs
microseconds, so thousands of streams (every zlib strategy, stored/fixed/dynamic blocks,
damaged input) can be pushed through the very C source the flasher is built from. The
pinned ziglang compiles it for the host.
"""

from __future__ import annotations

import ctypes
import hashlib
import random
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import deflate_writer as dw

STUB = Path(__file__).resolve().parents[1] / "stub"
CAP = 65536
GUARD = 64


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    out = tmp_path_factory.mktemp("hostc")
    (out / "poll.c").write_text("void uart_poll(void) {}\n")
    so = out / "codecs.so"
    cmd = [sys.executable, "-m", "ziglang", "cc", "-shared", "-fPIC", "-O2", "-o", str(so)]
    cmd += [str(STUB / "inflate.c"), str(STUB / "sha256.c"), str(out / "poll.c")]
    subprocess.run(cmd, check=True, capture_output=True)
    return ctypes.CDLL(str(so))


def inflate(lib, stream: bytes, cap: int = CAP) -> bytes | None:
    """Decode with the flasher's inflate_raw; None when it reports an error. Fails the
    test if the decoder wrote past ``cap``."""
    out = ctypes.create_string_buffer(b"\xa5" * (cap + GUARD), cap + GUARD)
    n = ctypes.c_uint32(0)
    rc = lib.inflate_raw(stream, len(stream), out, 0, cap, ctypes.byref(n))
    assert out.raw[cap:] == b"\xa5" * GUARD, "decoder wrote past the output capacity"
    return None if rc else out.raw[: n.value]


def deflate(data: bytes, level: int = 9, strategy: int = zlib.Z_DEFAULT_STRATEGY) -> bytes:
    c = zlib.compressobj(level, zlib.DEFLATED, -15, 9, strategy)
    return c.compress(data) + c.flush()


def _samples() -> dict[str, bytes]:
    rng = random.Random(7)
    text = b" ".join(
        rng.choice([b"kpu", b"layer", b"conv2d", b"0x300000", b"flash"]) for _ in range(9000)
    )
    mixed = bytearray()
    while len(mixed) < CAP:
        mixed += rng.randbytes(700) if rng.random() < 0.4 else bytes([rng.randrange(3)]) * 900
    return {
        "random": rng.randbytes(CAP),  # stored blocks
        "text": text[:CAP],
        "mixed": bytes(mixed[:CAP]),
        "zeros": bytes(CAP),
        "one byte": b"x",
        "empty": b"",
        "weights": bytes(rng.randrange(120, 136) for _ in range(CAP)),  # skewed: long codes
    }


SAMPLES = _samples()
STRATEGIES = {
    "default": zlib.Z_DEFAULT_STRATEGY,
    "fixed": zlib.Z_FIXED,
    "huffman": zlib.Z_HUFFMAN_ONLY,
    "rle": zlib.Z_RLE,
    "filtered": zlib.Z_FILTERED,
}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", SAMPLES)
def test_inflate_matches_zlib_for_every_block_kind(lib, name, strategy):
    data = SAMPLES[name]
    for level in (0, 1, 6, 9):
        assert inflate(lib, deflate(data, level, STRATEGIES[strategy])) == data


def deflate_flushed(parts: list[bytes], level: int, strategy: int) -> bytes:
    """One stream, with a sync flush after each part: every flush ends the current
    block and adds an empty stored block, which must be read from a byte boundary
    right after Huffman-coded data (the decoder's look-ahead must give bytes back)."""
    c = zlib.compressobj(level, zlib.DEFLATED, -15, 9, strategy)
    out = b"".join(c.compress(p) + c.flush(zlib.Z_SYNC_FLUSH) for p in parts)
    return out + c.flush()


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(
        st.binary(max_size=1500) | st.lists(st.integers(0, 3), max_size=3000).map(bytes),
        min_size=1,
        max_size=4,
    ),
    level=st.integers(0, 9),
    strategy=st.sampled_from(sorted(STRATEGIES.values())),
)
def test_inflate_roundtrips_arbitrary_data(lib, parts, level, strategy):
    data = b"".join(parts)
    assert inflate(lib, deflate(data, level, strategy)) == data
    assert inflate(lib, deflate_flushed(parts, level, strategy)) == data


def test_output_larger_than_capacity_is_an_error(lib):
    data = SAMPLES["text"]
    assert inflate(lib, deflate(data), cap=len(data) - 1) is None
    assert inflate(lib, deflate(data), cap=len(data)) == data


def test_damaged_streams_are_errors_or_wrong_data_never_overruns(lib):
    """Truncation and bit flips: the decoder may report an error or return other bytes
    (the frame's CRC and the final SHA-256 catch those), but never writes out of bounds
    or reports the original data from a shortened stream."""
    rng = random.Random(11)
    for name in ("text", "mixed", "weights", "random"):
        stream = deflate(SAMPLES[name][:20000])
        for cut in (1, 2, len(stream) // 3, len(stream) - 1):
            assert inflate(lib, stream[:cut]) != SAMPLES[name][:20000]
        for _ in range(150):
            bad = bytearray(stream)
            for _ in range(rng.randrange(1, 4)):
                bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
            inflate(lib, bytes(bad))  # must return; the guard check runs inside


def test_garbage_is_rejected(lib):
    rng = random.Random(3)
    results = [inflate(lib, rng.randbytes(rng.randrange(1, 400))) for _ in range(500)]
    assert results.count(None) > 400  # random bytes are almost never a valid stream


class Sha(ctypes.Structure):
    _fields_ = [
        ("h", ctypes.c_uint32 * 8),
        ("total", ctypes.c_uint64),
        ("buf", ctypes.c_uint8 * 64),
    ]


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=5000), cuts=st.lists(st.integers(0, 5000), max_size=6))
def test_sha256_matches_hashlib_for_any_split(lib, data, cuts):
    s = Sha()
    lib.sha256_init(ctypes.byref(s))
    pos = 0
    for cut in sorted(c for c in cuts if c <= len(data)) + [len(data)]:
        part = data[pos:cut]
        lib.sha256_update(ctypes.byref(s), part, len(part))
        pos = max(pos, cut)
    digest = ctypes.create_string_buffer(32)
    lib.sha256_final(ctypes.byref(s), digest)
    assert digest.raw == hashlib.sha256(data).digest()


def inflate_after(lib, zdict: bytes, stream: bytes, cap: int = CAP) -> bytes | None:
    """Decode with ``zdict`` right in front of the output, as the flasher keeps the
    tail of the previous frame (docs/flasher-protocol.md, BC); None on an error."""
    out = ctypes.create_string_buffer(zdict + b"\xa5" * (cap + GUARD), len(zdict) + cap + GUARD)
    n = ctypes.c_uint32(0)
    start = ctypes.cast(ctypes.addressof(out) + len(zdict), ctypes.c_char_p)
    rc = lib.inflate_raw(stream, len(stream), start, len(zdict), cap, ctypes.byref(n))
    assert out.raw[: len(zdict)] == zdict, "decoder wrote into the dictionary"
    assert out.raw[len(zdict) + cap :] == b"\xa5" * GUARD, "decoder wrote past the capacity"
    return None if rc else out.raw[len(zdict) : len(zdict) + n.value]


@pytest.mark.parametrize("size", [1, 300, 4096, 32768])
def test_inflate_with_a_preset_dictionary_matches_zlib(lib, size):
    """A frame packed against the previous frame's tail decodes with that tail in front
    of the output: back references reach into it."""
    prev, data = SAMPLES["mixed"][:40000], SAMPLES["mixed"][40000:] + SAMPLES["text"][:9000]
    zdict = prev[-size:]
    c = zlib.compressobj(9, zlib.DEFLATED, -15, zdict=zdict)
    stream = c.compress(data) + c.flush()
    assert inflate_after(lib, zdict, stream) == data


def test_a_stream_reaching_before_its_dictionary_is_an_error(lib):
    """Back references reach no further than the dictionary: one that would is an
    error, not a read of whatever lies in front of it."""
    zdict = bytes(range(256)) * 4
    c = zlib.compressobj(9, zlib.DEFLATED, -15, zdict=zdict)
    stream = c.compress(zdict[:600]) + c.flush()  # all of it refers to the dictionary
    assert inflate_after(lib, zdict, stream) == zdict[:600]
    assert inflate_after(lib, zdict[-100:], stream) is None
    assert inflate(lib, stream) is None


def chosen_codes_stream(rng: random.Random, history: int, blocks: int, deep: float):
    """A stream of ``blocks`` dynamic blocks, each with a random complete code (codes
    up to 15 bits when ``deep`` is high) and random symbols of that code: literals and
    copies reaching back into ``history`` bytes of dictionary or the output so far."""
    bits, symbols_out = dw.Bits(), 0
    for b in range(blocks):
        literals = rng.sample(range(256), rng.randrange(1, 257))
        lengths = rng.sample(range(257, 286), rng.randrange(0, 30))
        dists = rng.sample(range(30), rng.randrange(1, 31))
        lit_len = dw.lengths_for(rng, literals + lengths + [256], 286, deep)
        dist_len = dw.lengths_for(rng, dists, 30, deep) if len(dists) > 1 else [0] * 30
        if len(dists) == 1:
            dist_len[dists[0]] = 1  # a lone distance code of one bit
        symbols = []
        for _ in range(rng.randrange(0, 300)):
            reach = history + symbols_out
            usable = [d for d in dists if dw.DISTANCES[d][0] <= reach]
            if lengths and usable and rng.random() < 0.5:
                ls, ds = rng.choice(lengths), rng.choice(usable)
                base, extra = dw.LENGTHS[ls - 257]
                length = base + rng.randrange(1 << extra)
                length = length if ls == 285 else min(length, 257)  # 258: code 285
                dbase, dextra = dw.DISTANCES[ds]
                distance = min(reach, dbase + rng.randrange(1 << dextra))
                if symbols_out + length > CAP:
                    break
                symbols.append(("copy", length, distance))
                symbols_out += length
            elif symbols_out < CAP:
                symbols.append(("lit", rng.choice(literals)))
                symbols_out += 1
        dw.dynamic_block(bits, lit_len, dist_len, symbols, b == blocks - 1)
    return bits.bytes()


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    deep=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    blocks=st.integers(1, 3),
    history=st.sampled_from([0, 1, 300, 32768]),
)
def test_inflate_decodes_any_complete_code(lib, seed, deep, blocks, history):
    """Codes zlib's encoder never makes: up to 15 bits (second-level tables of every
    depth, the end of block and distances among the long codes), several blocks with
    different codes (no entry of one block's tables may survive into the next), a lone
    one-bit distance code; zlib decodes each stream too."""
    rng = random.Random(seed)
    zdict = rng.randbytes(history)
    stream = chosen_codes_stream(rng, history, blocks, deep)
    want = zlib.decompressobj(-15, zdict=zdict).decompress(stream) if zdict else None
    want = want if zdict else zlib.decompress(stream, -15)
    assert inflate_after(lib, zdict, stream) == want


def chain_lengths(symbols: list[int], size: int) -> list[int]:
    """The deepest code: lengths 1, 2, ..., 14, 15, 15 for the symbols in order."""
    lengths = [0] * size
    for i, s in enumerate(symbols):
        lengths[s] = min(i + 1, 15)
    return lengths


def test_fifteen_bit_codes_for_every_kind_of_symbol(lib):
    """End of block, a length code and a distance code of 15 bits, each behind a run of
    shorter codes: the longest codes the format has, all in second-level tables."""
    lit = chain_lengths([ord("a")] + list(range(1, 14)) + [285, 256], 286)
    dist = chain_lengths(list(range(1, 15)) + [0, 29], 30)
    syms = [("lit", ord("a"))] * 3 + [("lit", 13), ("copy", 258, 1), ("copy", 258, 4)]
    bits = dw.Bits()
    dw.dynamic_block(bits, lit, dist, syms, True)
    stream = bits.bytes()
    want = zlib.decompress(stream, -15)
    assert len(want) == 4 + 2 * 258
    assert inflate(lib, stream) == want
    zdict = bytes(range(256)) * 128  # 32 KiB: distance code 29 (24577+) reaches into it
    bits = dw.Bits()
    dw.dynamic_block(bits, lit, dist, [("copy", 258, 32768), ("copy", 258, 24577)], True)
    stream = bits.bytes()
    want = zlib.decompressobj(-15, zdict=zdict).decompress(stream)
    start = len(zdict) + 258 - 24577  # the second copy's start, counted in the dictionary
    assert inflate_after(lib, zdict, stream) == want == zdict[:258] + zdict[start : start + 258]


def one_block(symbols: list[tuple], dist: list[int], lit: list[int] | None = None) -> bytes:
    """The last block: the code lengths given, by default a complete code over every
    literal and length code (226 of 8 bits, 60 of 9)."""
    bits = dw.Bits()
    dw.dynamic_block(bits, lit or [8] * 226 + [9] * 60, dist, symbols, True)
    return bits.bytes()


#: a complete code over the 30 distance codes: 2 of 4 bits, 28 of 5
FLAT_DIST = [4] * 2 + [5] * 28


def test_copies_at_the_edges_of_the_buffer(lib):
    """A copy from exactly the first byte of the dictionary, one from a byte before it;
    a copy that ends exactly at the capacity, one that would end a byte past it."""
    dist = FLAT_DIST
    zdict = bytes(range(100))
    reach = one_block([("lit", 1)] * 5 + [("copy", 3, 105)], dist)
    assert inflate_after(lib, zdict, reach) == bytes([1] * 5) + zdict[:3]
    beyond = one_block([("lit", 1)] * 5 + [("copy", 3, 106)], dist)
    with pytest.raises(zlib.error):
        zlib.decompressobj(-15, zdict=zdict).decompress(beyond)
    assert inflate_after(lib, zdict, beyond) is None
    full = one_block([("lit", 7), ("lit", 8)] + [("copy", 258, 2)] * 3, dist)
    want = bytes([7, 8] * 388)
    assert zlib.decompress(full, -15) == want
    assert inflate(lib, full, cap=len(want)) == want
    assert inflate(lib, full, cap=len(want) - 1) is None
    assert inflate(lib, full, cap=len(want) - 258) is None


def test_incomplete_and_oversubscribed_codes_are_errors(lib):
    """Code lengths that leave codes unused (more than one lone one-bit code) or that
    give out more codes than exist: errors, never a table with holes read as symbols."""
    rng = random.Random(5)
    dist = FLAT_DIST
    for _ in range(50):
        syms = sorted(rng.sample(range(256), 60)) + [256]
        lit = dw.lengths_for(rng, syms, 286, 0.7)
        ok = one_block([("lit", syms[0])], dist, lit)
        assert inflate(lib, ok) == bytes([syms[0]])
        holes = list(lit)
        holes[syms[-2]] = 0  # one leaf fewer: incomplete
        oversubscribed = list(lit)
        oversubscribed[285] = max(lit)  # one leaf more
        for bad in (holes, oversubscribed):
            stream = one_block([("lit", syms[0])], dist, bad)
            with pytest.raises(zlib.error):
                zlib.decompress(stream, -15)
            assert inflate(lib, stream) is None


def test_damaged_long_code_streams_never_overrun(lib):
    """Bit flips and cuts in streams of long codes and copies into a dictionary: the
    damage lands in code lengths, second-level tables, distances; the decoder returns,
    leaves the dictionary and everything past the capacity untouched, and reports an
    error for a shortened stream (the last byte holds the end of the last block)."""
    rng = random.Random(13)
    for _ in range(40):
        history = rng.choice([0, 50, 32768])
        zdict = rng.randbytes(history)
        stream = chosen_codes_stream(rng, history, rng.randrange(1, 3), rng.random())
        good = inflate_after(lib, zdict, stream)
        assert good is not None
        for cut in (1, len(stream) // 2, len(stream) - 1):
            assert inflate_after(lib, zdict, stream[:cut]) is None  # its end of block is cut
        for _ in range(30):
            bad = bytearray(stream)
            for _ in range(rng.randrange(1, 4)):
                bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
            inflate_after(lib, zdict, bytes(bad), cap=rng.choice([CAP, len(good)]))
