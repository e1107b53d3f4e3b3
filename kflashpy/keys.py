"""AES key material for encrypted boot images, from a file, the environment or hex.

Keys are secrets: nothing here puts key bytes into an error message, a log line or a
``repr``. A hex argument on the command line is visible to other local users (``ps``),
so the file and environment forms are preferred and documented first.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .errors import KeyMaterialError, UsageError

__all__ = ["DEFAULT_KEY_ENV", "KEY_SIZE", "is_hex_text", "load_key", "parse_key_text"]

KEY_SIZE = 16
DEFAULT_KEY_ENV = "KFLASHPY_AES_KEY"
_HEX = re.compile(r"^(?:0x)?([0-9a-fA-F]+)$")


def is_hex_text(raw: bytes) -> bool:
    """True when ``raw`` is only hex digits: a key file of that kind is hex text even
    when its length equals the raw key size (a 128-bit hex key passed where a 256-bit
    raw key is expected must be refused, not used as 32 ASCII bytes)."""
    return bool(raw) and raw.strip(b"0123456789abcdefABCDEF") == b""


def parse_key_text(text: str, source: str, size: int = KEY_SIZE, what: str = "AES key") -> bytes:
    """Decode ``2*size`` hex digits (spaces, colons and a 0x prefix allowed) into bytes."""
    compact = re.sub(r"[\s:_-]", "", text)
    m = _HEX.match(compact)
    if not m or len(m.group(1)) != 2 * size:
        digits = len(m.group(1)) if m else None
        got = f"{digits} hex digits" if digits is not None else "characters that are not hex"
        raise KeyMaterialError(
            f"{what} from {source}: expected {2 * size} hex digits ({size} bytes), got {got}",
            f"write the {size * 8}-bit key as {2 * size} hex digits",
        )
    return bytes.fromhex(m.group(1))


def load_key(
    *,
    hex_text: str | None = None,
    file: str | os.PathLike[str] | None = None,
    env: str | None = None,
    size: int = KEY_SIZE,
    what: str = "AES key",
) -> bytes | None:
    """Return the ``size``-byte key from exactly one source, or ``None`` when none is given.

    ``file``: ``size`` raw bytes, or a text file with hex digits. ``env``: the name of an
    environment variable holding the hex digits. ``hex_text``: the digits themselves.
    ``what`` names the key in messages (other areas load other keys the same way).
    """
    given = [s for s in (hex_text, file, env) if s is not None]
    if len(given) > 1:
        raise UsageError(
            f"{what} given more than once", "use one of --key-file, --key-env, --key-hex"
        )
    if file is not None:
        try:
            raw = Path(file).read_bytes()
        except OSError as e:
            raise KeyMaterialError(
                f"{what} file {file}: cannot read: {e.strerror or e}",
                "check the path and permissions",
            ) from e
        if len(raw) == size and not is_hex_text(raw):
            return raw
        try:
            return parse_key_text(raw.decode("ascii"), f"file {file}", size, what)
        except UnicodeDecodeError:
            raise KeyMaterialError(
                f"{what} file {file}: {len(raw)} bytes, neither {size} raw bytes nor hex text",
                f"store the key as {size} raw bytes or as {2 * size} hex digits",
            ) from None
    if env is not None:
        value = os.environ.get(env)
        if value is None:
            raise KeyMaterialError(
                f"{what}: environment variable {env} is not set",
                f"export {env}=<{2 * size} hex digits> or use --key-file",
            )
        return parse_key_text(value, f"environment variable {env}", size, what)
    if hex_text is not None:
        return parse_key_text(hex_text, "--key-hex", size, what)
    return None
