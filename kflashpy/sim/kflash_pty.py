"""Run the installed kflash.py (PyPI ``kflash``) against a virtual board on a pty.

kflash.py resets the board by toggling DTR and RTS, and the kernel refuses those ioctls
on a pseudo-terminal (ENOTTY, "Inappropriate ioctl for device"), so on `kflashpy sim
serve`'s pty it stops before its first byte. ``python -m kflashpy.sim.kflash_pty ARGS``
runs ``kflash.main()`` with ARGS in a process whose serial ports ignore exactly that
refusal: a real port still gets its modem lines. The server's reset on open
(``--on-open isp``, docs/simulator.md "Serving the board on a pty") has already put the
board in ISP mode, which is what kflash.py's reset sequence would have done.

:func:`run_kflash` runs that process against a given pty, or against a board it serves
itself for the duration of the run (``kflashpy sim kflash -- ARGS``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from ..errors import InputError


def _tolerate_pty(update: Any) -> Any:
    """A pyserial modem-line update that ignores ENOTTY (a pty has no modem lines)."""

    def apply(self: Any) -> None:
        try:
            update(self)
        except OSError as exc:
            if exc.errno != errno.ENOTTY:
                raise

    return apply


def patch_serial() -> None:
    """Make every pyserial POSIX port of this process ignore ENOTTY from DTR/RTS."""
    from serial import serialposix

    port = serialposix.Serial
    port._update_dtr_state = _tolerate_pty(port._update_dtr_state)  # type: ignore[method-assign]
    port._update_rts_state = _tolerate_pty(port._update_rts_state)  # type: ignore[method-assign]


def kflash_command(args: list[str], port: str) -> list[str]:
    """The command line that runs kflash.py with ``args`` on ``port`` (added as ``-p``
    unless ``args`` name a port themselves)."""
    if any(a in ("-p", "--port") or a.startswith("--port=") for a in args):
        raise InputError(
            "the kflash arguments name a port (-p/--port)",
            hint="leave -p out: kflashpy sim kflash passes the virtual board's pty "
            "(use --port for a board another `kflashpy sim serve` offers)",
        )
    return [sys.executable, "-m", "kflashpy.sim.kflash_pty", "-p", port, *args]


def _die_with_parent() -> None:
    """In the child: end with the parent (Linux ``PR_SET_PDEATHSIG``), so a killed
    ``kflashpy sim kflash`` leaves no kflash.py holding the pty open."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class KflashRun:
    """What a kflash.py run against a virtual board did."""

    returncode: int
    pty: str
    virtual_seconds: float | None  # None when the board belongs to another server


def run_kflash(args: list[str], *, port: str | None = None, server: Any = None) -> KflashRun:
    """Run kflash.py with ``args``: on ``port`` (a pty some `kflashpy sim serve` offers),
    or on ``server`` (a :class:`~kflashpy.sim.serve.PtyServer`), which is served until
    kflash.py exits. kflash.py's own output goes to this process's stdout/stderr."""
    if (port is None) == (server is None):
        raise InputError("run_kflash needs exactly one of port and server")
    path = port if port is not None else server.path
    cmd = kflash_command(args, path)
    if server is None:
        return KflashRun(subprocess.call(cmd, preexec_fn=_die_with_parent), path, None)
    proc = subprocess.Popen(cmd, preexec_fn=_die_with_parent)
    try:
        server.serve(until=lambda: proc.poll() is not None)
        server.step(0.0)  # the last bytes kflash.py wrote reach the board
    finally:
        if proc.poll() is None:
            proc.terminate()
        code = proc.wait()
    return KflashRun(code, path, server.board.now)


def main() -> None:
    """``python -m kflashpy.sim.kflash_pty ARGS``: kflash.py's command line."""
    try:
        import kflash
    except ImportError:
        sys.exit("kflash.py is not installed: pip install kflash==1.1.6")
    patch_serial()
    sys.argv[0] = "kflash"
    kflash.main()


if __name__ == "__main__":
    main()
