"""A raw-REPL driver for MaixPy (MicroPython v1.11 on the K210).

MaixPy's REPL differs from the boards mpremote/pyboard.py are written for
(docs/compare.md, "How the REPL driver works"), and the driver is built around
those differences:

- no raw-paste mode and no flow control, a 2 KiB receive ring: code is sent in small
  chunks with a pause after each, never in one burst;
- a soft reset re-runs ``boot.py`` even in raw mode, and most apps loop forever in
  ``boot.py``: the driver never soft-resets unless asked, and reaches a prompt on a
  trapped board by resetting it and sending Ctrl-C in the 200 ms window ``_boot.py``
  leaves after ``[MaixPy] init end``;
- raw-REPL bytes 0x01-0x04 are commands, so code containing them is refused and data
  travels as base64 text (:func:`py_bytes`).

Waiting is done by reading the port with a timeout, so the same code runs against a
real board and the virtual one (whose clock advances while the host reads). Timeouts
count idle time: a board that keeps talking is not cut off, a silent one is.
"""

from __future__ import annotations

import ast
import base64
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

import serial

from ..errors import (
    DeviceError,
    NoResponseError,
    PortError,
    ProtocolError,
    UsageError,
)
from ..isp import reset as reset_engine
from .errors import board_exception

#: what the raw REPL prints on entry (and again on every Ctrl-A)
RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n>"
#: printed by the frozen _boot.py; Ctrl-C in the next 200 ms skips boot.py and main.py
INIT_END = b"[MaixPy] init end"
SOFT_REBOOT = b"soft reboot\r\n"
#: the K210 ROM's line when flash holds no bootable image (docs/compare.md)
ROM_BOOT_FAILED = b"boot failed with exit code"
FRIENDLY_PROMPT = b">>> "

#: raw-REPL control bytes: they can never appear in code sent for execution
CONTROL_BYTES = frozenset(b"\x00\x01\x02\x03\x04")
#: bytes per write and pause after each: well inside the 2 KiB receive ring at any baud
DEFAULT_CHUNK = 256
DEFAULT_PAUSE = 0.01
#: after the first byte of a burst, how long to keep collecting (about 115 bytes at 115200)
GATHER = 0.01


class NoFirmwareError(NoResponseError):
    """The board's ROM found no bootable firmware (nothing answers the REPL)."""

    kind = "no-firmware"


def encode_code(code: str) -> bytes:
    """Source text as the bytes the raw REPL receives; refuse raw-REPL control bytes.

    Raises :class:`UsageError` naming the offending position: a 0x03 inside a string
    literal would silently clear the line on the board, a 0x04 would run half of it.
    """
    data = code.encode("utf-8")
    for i, b in enumerate(data):
        if b in CONTROL_BYTES:
            raise UsageError(
                f"code for the board contains control byte 0x{b:02x} at offset {i}",
                "raw-REPL control bytes cannot be sent as text: build data literals with "
                "kflashpy.maixpy.repl.py_bytes()",
            )
    return data


def chunks(data: bytes, size: int) -> list[bytes]:
    """Split ``data`` into pieces of at most ``size`` bytes, in order."""
    if size < 1:
        raise UsageError(f"chunk size must be >= 1 (got {size})")
    return [data[i : i + size] for i in range(0, len(data), size)]


def py_bytes(data: bytes) -> str:
    """A MicroPython expression that evaluates to ``data``, ASCII without control bytes.

    Base64 keeps the expression short (4/3 of the data) and needs only ``ubinascii``,
    which every MaixPy build has.
    """
    return f"ubinascii.a2b_base64({base64.b64encode(data).decode('ascii')!r})"


def py_str(text: str) -> str:
    """A string literal safe to embed in code sent to the board (ASCII, escaped)."""
    return ascii(text)


def normalize_output(raw: bytes) -> bytes:
    """Board stdout with MicroPython's cooked line ends (``\\r\\n``) turned into ``\\n``."""
    return raw.replace(b"\r\n", b"\n")


def parse_repr(text: str, what: str) -> object:
    """Parse a value the board printed with ``repr()`` (never ``eval``)."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError) as e:
        raise ProtocolError(
            f"the board printed something that is not a literal for {what}: {text[:120]!r}",
            "another program may be writing to the REPL UART; reset the board and retry",
        ) from e


class MaixPyRepl:
    """Drives a MaixPy board's raw REPL over an open pyserial port.

    ``timeout`` is the longest silence tolerated while waiting for the board (seconds).
    ``trace`` receives ``(direction, bytes)`` for ``-vv`` protocol logs.
    """

    def __init__(
        self,
        port: serial.SerialBase,
        *,
        timeout: float = 10.0,
        chunk_size: int = DEFAULT_CHUNK,
        chunk_pause: float = DEFAULT_PAUSE,
        trace: Callable[[str, bytes], None] | None = None,
    ) -> None:
        self.port = port
        self.timeout = timeout
        self.chunk_size = chunk_size
        self.chunk_pause = chunk_pause
        self.trace = trace
        self.in_raw = False
        #: bytes the board sent after the last marker we waited for
        self._rx = bytearray()
        #: everything seen while looking for a prompt, for error messages
        self.boot_log = bytearray()

    # --- low level --------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if self.trace:
            self.trace(">>", data)
        try:
            self.port.write(data)
        except (serial.SerialException, OSError) as e:
            raise PortError(
                f"writing to {self.port.name or 'the port'} failed: {e}",
                "the board was unplugged or reset; reconnect and retry",
            ) from e

    def _read_some(self, wait: float) -> bytes:
        """Whatever arrives within ``wait`` seconds (at least one byte, or nothing)."""
        try:
            self.port.timeout = wait
            data = self.port.read(1)
            if data:  # gather the rest of a burst in one call, not byte by byte
                self.port.timeout = GATHER
                data += self.port.read(max(4096, self.port.in_waiting))
        except (serial.SerialException, OSError) as e:
            raise PortError(
                f"reading from {self.port.name or 'the port'} failed: {e}",
                "the connection dropped (board unplugged or reset); reconnect and retry",
            ) from e
        if data and self.trace:
            self.trace("<<", data)
        return data

    def pause(self, seconds: float) -> None:
        """Let ``seconds`` pass by reading the port; what arrives is kept for later."""
        self._rx += self._read_some(seconds)

    def read_until(
        self,
        marker: bytes,
        timeout: float | None = None,
        what: str = "",
        total: float | None = None,
    ) -> bytes:
        """Bytes up to (not including) ``marker``; the marker is consumed.

        Raises :class:`NoResponseError` after ``timeout`` seconds without new bytes, or
        once about ``total`` seconds passed (a board that keeps printing something
        else, like a looping ``boot.py``).
        """
        limit = self.timeout if timeout is None else timeout
        idle = spent = 0.0
        step = min(0.05, limit) if limit > 0 else 0.01
        while True:
            at = self._rx.find(marker)
            if at >= 0:
                out = bytes(self._rx[:at])
                del self._rx[: at + len(marker)]
                return out
            if idle >= limit or (total is not None and spent >= total):
                tail = bytes(self._rx[-160:])
                raise NoResponseError(
                    f"no {what or repr(marker)} from the board within {limit:g} s"
                    + (f" (last bytes: {tail!r})" if tail else " (it sent nothing)"),
                    "check the port and baud (MaixPy uses 115200); if a program is running, "
                    "retry with --reset so kflashpy can interrupt it at boot",
                )
            data = self._read_some(step)
            spent += step  # a read that returned data took at most about this long
            if data:
                idle = 0.0
                self._rx += data
            else:
                idle += step

    def drain(self, quiet: float = 0.1, limit: float = 2.0) -> bytes:
        """Read until the board has been silent for ``quiet`` s (at most ``limit`` s)."""
        got = bytes(self._rx)
        self._rx.clear()
        spent = 0.0
        while spent < limit:
            data = self._read_some(quiet)
            spent += quiet
            if not data:
                break
            got += data
        return got

    # --- getting a prompt ---------------------------------------------------------------

    def interrupt(self) -> bytes:
        """Ctrl-C twice (stops a running script), then what the board printed."""
        self._write(b"\r\x03\x03")
        return self.drain()

    def enter_raw(self, timeout: float = 1.0, attempts: int = 3) -> None:
        """Enter the raw REPL from wherever the board is (friendly or raw prompt).

        Sends Ctrl-C first, so a script that honours KeyboardInterrupt stops, then
        Ctrl-A. A board still booting misses both, so this tries ``attempts`` times; a
        ``boot.py`` that swallows Ctrl-C never answers and this raises
        :class:`NoResponseError` (use :meth:`connect` with ``reset=True``).
        """
        for attempt in range(attempts):
            self.boot_log += self.interrupt()
            self._write(b"\r\x01")
            try:
                self.read_until(RAW_BANNER, timeout, "raw REPL banner", total=timeout)
            except NoResponseError:
                if attempt + 1 < attempts:
                    continue
                self._check_firmware()
                tail = bytes(self.boot_log[-200:] + self._rx[-200:])
                raise NoResponseError(
                    "the board does not answer Ctrl-C/Ctrl-A with a raw REPL prompt"
                    + (f"; it printed {tail[-120:]!r}" if tail else "; it sent nothing"),
                    "a boot.py that loops and catches KeyboardInterrupt blocks the REPL: rerun "
                    "with --reset (kflashpy resets the board and interrupts _boot.py), or "
                    "press RESET while kflashpy waits (--wait-reset); check the port and "
                    "115200 baud",
                ) from None
            self.in_raw = True
            return

    def _check_firmware(self) -> None:
        """Raise :class:`NoFirmwareError` if the ROM said it found nothing to boot."""
        seen = bytes(self.boot_log + self._rx)
        at = seen.rfind(ROM_BOOT_FAILED)
        if at >= 0:
            line = seen[seen.rfind(b"\n", 0, at) + 1 :].split(b"\r")[0].split(b"\n")[0]
            raise NoFirmwareError(
                "the board has no firmware to run: its ROM printed "
                f"{line.decode('ascii', 'replace').strip()!r}",
                "burn MaixPy first (kflashpy burn --firmware maixpy.bin), then rerun; "
                "the flash at 0x0 is erased or holds no valid boot image",
            )

    def exit_raw(self) -> None:
        """Back to the friendly REPL (Ctrl-B), e.g. before handing the port to a terminal."""
        self._write(b"\r\x02")
        self.read_until(FRIENDLY_PROMPT, 2.0, "friendly prompt", total=2.0)
        self.in_raw = False

    def catch_boot_window(self, wait: float = 10.0) -> None:
        """Wait for ``[MaixPy] init end`` and interrupt ``_boot.py`` right after it.

        The board must be booting (reset just pulsed, soft reboot sent, or the user
        pressing RESET). Ctrl-C in ``_boot.py``'s 200 ms window skips ``boot.py`` and
        ``main.py``, which is the only way past a boot script that swallows Ctrl-C.
        """
        try:
            log = self.read_until(INIT_END, wait, "'[MaixPy] init end' boot line", total=wait)
        except NoResponseError as e:
            self._check_firmware()
            raise NoResponseError(
                f"the board did not boot MaixPy within {wait:g} s (no '[MaixPy] init end')",
                "check that MaixPy is burned at 0x0 and the board's reset wiring "
                "(-B BOARD, or --reset-seq for an unlisted one)",
            ) from e
        self.boot_log += log + INIT_END
        for _ in range(6):  # every 20 ms across the 200 ms window
            self._write(b"\x03")
            self.pause(0.02)
        self.boot_log += self.drain()

    def hard_reset(self, steps: tuple[reset_engine.Step, ...], wait: float = 10.0) -> None:
        """Play the board's run-reset ``steps`` and stop at the REPL prompt.

        ``steps`` come from :func:`kflashpy.isp.reset.run_sequence` (the board's wiring in
        ``firmware_layouts/boards.toml``). A port that cannot drive DTR/RTS (a pty, a TCP
        bridge) raises :class:`PortError` instead of waiting for a boot that never comes.
        """
        self._rx.clear()
        if not reset_engine.apply(self.port, steps, self.pause):
            raise PortError(
                f"{self.port.port} cannot drive DTR/RTS, so kflashpy cannot reset the board",
                "press RESET yourself while kflashpy waits (--wait-reset SECONDS)",
            )
        self.catch_boot_window(wait)
        self.in_raw = False

    def connect(
        self,
        *,
        reset: bool = False,
        reset_steps: tuple[reset_engine.Step, ...] | None = None,
        wait_reset: float = 0.0,
        boot_wait: float = 10.0,
    ) -> None:
        """Get a clean raw-REPL prompt without resetting the board unless asked.

        - ``reset=True``: play ``reset_steps`` (default: the generic board's run
          sequence) and interrupt ``_boot.py`` (a fresh interpreter);
        - otherwise Ctrl-C the running program; if it ignores Ctrl-C and
          ``wait_reset`` > 0, wait that long for the user to press RESET.
        """
        if reset:
            steps = reset_engine.run_sequence(None) if reset_steps is None else reset_steps
            self.hard_reset(steps, boot_wait)
            self.enter_raw()
            return
        try:
            self.enter_raw()
        except NoResponseError:
            if wait_reset <= 0:
                raise
            self.catch_boot_window(wait_reset)
            self.enter_raw()

    def soft_reset(self, boot_wait: float = 10.0) -> None:
        """Soft-reset from the raw REPL, interrupting ``boot.py`` so a loop cannot trap us.

        MaixPy re-runs ``_boot.py`` and ``boot.py`` on a raw-mode soft reset (unlike
        mainline MicroPython), so the driver catches the boot window like a hard reset.
        """
        if not self.in_raw:
            self.enter_raw()
        self._write(b"\x04")
        self.read_until(b"OK", 2.0, "soft reset acknowledgement", total=2.0)
        self.read_until(SOFT_REBOOT, boot_wait, "soft reboot message", total=boot_wait)
        self.catch_boot_window(boot_wait)
        self.in_raw = False
        self.enter_raw()

    # --- running code ---------------------------------------------------------------------

    def send_code(self, data: bytes) -> None:
        """Write code in chunks small enough for the board's 2 KiB ring, pausing after each."""
        for piece in chunks(data, self.chunk_size):
            self._write(piece)
            self.pause(self.chunk_pause)

    def exec_raw(
        self,
        code: str,
        timeout: float | None = None,
        doing: str = "",
        on_output: Callable[[bytes], None] | None = None,
    ) -> bytes:
        """Run ``code`` on the board and return its stdout (``\\n`` line ends).

        ``on_output`` receives the stdout as it arrives (``\\n`` line ends), for scripts
        whose output is followed live (``kflashpy exec``). A board exception becomes :class:`~kflashpy.maixpy.errors.ReplError` (or
        :class:`~kflashpy.maixpy.errors.KpuError` for KPU codes) carrying the traceback.
        """
        data = encode_code(code)
        if not self.in_raw:
            self.enter_raw()
        leftover = bytes(self._rx)  # unsolicited output since the last prompt
        self._rx.clear()
        if leftover.strip(b">\r\n"):
            self.boot_log += leftover
        self.send_code(data)
        self._write(b"\x04")
        try:
            ack = self.read_until(b"OK", 2.0, "'OK' after the code", total=2.0)
        except NoResponseError as e:
            self.in_raw = False  # unknown state: the next call re-syncs with Ctrl-C/Ctrl-A
            raise NoResponseError(
                f"the board did not acknowledge {len(data)} bytes of code"
                + (f" while {doing}" if doing else ""),
                "the connection dropped, the board reset, or it lost bytes of the upload "
                "(its receive buffer is 2 KiB: use smaller chunks); kflashpy "
                "re-synchronises with the REPL on the next command",
            ) from e
        if ack.strip(b"\r\n>"):
            self.in_raw = False
            raise ProtocolError(
                f"unexpected bytes before the raw REPL 'OK': {ack[-80:]!r}",
                "another program may be using the REPL; reset the board and retry",
            )
        try:
            out = self._follow(timeout, on_output)
            err = self.read_until(b"\x04", timeout=timeout, what="end of the error output")
            self.read_until(b">", timeout=2.0, what="raw REPL prompt")
        except NoResponseError:
            self.in_raw = False
            raise
        if err:
            raise board_exception(err.decode("utf-8", "replace"), normalize_output(out), doing)
        return normalize_output(out)

    def _follow(self, timeout: float | None, on_output: Callable[[bytes], None] | None) -> bytes:
        """Stdout up to the raw REPL's first 0x04, handed to ``on_output`` as it comes."""
        if on_output is None:
            return self.read_until(b"\x04", timeout=timeout, what="end of the code's output")
        limit = self.timeout if timeout is None else timeout
        got = bytearray()
        idle = 0.0
        while True:
            at = self._rx.find(b"\x04")
            # a trailing "\r" waits for its "\n" so line ends convert in one piece
            cut = at if at >= 0 else len(self._rx) - self._rx.endswith(b"\r")
            if cut > 0:
                piece = bytes(self._rx[:cut])
                del self._rx[:cut]
                got += piece
                on_output(normalize_output(piece))
            if at >= 0:
                del self._rx[:1]
                return bytes(got)
            if idle >= limit:
                raise NoResponseError(
                    f"the script printed nothing for {limit:g} s and did not end",
                    "raise --timeout for scripts that work silently, or press Ctrl-C",
                )
            data = self._read_some(0.05)
            idle = 0.0 if data else idle + 0.05
            self._rx += data

    def eval(self, expr: str, setup: str = "", timeout: float | None = None) -> object:
        """Evaluate ``expr`` on the board and return it as a host value (literals only)."""
        code = (setup + "\n" if setup else "") + f"print(repr({expr}))"
        out = self.exec_raw(code, timeout=timeout, doing=f"evaluating {expr[:40]}")
        return parse_repr(out.decode("utf-8", "replace"), expr[:40])

    def read_blocks(self, code: str, timeout: float | None = None, doing: str = "") -> bytes:
        """Run ``code`` that prints base64 lines (one per block) and return the decoded bytes."""
        out = self.exec_raw(code, timeout=timeout, doing=doing)
        try:
            return b"".join(base64.b64decode(line) for line in out.split() if line)
        except ValueError as e:
            raise ProtocolError(
                f"garbled base64 from the board while {doing or 'reading data'}",
                "line noise or another program on the UART: retry at 115200 baud",
            ) from e


@contextmanager
def open_repl(
    url: str,
    *,
    baud: int = 115200,
    reset: bool = False,
    board: str | None = None,
    reset_sequence: str | None = None,
    wait_reset: float = 0.0,
    timeout: float = 10.0,
    trace: Callable[[str, bytes], None] | None = None,
) -> Iterator[MaixPyRepl]:
    """Open ``url`` (DTR/RTS released: opening never resets the board) at a raw REPL.

    On exit the board is returned to the friendly REPL when possible and the port is
    closed; a failure to leave raw mode never hides the original error. ``reset`` plays
    the run-reset sequence of ``board``'s wiring (``reset_sequence`` overrides it, see
    :func:`kflashpy.isp.reset.run_sequence`).
    """
    from ..isp.ports import open_port

    steps = reset_engine.run_sequence(board, reset_sequence)  # bad input fails before opening
    port = open_port(url, baud)
    try:
        repl = MaixPyRepl(port, timeout=timeout, trace=trace)
        repl.connect(reset=reset, reset_steps=steps, wait_reset=wait_reset)
        try:
            yield repl
        finally:
            if repl.in_raw:
                with suppress(DeviceError):
                    repl.exit_raw()
    finally:
        port.close()
