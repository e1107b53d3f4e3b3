"""Serve a virtual board on a pseudo-terminal, for programs that want a real tty.

Any program that opens a serial port (kflash.py, a terminal, another flasher) can
open the pty slave path of a :class:`PtyServer`. What a pty can and cannot carry:

* Bytes both ways, at the baud rate the client set: the client's termios settings
  are visible on the master (``TCGETS2``/``tcgetattr``), so the server feeds every
  baud change to the board and a rate mismatch garbles the line as on hardware.
* No DTR/RTS (the ioctls fail with ENOTTY on a pty). The board's reset buttons are
  therefore commands of the server: :meth:`PtyServer.command` (``isp``, ``run``,
  ``dtr 0|1``, ``rts 0|1``, ``quit``), reachable through a control FIFO and, in
  ``kflashpy sim serve``, typed keys. ``on_open`` resets the board when a client
  opens the port, which is what a DTR/RTS reset sequence would have done.
* Client presence: the server does not keep the slave open, so the master reports
  a hang-up whenever no client has it open.

Virtual time. A reader thread stamps every byte the client writes with the host
clock. The host's time between two of its observable events (its previous write, or
the moment the server handed it board output) is charged as virtual time: a byte
written 0.5 s after a reply arrives 0.5 virtual seconds after that reply, however long
the emulation took meanwhile. The board runs ahead of the host clock as fast as it can
while it has something to do (bytes on the wire, a flash operation in progress, or
less than ``grace`` virtual seconds since the last byte or flash command); while it
idles waiting for the host, its clock follows the host's, as long as a client has the
port open: with nobody there, the board finishes its own work and then waits. So a
client that sleeps 0.5 s costs 0.5 virtual seconds, and emulation speed never shows up
as virtual time.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pty
import select
import stat
import struct
import termios
import threading
import time
import tty
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..errors import InputError, PortError

# Linux: struct termios2 is 44 bytes; c_ispeed/c_ospeed are the last two u32
_TCGETS2 = 0x802C542A
_TERMIOS2_SPEEDS = 36

#: baud rates of the termios Bxxx constants, for systems without TCGETS2
_BAUD_CONSTANTS = {
    getattr(termios, f"B{rate}"): rate
    for rate in (
        50, 75, 110, 134, 150, 200, 300, 600, 1200, 1800, 2400, 4800, 9600, 19200, 38400,
        57600, 115200, 230400, 460800, 500000, 576000, 921600, 1000000, 1152000, 1500000,
        2000000, 2500000, 3000000, 3500000, 4000000,
    )
    if hasattr(termios, f"B{rate}")
}  # fmt: skip

ON_OPEN = ("none", "isp", "run")
RUN_STEP = 0.02  # longest virtual time run without looking at keys, control and closes
COMMANDS = ("isp", "run", "dtr 0|1", "rts 0|1", "quit")


class Board(Protocol):
    """The part of :class:`kflashpy.sim.board.VirtualBoard` the server uses."""

    now: float
    stage: str
    flash: Any
    faults: Any
    to_board: Any
    to_host: Any

    def host_write(self, data: bytes) -> None: ...
    def host_read(self) -> bytes: ...
    def set_host_baud(self, baud: float) -> None: ...
    def set_dtr(self, asserted: bool) -> None: ...
    def set_rts(self, asserted: bool) -> None: ...
    def reset_into_isp(self) -> None: ...
    def reset_to_run(self) -> None: ...
    def run_until_time(self, t_end: float) -> None: ...
    def run_until(self, predicate: Callable[[], bool], max_s: float) -> bool: ...
    def status(self) -> dict[str, Any]: ...


def pty_baud(fd: int) -> int | None:
    """Output baud rate the client configured on the pty (read through the master)."""
    buf = bytearray(44)
    try:
        fcntl.ioctl(fd, _TCGETS2, buf)
        return struct.unpack_from("=I", buf, _TERMIOS2_SPEEDS + 4)[0] or None
    except OSError:
        pass
    try:
        return _BAUD_CONSTANTS.get(termios.tcgetattr(fd)[5])
    except termios.error:
        return None


class PtyServer:
    """Connect a virtual board to a new pty; call :meth:`serve` (or :meth:`step`).

    ``link``: also make a symlink with this name to the pty (a stable path).
    ``control``: a FIFO to create; each line written to it is a :meth:`command`.
    ``on_open``: "isp", "run" or "none" — what to do when a client opens the port.
    ``on_event(text)`` is called for connects, baud changes and commands;
    ``on_status(status)`` every ``status_interval`` host seconds with the board's
    :meth:`status` plus ``"client"`` and ``"host_seconds"``.
    """

    def __init__(
        self,
        board: Board,
        *,
        link: str | os.PathLike[str] | None = None,
        control: str | os.PathLike[str] | None = None,
        on_open: str = "isp",
        grace: float = 0.02,
        on_event: Callable[[str], None] | None = None,
        on_status: Callable[[dict[str, Any]], None] | None = None,
        status_interval: float = 0.25,
    ) -> None:
        if on_open not in ON_OPEN:
            raise InputError(f"on_open={on_open!r} is not known", hint=f"use {', '.join(ON_OPEN)}")
        self.board = board
        self.on_open = on_open
        self.grace = grace
        self.on_event = on_event
        self.on_status = on_status
        self.status_interval = status_interval
        self._master, slave = pty.openpty()
        self.path = os.ttyname(slave)
        tty.setraw(slave)  # no echo of board output before the client configures the port
        os.close(slave)
        os.set_blocking(self._master, False)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._poll = select.poll()
        self._poll.register(self._wake_r, select.POLLIN)
        self.link = self._make_link(link) if link else None
        self.control = Path(control) if control else None
        self._control_fds: tuple[int, int] | None = None
        self._control_buf = b""
        if self.control is not None:
            self._open_control()
        self._extra: dict[int, Callable[[], None]] = {}
        self.client = False
        self.clients = 0
        self.baud: int | None = None
        self._pending_out = b""
        self._stopped = False
        self._t0 = time.monotonic()
        # (real, virtual) of the last event the host could observe: the reference for
        # charging the host's own time
        self._ref = (self._t0, board.now)
        self._last_activity = board.now
        self._counters: tuple[int, ...] = ()
        self._next_status = 0.0
        #: events from the reader thread: (host time, kind, value)
        self._inbox: deque[tuple[float, str, Any]] = deque()
        self._reader = threading.Thread(target=self._read_loop, name="pty-reader", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------ setup
    def _make_link(self, link: str | os.PathLike[str]) -> Path:
        path = Path(link)
        if path.is_symlink():
            path.unlink()
        elif path.exists():
            raise InputError(
                f"cannot create the link {path}: a file of that name exists",
                hint="choose another --link path or remove the file",
            )
        path.symlink_to(self.path)
        return path

    def _open_control(self) -> None:
        assert self.control is not None
        path = self.control
        if path.exists() and not stat.S_ISFIFO(path.stat().st_mode):
            raise InputError(
                f"control path {path} exists and is not a FIFO",
                hint="choose another --control path or remove the file",
            )
        if not path.exists():
            os.mkfifo(path)
        reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        # keep a writer open ourselves so the FIFO never reports end-of-file
        keeper = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        self._control_fds = (reader, keeper)
        self._poll.register(reader, select.POLLIN)

    def add_reader(self, fd: int, callback: Callable[[], None]) -> None:
        """Call ``callback()`` whenever ``fd`` is readable (the CLI's keyboard)."""
        self._extra[fd] = callback
        self._poll.register(fd, select.POLLIN)

    # ------------------------------------------------------------------ control
    def command(self, text: str) -> None:
        """Run one control command: isp, run, dtr 0|1, rts 0|1, quit."""
        words = text.strip().lower().split()
        if not words:
            return
        board = self.board
        if words == ["isp"]:
            board.reset_into_isp()
        elif words == ["run"]:
            board.reset_to_run()
        elif words == ["quit"]:
            self._stopped = True
        elif len(words) == 2 and words[0] in ("dtr", "rts") and words[1] in ("0", "1"):
            setter = board.set_dtr if words[0] == "dtr" else board.set_rts
            setter(words[1] == "1")
        else:
            self._event(f"unknown command {text.strip()!r} (use: {', '.join(COMMANDS)})")
            return
        self._last_activity = board.now
        self._mark()
        self._event(f"command: {' '.join(words)}")

    def stop(self) -> None:
        """Make :meth:`serve` return (thread-safe: only sets a flag)."""
        self._stopped = True

    @property
    def stopped(self) -> bool:
        return self._stopped

    def _event(self, text: str) -> None:
        if self.on_event is not None:
            self.on_event(text)

    # ------------------------------------------------------------------ time
    def _mark(self, real: float | None = None) -> None:
        """The host just saw or did something: charge its time from here on."""
        self._ref = (time.monotonic() if real is None else real, self.board.now)

    def _host_time(self, real: float) -> float:
        """Virtual time of a host action at host time ``real``."""
        r0, v0 = self._ref
        return max(self.board.now, v0 + (real - r0))

    def _busy(self) -> bool:
        """Does the board have work it can do without the host? (see module doc)"""
        board = self.board
        counters = (
            board.to_board.bytes_sent,
            board.to_host.bytes_sent,
            board.flash.stats.commands,
        )
        if counters != self._counters:
            self._counters = counters
            self._last_activity = board.now
        return (
            board.to_board.pending() > 0
            or board.to_host.pending() > 0
            or board.flash.busy_until > board.now
            or board.now - self._last_activity < self.grace
        )

    # ------------------------------------------------------------------ loop
    def serve(self, until: Callable[[], bool] | None = None) -> None:
        """Run until :meth:`stop`, a ``quit`` command, or ``until()`` is true."""
        while not self._stopped and not (until is not None and until()):
            self.step()

    def step(self, max_wait: float = 0.01) -> None:
        """One round: take the host's events, advance the board, deliver its output."""
        self._take_events()
        board = self.board
        busy = self._busy()
        if busy:
            board.run_until_time(board.now + min(self.grace, 5e-3))
        elif self.client:  # with nobody on the port, nobody's time is charged
            target = self._host_time(time.monotonic())
            if board.now < target:
                board.run_until_time(min(target, board.now + 0.05))
        self._deliver()
        if board.faults.disconnected:
            # like a USB adapter pulled out: the port goes away and the server stops
            self._event("disconnected (fault injection)")
            self._stopped = True
            return
        idle = not busy and (not self.client or board.now >= self._host_time(time.monotonic()))
        self._wait(max_wait if idle and not self._pending_out and not self._inbox else 0.0)
        self._report()

    def _wait(self, timeout: float) -> None:
        for fd, _ in self._poll.poll(timeout * 1000):
            if fd == self._wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)
            elif self._control_fds and fd == self._control_fds[0]:
                self._read_control()
            elif fd in self._extra:
                self._extra[fd]()

    def _take_events(self) -> None:
        """Apply the reader thread's events at the virtual time the host made them.

        Only a connected client's time is charged. Bytes of a client that has closed the
        port since (its close is queued behind them) arrive at once, and the time before
        a close or before the next client opens the port is not charged: nobody waits
        for those answers, and charging it would make the next client wait for a board
        busy with a dead session (or an idle server spin, following the host clock with
        a polled program)."""
        board = self.board
        while self._inbox and not self._stopped:
            real, kind, value = self._inbox.popleft()
            if self.client and kind != "close" and not self._closing():
                self._run_to(self._host_time(real))  # the host's own time before this event
            if kind == "data":
                board.host_write(value)
                self._last_activity = board.now
            elif kind == "baud":
                self.baud = value
                board.set_host_baud(value)
                self._event(f"host baud {value}")
            elif kind == "open":
                self.client = True
                self.clients += 1
                self._event(f"client opened {self.path}")
                if self.on_open != "none":
                    self.command(self.on_open)
                    # the reset is over before the client's first byte, as after a DTR/RTS
                    # sequence: bytes sent while the ROM starts up would be lost
                    board.run_until(lambda: board.stage not in ("reset", "rom"), 0.1)
            elif kind == "close":
                self.client = False
                self._pending_out = b""
                self._event("client closed the port")
            self._mark(real)

    def _closing(self) -> bool:
        """Is a close of the port queued (the client the queued bytes came from is gone)?"""
        return any(kind == "close" for _, kind, _ in self._inbox)

    def _run_to(self, stamp: float) -> None:
        """Run the board to ``stamp`` in short steps, staying responsive meanwhile: keys
        and control commands are taken between steps, and the run ends early when the
        server is stopped or the client closes the port."""
        board = self.board
        while board.now < stamp and not self._stopped:
            board.run_until_time(min(stamp, board.now + RUN_STEP))
            self._wait(0.0)
            if self._closing():
                return

    def _read_loop(self) -> None:
        """Reader thread: stamp the client's bytes, baud changes, opens and closes."""
        poll = select.poll()
        poll.register(self._master, select.POLLIN)
        client = False
        baud = None
        while not self._stopped:
            try:
                events = poll.poll(5)
            except (OSError, ValueError):
                return
            flags = 0
            for _, ev in events:
                flags |= ev
            if flags & select.POLLIN:
                with contextlib.suppress(BlockingIOError, OSError):
                    data = os.read(self._master, 65536)
                    if data:
                        if not client:
                            client = True
                            self._post("open", None)
                        baud = self._post_baud(baud)
                        self._post("data", data)
            if flags & (select.POLLHUP | select.POLLNVAL):
                if client:
                    client = False
                    baud = None
                    self._post("close", None)
                time.sleep(0.01)  # a hung-up master is always "ready": do not spin
                continue
            if not client:
                client = True
                self._post("open", None)
            baud = self._post_baud(baud)

    def _post_baud(self, known: int | None) -> int | None:
        baud = pty_baud(self._master)
        if baud and baud != known:
            self._post("baud", baud)
            return baud
        return known

    def _post(self, kind: str, value: Any) -> None:
        self._inbox.append((time.monotonic(), kind, value))
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"!")

    def _read_control(self) -> None:
        assert self._control_fds is not None
        try:
            chunk = os.read(self._control_fds[0], 4096)
        except BlockingIOError:
            return
        self._control_buf += chunk
        *lines, self._control_buf = self._control_buf.split(b"\n")
        for line in lines:
            self.command(line.decode("utf-8", "replace"))

    def _deliver(self) -> None:
        out = self.board.host_read()
        if not self.client:
            return  # nobody listens: the bytes are lost, as on an unopened port
        self._pending_out += out
        while self._pending_out:
            try:
                n = os.write(self._master, self._pending_out)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EIO:
                    self._pending_out = b""
                    return
                raise PortError(f"pty {self.path}: {exc.strerror}") from None
            self._pending_out = self._pending_out[n:]
            self._mark()

    def _report(self) -> None:
        if self.on_status is None:
            return
        now = time.monotonic()
        if now < self._next_status:
            return
        self._next_status = now + self.status_interval
        self.on_status(self.status())

    def status(self) -> dict[str, Any]:
        """Board status plus the server's view (client present, host seconds)."""
        info = dict(self.board.status())
        info["client"] = self.client
        info["pty"] = self.path
        info["host_seconds"] = time.monotonic() - self._t0
        return info

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        """Close the pty and remove the link and FIFO (the board stays open)."""
        self._stopped = True
        self._reader.join(5)
        if self._master >= 0:
            for fd in (self._master, self._wake_r, self._wake_w):
                os.close(fd)
            self._master = -1
        if self._control_fds is not None:
            for fd in self._control_fds:
                os.close(fd)
            self._control_fds = None
            if self.control is not None and self.control.exists():
                self.control.unlink()
        if self.link is not None and self.link.is_symlink():
            self.link.unlink()

    def __enter__(self) -> PtyServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
