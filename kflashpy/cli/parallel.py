"""Rendering a command that runs on several boards at once (-p PORT -p PORT..., --ports auto).

The work is :func:`kflashpy.isp.parallel.run_on_boards`; this module only draws its rows:
a live table on a terminal (redrawn in place on stderr), one line per stage change in a
log, a final table on stdout, and with ``--json`` one document with a row per board.
The exit code is the worst board's.
"""

from __future__ import annotations

import sys
import threading
import time

from ..errors import UsageError
from ..isp import parallel
from ..isp.connect import ConnectOptions
from ..isp.parallel import BoardRow
from ..progress import Progress
from .session import Session

HEADERS = ("port", "board", "flash unique id", "stage", "progress", "speed", "result")
#: shortest time between two redraws of the live table (finished rows redraw at once)
REDRAW_S = 0.1


def row_cells(row: BoardRow) -> list[str]:
    progress = f"{row.done * 100 // row.total}%" if row.total else ""
    speed = f"{row.bytes_per_second / 1024:.1f} KiB/s" if row.bytes_per_second else ""
    result = row.status if row.status != "running" else ""
    if row.error:
        result += f": {row.error['message']}"
    return [row.port, row.board, row.unique_id or "-", row.stage, progress, speed, result]


class LiveView:
    """Draws the rows as the workers update them (called from their threads)."""

    def __init__(self, s: Session, ports: list[str]) -> None:
        self.s = s
        self.rows: dict[int, BoardRow] = {}
        self.ports = ports
        self.tty = sys.stderr.isatty() and s.show_progress
        self._lock = threading.Lock()
        self._drawn = 0
        self._last = 0.0
        self._stages: dict[int, str] = {}

    def __call__(self, row: BoardRow, ev: Progress | None) -> None:
        if self.s.json or self.s.quiet:
            return
        with self._lock:
            self.rows[row.index] = row
            if self.tty:
                now = time.monotonic()
                if ev is None or now - self._last >= REDRAW_S:
                    self._last = now
                    self._redraw()
            elif ev is None or self._stages.get(row.index) != row.stage:
                self._stages[row.index] = row.stage
                what = row.status if ev is None else row.stage
                self.s.echo(f"{row.port}: {what}", err=True)

    def _redraw(self) -> None:
        lines = [list(HEADERS)] + [
            row_cells(self.rows[i]) if i in self.rows else [p, "", "", "waiting", "", "", ""]
            for i, p in enumerate(self.ports)
        ]
        widths = [min(max(len(r[i]) for r in lines), 40) for i in range(len(HEADERS))]
        out = f"\x1b[{self._drawn}F" if self._drawn else ""
        for cells in lines:
            text = "  ".join(c[:w].ljust(w) for c, w in zip(cells, widths, strict=True))
            out += "\x1b[2K" + text.rstrip() + "\n"
        self._drawn = len(lines)
        sys.stderr.write(out)
        sys.stderr.flush()


def run_parallel(
    s: Session, name: str, operation: parallel.Operation, *, stub, reset_seq, rom_baud
) -> parallel.ParallelResult:
    """Run ``operation`` on every board of the session; render; raise the worst error."""
    if s.ports == "auto" and s.port_list:
        raise UsageError("give either -p PORT... or --ports auto, not both")
    ports = parallel.auto_ports() if s.ports == "auto" else list(s.port_list)
    connection = ConnectOptions(
        board=s.board, baud=s.baud, stub=stub, reset_sequence=reset_seq, rom_baud=rom_baud
    )
    view = LiveView(s, ports)
    result = parallel.run_on_boards(
        ports, operation, name=name, on_update=view, connection=connection
    )
    s.table(HEADERS[:3] + ("seconds", "result"), [_final(row) for row in result.boards])
    for row in result.boards:
        if row.error and row.error["hint"]:
            s.info(f"{row.port}: hint: {row.error['hint']}")
    s.result = result.to_dict()
    error = result.error()
    if error is not None:
        raise error
    return result


def _final(row: BoardRow) -> list[str]:
    port, board, uid, *_, result = row_cells(row)
    return [port, board, uid, f"{row.seconds:.2f}", result]
