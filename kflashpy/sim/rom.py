"""The K210 mask ROM, emulated in Python: ISP mode on UARTHS and normal boot from flash.

The ROM is part of the hardware, so it is modelled here; anything it boots (a stage-2
flasher, a RAM program) runs on the emulated core. Behaviour follows the hardware reference
(docs/simulator.md "The mask ROM", docs/protocol.md §4):

* ISP: SLIP frames on UARTHS at 115200 8N1. ``C2`` NOP (any length, CRC not checked, so
  the 13-byte legacy greeting works) -> ``C2 E0``; ``C3`` memory write (CRC-32 checked ->
  ``E2``; length field must match the data and be <= 1024 -> ``E1``; only SRAM outside the
  ROM's own 0x805F_8000..0x805F_FFFF area -> ``E1`` otherwise) -> ``C3 E0`` after the
  write; ``C5`` boot: no reply, the core starts at the address; ``C6`` baud: ``div =
  f_ROM / baud - 1`` on UARTHS (reply ``C6 E0`` still at the old rate); every other
  opcode (``C1`` echo and ``C4`` read included) -> ``E3``.
* Normal boot: flag byte + u32 LE length at flash 0, image at 5, SHA-256 of
  flag+length+image at 5+length. Bad length, bad hash or erased flash -> a failure
  message on UARTHS and ISP mode. Flag bit 0 -> AES-128-CBC decryption (IV 0) with the
  OTP key; a board whose OTP holds no key cannot start such an image.
"""

from __future__ import annotations

import hashlib
import struct

from kflashpy.isp.frames import ROM_MAX_CHUNK, RomOp, Status, parse_request
from kflashpy.isp.slip import SlipDecoder, encode

from ..target import k210
from .memory import GENERAL_SRAM_END, ROM_DATA, SRAM_ALIAS, SRAM_BASE, SRAM_SIZE
from .parts import BoardServices, BootResult
from .periph import ROM_CPU_HZ

ROM_CLOCK = ROM_CPU_HZ  # UARTHS runs from the CPU clock the ROM set up
ISP_BAUD = k210.ROM_BAUD
ROM_LATENCY = 30e-6  # frame handling time before the reply starts
FLASH_BOOT_RATE = 4_000_000  # bytes/s the ROM copies from flash (DIO read + SHA)
MAX_BOOT_IMAGE = ROM_DATA[0] - SRAM_BASE  # the image must not overwrite the ROM's data
BOOT_FAIL_TEXT = (
    b"interesting, something's wrong, boot failed with exit code 233, go to find your vendor.\r\n"
)


def uarths_div(clock: int, baud: int) -> int:
    """UARTHS divisor register value as the ROM and SDK compute it (16-bit)."""
    return max(0, clock // max(baud, 1) - 1) & 0xFFFF


def rom_writable(address: int, size: int) -> bool:
    """True when the ROM accepts a memory write to ``address..address+size``."""
    for base in (SRAM_BASE, SRAM_ALIAS):
        lo, hi = ROM_DATA[0] - SRAM_BASE + base, ROM_DATA[1] - SRAM_BASE + base
        end = address + size
        if base <= address and end <= base + SRAM_SIZE:
            return end <= lo or address >= hi
    return False


class MaskRom:
    """ISP command interpreter and flash boot loader of one board."""

    def __init__(self, board: BoardServices) -> None:
        self.board = board
        self._decoder = SlipDecoder()
        self.div = uarths_div(ROM_CLOCK, ISP_BAUD)
        self.frames = 0
        self.refused = 0
        self._written: tuple[int, int] | None = None  # SRAM offsets uploaded since reset

    @property
    def baud(self) -> float:
        """The rate UARTHS runs at: f_ROM / (div + 1)."""
        return ROM_CLOCK / (self.div + 1)

    def enter_isp(self) -> None:
        """Start listening, as the ROM does right after sampling IO16 low."""
        self._decoder.reset()
        self.div = uarths_div(ROM_CLOCK, ISP_BAUD)
        self._written = None

    def feed(self, data: bytes, t: float) -> None:
        """Bytes received on UARTHS whose last byte arrived at virtual time ``t``."""
        for frame in self._decoder.feed(data):
            self.frames += 1
            self._handle(frame, t + ROM_LATENCY)

    def _reply(self, op: int, status: int, t: float) -> None:
        if status not in (Status.OK, Status.DEFAULT):
            self.refused += 1
        self.board.board_transmit(encode(bytes((op & 0xFF, status))), t, self.baud)

    def _handle(self, frame: bytes, t: float) -> None:
        if len(frame) < 2:
            return
        op = frame[0] | frame[1] << 8
        if op == RomOp.NOP:
            self._reply(op, Status.OK, t)
            return
        if op not in (RomOp.MEMORY_WRITE, RomOp.MEMORY_BOOT, RomOp.BAUDRATE_SET):
            self._reply(op, Status.INVALID_COMMAND, t)
            return
        req = parse_request(frame)
        if req is None or req.data_len != len(req.data):
            self._reply(op, Status.BAD_DATA_LEN, t)
            return
        if not req.crc_ok:
            self._reply(op, Status.BAD_DATA_CHECKSUM, t)
            return
        if op == RomOp.MEMORY_WRITE:
            if len(req.data) > ROM_MAX_CHUNK or not rom_writable(req.address, len(req.data)):
                self._reply(op, Status.BAD_DATA_LEN, t)
                return
            self.board.sram.write(req.address, req.data)
            lo = self.board.sram.offset(req.address, len(req.data))
            assert lo is not None  # rom_writable checked the range
            hi = lo + len(req.data)
            if self._written is not None:
                lo, hi = min(lo, self._written[0]), max(hi, self._written[1])
            self._written = (lo, hi)
            self._reply(op, Status.OK, t + len(req.data) * 20e-9)
        elif op == RomOp.MEMORY_BOOT:
            self.board.start_core(req.address, t)
        else:  # BAUDRATE_SET
            if len(req.data) != 4:
                self._reply(op, Status.BAD_DATA_LEN, t)
                return
            (baud,) = struct.unpack("<I", req.data)
            self._reply(op, Status.OK, t)
            self.div = uarths_div(ROM_CLOCK, baud)
            self._decoder.reset()

    def written_range(self, entry: int) -> tuple[int, int]:
        """The uploaded code as an address range in the 0x8000_0000 view (for the core's
        instruction scan); the boot image when booting from flash."""
        lo, hi = self._written or (0, 0)
        start = self.board.sram.offset(entry, 1)
        if start is not None:
            lo, hi = (min(lo, start), max(hi, start + 4)) if self._written else (start, start + 4)
        return SRAM_BASE + (lo & ~3), SRAM_BASE + min(SRAM_SIZE, (hi + 3) & ~3)

    def boot_from_flash(self) -> BootResult:
        """Load, check and (if flagged) decrypt the boot image into SRAM."""
        flash = self.board.flash
        if flash is None:
            return BootResult(False, "no flash")
        head = bytes(flash.read(0, 5))
        flag, length = head[0], struct.unpack_from("<I", head, 1)[0]
        duration = 1e-3 + (length + 37) / FLASH_BOOT_RATE
        if length == 0 or length > MAX_BOOT_IMAGE or 5 + length + 32 > flash.size:
            return BootResult(False, f"bad image length 0x{length:X}", 1e-3)
        body = bytes(flash.read(5, length))
        stored = bytes(flash.read(5 + length, 32))
        if hashlib.sha256(head + body).digest() != stored:
            return BootResult(False, "SHA-256 mismatch", duration, length=length)
        encrypted = bool(flag & 1)
        if encrypted:
            key = self.board.config.otp_key
            if key is None:
                return BootResult(
                    False, "encrypted image, no OTP key", duration, True, length, True
                )
            body = aes_cbc_decrypt(key, body)
        self.board.sram.write(SRAM_BASE, body[: GENERAL_SRAM_END - SRAM_BASE])
        self._written = (0, len(body))
        return BootResult(True, "booted", duration, encrypted, length)


def aes_cbc_decrypt(key: bytes, data: bytes) -> bytes:
    """AES-128-CBC with a zero IV, as the ROM decrypts (whole blocks only)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    whole = len(data) - len(data) % 16
    dec = Cipher(algorithms.AES(key), modes.CBC(bytes(16))).decryptor()
    return dec.update(data[:whole]) + dec.finalize() + data[whole:]
