"""The SHA256 and AES accelerators (docs/simulator.md, "The core and the peripherals").

SHA256: software pads the message and tells the engine how many 64-byte blocks follow
(``sha_num_reg.data_cnt``); it then writes 32-bit words to ``sha_data_in1`` and reads the
digest from ``sha_result`` (word 7-i holds digest bytes 4i..4i+3, little-endian), once
``function_reg_0.sha_en`` reads back 1. With ``sha_endian`` set the bytes of a word are
taken in memory (little-endian) order. The engine only compresses, so the model does the
SHA-256 compression function itself.

AES: flashers and stage-2 programs do not use it (the ROM decrypts boot images itself,
modelled in :mod:`kflashpy.sim.rom`), so it is a register file that reports "finished"
and "tag ok" and passes data through unchanged. Programs that need real AES results on the
virtual board are not supported.
"""

from __future__ import annotations

import struct

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


class ShaEngine(RegisterFile):
    """SHA256 accelerator at 0x502C_0000 (PIO mode)."""

    def __init__(self) -> None:
        super().__init__("sha256")
        self._start()

    def _start(self) -> None:
        self._state: tuple[int, ...] = _H0
        self._buf = bytearray()
        self._done_blocks = 0

    def write(self, offset: int, size: int, value: int) -> None:
        if offset == DATA_IN:
            endian_mem = self.regs[FUNC0 + 2] & 1
            self._buf += (value & _M).to_bytes(4, "little" if endian_mem else "big")
            while len(self._buf) >= 64:
                self._state = sha256_compress(self._state, bytes(self._buf[:64]))
                del self._buf[:64]
                self._done_blocks += 1
            self._publish()
            return
        super().write(offset, size, value)
        if offset == FUNC0 and value & 1:
            self._start()
            self._publish()

    def _publish(self) -> None:
        digest = struct.pack(">8I", *self._state)
        for i in range(8):
            self.regs[RESULT + 4 * (7 - i) : RESULT + 4 * (8 - i)] = digest[4 * i : 4 * i + 4]
        count = self.word(NUM_REG) & 0xFFFF
        self.set_word(NUM_REG, count | (self._done_blocks & 0xFFFF) << 16)
        done = self._done_blocks >= count
        self.regs[FUNC0] = (self.regs[FUNC0] & ~1) | (1 if done else 0)


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
