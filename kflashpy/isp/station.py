"""A production station: burn and verify every board as it is plugged in, until stopped.

The station watches a *port source* (a function that lists the ports present now: the
K210 USB bridges by default, or a glob of links such as those ``kflashpy sim serve
--link`` makes, so hot-plug can be rehearsed on virtual boards). A port that appears is
claimed (:func:`kflashpy.isp.parallel.try_claim`: never two workers on one port) and a
worker burns, verifies and records the board on it while the station keeps watching;
once done, the port must disappear (the board is unplugged) before a board on it is
burned again. A failing board is recorded and never stops the others. ::

    from kflashpy.isp import station
    plan = station.load_station_plan("line.toml")
    with station.YieldReport("yield") as report:      # yield.csv and yield.jsonl
        st = station.Station(plan, station.usb_source(), report=report, log_dir="logs")
        summary = st.run()                               # until Ctrl-C or st.stop.set()
    print(summary.to_dict())

Every board gets a log file and one :class:`YieldRecord` (a CSV row and a JSON line,
written as soon as the board is done, so the report is complete whenever the station
stops): its serial number (the flash's 64-bit unique id and JEDEC id), times, bytes
written and skipped, the verify result, and the error with its hint.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from ..errors import EXIT_OK, InputError
from ..image.plan import FlashPlan
from ..progress import Progress
from ..units import parse_int

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib
from .api import erase_device, plan_burn, regions_of
from .burn import BurnResult, burn_on
from .connect import ConnectOptions, Device
from .flashops import VerifyResult, verify_on
from .parallel import BoardRow, port_key, release, run_board, try_claim, wait_all
from .ports import candidates

#: a port source: the ports present right now
PortSource = Callable[[], Iterable[str]]

PLAN_KEYS = ("board", "baud", "stub", "layout", "verify", "erase", "reboot", "kfpkg", "file")
ERASE_MODES = ("none", "chip")


@dataclass
class StationPlan:
    """What the station does to every board."""

    plan: FlashPlan
    source: str  # the plan file or kfpkg it came from
    board: str | None = None
    baud: int | None = None
    stub: str | None = None
    verify: bool = True  # hash every region on the board after burning
    erase: str = "none"  # "chip": erase the whole chip first
    reboot: bool = True

    def connection(self) -> ConnectOptions:
        """How the station reaches each board (its port is each board's own)."""
        return ConnectOptions(board=self.board, baud=self.baud, stub=self.stub)


def load_station_plan(
    path: str | os.PathLike[str], *, board: str | None = None, force: bool = False
) -> StationPlan:
    """A plan from a TOML plan file (``*.toml``, see docs/production.md), else a kfpkg::

        board = "maix-bit"        # also: baud, stub, layout
        verify = true             # on-board SHA-256 of every region after the burn
        erase = "none"            # or "chip": whole-chip erase first
        reboot = true
        kfpkg = "app.kfpkg"       # and/or [[file]] tables:
        [[file]]
        address = 0x300000
        path = "model.kmodel"     # relative to the plan file

    ``board`` (the command line's) wins over the file's. Layout checks run here, once.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such plan file", "give a kfpkg or a station plan (.toml)")
    if path.suffix.lower() != ".toml":
        return StationPlan(plan_burn(kfpkg=path, board=board, force=force), str(path), board)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: not a TOML plan: {e}", "see docs/production.md") from e
    unknown = sorted(set(doc) - set(PLAN_KEYS))
    if unknown:
        raise InputError(
            f"{path}: unknown plan key {unknown[0]!r}", f"keys: {', '.join(PLAN_KEYS)}"
        )
    erase = doc.get("erase", "none")
    if erase not in ERASE_MODES:
        raise InputError(f"{path}: erase = {erase!r}", 'use erase = "none" or "chip"')
    base = path.parent
    files = []
    for n, entry in enumerate(doc.get("file", [])):
        if not isinstance(entry, dict) or set(entry) != {"address", "path"}:
            raise InputError(
                f"{path}: [[file]] number {n + 1} needs exactly address and path",
                'write [[file]] address = 0x300000, path = "model.kmodel"',
            )
        files.append((parse_int(entry["address"], "address"), base / entry["path"]))
    kfpkg = base / doc["kfpkg"] if "kfpkg" in doc else None
    board = board or doc.get("board")
    plan = plan_burn(files, kfpkg=kfpkg, board=board, layout=doc.get("layout"), force=force)
    baud = parse_int(doc["baud"], "baud") if "baud" in doc else None
    return StationPlan(
        plan,
        str(path),
        board,
        baud,
        doc.get("stub"),
        bool(doc.get("verify", True)),
        erase,
        bool(doc.get("reboot", True)),
    )


# ---------------------------------------------------------------- port sources


def usb_source() -> PortSource:
    """Ports with a K210 USB bridge's VID/PID (what `kflashpy ports` lists)."""
    return lambda: [c.device for c in candidates()]


def glob_source(pattern: str) -> PortSource:
    """Paths matching ``pattern`` that lead to an existing device (dangling links skipped)."""
    return lambda: sorted(p for p in glob.glob(pattern) if os.path.exists(p))


# ---------------------------------------------------------------- one board


@dataclass
class StationBurn:
    """What the station did to one board."""

    burn: BurnResult
    verify: VerifyResult | None
    erased: str = ""

    @property
    def ok(self) -> bool:
        return self.verify is None or self.verify.ok

    @property
    def mismatches(self) -> list:
        return self.verify.mismatches if self.verify is not None else []

    def to_dict(self) -> dict[str, Any]:
        return {
            "burn": self.burn.to_dict(),
            "verify": self.verify.to_dict() if self.verify is not None else None,
            "erased": self.erased or None,
        }


def station_operation(plan: StationPlan):
    """The work done on each board: erase (if asked), burn, verify (if asked), reboot."""
    regions = regions_of(plan.plan)

    def work(dev: Device, progress, row: BoardRow) -> StationBurn:
        erased = ""
        if plan.erase == "chip":
            erased = erase_device(dev, progress=progress).method
        result = burn_on(dev, regions, reboot=False, progress=progress)
        verify = verify_on(dev, plan.plan.writes, progress=progress) if plan.verify else None
        if plan.reboot and (verify is None or verify.ok):
            result.rebooted = dev.reboot()
        return StationBurn(result, verify, erased)

    return work


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class YieldRecord:
    """One board's line in the yield report."""

    seq: int
    port: str
    serial: str  # flash unique id + JEDEC id ("" when the flasher cannot identify)
    unique_id: str
    jedec_id: str
    start: str  # ISO 8601, UTC
    end: str
    duration_s: float  # host seconds, port opened to port closed
    port_seconds: float  # on the port's clock (virtual on sim://)
    bytes_written: int
    bytes_skipped: int
    verify: str  # "ok", "mismatch", "not run"
    result: str  # "pass", "fail", "interrupted"
    exit_code: int
    error: str
    hint: str
    log: str

    @classmethod
    def from_row(cls, row: BoardRow, start: str, end: str, log: str) -> YieldRecord:
        done: StationBurn | None = row.result
        written = skipped = 0
        verify = "not run"
        if done is not None:
            for r in done.burn.regions:
                written += r.done if r.status == "written" else 0
                skipped += r.size if r.status == "skipped" else 0
            if done.verify is not None:
                verify = "ok" if done.verify.ok else "mismatch"
        result = "pass" if row.exit_code == EXIT_OK else row.status
        result = "fail" if result not in ("pass", "interrupted") else result
        return cls(
            row.index,
            row.port,
            row.serial,
            row.unique_id,
            f"{row.jedec_id:06X}" if row.jedec_id is not None else "",
            start,
            end,
            round(row.host_seconds, 3),
            round(row.seconds, 4),
            written,
            skipped,
            verify,
            result,
            row.exit_code,
            row.error["message"] if row.error else "",
            row.error["hint"] if row.error else "",
            log,
        )


FIELDS = tuple(YieldRecord.__dataclass_fields__)


@dataclass
class StationSummary:
    boards: int = 0
    passed: int = 0
    failed: int = 0
    interrupted: int = 0
    mean_seconds: float = 0.0  # mean host duration of the passed boards
    exit_code: int = EXIT_OK  # the worst board's

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class YieldReport:
    """``PREFIX.csv`` and ``PREFIX.jsonl``, appended to (a header starts a new CSV)."""

    def __init__(self, prefix: str | os.PathLike[str]) -> None:
        prefix = Path(prefix)
        self.csv_path = prefix.with_name(prefix.name + ".csv")
        self.jsonl_path = prefix.with_name(prefix.name + ".jsonl")
        try:
            prefix.parent.mkdir(parents=True, exist_ok=True)
            new = not self.csv_path.exists() or self.csv_path.stat().st_size == 0
            # open for the station's lifetime, closed by close() / the with block
            self._csv: IO[str] = open(self.csv_path, "a", newline="", encoding="utf-8")  # noqa: SIM115
            self._jsonl: IO[str] = open(self.jsonl_path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as e:
            raise InputError(
                f"cannot write the yield report {prefix}: {e}", "check the path"
            ) from e
        self._writer = csv.DictWriter(self._csv, fieldnames=FIELDS)
        if new:
            self._writer.writeheader()
        self._lock = threading.Lock()
        self.records: list[YieldRecord] = []

    def add(self, record: YieldRecord) -> None:
        """Write a board's line to both files at once (flushed: a crash keeps it)."""
        with self._lock:
            self.records.append(record)
            row = asdict(record)
            self._writer.writerow(row)
            self._jsonl.write(json.dumps(row) + "\n")
            self._csv.flush()
            self._jsonl.flush()

    def summary(self) -> StationSummary:
        with self._lock:
            recs = list(self.records)
        passed = [r for r in recs if r.result == "pass"]
        return StationSummary(
            boards=len(recs),
            passed=len(passed),
            failed=sum(r.result == "fail" for r in recs),
            interrupted=sum(r.result == "interrupted" for r in recs),
            mean_seconds=round(sum(r.duration_s for r in passed) / len(passed), 3)
            if passed
            else 0.0,
            exit_code=max((r.exit_code for r in recs), default=EXIT_OK),
        )

    def close(self) -> None:
        self._csv.close()
        self._jsonl.close()

    def __enter__(self) -> YieldReport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: station events for a renderer: ("waiting", None), ("start", row), ("done", record),
#: ("unplugged", port); called from the station's and the workers' threads
EventFn = Callable[[str, Any], None]


class _BoardLog:
    """A board's log file: progress messages and stage changes, with host timestamps."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f = open(path, "w", encoding="utf-8")  # noqa: SIM115 (closed by close())
        self._stage = ""

    def line(self, text: str) -> None:
        self._f.write(f"{_now()} {text}\n")

    def __call__(self, row: BoardRow, ev: Progress | None) -> None:
        if ev is None:
            return
        if ev.stage != self._stage:
            self._stage = ev.stage
            self.line(f"stage {ev.stage} {ev.label}".rstrip())
        if ev.message:
            self.line(ev.message)

    def close(self, row: BoardRow) -> None:
        self.line(f"serial {row.serial or 'unknown'}; board {row.board or '?'}")
        for note in row.notes:
            self.line(f"note: {note}")
        if row.result is not None:
            self.line("result: " + json.dumps(row.result.to_dict()))
        if row.error:
            self.line(f"error: {row.error['message']}")
            if row.error["hint"]:
                self.line(f"hint: {row.error['hint']}")
        self.line(f"end: {row.status}")
        self._f.close()


class Station:
    """Watch ``source``; burn every board that appears; record it; wait for its unplug.

    ``run()`` returns when ``stop`` is set (or Ctrl-C reaches the calling thread), or
    after ``max_boards`` boards; boards in progress are then interrupted cleanly at their
    next step and recorded, so the report is complete.
    """

    def __init__(
        self,
        plan: StationPlan,
        source: PortSource,
        *,
        report: YieldReport,
        log_dir: str | os.PathLike[str],
        poll: float = 0.25,
        max_boards: int | None = None,
        on_event: EventFn | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.plan, self.source, self.report = plan, source, report
        self.log_dir = Path(log_dir)
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"cannot create the log folder {self.log_dir}: {e}", "") from e
        self.poll, self.max_boards = poll, max_boards
        self.on_event = on_event or (lambda kind, what: None)
        self.stop = stop or threading.Event()
        self._operation = station_operation(plan)
        self._seq = 0

    def _worker(self, row: BoardRow, done: threading.Event) -> None:
        try:
            self._burn(row)
        finally:
            done.set()

    def _burn(self, row: BoardRow) -> None:
        log = _BoardLog(self.log_dir / f"board-{row.index:04d}.log")
        log.line(f"port {row.port}; plan {self.plan.source}")
        start = _now()
        try:
            run_board(
                row,
                self._operation,
                on_update=log,
                stop=self.stop,
                claimed=True,
                connection=self.plan.connection(),
            )
        finally:
            release(row.port)
            log.close(row)
        record = YieldRecord.from_row(row, start, _now(), str(log.path))
        self.report.add(record)
        self.on_event("done", record)

    def _start(self, port: str) -> threading.Event | None:
        """Start a worker on ``port``; returns the event it sets when done."""
        if not try_claim(port):  # another worker of this process drives it
            return None
        self._seq += 1
        row = BoardRow(self._seq, port)
        done = threading.Event()
        worker = threading.Thread(
            target=self._worker, args=(row, done), name=f"station-{self._seq}", daemon=True
        )
        worker.start()
        self.on_event("start", row)
        return done

    def _present(self) -> dict[str, str]:
        present: dict[str, str] = {}
        for port in self.source():
            present.setdefault(port_key(port), port)  # two links to one device: one board
        return present

    def run(self) -> StationSummary:
        active: dict[str, threading.Event] = {}  # port -> its worker's "done"
        plugged: set[str] = set()  # done, waiting to be unplugged
        self.on_event("waiting", None)
        try:
            while not self.stop.is_set():
                present = self._present()
                for key in plugged - present.keys():
                    self.on_event("unplugged", key)
                plugged &= present.keys()
                for key, done in list(active.items()):
                    if done.is_set():
                        del active[key]
                        plugged.add(key)
                full = self.max_boards is not None and self._seq >= self.max_boards
                if full and not active:
                    break
                for key, port in present.items():
                    if full or key in active or key in plugged:
                        continue
                    started = self._start(port)
                    if started is not None:
                        active[key] = started
                        full = self.max_boards is not None and self._seq >= self.max_boards
                self.stop.wait(self.poll)
        except KeyboardInterrupt:
            pass
        finally:
            self.stop.set()
            wait_all(list(active.values()))
        return self.report.summary()
