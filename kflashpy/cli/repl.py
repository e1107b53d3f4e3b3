"""``kflashpy repl``: an interactive terminal to MaixPy's REPL (and ``burn --monitor``)."""

from __future__ import annotations

import sys
from contextlib import ExitStack, contextmanager

import click

from ..errors import UsageError
from .compare import _open, repl_options
from .session import Session


@contextmanager
def _raw_keys(fd: int):
    """Keys reach the program one by one, Ctrl-C/Ctrl-D included (a terminal's raw mode)."""
    if not sys.stdin.isatty():
        yield
        return
    import termios
    import tty

    saved = termios.tcgetattr(fd)
    try:
        tty.setraw(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def check_terminal(s: Session) -> None:
    """Refuse, before anything happens (a burn...), a terminal that cannot work here."""
    if not s.port:
        raise UsageError("the terminal needs the board's port", "give -p/--port (or KFLASHPY_PORT)")
    if s.json:
        raise UsageError("the terminal is interactive: it cannot run with --json", "drop --json")
    if sys.platform == "win32":
        raise UsageError(
            "the terminal needs a POSIX console (Linux, macOS) for now",
            "on Windows use a serial terminal (PuTTY, miniterm) at 115200 baud",
        )


def monitor(
    s: Session,
    reset: bool = False,
    wait_reset: float = 0.0,
    reset_seq: str | None = None,
    timeout: float = 10.0,
) -> int:
    """Run the terminal on the session's port until Ctrl-]; return how often it reconnected."""
    from ..isp.ports import open_port
    from ..maixpy.terminal import Terminal

    check_terminal(s)
    url, baud = str(s.port), s.baud or 115200

    def show(data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    def notice(text: str) -> None:
        click.echo(f"\r\n[kflashpy: {text}]\r", err=True)

    with ExitStack() as stack:
        port = None
        if reset:  # a fresh interpreter: reset, interrupt _boot.py, back to the >>> prompt
            repl = stack.enter_context(_open(s, True, wait_reset, reset_seq, timeout))
            repl.exit_raw()
            port = repl.port
            port.write(b"\r")
        notice(f"connected to {url} at {baud} baud; Ctrl-] leaves, Ctrl-C/Ctrl-D go to the board")
        term = Terminal(lambda: open_port(url, baud), sys.stdin.fileno(), show, notice, port=port)
        with _raw_keys(sys.stdin.fileno()):
            term.run()
    notice("left the terminal")
    return term.reconnects


def register(group: click.Group) -> None:
    @group.command("repl")
    @repl_options
    @click.pass_obj
    def repl_cmd(s: Session, reset, wait_reset, reset_seq, timeout):
        """Interactive terminal to the board's REPL (Ctrl-] leaves).

        Keys go to the board as typed: Ctrl-C interrupts a script, Ctrl-D soft-reboots
        MaixPy. The terminal never resets the board unless --reset is given, and when the
        port goes away (board reset or unplugged) it reconnects.

        \b
        kflashpy -p /dev/ttyUSB0 repl
        kflashpy -p /dev/ttyUSB0 repl --reset     # reset first, skipping boot.py
        """
        n = monitor(s, reset, wait_reset, reset_seq, timeout)
        s.result = {"reconnects": n}
