"""Writing output files without ever leaving a half-written one behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .errors import InputError

__all__ = ["write_atomic"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(
    path: str | os.PathLike[str],
    content: bytes | Callable[[BinaryIO], None],
    mode: int | None = None,
) -> Path:
    """Write ``content`` (bytes, or a function writing to a binary file) to ``path``.

    The data goes to a temporary file in the same directory, which is renamed over
    ``path`` only when complete; on any failure the temporary file is removed.
    The file gets ``mode`` (set before the rename, so a key is never readable by
    others even briefly) or, by default, the permissions ``open()`` would give it
    (0o666 minus the umask), not the private 0o600 of a temporary file.
    """
    out = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent or ".")
    except OSError as e:
        raise InputError(f"{out}: cannot write: {e.strerror or e}", "check the directory") from None
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(content, bytes | bytearray):
                f.write(content)
            else:
                content(f)
        os.chmod(tmp, 0o666 & ~_umask() if mode is None else mode)
        os.replace(tmp, out)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(
            f"{out}: cannot write: {e.strerror or e}", "check the free space and the permissions"
        ) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
