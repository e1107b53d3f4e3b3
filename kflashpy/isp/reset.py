"""Board reset wirings as data: how DTR/RTS reach the K210's RESET and BOOT (IO16) pins.

Every K210 board wires its USB bridge's DTR and RTS lines to RESET and BOOT in one of a
few ways. A wiring is described by two *sequences*: one that resets into the mask-ROM ISP
(BOOT held low across the reset) and one that resets into the flashed program.

A sequence is a string of steps separated by spaces, commas or ``|``:

* ``D1`` / ``D0``: assert / release DTR (pyserial semantics: asserted = pin low on
  common bridges);
* ``R1`` / ``R0``: assert / release RTS;
* ``W0.1``: wait 0.1 s (done by reading the port, so the virtual board's clock runs).

Example (RTS on RESET, DTR on BOOT, "dan" wiring): ``D0 R0 W0.1 R1 W0.1 R0 D1 W0.1``.
The known wirings come from the board data (``firmware_layouts/boards.toml``, via
:mod:`kflashpy.target.boards`); users with odd boards pass their own with
``--reset-seq``, or ``none`` to reset by hand.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Callable
from dataclasses import dataclass

import serial

from ..errors import InputError, PortError
from ..target import boards

#: hold time of the quick first reset (see :attr:`ResetPlan.quick_isp`)
QUICK_HOLD = 0.01

_STEP = re.compile(r"^(?:(?P<line>[DR])(?P<level>[01])|W(?P<wait>\d+(?:\.\d+)?))$", re.I)


@dataclass(frozen=True)
class Step:
    """One step of a reset sequence: set a line, or wait."""

    line: str | None  # "dtr" | "rts" | None for a wait
    level: bool = False
    wait: float = 0.0

    def __str__(self) -> str:
        if self.line is None:
            return f"W{self.wait:g}"
        return f"{self.line[0].upper()}{int(self.level)}"


def parse_sequence(text: str) -> tuple[Step, ...]:
    """Parse a sequence string; raises :class:`InputError` naming the bad step."""
    steps: list[Step] = []
    for token in re.split(r"[\s,|]+", text.strip()):
        if not token:
            continue
        m = _STEP.match(token)
        if not m:
            raise InputError(
                f"reset sequence {text!r}: cannot read step {token!r}",
                "use D0/D1 (DTR), R0/R1 (RTS) and W<seconds>, e.g. 'D0 R0 W0.1 R1 W0.1 R0 D1 W0.1'",
            )
        if m.group("wait"):
            wait = float(m.group("wait"))
            if wait > 10:
                raise InputError(f"reset sequence {text!r}: wait {token!r} is longer than 10 s")
            steps.append(Step(None, wait=wait))
        else:
            steps.append(
                Step("dtr" if m.group("line").upper() == "D" else "rts", m.group("level") == "1")
            )
    if not steps:
        raise InputError(f"reset sequence {text!r} is empty")
    return tuple(steps)


def format_sequence(steps: tuple[Step, ...]) -> str:
    return " ".join(str(s) for s in steps)


def from_layout(steps: tuple[boards.ResetStep, ...]) -> tuple[Step, ...]:
    """Steps of a wiring from the board data (``firmware_layouts/boards.toml``)."""
    out: list[Step] = []
    for rs in steps:
        dtr, rts = Step("dtr", rs.dtr), Step("rts", rs.rts)
        out += [dtr, rts] if rs.first == "dtr" else [rts, dtr]
        if rs.hold:
            out.append(Step(None, wait=rs.hold))
    return tuple(out)


@dataclass(frozen=True)
class ResetPlan:
    """One way of resetting a board: into ISP, and back into its program."""

    name: str  # wiring name ("dan", "kd233", ..., "custom", "none")
    enter_isp: tuple[Step, ...]
    run: tuple[Step, ...]  # empty: this wiring cannot start the program by itself

    @classmethod
    def from_wiring(cls, w: boards.Wiring) -> ResetPlan:
        return cls(w.name, from_layout(w.isp), from_layout(w.run))

    @property
    def quick_isp(self) -> tuple[Step, ...] | None:
        """The ISP sequence with every hold cut to :data:`QUICK_HOLD`; None for a
        user's own sequence, whose timing is kept as given.

        kflash's 100 ms holds are generous: the K210 needs microseconds of RESET and
        samples BOOT milliseconds after its release, and USB bridges apply a line
        change within a millisecond or two. A first try with short holds saves about
        0.3 s per connection; boards that need more answer to the full sequence.
        """
        if self.name == "custom":
            return None
        return tuple(
            Step(None, wait=min(s.wait, QUICK_HOLD)) if s.line is None else s
            for s in self.enter_isp
        )


#: for boards without auto-reset: the user holds BOOT and presses RESET
MANUAL = ResetPlan("none", (Step(None, wait=0.1),), ())


def plans_for(board: boards.Board, custom: str | None = None) -> list[ResetPlan]:
    """The reset plans to try, in order, for ``board`` (or the user's custom sequence).

    A custom sequence replaces the board's ISP entry; its run sequence is kept if the
    board has a fixed wiring.
    """
    if custom:
        if custom.strip().lower() == "none":
            return [MANUAL]
        run = from_layout(board.wiring.run) if board.wiring else ()
        return [ResetPlan("custom", parse_sequence(custom), run)]
    if board.wiring is not None:
        return [ResetPlan.from_wiring(board.wiring)]
    # auto: the board data lists the wirings to try, in order
    return [ResetPlan.from_wiring(w) for w in board.auto_wirings] or [MANUAL]


def run_sequence(board: str | boards.Board | None, custom: str | None = None) -> tuple[Step, ...]:
    """The steps that reset ``board`` into its flashed program (BOOT released).

    This is what a REPL's hard reset plays. ``custom`` (a sequence string) wins over the
    board data; ``"none"`` gives no steps (the user presses RESET). A board whose wiring
    is detected at ISP time (``generic``) gets the run sequence of the first wiring its
    data lists, the one a detecting flasher tries first.
    """
    if custom:
        return () if custom.strip().lower() == "none" else parse_sequence(custom)
    profile = board if isinstance(board, boards.Board) else boards.get_board(board)
    wiring = profile.wiring or next(iter(profile.auto_wirings), None)
    return from_layout(wiring.run) if wiring else ()


def apply(port: serial.SerialBase, steps: tuple[Step, ...], wait: Callable[[float], None]) -> bool:
    """Play ``steps`` on ``port``; ``wait`` lets time pass (the link's port-reading wait).

    Returns False when the port cannot drive DTR/RTS (a pty, a TCP bridge), in which
    case the waits still happen and the caller should tell the user to reset by hand.
    """
    can_drive = True
    for step in steps:
        if step.line is None:
            wait(step.wait)
            continue
        if not can_drive:
            continue
        try:
            setattr(port, step.line, step.level)
        except OSError as e:
            if e.errno in (errno.ENOTTY, errno.EINVAL):
                can_drive = False
                continue
            raise PortError(f"cannot set {step.line.upper()} on {port.port}: {e}") from e
        except serial.SerialException as e:
            raise PortError(f"cannot set {step.line.upper()} on {port.port}: {e}") from e
    return can_drive
