"""Sealed containers: authenticated encryption of models (or any file) at rest and in transit.

A vendor seals a model (or a whole kfpkg) with a 256-bit master key; only a holder
of the key can unseal it, on the host or on a MaixPy board (the MicroPython helper
``kflashpy/model/board/kseal.py`` implements the same algorithm with ``ucryptolib``
and ``uhashlib``). The construction is encrypt-then-MAC, because MaixPy offers
hardware AES-CBC and SHA-256 but its GCM does not check tags:

* per-file random ``salt`` (16 B) and ``iv`` (16 B);
* ``enc_key = HMAC-SHA256(master, "kflashpy-seal-v1 enc" || salt)``,
  ``mac_key = HMAC-SHA256(master, "kflashpy-seal-v1 mac" || salt)``;
* ``ciphertext = AES-256-CBC(enc_key, iv, PKCS#7(plaintext))``;
* ``tag = HMAC-SHA256(mac_key, header || ciphertext)`` (the header contains the IV).

The byte layout is in docs/sealed-model.md. Keys never appear in messages, logs,
``repr`` or exceptions; the ``key_id`` stored in the header is an HMAC of a constant
(it tells "wrong key" apart from "tampered" without revealing anything about the key).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import struct
from dataclasses import dataclass

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from ..errors import FormatError, IntegrityError, KeyMaterialError, UsageError
from ..keys import load_key

__all__ = [
    "MAGIC",
    "HEADER_SIZE",
    "TAG_SIZE",
    "KEY_SIZE",
    "DEFAULT_KEY_ENV",
    "CONTENT_TYPES",
    "SealHeader",
    "is_sealed",
    "read_header",
    "seal_bytes",
    "unseal_bytes",
    "key_id",
    "load_seal_key",
    "new_key",
]

MAGIC = b"KFPYSEAL"
VERSION = 1
SUITE_AES256CBC_HS256 = 1
KEY_SIZE = 32
SALT_SIZE = 16
IV_SIZE = 16
KEY_ID_SIZE = 8
TAG_SIZE = 32
BLOCK = 16
#: magic, version, suite, content type, reserved, plaintext length, salt, key id, iv
_HEADER = struct.Struct("<8sBBBBI16s8s16s")
HEADER_SIZE = _HEADER.size  # 56
DEFAULT_KEY_ENV = "KFLASHPY_SEAL_KEY"
CONTENT_TYPES = {0: "data", 1: "kmodel", 2: "kfpkg", 3: "firmware", 4: "maixhub-model"}
_LABEL_ENC = b"kflashpy-seal-v1 enc"
_LABEL_MAC = b"kflashpy-seal-v1 mac"
_LABEL_ID = b"kflashpy-seal-v1 key-id"
_NOT_SEALED_HINT = "seal files with `kflashpy model seal`"


@dataclass(frozen=True)
class SealHeader:
    """The public (authenticated, not secret) part of a sealed container."""

    version: int
    suite: int
    content_type: int
    plaintext_size: int
    salt: bytes
    key_id: bytes
    iv: bytes
    ciphertext_size: int

    @property
    def content(self) -> str:
        return CONTENT_TYPES.get(self.content_type, f"unknown({self.content_type})")

    def to_dict(self) -> dict[str, object]:
        return {
            "version": self.version,
            "suite": "AES-256-CBC + HMAC-SHA-256",
            "content": self.content,
            "plaintext_size": self.plaintext_size,
            "ciphertext_size": self.ciphertext_size,
            "key_id": self.key_id.hex(),
        }


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def _check_key(key: bytes) -> None:
    if not isinstance(key, bytes | bytearray) or len(key) != KEY_SIZE:
        raise KeyMaterialError(
            f"seal key must be {KEY_SIZE} bytes (256 bits)",
            "create one with `kflashpy model keygen KEYFILE`",
        )


def key_id(key: bytes) -> bytes:
    """8-byte identifier of a master key (safe to show: an HMAC of a constant)."""
    _check_key(key)
    return _hmac(key, _LABEL_ID)[:KEY_ID_SIZE]


def _derive(key: bytes, salt: bytes) -> tuple[bytes, bytes]:
    return _hmac(key, _LABEL_ENC + salt), _hmac(key, _LABEL_MAC + salt)


def content_type_of(data: bytes, name: str | None = None) -> int:
    """Guess the content type recorded in the header (informational only)."""
    from .detect import detect

    sig = detect(data, name)
    if sig is not None:
        return 4 if sig.opaque else 1
    if data[:4] == b"PK\x03\x04":
        return 2
    return 0


def is_sealed(data: bytes) -> bool:
    """True when ``data`` starts with the sealed-container magic."""
    return bytes(data[: len(MAGIC)]) == MAGIC


def seal_bytes(
    plaintext: bytes,
    key: bytes,
    *,
    content_type: int | None = None,
    name: str | None = None,
    salt: bytes | None = None,
    iv: bytes | None = None,
) -> bytes:
    """Seal ``plaintext`` with the 32-byte master ``key``; returns the container bytes.

    ``content_type`` (see :data:`CONTENT_TYPES`) defaults to a guess from the content
    and ``name``. ``salt``/``iv`` are for reproducible tests only: leave them None.
    Works on any bytes (a kmodel, a MaixHub model passed through opaque, a kfpkg).
    """
    _check_key(key)
    plaintext = bytes(plaintext)
    if len(plaintext) >= 1 << 32:
        raise UsageError("cannot seal 4 GiB or more", "split the data")
    salt = os.urandom(SALT_SIZE) if salt is None else salt
    iv = os.urandom(IV_SIZE) if iv is None else iv
    if len(salt) != SALT_SIZE or len(iv) != IV_SIZE:
        raise UsageError("salt and iv must be 16 bytes each", "leave salt and iv as None")
    ctype = content_type_of(plaintext, name) if content_type is None else content_type
    enc_key, mac_key = _derive(bytes(key), salt)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    enc = Cipher(algorithms.AES(enc_key), modes.CBC(iv)).encryptor()
    ciphertext = enc.update(padded) + enc.finalize()
    header = _HEADER.pack(MAGIC, VERSION, SUITE_AES256CBC_HS256, ctype, 0, len(plaintext),
                          salt, key_id(bytes(key)), iv)  # fmt: skip
    return header + ciphertext + _hmac(mac_key, header + ciphertext)


def read_header(blob: bytes, source: str = "sealed file") -> SealHeader:
    """Parse and sanity-check the header (no key needed; nothing is authenticated yet)."""
    blob = bytes(blob)
    if not is_sealed(blob):
        raise FormatError(
            f"{source}: not a kflashpy sealed container (bad magic)", _NOT_SEALED_HINT
        )
    if len(blob) < HEADER_SIZE + BLOCK + TAG_SIZE:
        raise IntegrityError(
            f"{source}: truncated: {len(blob)} bytes, a sealed container has at least "
            f"{HEADER_SIZE + BLOCK + TAG_SIZE}",
            "copy the complete file again",
        )
    _m, ver, suite, ctype, _res, size, salt, kid, iv = _HEADER.unpack_from(blob)
    if ver != VERSION or suite != SUITE_AES256CBC_HS256:
        raise FormatError(
            f"{source}: sealed container version {ver} suite {suite} is not supported "
            f"(this kflashpy reads version {VERSION} suite {SUITE_AES256CBC_HS256})",
            "upgrade kflashpy",
        )
    ct_size = len(blob) - HEADER_SIZE - TAG_SIZE
    if ct_size % BLOCK or size // BLOCK + 1 != ct_size // BLOCK:
        raise IntegrityError(
            f"{source}: truncated or tampered: {ct_size} ciphertext bytes do not match "
            f"the recorded size {size}",
            "copy the complete file again; if it persists the file was modified",
        )
    return SealHeader(ver, suite, ctype, size, salt, kid, iv, ct_size)


def unseal_bytes(blob: bytes, key: bytes, source: str = "sealed file") -> bytes:
    """Verify and decrypt a sealed container; returns the plaintext.

    Raises :class:`~kflashpy.errors.IntegrityError` for a wrong key, any modified
    byte or a truncated file (the tag is checked before anything is decrypted), and
    :class:`~kflashpy.errors.FormatError` when the data is not a sealed container.
    """
    _check_key(key)
    blob = bytes(blob)
    head = read_header(blob, source)
    if not hmac.compare_digest(head.key_id, key_id(bytes(key))):
        raise IntegrityError(
            f"{source}: sealed with a different key (key id {head.key_id.hex()}, "
            f"yours {key_id(bytes(key)).hex()})",
            "use the key the file was sealed with",
        )
    enc_key, mac_key = _derive(bytes(key), head.salt)
    body, tag = blob[:-TAG_SIZE], blob[-TAG_SIZE:]
    if not hmac.compare_digest(_hmac(mac_key, body), tag):
        raise IntegrityError(
            f"{source}: authentication failed: the file was modified or truncated",
            "do not use this file; get an intact copy from its sender",
        )
    dec = Cipher(algorithms.AES(enc_key), modes.CBC(head.iv)).decryptor()
    padded = dec.update(blob[HEADER_SIZE:-TAG_SIZE]) + dec.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        plain = unpadder.update(padded) + unpadder.finalize()
    except ValueError:  # impossible once the tag matched, unless the sealer was faulty
        raise IntegrityError(
            f"{source}: bad padding after decryption", "re-seal the file"
        ) from None
    if len(plain) != head.plaintext_size:
        raise IntegrityError(
            f"{source}: decrypted size differs from the header", "re-seal the file"
        )
    return plain


# --- keys ---------------------------------------------------------------------------

_HEX = re.compile(r"^(?:0x)?([0-9a-fA-F]*)$")


def load_seal_key(
    *,
    hex_text: str | None = None,
    file: str | os.PathLike[str] | None = None,
    env: str | None = None,
) -> bytes:
    """The 32-byte master key from exactly one source: a file (32 raw bytes or 64 hex
    digits), an environment variable (hex) or hex text. Never echoes the key."""
    key = load_key(hex_text=hex_text, file=file, env=env, size=KEY_SIZE, what="seal key")
    if key is None:
        raise UsageError(
            "no seal key given",
            f"use --key-file FILE, --key-env NAME (default {DEFAULT_KEY_ENV}) or --key-hex",
        )
    return key


def new_key() -> bytes:
    """A fresh random 32-byte master key."""
    return os.urandom(KEY_SIZE)
