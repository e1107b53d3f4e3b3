"""Configuration of a virtual board, and its parsing from a ``sim://`` URL query."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

from kflashpy.errors import InputError
from kflashpy.units import parse_int

from .faults import QUERY_KEYS as FAULT_KEYS

# URL keys with this prefix go to the personality (kflashpy.sim.maixpy_personality)
PERSONALITY_PREFIX = "maixpy_"


@dataclass
class BoardConfig:
    """Everything that defines a virtual board; every field has a working default."""

    board: str = "maix-bit"
    wiring: str | None = None  # override the board's reset wiring
    flash: str | None = None  # backing file of the NOR flash (None: in memory, erased)
    flash_size: int = 16 * 1024 * 1024
    chip: str = "w25q128"
    #: the flash's 64-bit unique id (answer to 0x4B); None: derived, see :meth:`unique_id`
    uid: bytes | None = None
    #: the JEDEC id (answer to 0x9F); None: the chip's manufacturer/type and the size
    jedec: bytes | None = None
    timing: str = "typical"
    personality: str | None = None  # None: "maixpy" if available, else "silent"
    otp_key: bytes | None = None  # AES-128 key "fused" into the virtual OTP
    seed: int = 0
    faults: dict[str, str] = field(default_factory=dict)
    # ``maixpy_*`` URL keys, handed untouched to the MaixPy personality (docs/compare.md)
    personality_options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_url(cls, url: str) -> BoardConfig:
        """Parse ``sim://?board=maix-bit&flash=board.img&...`` (see docs/simulator.md)."""
        parts = urlsplit(url)
        if parts.scheme != "sim":
            raise InputError(
                f"not a virtual-board URL: {url!r}", hint="write it as sim://?board=maix-bit"
            )
        cfg = cls()
        for key, values in parse_qs(parts.query, keep_blank_values=True).items():
            cfg.apply(key, values[-1])
        return cfg

    def apply(self, key: str, value: str) -> None:
        """Set one option by its URL name; unknown names and bad values are errors."""
        try:
            if key == "board":
                self.board = value
            elif key == "wiring":
                self.wiring = value
            elif key == "flash":
                self.flash = value or None
            elif key == "flash_size":
                self.flash_size = parse_int(value, "flash_size")
            elif key == "chip":
                self.chip = value
            elif key == "uid":
                self.uid = _parse_hex(value, 8, "uid", "a 64-bit flash unique id")
            elif key == "jedec":
                self.jedec = _parse_hex(value, 3, "jedec", "a JEDEC id, e.g. EF4018")
            elif key == "timing":
                self.timing = value
            elif key == "personality":
                self.personality = value
            elif key == "otp_key":
                self.otp_key = _parse_key(value)
            elif key.startswith(PERSONALITY_PREFIX):
                self.personality_options[key] = value
            elif key in FAULT_KEYS:
                self.faults[key] = value
                if key == "seed":
                    self.seed = parse_int(value, "seed")
            else:
                raise InputError(
                    f"unknown sim:// option {key!r}",
                    hint="options: board, wiring, flash, flash_size, chip, uid, jedec, timing, "
                    "personality, otp_key, " + ", ".join(FAULT_KEYS),
                )
        except ValueError as exc:
            raise InputError(
                f"bad value for sim:// option {key}: {value!r}", hint=str(exc)
            ) from exc

    def unique_id(self) -> bytes | None:
        """The board's flash unique id: ``uid``, else one derived from the flash file.

        Boards backed by different files answer different ids (the file's absolute path
        is hashed, so a board keeps its id across runs while its contents change); an
        in-memory board without ``uid`` keeps the chip model's default (None here).
        """
        if self.uid is not None:
            return self.uid
        if self.flash is None:
            return None
        path = os.path.abspath(self.flash)
        return hashlib.sha256(f"flash-file:{path}".encode()).digest()[:8]


def _parse_hex(text: str, size: int, name: str, what: str) -> bytes:
    try:
        value = bytes.fromhex(text)
    except ValueError:
        value = b""
    if len(value) != size:
        raise InputError(
            f"sim:// option {name} must be {2 * size} hex digits ({what})", hint=f"got {text!r}"
        )
    return value


def _parse_key(text: str) -> bytes:
    return _parse_hex(text, 16, "otp_key", "an AES-128 key")
