"""The SHA256 and AES accelerators (docs/simulator.md, "The SHA-256 engine").

SHA256: software pads the message and tells the engine how many 64-byte blocks follow
(``sha_num_reg.data_cnt``, 16 bits); it then feeds 32-bit words to ``sha_data_in1`` and
reads the digest from ``sha_result`` (word 7-i holds digest bytes 4i..4i+3,
little-endian), once ``function_reg_0.sha_en`` reads back 1. With ``sha_endian`` set the
bytes of a word are taken in memory (little-endian) order. The engine only compresses.

The words come either from the core (PIO: stores to ``sha_data_in1``, what the Kendryte
standalone SDK does) or, with ``function_reg_1.dma_en`` set, from a DMAC channel routed to
request SHA_RX (memory -> ``sha_data_in1``, fixed, 32-bit items, hardware handshake, what
the Kendryte FreeRTOS SDK's driver does: it arms the channel with the whole padded
message, bursts of 16 items, then sets ``dma_en``, waits for the channel and then for
``sha_en``). The engine asks for words while ``dma_en`` is set and it still expects some
(``data_cnt`` blocks); a DMA block may carry any part of the message (inferred: no
source says whether one message may span several DMA blocks; the model allows it).
Timing (chosen, not measured: no public figure): a 64-byte block takes
:data:`BLOCK_CYCLES` APB0 cycles, the DMAC's 16 bus writes and the 64 rounds; the words
of a DMA block are taken evenly at that rate from the time both the channel is armed
and ``dma_en`` is set. Anything else (a block longer than the words the engine still
expects, another peripheral address or item width, bursts over 16 items, a restart
while a channel feeds the engine) halts the board.

The digest is computed when ``sha_result`` is read, not per block: the bytes fed are
kept, and when they end in a correct SHA-256 padding of their own length (what software
feeds) ``hashlib`` gives the state; otherwise the model runs the compression function
itself (:func:`sha256_compress`, FIPS 180-4), from the last state it knows.

AES: flashers and stage-2 programs do not use it (the ROM decrypts boot images itself,
modelled in :mod:`kflashpy.sim.rom`), so it is a register file that reports "finished"
and "tag ok" and passes data through unchanged. Programs that need real AES results on the
virtual board are not supported.
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Callable

from ..target import k210
from .dmac import CTL, Channel
from .periph import RegisterFile

_K = (
    0x428A2F98, 0x71374491, 0xB5C0FBCF, 0xE9B5DBA5, 0x3956C25B, 0x59F111F1, 0x923F82A4, 0xAB1C5ED5,
    0xD807AA98, 0x12835B01, 0x243185BE, 0x550C7DC3, 0x72BE5D74, 0x80DEB1FE, 0x9BDC06A7, 0xC19BF174,
    0xE49B69C1, 0xEFBE4786, 0x0FC19DC6, 0x240CA1CC, 0x2DE92C6F, 0x4A7484AA, 0x5CB0A9DC, 0x76F988DA,
    0x983E5152, 0xA831C66D, 0xB00327C8, 0xBF597FC7, 0xC6E00BF3, 0xD5A79147, 0x06CA6351, 0x14292967,
    0x27B70A85, 0x2E1B2138, 0x4D2C6DFC, 0x53380D13, 0x650A7354, 0x766A0ABB, 0x81C2C92E, 0x92722C85,
    0xA2BFE8A1, 0xA81A664B, 0xC24B8B70, 0xC76C51A3, 0xD192E819, 0xD6990624, 0xF40E3585, 0x106AA070,
    0x19A4C116, 0x1E376C08, 0x2748774C, 0x34B0BCB5, 0x391C0CB3, 0x4ED8AA4A, 0x5B9CCA4F, 0x682E6FF3,
    0x748F82EE, 0x78A5636F, 0x84C87814, 0x8CC70208, 0x90BEFFFA, 0xA4506CEB, 0xBEF9A3F7, 0xC67178F2,
)  # fmt: skip
_H0 = (
    0x6A09E667,
    0xBB67AE85,
    0x3C6EF372,
    0xA54FF53A,
    0x510E527F,
    0x9B05688C,
    0x1F83D9AB,
    0x5BE0CD19,
)
_M = 0xFFFF_FFFF


def _rotr(x: int, n: int) -> int:
    return ((x >> n) | (x << (32 - n))) & _M


def sha256_compress(state: tuple[int, ...], block: bytes) -> tuple[int, ...]:
    """One SHA-256 compression of a 64-byte block (FIPS 180-4 §6.2.2)."""
    w = list(struct.unpack(">16I", block))
    for i in range(16, 64):
        s0 = _rotr(w[i - 15], 7) ^ _rotr(w[i - 15], 18) ^ (w[i - 15] >> 3)
        s1 = _rotr(w[i - 2], 17) ^ _rotr(w[i - 2], 19) ^ (w[i - 2] >> 10)
        w.append((w[i - 16] + s0 + w[i - 7] + s1) & _M)
    a, b, c, d, e, f, g, h = state
    for i in range(64):
        t1 = (
            h + (_rotr(e, 6) ^ _rotr(e, 11) ^ _rotr(e, 25)) + ((e & f) ^ (~e & g)) + _K[i] + w[i]
        ) & _M
        t2 = ((_rotr(a, 2) ^ _rotr(a, 13) ^ _rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) & _M
        a, b, c, d, e, f, g, h = (t1 + t2) & _M, a, b, c, (d + t1) & _M, e, f, g
    return tuple((x + y) & _M for x, y in zip(state, (a, b, c, d, e, f, g, h), strict=True))


RESULT, DATA_IN, NUM_REG, FUNC0, FUNC1 = 0x00, 0x20, 0x28, 0x2C, 0x34
#: APB0 cycles per 64-byte block fed by DMA (chosen, see the module docstring): 0.66 us at
#: the flasher's 195 MHz, about 97 MB/s
BLOCK_CYCLES = 128
_DATA_IN_ADDRESS = k210.PERIPHERALS["sha256"].base + DATA_IN


def unpadded_length(m: bytes | bytearray) -> int | None:
    """The length of the message whose SHA-256 padding ``m`` ends in (0x80, zeros, the
    64-bit big-endian bit length, to a multiple of 64 bytes), or None if it does not."""
    if not m or len(m) % 64:
        return None
    bits = int.from_bytes(m[-8:], "big")
    n = bits >> 3
    if bits & 7 or (n + 9 + 63) // 64 * 64 != len(m) or m[n] != 0x80:
        return None
    return n if not any(m[n + 1 : -8]) else None


class ShaEngine(RegisterFile):
    """SHA256 accelerator at 0x502C_0000, fed by the core or by DMA (request SHA_RX)."""

    #: test-only fault on the DMA mode: "stall" (the engine never asks for a word) or
    #: "swap" (DMA words taken in the other byte order): a board whose DMA mode differs
    #: from the model's, for the flasher's own check (docs/flasher-protocol.md)
    dma_fault: str | None = None

    def __init__(
        self,
        now: Callable[[], float] = lambda: 0.0,
        hz: Callable[[], float] = lambda: 195e6,
    ) -> None:
        super().__init__("sha256")
        self._now = now
        self._hz = hz
        self.dma_blocks = 0  # 64-byte blocks fed by DMA since power-up (counted for tests)
        self.compressed = 0  # blocks the Python compression function ran (not hashlib)
        self._ch: Channel | None = None  # the DMA channel armed on SHA_RX
        self._flow_t = 0.0  # when the DMA words began to flow at the engine's rate ...
        self._flow_n = 0  # ... and how many the channel had moved then
        self._start()

    def _start(self) -> None:
        self._msg = bytearray()  # every byte fed since sha_en, in SHA-256 order
        self._state: tuple[int, ...] = _H0
        self._state_blocks = 0  # blocks _state covers
        self._shown = -1  # blocks the result registers show
        self._publish()

    # ------------------------------------------------------------------ MMIO
    def read(self, offset: int, size: int) -> int:
        if self._ch is not None:
            self.dma_sync(self._now())
        if offset < DATA_IN:
            self._show_digest()
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        if self._ch is not None:
            self.dma_sync(self._now())
        if offset == DATA_IN:
            self._feed((value & _M).to_bytes(4, "little" if self._endian_mem() else "big"))
            return
        was_flowing = self._flowing()
        super().write(offset, size, value)
        if offset == FUNC0 and value & 1:
            if was_flowing:
                self._refuse("function_reg_0.sha_en written while DMA feeds the engine")
                return
            self._start()
        else:
            self._publish()
            if not was_flowing:
                self._flow_begin()

    def _endian_mem(self) -> bool:
        return bool(self.regs[FUNC0 + 2] & 1)

    def _feed(self, data: bytes) -> None:
        self._msg += data
        self._publish()

    def _publish(self) -> None:
        """The block count (sha_num_reg.data_num) and the done bit (sha_en reads 1)."""
        done = len(self._msg) // 64
        count = self.word(NUM_REG) & 0xFFFF
        self.set_word(NUM_REG, count | (done & 0xFFFF) << 16)
        self.regs[FUNC0] = (self.regs[FUNC0] & ~1) | (1 if done >= count else 0)

    def _show_digest(self) -> None:
        """Bring sha_result up to the blocks fed (computed only when it is read)."""
        blocks = len(self._msg) // 64
        if blocks == self._shown:
            return
        if blocks != self._state_blocks:
            m = bytes(memoryview(self._msg)[: 64 * blocks])  # no export kept: _msg grows
            n = unpadded_length(m)
            if n is not None:  # software's padded message: hashlib, in C
                self._state = struct.unpack(">8I", hashlib.sha256(m[:n]).digest())
            else:
                for b in range(self._state_blocks, blocks):
                    self._state = sha256_compress(self._state, m[64 * b : 64 * b + 64])
                    self.compressed += 1
            self._state_blocks = blocks
        digest = struct.pack(">8I", *self._state)
        for i in range(8):
            self.regs[RESULT + 4 * (7 - i) : RESULT + 4 * (8 - i)] = digest[4 * i : 4 * i + 4]
        self._shown = blocks

    # ------------------------------------------------------------------ DMA
    def _expected(self) -> int:
        """Words the engine still asks for (data_cnt blocks in all)."""
        return max(0, 16 * (self.word(NUM_REG) & 0xFFFF) - len(self._msg) // 4)

    def _flowing(self) -> bool:
        return self._ch is not None and bool(self.regs[FUNC1] & 1) and self.dma_fault != "stall"

    def _word_time(self) -> float:
        return BLOCK_CYCLES / 16 / self._hz()

    def _flow_begin(self) -> None:
        """The channel is armed and dma_en set (in either order): words flow from now."""
        ch = self._ch
        if ch is None or not self._flowing():
            return
        self._flow_t, self._flow_n = self._now(), ch.moved
        if ch.remaining > self._expected():
            self._refuse(
                f"a DMA block of {ch.remaining} words while sha_num_reg.data_cnt leaves"
                f" {self._expected()} to take (not modelled)"
            )
            return
        if math.isfinite(self.dma_due()):
            ch.dmac.end_slice(True)  # the next slice stops at the block's end

    def _refuse(self, why: str) -> None:
        ch = self._ch
        if ch is not None:
            ch.dmac.refuse(f"sha256 (DMA channel {ch.n}): {why}")

    def dma_arm(self, channel: Channel) -> str | None:
        if channel.to_memory:
            return "SHA_RX serves memory -> peripheral transfers (TT_FC 1) only"
        if channel.prf_address != _DATA_IN_ADDRESS or not channel.prf_fixed:
            fixed = "fixed" if channel.prf_fixed else "incrementing"
            return (
                f"DAR=0x{channel.prf_address:08x} ({fixed}): the destination must be"
                f" sha_data_in1, 0x{_DATA_IN_ADDRESS:08x}, fixed (CTL.DINC = 1)"
            )
        if channel.width != 4:
            return f"items of {channel.width} bytes (the engine takes 32-bit words)"
        msize = channel.reg(CTL) >> 18 & 0xF
        if msize > 3:
            return f"DST_MSIZE {msize}: bursts over 16 items (not modelled)"
        self._ch = channel
        self._flow_begin()
        return None

    def dma_sync(self, now: float) -> None:
        ch = self._ch
        if ch is None or not self._flowing():
            return
        word, end = self._word_time(), self.dma_due()
        if now >= end:  # the whole block (exactly, whatever the float rounding)
            count, at = ch.remaining, end
        else:
            count = self._flow_n + int((now - self._flow_t) / word) - ch.moved
            if count <= 0:
                return
            at = self._flow_t + (ch.moved + count - self._flow_n) * word
        raw = ch.take_raw(count, at)  # 32-bit words (dma_arm); may complete: disarms
        if (self.dma_fault == "swap") == self._endian_mem():  # each word's bytes reversed
            raw = struct.pack(f">{count}I", *struct.unpack(f"<{count}I", raw))
        self.dma_blocks += (len(self._msg) % 64 + len(raw)) // 64
        self._feed(raw)

    def dma_due(self) -> float:
        ch = self._ch
        if ch is None or not self._flowing():
            return math.inf
        return self._flow_t + (ch.moved + ch.remaining - self._flow_n) * self._word_time()

    def dma_disarm(self, channel: Channel) -> None:
        self._ch = None


class AesEngine(RegisterFile):
    """AES accelerator at 0x5045_0000: registers only (see the module docstring)."""

    FINISH, TAG_CHK, DATA_IN_FLAG, OUT_DATA, DATA_OUT_FLAG = 0x2C, 0x48, 0x4C, 0x60, 0x68

    def __init__(self) -> None:
        super().__init__("aes")
        self._last = 0

    def read(self, offset: int, size: int) -> int:
        if offset in (self.FINISH, self.DATA_IN_FLAG, self.DATA_OUT_FLAG):
            return 1
        if offset == self.TAG_CHK:
            return 2
        if offset == self.OUT_DATA:
            return self._last
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        if offset == 0x40:  # aes_text_data
            self._last = value & _M
        super().write(offset, size, value)
