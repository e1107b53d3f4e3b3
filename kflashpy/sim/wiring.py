"""How a board's USB-serial control lines reach the K210 RESET and IO16 (BOOT) pins.

pyserial's ``dtr=True``/``rts=True`` assert the line, which is TTL low on the USB-UART
chips these boards carry. RESET is active low, and IO16 low at the moment the mask ROM
samples it selects ISP mode. Known wirings (see docs/simulator.md, "Reset wiring", and
docs/formats.md, "Where the board data comes from"):

* ``rts-reset`` — RTS drives RESET, DTR drives IO16 (kflash "dan": Maix Bit/Dock, M1).
* ``dtr-reset`` — DTR drives RESET, RTS drives IO16 (kflash "kd233"/"goE": KD233,
  Maixduino, Maix Go/Amigo/Cube/Nano, M5StickV).
* ``cmsis-dap`` — a reading of kflash's "goD" sequences (old Maix Go CMSIS-DAP firmware):
  RESET held while both lines are asserted, IO16 follows DTR (inferred; ISP = both
  asserted then RTS released). Selected with ``wiring=cmsis-dap``; the board data gives
  that board the ``dtr-reset`` lines.
* ``none`` — no auto-reset circuit: only the buttons (``reset_into_isp``/``reset_to_run``).

Board names map to a wiring through the foundation's board data
(``kflashpy.target.boards.load_boards()``: ``reset_line``/``boot_line`` of the board's
wiring, aliases included). Boards whose wiring is detected at run time (``generic``) get
``rts-reset``; ``no-autoreset`` is the simulator's own board without the circuit.
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

_OWN_BOARDS = {"no-autoreset": "none"}
_AUTO_DEFAULT = "rts-reset"  # boards whose wiring a flasher detects by trying sequences
_ALIASES = {"dan": "rts-reset", "bit": "rts-reset", "goe": "dtr-reset", "god": "cmsis-dap"}
_BY_LINES = {("rts", "dtr"): "rts-reset", ("dtr", "rts"): "dtr-reset"}


def _boards() -> dict[str, str]:
    """Board id and alias -> wiring name, from the layout data."""
    from kflashpy.target.boards import load_boards

    table: dict[str, str] = {}
    for bid, board in load_boards().items():
        w = board.wiring
        name = _BY_LINES.get((w.reset_line, w.boot_line), _AUTO_DEFAULT) if w else _AUTO_DEFAULT
        for key in (bid, *board.aliases):
            table[key.lower()] = name
    table.update(_OWN_BOARDS)
    return table


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
    boards = _boards()
    found = boards.get(board.lower())
    if found is None:
        raise InputError(
            f"unknown board {board!r} for the virtual K210",
            hint=f"use one of: {', '.join(sorted(boards))} (or wiring=rts-reset|dtr-reset|...)",
        )
    return WIRINGS[found]
