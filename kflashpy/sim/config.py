"""Configuration of a virtual board, and its parsing from a ``sim://`` URL query."""

from __future__ import annotations

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
                    hint="options: board, wiring, flash, flash_size, chip, timing, "
                    "personality, otp_key, " + ", ".join(FAULT_KEYS),
                )
        except ValueError as exc:
            raise InputError(
                f"bad value for sim:// option {key}: {value!r}", hint=str(exc)
            ) from exc


def _parse_key(text: str) -> bytes:
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != 16:
        raise InputError("otp_key must be 32 hex digits (an AES-128 key)", hint=f"got {text!r}")
    return key
