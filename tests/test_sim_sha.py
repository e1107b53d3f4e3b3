"""The SHA-256 engine model (kflashpy/sim/crypto.py): PIO and DMA feeding (request
SHA_RX), its computed timing, the lazy digest (hashlib for a correctly padded message,
the compression function otherwise), the loud halts, and the test-only faults."""

from __future__ import annotations

import hashlib
import math
import random
import struct

import pytest
from test_sim_dmac import W32, Rig

from kflashpy.sim import crypto
from kflashpy.sim.crypto import BLOCK_CYCLES, ShaEngine, unpadded_length
from kflashpy.sim.dmac import CH_INTSTATUS, CHEN
from kflashpy.sim.memory import SRAM_BASE
from kflashpy.target import k210

NUM, FUNC0, FUNC1, DATA_IN = 0x28, 0x2C, 0x34, 0x502C_0020
HZ = 195e6
WORD = BLOCK_CYCLES / 16 / HZ  # seconds per DMA word
SHA_CFG = 1 << 32 | 3 << 44  # memory -> peripheral, hardware handshake, interface 3
SHA_CTL = W32 | 1 << 6 | 3 << 14 | 3 << 18  # DAR fixed, bursts of 16 items


def pad(m: bytes) -> bytes:
    return m + b"\x80" + bytes(-(len(m) + 9) % 64) + struct.pack(">Q", 8 * len(m))


def digest(sha: ShaEngine) -> bytes:
    return b"".join(sha.read(4 * (7 - i), 4).to_bytes(4, "little") for i in range(8))


def pio(sha: ShaEngine, data: bytes, blocks: int) -> None:
    sha.write(NUM, 4, blocks)
    sha.write(FUNC0, 4, 1 | 1 << 16)  # start, bytes in memory order
    for (word,) in struct.iter_unpack("<I", data):
        sha.write(0x20, 4, word)


@pytest.mark.parametrize("n", [0, 1, 55, 56, 63, 64, 119, 120, 1000])
def test_unpadded_length_recognises_exactly_a_padded_message(n: int) -> None:
    m = random.Random(n).randbytes(n)
    p = bytearray(pad(m))
    assert unpadded_length(p) == n
    for spoil in (n, len(p) - 9, len(p) - 1):  # the 0x80, a zero, the length
        if spoil > n or spoil == n:
            q = bytearray(p)
            q[spoil] ^= 0x40
            assert unpadded_length(q) is None
    assert unpadded_length(p + bytes(64)) is None and unpadded_length(p[:-1]) is None


def test_pio_digest_by_hashlib_and_by_the_compression_function(monkeypatch) -> None:
    """A padded message takes the fast path; the compression function gives the same
    digest (and the intermediate states, read between blocks)."""
    m = random.Random(1).randbytes(300)
    p = pad(m)
    sha = ShaEngine()
    pio(sha, p, len(p) // 64)
    assert sha.read(FUNC0, 4) & 1 and digest(sha) == hashlib.sha256(m).digest()
    assert sha.compressed == 0
    monkeypatch.setattr(crypto, "unpadded_length", lambda m: None)
    slow = ShaEngine()
    pio(slow, p[:128], len(p) // 64)
    assert not slow.read(FUNC0, 4) & 1  # two of five blocks
    assert slow.read(NUM, 4) >> 16 == 2
    digest(slow)
    assert slow.compressed == 2
    for (word,) in struct.iter_unpack("<I", p[128:]):
        slow.write(0x20, 4, word)
    assert digest(slow) == hashlib.sha256(m).digest() and slow.compressed == len(p) // 64


def dma_rig(fault: str | None = None) -> tuple[Rig, ShaEngine]:
    rig = Rig()
    sha = ShaEngine(lambda: rig.t, lambda: HZ)
    sha.dma_fault = fault
    rig.sel[0x64] = k210.DMA_REQUEST["sha_rx"] << 18  # interface 3
    rig.dmac.endpoints[k210.DMA_REQUEST["sha_rx"]] = sha
    return rig, sha


def test_dma_feeds_the_engine_at_its_rate_in_one_or_several_blocks() -> None:
    """The FreeRTOS SDK's order (channel armed, then dma_en) and the other one; a message
    in two DMA blocks; words flow at BLOCK_CYCLES APB0 cycles per 64 bytes."""
    m = random.Random(2).randbytes(4096 + 70)
    p = pad(m)
    rig, sha = dma_rig()
    rig.sram.write(SRAM_BASE, p)
    sha.write(NUM, 4, len(p) // 64)
    sha.write(FUNC0, 4, 1 | 1 << 16)
    rig.t = 1.0
    rig.single(3, SRAM_BASE, DATA_IN, 1024, SHA_CTL, SHA_CFG)
    assert rig.dmac.due() == math.inf  # dma_en not set yet: the engine asks for nothing
    rig.t = 2.0
    sha.write(FUNC1, 4, 1)
    assert rig.dmac.due() == pytest.approx(2.0 + 1024 * WORD)
    rig.t = 2.0 + 512.5 * WORD
    assert sha.read(NUM, 4) >> 16 == 32 and not sha.read(FUNC0, 4) & 1
    rig.t = 2.0 + 1024 * WORD
    assert rig.r(rig.ch(3, CH_INTSTATUS)) & 2 and sha.dma_blocks == 64
    rig.t = 3.0  # dma_en still set: the next block flows from the time it is armed
    rig.single(3, SRAM_BASE + 4096, DATA_IN, (len(p) - 4096) // 4, SHA_CTL, SHA_CFG)
    rig.t = 3.0 + (len(p) - 4096) // 4 * WORD
    assert sha.read(FUNC0, 4) & 1
    assert digest(sha) == hashlib.sha256(m).digest() and sha.compressed == 0
    assert sha.dma_blocks == len(p) // 64 and rig.halts == []


@pytest.mark.parametrize(
    ("what", "ctl", "cfg", "dar", "message"),
    [
        ("longer", SHA_CTL, SHA_CFG, DATA_IN, "sha_num_reg.data_cnt leaves 16"),
        ("address", SHA_CTL, SHA_CFG, DATA_IN + 4, "must be sha_data_in1"),
        ("incrementing", SHA_CTL & ~(1 << 6), SHA_CFG, DATA_IN, "(incrementing)"),
        ("width", SHA_CTL & ~(7 << 8 | 7 << 11) | 3 << 8 | 3 << 11, SHA_CFG, DATA_IN, "8 bytes"),
        ("burst", SHA_CTL | 4 << 18, SHA_CFG, DATA_IN, "bursts over 16"),
        ("direction", SHA_CTL, 2 << 32 | 3 << 39, DATA_IN, "memory -> peripheral"),
    ],
)
def test_what_the_model_does_not_know_halts(what, ctl, cfg, dar, message) -> None:
    rig, sha = dma_rig()
    sha.write(NUM, 4, 1)
    sha.write(FUNC0, 4, 1 | 1 << 16)
    sha.write(FUNC1, 4, 1)
    src, items = (dar, 32) if what == "direction" else (SRAM_BASE, 32 if what == "longer" else 16)
    rig.single(
        3,
        src if what != "direction" else DATA_IN,
        SRAM_BASE if what == "direction" else dar,
        items,
        ctl,
        cfg,
    )
    assert len(rig.halts) == 1 and message in rig.halts[0]


def test_restarting_the_engine_while_dma_feeds_it_halts() -> None:
    rig, sha = dma_rig()
    sha.write(NUM, 4, 2)
    sha.write(FUNC0, 4, 1 | 1 << 16)
    sha.write(FUNC1, 4, 1)
    rig.single(3, SRAM_BASE, DATA_IN, 32, SHA_CTL, SHA_CFG)
    sha.write(FUNC0, 4, 1 | 1 << 16)
    assert len(rig.halts) == 1 and "sha_en written while DMA feeds" in rig.halts[0]


@pytest.mark.parametrize("fault", ["stall", "swap"])
def test_test_only_faults(fault: str) -> None:
    m = b"abc" * 30
    p = pad(m)
    rig, sha = dma_rig(fault)
    rig.sram.write(SRAM_BASE, p)
    sha.write(NUM, 4, len(p) // 64)
    sha.write(FUNC0, 4, 1 | 1 << 16)
    rig.single(3, SRAM_BASE, DATA_IN, len(p) // 4, SHA_CTL, SHA_CFG)
    sha.write(FUNC1, 4, 1)
    rig.t = 1.0
    if fault == "stall":
        assert rig.dmac.due() == math.inf and rig.r(CHEN) & 8 and sha.dma_blocks == 0
    else:
        assert sha.read(FUNC0, 4) & 1 and digest(sha) != hashlib.sha256(m).digest()
