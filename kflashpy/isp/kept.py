"""Bytes outside a file that a burn may erase, kept on disk until the burn succeeds.

Writing a file whose first or last 4 KiB sector (or 64 KiB block) also holds other data
makes the flasher erase that data and program it again. A power cut in between loses it,
and a rerun cannot know what it was. So before such a write the burn pipeline reads
those bytes (the parts that are not blank: a blank byte survives an erase) and keeps
them in a small file; the rerun of the same burn on the same board writes them back, and
the file is removed once the region is written and verified (docs/burning.md).

An entry is found again only for the same board (the flash's unique id), the same
address and the same file bytes, so another burn never restores stale data.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..fileio import write_atomic

__all__ = ["KeptBytes", "kept_dir"]


def kept_dir() -> Path:
    """Where kept bytes live: ``$KFLASHPY_STATE_DIR/kept``, else the XDG state directory."""
    base = os.environ.get("KFLASHPY_STATE_DIR")
    if not base:
        xdg = os.environ.get("XDG_STATE_HOME") or os.path.join(
            os.path.expanduser("~"), ".local", "state"
        )
        base = os.path.join(xdg, "kflashpy")
    return Path(base) / "kept"


@dataclass
class KeptBytes:
    """The old bytes around one region on one board: ``[(address, bytes)]``."""

    board: str
    address: int
    data_sha256: str
    pieces: list[tuple[int, bytes]]

    @property
    def path(self) -> Path:
        return kept_dir() / f"{self.board}-{self.address:08x}-{self.data_sha256[:16]}.json"

    @classmethod
    def load(cls, board: str, address: int, data: bytes) -> KeptBytes | None:
        """The entry a failed burn of ``data`` at ``address`` on ``board`` left, if any."""
        path = cls(board, address, hashlib.sha256(data).hexdigest(), []).path
        try:
            doc = json.loads(path.read_text())
            pieces = [(int(p["address"]), bytes.fromhex(p["hex"])) for p in doc["pieces"]]
        except (OSError, ValueError, KeyError, TypeError):
            return None  # none, or unreadable: the burn reads the flash instead
        return cls(board, address, hashlib.sha256(data).hexdigest(), pieces)

    def save(self) -> Path:
        doc = {
            "board": self.board,
            "address": self.address,
            "data_sha256": self.data_sha256,
            "pieces": [{"address": a, "hex": b.hex()} for a, b in self.pieces],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return write_atomic(self.path, json.dumps(doc).encode())

    def drop(self) -> None:
        self.path.unlink(missing_ok=True)
