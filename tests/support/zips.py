"""Zip archives built in memory, for the kfpkg reader's tests."""

from __future__ import annotations

import io
import zipfile


def make_zip(members, compression=zipfile.ZIP_DEFLATED) -> bytes:
    """A zip of ``(name, data)`` members, names written exactly as given (hostile ones too)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name)
            info.compress_type = compression
            zf.writestr(info, data)
    return buf.getvalue()
