"""An interactive terminal to the board's REPL (``kflashpy repl``, ``burn --monitor``).

Keys go to the board as they are typed (Ctrl-C and Ctrl-D included: MaixPy's REPL
interrupts and soft-reboots with them); Ctrl-] leaves. What the board sends is shown
as it arrives. When the port goes away (the board was unplugged, or a reset made its
USB bridge re-enumerate), the terminal says so and reopens it until it is back, so a
board reset never ends the session.

The loop only needs a file descriptor for keys and a callable for output, so it runs
the same on a real terminal (the CLI puts it in raw mode) and under a pty in tests.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from contextlib import suppress

import serial

from ..errors import PortError

#: the key that leaves the terminal (Ctrl-], as in miniterm and mpremote)
EXIT_KEY = b"\x1d"
#: how long one read of the port may wait for the board (seconds)
POLL = 0.02


class Terminal:
    """Copies keys to the board and the board's output to the screen until Ctrl-].

    ``open_port`` opens the board's port (never resetting it); ``notice`` receives
    the terminal's own messages (disconnected, reconnected); ``reconnect_for`` is how
    long to keep trying to reopen a port that went away (seconds).
    """

    def __init__(
        self,
        open_port: Callable[[], serial.SerialBase],
        keys_fd: int,
        show: Callable[[bytes], None],
        notice: Callable[[str], None],
        *,
        port: serial.SerialBase | None = None,
        reconnect_for: float = 30.0,
    ) -> None:
        self.open_port = open_port
        self.keys_fd = keys_fd
        self.show = show
        self.notice = notice
        self.port = port
        self.reconnect_for = reconnect_for
        self.reconnects = 0
        self.leaving = False

    def run(self) -> None:
        """Run until the user presses Ctrl-] (or the keys' input ends)."""
        if self.port is None:
            self.port = self.open_port()
        try:
            while not self.leaving:
                keys = self._keys()
                if keys is None:
                    return
                if keys and not self._send(keys):
                    continue
                if self.port is not None:
                    self._receive()
        finally:
            if self.port is not None:
                self.port.close()

    def _keys(self) -> bytes | None:
        """Keys typed since the last call; None once the user leaves."""
        ready, _, _ = select.select([self.keys_fd], [], [], 0)
        if not ready:
            return b""
        data = os.read(self.keys_fd, 1024)
        if not data:
            return None
        at = data.find(EXIT_KEY)
        if at < 0:
            return data
        if at:
            self._send(data[:at])
        return None

    def _send(self, data: bytes) -> bool:
        try:
            assert self.port is not None
            self.port.write(data)
            return True
        except (serial.SerialException, OSError):
            self._reconnect()
            return False

    def _receive(self) -> None:
        try:
            assert self.port is not None
            self.port.timeout = POLL
            data = self.port.read(max(1, self.port.in_waiting))
        except (serial.SerialException, OSError):
            self._reconnect()
            return
        if data:
            self.show(data)

    def _reconnect(self) -> None:
        """The port went away: reopen it (the board may be rebooting or re-enumerating)."""
        if self.port is not None:
            with suppress(serial.SerialException, OSError):
                self.port.close()
        self.port = None
        self.notice("connection lost; reconnecting (Ctrl-] to leave)")
        deadline = time.monotonic() + self.reconnect_for
        while True:
            try:
                self.port = self.open_port()
            except (PortError, serial.SerialException, OSError):
                if time.monotonic() > deadline:
                    raise PortError(
                        f"the board's port did not come back within {self.reconnect_for:g} s",
                        "plug the board in again and rerun `kflashpy repl`",
                    ) from None
                if self._keys() is None:
                    self.leaving = True
                    return
                time.sleep(0.25)
                continue
            self.reconnects += 1
            self.notice("reconnected")
            return
