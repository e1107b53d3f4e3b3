"""Request and response packets of the K210 ISP protocol (inside SLIP frames).

Request, little-endian: ``op u16 | reserved u16 | crc32 u32 | address u32 |
data_len u32 | data``; the CRC-32 (IEEE, as :func:`zlib.crc32`) covers bytes 8..end.
Response: ``op u8 | status u8 | extra...``. Opcode and status values follow
``docs/protocol.md``; the constants here are the single source for the client and
the virtual board's mask ROM.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum

from ..target import k210

HEADER = struct.Struct("<HHIII")  # op, reserved, crc, address, data_len
HEADER_SIZE = HEADER.size  # 16

ROM_MAX_CHUNK = k210.ROM_MAX_WRITE
STAGE2_MAX_CHUNK = 65536  # the kflash-family stubs' receive buffer


class RomOp(IntEnum):
    """Mask-ROM ISP opcodes (stage 1, UARTHS, 115200 baud)."""

    ECHO = 0xC1
    NOP = 0xC2
    MEMORY_WRITE = 0xC3
    MEMORY_READ = 0xC4
    MEMORY_BOOT = 0xC5
    BAUDRATE_SET = 0xC6
    DEBUG_INFO = 0xD1


class FlashOp(IntEnum):
    """kflash-compatible stage-2 opcodes (the meaning shared by every kflash stub)."""

    DEBUG_INFO = 0xD1
    NOP = 0xD2
    FLASH_ERASE = 0xD3
    FLASH_WRITE = 0xD4
    REBOOT = 0xD5
    UARTHS_BAUDRATE_SET = 0xD6
    FLASH_INIT = 0xD7
    # PyPI kflash 1.1.6 stub only (ktool's stub gives these other meanings)
    FLASH_ERASE_NONBLOCKING = 0xD8
    FLASH_STATUS = 0xD9


class Status(IntEnum):
    """Second byte of a response."""

    DEFAULT = 0x00  # the ROM may answer a memory write with 00; hosts treat it as OK
    OK = 0xE0
    BAD_DATA_LEN = 0xE1
    BAD_DATA_CHECKSUM = 0xE2
    INVALID_COMMAND = 0xE3
    BAD_INIT = 0xE4
    BAD_ERASE = 0xE5
    BAD_WRITE = 0xE6
    FLASH_BUSY = 0xE7


#: keyed by the raw status byte (a Status is an int), so unknown bytes look up too
STATUS_TEXT: dict[int, str] = {
    Status.DEFAULT: "ok (ROM default)",
    Status.OK: "ok",
    Status.BAD_DATA_LEN: "bad data length",
    Status.BAD_DATA_CHECKSUM: "bad data checksum",
    Status.INVALID_COMMAND: "invalid command",
    Status.BAD_INIT: "flash initialisation failed",
    Status.BAD_ERASE: "erase failed",
    Status.BAD_WRITE: "write failed",
    Status.FLASH_BUSY: "flash busy",
}


def crc32(data: bytes) -> int:
    """CRC-32 as the protocol uses it (IEEE, reflected, as zlib computes it)."""
    return zlib.crc32(data) & 0xFFFFFFFF


def build_request(
    op: int, address: int = 0, data: bytes = b"", data_len: int | None = None
) -> bytes:
    """Build a full request packet (not yet SLIP-encoded) with a valid CRC.

    ``data_len`` defaults to ``len(data)``; parameter-only commands pass a value in it
    with empty ``data``.
    """
    length = len(data) if data_len is None else data_len
    body = struct.pack("<II", address & 0xFFFFFFFF, length & 0xFFFFFFFF) + data
    return struct.pack("<HHI", op, 0, crc32(body)) + body


def legacy_short_request(op: int) -> bytes:
    """The 13-byte frame body every legacy host sends for NOP/STATUS/REBOOT.

    Its CRC and length are zero and it is 3 bytes short of a header; ROM and stubs
    accept it for those opcodes. Kept for compatibility tests and as a fallback.
    """
    return bytes((op,)) + bytes(12)


@dataclass(frozen=True)
class Request:
    """A parsed request packet, as a device sees it."""

    op: int
    reserved: int
    crc: int
    address: int
    data_len: int
    data: bytes

    @property
    def crc_ok(self) -> bool:
        return crc32(struct.pack("<II", self.address, self.data_len) + self.data) == self.crc


def parse_request(packet: bytes) -> Request | None:
    """Parse a request; ``None`` when it is shorter than the 16-byte header."""
    if len(packet) < HEADER_SIZE:
        return None
    op, reserved, crc, address, data_len = HEADER.unpack_from(packet)
    return Request(op, reserved, crc, address, data_len, bytes(packet[HEADER_SIZE:]))


@dataclass(frozen=True)
class Response:
    """A parsed response: echoed opcode, status, and any extra bytes."""

    op: int
    status: int
    extra: bytes = b""

    @property
    def ok(self) -> bool:
        return self.status in (Status.OK, Status.DEFAULT)

    def describe(self) -> str:
        text = STATUS_TEXT.get(self.status, "unknown status")
        return f"op 0x{self.op:02X} status 0x{self.status:02X} ({text})"


def build_response(op: int, status: int, extra: bytes = b"") -> bytes:
    return bytes((op & 0xFF, status & 0xFF)) + extra


def parse_response(packet: bytes) -> Response | None:
    """Parse a response; ``None`` if it is too short to hold op and status."""
    if len(packet) < 2:
        return None
    return Response(packet[0], packet[1], bytes(packet[2:]))
