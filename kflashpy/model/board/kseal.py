# kseal.py - verify and decrypt kflashpy sealed containers on a MaixPy board.
#
# Same algorithm as kflashpy.model.seal (format: docs/sealed-model.md):
#   enc_key = HMAC-SHA256(master, "kflashpy-seal-v1 enc" + salt)
#   mac_key = HMAC-SHA256(master, "kflashpy-seal-v1 mac" + salt)
#   tag     = HMAC-SHA256(mac_key, header + ciphertext)   (checked FIRST)
#   plain   = unpad(AES-256-CBC-decrypt(enc_key, iv, ciphertext))
# Only ucryptolib (AES-CBC) and uhashlib (SHA-256) are used; no f-strings, no
# annotations, so it runs on MicroPython 1.11 (MaixPy). Streams in chunks so a
# model larger than the free heap can be unsealed from one file to another.
#
# Usage on the board:
#   import kseal
#   kseal.unseal_file("/sd/model.sealed", "/sd/model.kmodel", key)   # key: 32 bytes
#   task = kpu.load("/sd/model.kmodel")

import ucryptolib
import uhashlib

MAGIC = b"KFPYSEAL"
HEADER_SIZE = 56
TAG_SIZE = 32
BLOCK = 16
MODE_CBC = 2
CHUNK = 4096


class SealError(Exception):
    pass


class _Hmac:
    def __init__(self, key):
        if len(key) > 64:
            key = uhashlib.sha256(key).digest()
        key = key + bytes(64 - len(key))
        self._outer = bytes([b ^ 0x5C for b in key])
        self._inner = uhashlib.sha256(bytes([b ^ 0x36 for b in key]))

    def update(self, data):
        self._inner.update(data)

    def digest(self):
        outer = uhashlib.sha256(self._outer)
        outer.update(self._inner.digest())
        return outer.digest()


def hmac_sha256(key, data):
    h = _Hmac(key)
    h.update(data)
    return h.digest()


def _equal(a, b):
    if len(a) != len(b):
        return False
    diff = 0
    for i in range(len(a)):
        diff |= a[i] ^ b[i]
    return diff == 0


def parse_header(header, total_size):
    """Check the header against the file size; return (plain_size, salt, key_id, iv)."""
    if len(header) < HEADER_SIZE or header[:8] != MAGIC:
        raise SealError("not a kflashpy sealed container")
    if header[8] != 1 or header[9] != 1:
        raise SealError("unsupported sealed container version")
    plain_size = int.from_bytes(header[12:16], "little")
    ct_size = total_size - HEADER_SIZE - TAG_SIZE
    if ct_size < BLOCK or ct_size % BLOCK or plain_size // BLOCK + 1 != ct_size // BLOCK:
        raise SealError("truncated or tampered container")
    return plain_size, header[16:32], header[32:40], header[40:56]


def _keys(master, salt, key_id):
    if len(master) != 32:
        raise SealError("the seal key must be 32 bytes")
    if not _equal(hmac_sha256(master, b"kflashpy-seal-v1 key-id")[:8], key_id):
        raise SealError("sealed with a different key")
    enc = hmac_sha256(master, b"kflashpy-seal-v1 enc" + salt)
    mac = hmac_sha256(master, b"kflashpy-seal-v1 mac" + salt)
    return enc, mac


def _unpad(block, plain_size, written):
    n = block[-1]
    if n < 1 or n > BLOCK or block[-n:] != bytes([n]) * n:
        raise SealError("bad padding")
    out = block[:-n]
    if written + len(out) != plain_size:
        raise SealError("size mismatch")
    return out


def _decrypt_stream(read, write, enc_key, iv, ct_size, plain_size):
    done = 0
    written = 0
    while done < ct_size:
        chunk = read(min(CHUNK, ct_size - done))
        if not chunk or len(chunk) % BLOCK:
            raise SealError("short read")
        plain = ucryptolib.aes(enc_key, MODE_CBC, iv).decrypt(chunk)
        iv = chunk[-BLOCK:]
        done += len(chunk)
        if done == ct_size:
            plain = _unpad(plain, plain_size, written)
        write(plain)
        written += len(plain)
    return written


def unseal_bytes(blob, master):
    """Verify and decrypt a whole container held in memory; returns the plaintext."""
    plain_size, salt, key_id, iv = parse_header(blob[:HEADER_SIZE], len(blob))
    enc_key, mac_key = _keys(master, salt, key_id)
    if not _equal(hmac_sha256(mac_key, blob[:-TAG_SIZE]), blob[-TAG_SIZE:]):
        raise SealError("authentication failed: modified or truncated")
    parts = []
    pos = [HEADER_SIZE]

    def read(n):
        start = pos[0]
        pos[0] = start + n
        return blob[start : start + n]

    _decrypt_stream(read, parts.append, enc_key, iv, len(blob) - HEADER_SIZE - TAG_SIZE, plain_size)
    return b"".join(parts)


def unseal_file(src, dst, master):
    """Verify ``src`` completely, then decrypt it into ``dst``; returns the plain size.

    Nothing is written unless the tag matches. RAM use is about 2 x CHUNK.
    """
    with open(src, "rb") as f:
        f.seek(0, 2)
        total = f.tell()
        f.seek(0)
        header = f.read(HEADER_SIZE)
        plain_size, salt, key_id, iv = parse_header(header, total)
        enc_key, mac_key = _keys(master, salt, key_id)
        mac = _Hmac(mac_key)
        mac.update(header)
        ct_size = total - HEADER_SIZE - TAG_SIZE
        left = ct_size
        while left:
            chunk = f.read(min(CHUNK, left))
            if not chunk:
                raise SealError("short read")
            mac.update(chunk)
            left -= len(chunk)
        if not _equal(mac.digest(), f.read(TAG_SIZE)):
            raise SealError("authentication failed: modified or truncated")
        f.seek(HEADER_SIZE)
        with open(dst, "wb") as out:
            return _decrypt_stream(f.read, out.write, enc_key, iv, ct_size, plain_size)
