"""How a board's USB-serial control lines reach the K210 RESET and IO16 (BOOT) pins.

pyserial's ``dtr=True``/``rts=True`` assert the line, which is TTL low on the USB-UART
chips these boards carry. RESET is active low, and IO16 low at the moment the mask ROM
samples it selects ISP mode. Known wirings (see docs/simulator.md and the protocol
reference §4):

* ``rts-reset`` — RTS drives RESET, DTR drives IO16 (Maix Bit/Dock, Maix Bit with mic's
  CH552 in kflash's "dan" mode, KD233 is the other way round).
* ``dtr-reset`` — DTR drives RESET, RTS drives IO16 (KD233, Maixduino, Maix Go/Amigo/Cube
  with the OpenEC/new CMSIS-DAP firmware, M5StickV).
* ``cmsis-dap`` — old Maix Go CMSIS-DAP firmware ("goD"): RESET is held while both lines
  are asserted and IO16 follows DTR (inferred from kflash's goD sequences: ISP = both
  asserted then RTS released; its "boot" sequence ends in reset and the board starts when
  the port closes and both lines drop).
* ``none`` — no auto-reset circuit: only the buttons (``reset_into_isp``/``reset_to_run``).

Board names map to a wiring through the foundation's layout data
(``kflashpy.image.layouts.load_boards``) when it describes the board; :data:`_FALLBACK`
covers the boards until then and any board the data does not name.
"""

from __future__ import annotations

from dataclasses import dataclass

from kflashpy.errors import InputError


@dataclass(frozen=True)
class Wiring:
    """A reset circuit: maps (dtr, rts) asserted states to (reset held, IO16 low)."""

    name: str
    description: str

    def pins(self, dtr: bool, rts: bool) -> tuple[bool, bool]:
        """Return ``(reset_asserted, boot_low)`` for the given control-line states."""
        if self.name == "rts-reset":
            return rts, dtr
        if self.name == "dtr-reset":
            return dtr, rts
        if self.name == "cmsis-dap":
            return dtr and rts, dtr
        return False, False


WIRINGS: dict[str, Wiring] = {
    w.name: w
    for w in (
        Wiring("rts-reset", "RTS -> RESET, DTR -> IO16 (kflash 'dan')"),
        Wiring("dtr-reset", "DTR -> RESET, RTS -> IO16 (kflash 'kd233', OpenEC 'goE')"),
        Wiring("cmsis-dap", "reset while DTR and RTS asserted, DTR -> IO16 (kflash 'goD')"),
        Wiring("none", "no auto-reset: use the buttons"),
    )
}

# board name -> wiring, used until/unless the layout data names the board
_FALLBACK: dict[str, str] = {
    "maix-bit": "rts-reset",
    "maix-dock": "rts-reset",
    "maix-bit-mic": "dtr-reset",
    "kd233": "dtr-reset",
    "maixduino": "dtr-reset",
    "maix-go": "dtr-reset",
    "maix-go-cmsis-dap": "cmsis-dap",
    "maix-amigo": "dtr-reset",
    "maix-cube": "dtr-reset",
    "m5stickv": "dtr-reset",
    "generic": "rts-reset",
    "no-autoreset": "none",
}

_ALIASES = {"dan": "rts-reset", "bit": "rts-reset", "goe": "dtr-reset", "god": "cmsis-dap"}


def _layout_wiring(board: str) -> str | None:
    """The board's wiring from the layout data, if that module exists and knows it."""
    try:
        from kflashpy.image import layouts  # type: ignore[attr-defined]
    except ImportError:
        return None
    try:
        boards = layouts.load_boards()
    except Exception:  # noqa: BLE001 - layout data problems must not break the simulator
        return None
    entry = boards.get(board)
    value = getattr(entry, "reset_wiring", None) or getattr(entry, "wiring", None)
    if not isinstance(value, str):
        return None
    value = _ALIASES.get(value.lower(), value.lower())
    return value if value in WIRINGS else None


def wiring_for(board: str, override: str | None = None) -> Wiring:
    """Resolve the wiring of ``board`` (``override`` = a wiring name from the URL wins)."""
    if override:
        name = _ALIASES.get(override.lower(), override.lower())
        if name not in WIRINGS:
            raise InputError(
                f"unknown reset wiring {override!r}",
                hint=f"use one of: {', '.join(WIRINGS)}",
            )
        return WIRINGS[name]
    name = _layout_wiring(board) or _FALLBACK.get(board)
    if name is None:
        raise InputError(
            f"unknown board {board!r} for the virtual K210",
            hint=f"use one of: {', '.join(sorted(_FALLBACK))} (or wiring=rts-reset|dtr-reset|...)",
        )
    return WIRINGS[name]


def known_boards() -> list[str]:
    """Board names the simulator accepts without an explicit wiring."""
    return sorted(_FALLBACK)
