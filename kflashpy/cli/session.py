"""State shared by all commands of one CLI invocation, and how output is rendered.

The CLI layer only parses and renders. A command calls the library, stores a
JSON-able ``result`` on the :class:`Session`, and uses :meth:`Session.out` /
:meth:`Session.table` for human output. With ``--json`` human output is suppressed
and ``main`` prints one versioned envelope instead. Data goes to stdout; logs,
progress and errors go to stderr.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from ..progress import Progress, ProgressFn

JSON_SCHEMA = {"major": 1, "minor": 0}

#: commands that run on every board of -p PORT -p PORT... / --ports auto at once (they
#: check :attr:`Session.several_boards`; every other command reads :attr:`Session.port`)
MULTI_BOARD_COMMANDS = frozenset({"burn", "verify", "erase", "read", "flash-id"})


@dataclass
class Session:
    """Global options and the outcome of the command being run."""

    #: every -p given (several: the board commands run on all of them at once)
    port_list: tuple[str, ...] = ()
    ports: str | None = None  # --ports auto
    baud: int | None = None
    board: str | None = None
    json: bool = False
    verbose: int = 0
    quiet: bool = False
    color: str = "auto"
    show_progress: bool = True
    result: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    #: the command already showed its error (e.g. check-layout's findings): main adds no copy
    error_shown: bool = False

    @property
    def port(self) -> str | None:
        """The one board's port (None: auto-detect); refused when several boards were named."""
        if self.several_boards:
            ctx = click.get_current_context(silent=True)
            command = ctx.command_path.removeprefix("kflashpy ") if ctx else "this command"
            raise click.UsageError(
                f"{command} works on one board: give -p once (several boards at once: "
                f"{', '.join(sorted(MULTI_BOARD_COMMANDS))})"
            )
        return self.port_list[0] if self.port_list else None

    @port.setter
    def port(self, value: str | Sequence[str] | None) -> None:
        """-p: one port, or the tuple of a repeated -p."""
        if value is None or isinstance(value, str):
            self.port_list = (value,) if value else ()
        else:
            self.port_list = tuple(value)

    @property
    def several_boards(self) -> bool:
        return self.ports == "auto" or len(self.port_list) > 1

    # --- colour -------------------------------------------------------------------

    def use_color(self, stream=None) -> bool:
        """Colour only when asked for, or on a real terminal without NO_COLOR/TERM=dumb."""
        if self.color == "always":
            return True
        if self.color == "never" or os.environ.get("NO_COLOR"):
            return False
        if os.environ.get("TERM") == "dumb":
            return False
        stream = stream or sys.stdout
        return bool(getattr(stream, "isatty", lambda: False)())

    def style(self, text: str, **styles: Any) -> str:
        return click.style(text, **styles) if self.use_color() else text

    def echo(self, text: str = "", err: bool = False) -> None:
        """``click.echo`` that keeps colours when ``--color always`` (click strips them off a TTY)."""
        click.echo(text, err=err, color=True if self.color == "always" else None)

    # --- human output ---------------------------------------------------------------

    def out(self, text: str = "") -> None:
        """A line of the result on stdout (suppressed by --json; -q hides logs, not this)."""
        if not self.json:
            self.echo(text)

    def info(self, text: str) -> None:
        """A log line on stderr (suppressed by --json and -q)."""
        if not self.json and not self.quiet:
            self.echo(text, err=True)

    def debug(self, text: str) -> None:
        """A detail on stderr shown only with -v (never in --json)."""
        if self.verbose and not self.json:
            self.echo(text, err=True)

    def warn(self, text: str) -> None:
        """A warning: stderr in human mode (not with -q), collected into the --json envelope."""
        self.warnings.append(text)
        if not self.json and not self.quiet:
            self.echo(self.style("warning: ", fg="yellow") + text, err=True)

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """A plain aligned table of the result, within the terminal's width (80 columns
        when not a terminal): a long last column (free text) wraps under itself."""
        if self.json:
            return
        cells = [[str(c) for c in headers]] + [[str(c) for c in r] for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
        room = table_width() - sum(widths[:-1]) - 2 * (len(widths) - 1)
        if widths[-1] > room >= 12:
            widths[-1] = room
        for n, row in enumerate(cells):
            last = textwrap.wrap(row[-1], widths[-1], break_on_hyphens=False) or [""]
            for k, text in enumerate(last):
                lead = row[:-1] if k == 0 else [""] * (len(row) - 1)
                line = "  ".join(c.ljust(w) for c, w in zip([*lead, text], widths, strict=True))
                self.echo(self.style(line.rstrip(), bold=True) if n == 0 else line.rstrip())

    # --- progress ---------------------------------------------------------------------

    def progress(self) -> ProgressFn | None:
        """A progress listener: tqdm bars on a terminal, milestone lines in logs.

        With --json the bars still go to stderr when it is a terminal (stdout keeps the
        one JSON document); milestone lines would only clutter a captured log.
        """
        tty = sys.stderr.isatty()
        if self.quiet or not self.show_progress or (self.json and not tty):
            return None
        return _ProgressRenderer(tty=tty)


def table_width() -> int:
    """Columns a table may use: the terminal's, or 80 when output is not a terminal."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size((80, 24)).columns
    return 80


def short_label(label: str) -> str:
    """A progress label without its directories (``build/out/fw.bin`` -> ``fw.bin``,
    ``dist/app.kfpkg:m.kmodel`` -> ``app.kfpkg:m.kmodel``); port URLs stay whole."""
    if "/" not in label or "://" in label:
        return label
    return ":".join(os.path.basename(part) or part for part in label.split(":"))


class _ProgressRenderer:
    """Turns :class:`Progress` events into tqdm bars (TTY) or 25 % milestone lines."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self._bar = None
        self._key: tuple[str, str] | None = None
        self._milestone = 0

    def __call__(self, ev: Progress) -> None:
        key = (ev.stage, short_label(ev.label))
        if key != self._key:
            self.close()
            self._key = key
            self._milestone = 0
            if ev.message:
                click.echo(ev.message, err=True)
            if ev.total and self.tty:
                from tqdm import tqdm

                self._bar = tqdm(
                    total=ev.total,
                    desc=f"{ev.stage} {key[1]}".strip(),
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    leave=False,
                    file=sys.stderr,
                )
        elif ev.message and not ev.total:
            click.echo(ev.message, err=True)
        if self._bar is not None:
            self._bar.update(ev.done - self._bar.n)
        elif ev.total and not self.tty:
            pct = ev.done * 100 // ev.total
            while self._milestone <= pct and self._milestone <= 100:
                if self._milestone:
                    click.echo(f"{ev.stage} {key[1]}: {self._milestone}%", err=True)
                self._milestone += 25
        if ev.total and ev.done >= ev.total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
