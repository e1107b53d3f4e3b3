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
