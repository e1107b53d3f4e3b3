"""Writing output files without ever leaving a half-written one behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ..errors import InputError

__all__ = ["write_atomic"]


def write_atomic(path: str | os.PathLike[str], content: bytes | Callable[[BinaryIO], None]) -> Path:
    """Write ``content`` (bytes, or a function writing to a binary file) to ``path``.

    The data goes to a temporary file in the same directory, which is renamed over
    ``path`` only when complete; on any failure the temporary file is removed.
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
        os.replace(tmp, out)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{out}: cannot write: {e.strerror or e}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
