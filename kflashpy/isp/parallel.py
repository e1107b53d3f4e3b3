"""One operation on several boards at once: one worker thread per board.

Nothing is shared between the workers while they talk to their boards: each opens,
drives and closes its own port. The only lock is the one that keeps two workers from
claiming the same port (:func:`claim_port`); it is held from before the port is opened
until after it is closed, and never around I/O. Blocking serial reads release the GIL,
so on real ports the boards program concurrently while the host idles. Virtual boards
(``sim://``) run their emulator inside the worker thread: their *virtual* times do not
depend on one another, but the host time they cost adds up (see
``benchmarks/bench_parallel.py``). ::

    from kflashpy.isp import api, parallel
    plan = api.plan_burn([(0x300000, "model.kmodel")], board="maix-bit")
    result = parallel.run_on_boards(
        ["/dev/ttyUSB0", "/dev/ttyUSB1"],
        parallel.burn_operation(plan),
        connection=api.ConnectOptions(board="maix-bit"),
    )
    for row in result.boards:
        print(row.port, row.unique_id, row.status, row.error)

Every board gets a :class:`BoardRow` (live while the workers run: ``on_update`` is called
from the worker threads with each change) and ``result.exit_code`` is the worst board's.
A ``stop`` event ends the run early: each board stops at its next progress step (a burn
at a frame boundary) and is reported as interrupted.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import (
    EXIT_DEVICE,
    EXIT_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_MISMATCH,
    EXIT_OK,
    InputError,
    Interrupted,
    KflashError,
    PortError,
)
from ..image.plan import FlashPlan
from ..progress import Progress
from .api import burn_plan_on, erase_device
from .connect import ConnectOptions, Device
from .flashops import flash_id_on, mismatch_error, read_on, verify_items, verify_on
from .ports import candidates
from .stage2 import CAP_IDENTIFY

_claims_lock = threading.Lock()
_claimed: set[str] = set()


def port_key(port: str) -> str:
    """What identifies a port: the device file a path resolves to (links included), or the URL."""
    return port if "://" in port else os.path.realpath(port)


def try_claim(port: str) -> bool:
    """Claim ``port`` for one worker of this process; False if another holds it."""
    key = port_key(port)
    with _claims_lock:
        if key in _claimed:
            return False
        _claimed.add(key)
        return True


def release(port: str) -> None:
    with _claims_lock:
        _claimed.discard(port_key(port))


@contextlib.contextmanager
def claim_port(port: str) -> Iterator[None]:
    """Hold ``port`` for one worker of this process; a second claim fails at once."""
    if not try_claim(port):
        raise PortError(
            f"{port} is already being driven by another worker",
            "one worker per port: wait for it to finish (or give each port once)",
        )
    try:
        yield
    finally:
        release(port)


def auto_ports() -> list[str]:
    """Every detected port with a K210 USB bridge (``--ports auto``), sorted."""
    found = [c.device for c in candidates()]
    if not found:
        raise PortError(
            "--ports auto: no serial port of a known K210 USB bridge found",
            "plug the boards in (see `kflashpy ports`), or name them with -p PORT -p PORT",
        )
    return found


class BoardsFailed(KflashError):
    """Some boards of a multi-board run failed; the exit code is the worst board's."""

    kind = "boards"

    def __init__(self, message: str, hint: str, exit_code: int) -> None:
        super().__init__(message, hint)
        self.exit_code = exit_code


#: result words of a finished board, by exit code
STATUS_OF_EXIT = {
    EXIT_OK: "ok",
    EXIT_DEVICE: "failed",
    EXIT_INPUT: "bad input",
    EXIT_MISMATCH: "mismatch",
    EXIT_INTERNAL: "internal error",
    EXIT_INTERRUPTED: "interrupted",
}


@dataclass
class BoardRow:
    """One board of a parallel run: live state while it runs, its outcome afterwards."""

    index: int
    port: str
    board: str = ""
    unique_id: str = ""  # hex, from the flasher (empty when it cannot identify)
    jedec_id: int | None = None
    stage: str = "waiting"
    done: int = 0
    total: int = 0
    bytes_per_second: float = 0.0  # of the current stage, on the port's clock
    status: str = "waiting"  # waiting, running, ok, failed, mismatch, interrupted...
    exit_code: int = EXIT_OK
    error: dict[str, str] | None = None
    result: Any = None  # the operation's result (has to_dict())
    seconds: float = 0.0  # port time (virtual on sim://) from ISP entry to the end
    host_seconds: float = 0.0
    cpu_seconds: float = 0.0  # CPU time of this board's worker thread
    notes: list[str] = field(default_factory=list)

    @property
    def serial(self) -> str:
        """The board's serial number: flash unique id and JEDEC id ("" if unknown)."""
        if not self.unique_id:
            return ""
        jedec = f"-{self.jedec_id:06X}" if self.jedec_id is not None else ""
        return self.unique_id + jedec

    @property
    def finished(self) -> bool:
        return self.status not in ("waiting", "running")

    def fail(self, error: KflashError) -> None:
        self.exit_code = error.exit_code
        self.status = STATUS_OF_EXIT.get(error.exit_code, "failed")
        self.error = {"kind": error.kind, "message": error.message, "hint": error.hint}

    def to_dict(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "board": self.board,
            "unique_id": self.unique_id or None,
            "jedec_id": f"0x{self.jedec_id:06X}" if self.jedec_id is not None else None,
            "serial": self.serial or None,
            "status": self.status,
            "exit_code": self.exit_code,
            "error": self.error,
            "seconds": round(self.seconds, 4),
            "host_seconds": round(self.host_seconds, 4),
            "cpu_seconds": round(self.cpu_seconds, 4),
            "result": self.result.to_dict() if self.result is not None else None,
            "notes": self.notes,
        }


@dataclass
class ParallelResult:
    operation: str
    boards: list[BoardRow]
    interrupted: bool = False

    @property
    def exit_code(self) -> int:
        """The worst board's exit code (0 when every board is ok)."""
        return max((b.exit_code for b in self.boards), default=EXIT_OK)

    @property
    def passed(self) -> int:
        return sum(b.exit_code == EXIT_OK for b in self.boards)

    def to_dict(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "boards": [b.to_dict() for b in self.boards],
            "passed": self.passed,
            "failed": len(self.boards) - self.passed,
            "interrupted": self.interrupted,
            "exit_code": self.exit_code,
        }

    def error(self) -> KflashError | None:
        """One error that stands for the failed boards (None if all passed)."""
        bad = [b for b in self.boards if b.exit_code != EXIT_OK]
        if not bad:
            return None
        return BoardsFailed(
            f"{len(bad)} of {len(self.boards)} boards failed: "
            + "; ".join(f"{b.port}: {b.error['message'] if b.error else b.status}" for b in bad),
            "the table shows each board's result; rerun on the failed ports",
            self.exit_code,
        )


#: what the workers run on each connected board; it may use the row (index, unique id)
Operation = Callable[[Device, Callable[[Progress], None], BoardRow], Any]
#: called from the worker threads on every change of a row (``event`` None at the end)
UpdateFn = Callable[[BoardRow, Progress | None], None]


class _Tracker:
    """A board's progress listener: updates its row, measures speed, honours ``stop``."""

    def __init__(self, row: BoardRow, on_update: UpdateFn | None, stop: threading.Event) -> None:
        self.row, self.on_update, self.stop = row, on_update, stop
        self.dev: Device | None = None
        self._key: tuple[str, str] = ("", "")
        self._start = 0.0

    def __call__(self, ev: Progress) -> None:
        if self.stop.is_set():
            # the burn pipeline turns this into a precise Interrupted at a frame boundary
            raise KeyboardInterrupt
        row = self.row
        now = self.dev.link.now() if self.dev is not None else 0.0
        if (ev.stage, ev.label) != self._key:
            self._key, self._start = (ev.stage, ev.label), now
            row.bytes_per_second = 0.0
        row.stage, row.done, row.total = ev.stage, ev.done, ev.total
        if ev.total and now > self._start:
            row.bytes_per_second = ev.done / (now - self._start)
        if self.on_update is not None:
            self.on_update(row, ev)


def _identify(dev: Device, row: BoardRow) -> None:
    s2 = dev.require_stage2()
    if s2.has(CAP_IDENTIFY):
        info = s2.identify()
        row.unique_id, row.jedec_id = info.unique_id.hex(), info.jedec_id


def run_board(
    row: BoardRow,
    operation: Operation,
    *,
    on_update: UpdateFn | None = None,
    stop: threading.Event | None = None,
    claimed: bool = False,
    connection: ConnectOptions | None = None,
) -> BoardRow:
    """Claim the row's port, connect, identify the flash and run ``operation``; never raises.

    Errors end up in the row (``status``, ``exit_code``, ``error`` with its hint).
    ``claimed``: the caller already holds the port's claim (:func:`try_claim`).
    """
    stop = stop or threading.Event()
    tracker = _Tracker(row, on_update, stop)
    host0, cpu0 = time.monotonic(), time.thread_time()
    row.status = "running"
    try:
        claim = contextlib.nullcontext() if claimed else claim_port(row.port)
        options = replace(connection or ConnectOptions(), port=row.port, trace=None)
        with claim, options.connect(tracker) as dev:
            tracker.dev = dev
            start = dev.link.now()
            row.board = dev.board.id
            _identify(dev, row)
            row.stage = "connected"
            try:
                row.result = operation(dev, tracker, row)
            finally:
                row.seconds = dev.link.now() - start
                row.notes = list(dev.notes)
        bad = getattr(row.result, "ok", True) is False
        if bad:
            row.fail(mismatch_error(row.result))
        else:
            row.status, row.stage = "ok", "done"
    except KflashError as e:
        row.fail(e)
    except KeyboardInterrupt:  # stopped outside a burn's frame loop
        row.fail(Interrupted(f"stopped during {row.stage}", "run the operation again"))
    except Exception as e:  # a bug must not kill the worker silently: the row says it
        bug = KflashError(
            f"internal error: {type(e).__name__}: {e}", "this is a bug in kflashpy; report it"
        )
        bug.kind = "internal"
        row.fail(bug)
    row.host_seconds = time.monotonic() - host0
    row.cpu_seconds = time.thread_time() - cpu0
    if on_update is not None:
        on_update(row, None)
    return row


def run_on_boards(
    ports: Sequence[str],
    operation: Operation,
    *,
    name: str = "",
    on_update: UpdateFn | None = None,
    stop: threading.Event | None = None,
    connection: ConnectOptions | None = None,
) -> ParallelResult:
    """Run ``operation`` on every port at once (one thread each) and collect the rows.

    ``connection``: how to reach each board (board, baud, stub...; its port is each row's
    and protocol traces are off, as several boards' traces would interleave). Ctrl-C in
    the calling thread, or ``stop`` being set, interrupts every board cleanly.
    """
    if not ports:
        raise InputError("no boards to work on", "give -p PORT several times, or --ports auto")
    seen: set[str] = set()
    for port in ports:
        if port_key(port) in seen:
            raise InputError(f"{port} is given twice", "give each board's port once")
        seen.add(port_key(port))
    stop = stop or threading.Event()
    rows = [BoardRow(n, port) for n, port in enumerate(ports)]
    done = [threading.Event() for _ in rows]

    def work(row: BoardRow) -> None:
        try:
            run_board(row, operation, on_update=on_update, stop=stop, connection=connection)
        finally:
            done[row.index].set()

    for row in rows:
        threading.Thread(target=work, args=(row,), name=f"board-{row.index}", daemon=True).start()
    interrupted = False
    try:
        wait_all(done)
    except KeyboardInterrupt:
        interrupted = True
        stop.set()
        wait_all(done)
    return ParallelResult(name, rows, interrupted or stop.is_set())


def wait_all(events: Sequence[threading.Event]) -> None:
    """Wait until every event is set, in short waits that let Ctrl-C through.

    (Events rather than ``Thread.join``: a join cut short by Ctrl-C can leave the thread
    looking finished while it still runs.)
    """
    for event in events:
        while not event.wait(0.2):
            pass


# ---------------------------------------------------------------- operations


def burn_operation(plan: FlashPlan, *, reboot: bool = True, erase_all: bool = False) -> Operation:
    """Burn a checked plan (see :func:`kflashpy.isp.api.plan_burn`) on each board."""
    return lambda dev, progress, row: burn_plan_on(
        dev, plan, reboot=reboot, erase_all=erase_all, progress=progress
    )


def verify_operation(files: Sequence[tuple[int, str | os.PathLike[str] | bytes]]) -> Operation:
    """Compare each board's flash with the files (read once, before any port opens)."""
    items = verify_items(files)
    return lambda dev, progress, row: verify_on(dev, items, progress=progress)


def erase_operation(
    address: int | None = None, size: int | None = None, *, reboot: bool = False
) -> Operation:
    """Erase a region, or with neither ``address`` nor ``size`` the whole chip."""
    if (address is None) != (size is None):
        raise InputError("erase needs both --addr and --size, or --all")
    return lambda dev, progress, row: erase_device(
        dev, address, size, reboot=reboot, progress=progress
    )


def flash_id_operation() -> Operation:
    return lambda dev, progress, row: flash_id_on(dev)


PLACEHOLDERS = ("{n}", "{uid}", "{port}")


def output_name(pattern: str, row: BoardRow, several: bool) -> str:
    """The file a board's read goes to.

    ``{n}`` (1-based board number), ``{uid}`` (flash unique id) and ``{port}`` (the port
    name made file-safe) are filled in; with several boards and none of them, ``-{n}``
    goes before the suffix (``backup.bin`` -> ``backup-1.bin``, ``backup-2.bin``...).
    """
    if not any(p in pattern for p in PLACEHOLDERS):
        if not several:
            return pattern
        path = Path(pattern)
        pattern = str(path.with_name(f"{path.stem}-{{n}}{path.suffix}"))
    port = re.sub(r"[^A-Za-z0-9._-]+", "_", row.port).strip("_")
    return (
        pattern.replace("{n}", str(row.index + 1))
        .replace("{uid}", row.unique_id or f"board{row.index + 1}")
        .replace("{port}", port)
    )


def read_operation(address: int, size: int, output: str, *, several: bool = True) -> Operation:
    """Read a flash range from each board into its own file (see :func:`output_name`)."""
    taken: set[str] = set()
    lock = threading.Lock()

    def read(dev: Device, progress, row: BoardRow):
        name = output_name(output, row, several)
        with lock:
            if name in taken:
                raise InputError(
                    f"two boards would write {name}",
                    "put {n} in the output name so every board gets its own file",
                )
            taken.add(name)
        return read_on(dev, address, size, output=name, progress=progress)

    return read
