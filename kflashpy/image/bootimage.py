"""The K210 boot image: what the mask ROM loads from flash address 0.

Layout (all that the ROM checks)::

    offset 0      1 byte   flag: bit0 = payload is AES-128-CBC encrypted (OTP key),
                                 bit1 = DIO (dual-SPI) flash read mode
    offset 1      4 bytes  u32 little-endian length N of the payload as stored
    offset 5      N bytes  payload (the firmware, or its ciphertext)
    offset 5+N   32 bytes  SHA-256 of bytes [0, 5+N): flag + length + payload

So a wrapped image is ``37`` bytes longer than its payload (:data:`OVERHEAD`). The ROM
copies the payload to 0x80000000, checks the hash and jumps; a bad hash makes it print
"boot failed with exit code 233".

Why DIO is the default: kflash.py 1.1.6 and kflash_gui (the tools most users have)
set bit1 unless told ``--iomode qio``, and their author reports that DIO "has better
compatibility" while QIO is faster; an image made by kflashpy is therefore byte-identical
to the one those tools burn. Pass ``dio=False`` for the flag byte older tools wrote (0x00).

AES: the ROM decrypts with the 128-bit key held in the chip's OTP. The plaintext is
padded with zero bytes to whole 16-byte blocks, encrypted in CBC mode with an all-zero
IV, and the length field holds the ciphertext length. Nothing in the image says how
long the firmware was before padding, so :func:`unwrap_boot_image` returns the padded
plaintext.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

from ..errors import FormatError, KeyMaterialError
from ..target import k210

__all__ = [
    "FLAG_AES",
    "FLAG_DIO",
    "HEADER_SIZE",
    "OVERHEAD",
    "BootImage",
    "aes_padded_size",
    "parse_boot_image",
    "probe_boot_image",
    "unwrap_boot_image",
    "wrap_boot_image",
    "wrapped_size",
]

FLAG_AES = 0x01
FLAG_DIO = 0x02
#: flag byte + u32 length
HEADER_SIZE = 5
#: header + SHA-256 trailer
OVERHEAD = HEADER_SIZE + 32
#: the payload is copied to SRAM (general + AI SRAM)
MAX_PAYLOAD = k210.SRAM_SIZE
AES_BLOCK = 16


def aes_padded_size(n: int) -> int:
    """Size of ``n`` plaintext bytes after zero padding to whole AES blocks."""
    return -(-n // AES_BLOCK) * AES_BLOCK


def wrapped_size(payload_size: int, aes: bool = False) -> int:
    """Bytes a payload of ``payload_size`` occupies in flash once wrapped."""
    return (aes_padded_size(payload_size) if aes else payload_size) + OVERHEAD


def _check_key(key: bytes) -> None:
    if len(key) != 16:
        raise KeyMaterialError(
            f"AES key has {len(key)} bytes; the K210 OTP key is exactly 16 bytes (128 bits)",
            "give 32 hex digits, or a 16-byte key file",
        )


def _aes_cbc(key: bytes, data: bytes, encrypt: bool) -> bytes:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    cipher = Cipher(algorithms.AES(key), modes.CBC(bytes(AES_BLOCK)))
    ctx = cipher.encryptor() if encrypt else cipher.decryptor()
    return ctx.update(data) + ctx.finalize()


def wrap_boot_image(payload: bytes, *, key: bytes | None = None, dio: bool = True) -> bytes:
    """Wrap a raw firmware ``payload`` into the boot image the ROM loads.

    ``key`` (16 bytes) encrypts the payload for a chip whose OTP holds that key; such
    an image does not start on any other chip. ``dio`` sets the DIO flag bit (see the
    module docstring for why it is the default).
    """
    flag = FLAG_DIO if dio else 0
    body = bytes(payload)
    if key is not None:
        _check_key(key)
        flag |= FLAG_AES
        body = _aes_cbc(key, body + bytes(aes_padded_size(len(body)) - len(body)), True)
    if len(body) > 0xFFFFFFFF:
        raise FormatError(
            f"firmware of {len(body)} bytes does not fit the u32 length field",
            "a K210 firmware is a few MiB at most; check the input file",
        )
    head = struct.pack("<BI", flag, len(body)) + body
    return head + hashlib.sha256(head).digest()


@dataclass(frozen=True)
class BootImage:
    """A parsed boot image. ``payload`` is as stored (ciphertext when ``aes``)."""

    flag: int
    payload: bytes
    sha_valid: bool
    #: bytes after the SHA-256 trailer (e.g. the rest of a flash dump)
    trailing: int = 0

    @property
    def aes(self) -> bool:
        return bool(self.flag & FLAG_AES)

    @property
    def dio(self) -> bool:
        return bool(self.flag & FLAG_DIO)

    @property
    def size(self) -> int:
        """Bytes of the image in flash (payload + 37)."""
        return len(self.payload) + OVERHEAD

    @property
    def unknown_flag_bits(self) -> int:
        return self.flag & ~(FLAG_AES | FLAG_DIO)


def probe_boot_image(data: bytes) -> BootImage | None:
    """Read ``data`` as a boot image if its structure allows it, else ``None``.

    The structure is plausible when the length field fits inside ``data`` and the flag
    byte has no unknown bits. The SHA may still be wrong (``sha_valid`` says so): a
    corrupted image is still worth reporting as an image.
    """
    if len(data) < OVERHEAD:
        return None
    flag, n = struct.unpack_from("<BI", data)
    if flag & ~(FLAG_AES | FLAG_DIO) or n == 0 or n > MAX_PAYLOAD:
        return None
    if HEADER_SIZE + n + 32 > len(data) or (flag & FLAG_AES and n % AES_BLOCK):
        return None
    end = HEADER_SIZE + n
    digest = hashlib.sha256(memoryview(data)[:end]).digest()
    return BootImage(
        flag=flag,
        payload=bytes(data[HEADER_SIZE:end]),
        sha_valid=digest == bytes(data[end : end + 32]),
        trailing=len(data) - end - 32,
    )


def parse_boot_image(data: bytes, name: str = "image") -> BootImage:
    """Strictly parse a boot image; :class:`FormatError` names what is wrong."""
    if len(data) < OVERHEAD:
        raise FormatError(
            f"{name}: {len(data)} bytes is too short for a boot image (at least {OVERHEAD})",
            "is this a raw firmware .bin? it is wrapped when burned, not before",
        )
    flag, n = struct.unpack_from("<BI", data)
    if flag & ~(FLAG_AES | FLAG_DIO):
        raise FormatError(
            f"{name}: flag byte 0x{flag:02X} has bits other than AES (0x01) and DIO (0x02)",
            "this does not look like a K210 boot image",
        )
    if HEADER_SIZE + n + 32 > len(data):
        raise FormatError(
            f"{name}: length field says {n} payload bytes but only "
            f"{max(0, len(data) - OVERHEAD)} follow the header",
            "the file is truncated or not a boot image",
        )
    image = probe_boot_image(data)
    if image is None:
        raise FormatError(
            f"{name}: length field {n} is not valid for this flag byte",
            "an AES image holds whole 16-byte blocks; a payload is at most 8 MiB",
        )
    return image


def unwrap_boot_image(
    data: bytes, *, key: bytes | None = None, name: str = "image", check_sha: bool = True
) -> bytes:
    """Return the firmware inside a boot image (decrypted when ``key`` is given).

    Raises :class:`FormatError` when the SHA-256 does not match (unless ``check_sha``
    is False) and :class:`KeyMaterialError` when an encrypted image has no key.
    """
    image = parse_boot_image(data, name)
    if check_sha and not image.sha_valid:
        raise FormatError(
            f"{name}: SHA-256 trailer does not match the image (the ROM would refuse to boot it)",
            "the image is corrupted; pass check_sha=False (CLI: --no-check) to extract anyway",
        )
    if not image.aes:
        return image.payload
    if key is None:
        raise KeyMaterialError(
            f"{name}: the payload is AES-encrypted",
            "give the key (--key-file, --key-env or --key-hex) to decrypt it",
        )
    _check_key(key)
    return _aes_cbc(key, image.payload, False)
