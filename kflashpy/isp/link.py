"""One serial link to a K210 in ISP mode: frames out, validated replies in.

The ISP protocol has no sequence numbers: a reply carries only the echoed opcode and a
status byte. A late reply to an earlier (resent) frame could therefore be taken as the
answer to the next one, and a failed frame would be skipped silently. :class:`Link`
prevents that with a *barrier*: before any resend it sends a NOP and throws away every
reply until the NOP's own answer arrives. The board handles frames one after another,
so once the NOP is answered nothing older can still be on its way.

Waiting is always done by reading the port with a timeout (never ``time.sleep``): on a
real port that is the same as sleeping, and on the virtual board it advances the
board's clock while the host waits.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import serial

from ..errors import NoResponseError, PortError, ProtocolError
from . import slip
from .frames import FlashOp, Response, RomOp, Status, build_request, parse_response

#: trace hook: called with ("tx"|"rx", frame payload) for every frame (used by -vv)
TraceFn = Callable[[str, bytes], None]

#: statuses that mean "the frame did not arrive intact: send the same frame again"
RESEND_STATUSES = frozenset({Status.BAD_DATA_CHECKSUM, Status.BAD_DATA_LEN})

SAMPLE_SIZE = 256
RESEND_BACKOFF = 0.02  # seconds before the first resend; doubles per failure (max 1 s)
READ_SLICE = 0.1  # seconds: the longest single read while waiting for a reply


@dataclass
class LinkStats:
    """What the link saw; used for diagnostics ("no reply at all" vs "garbage")."""

    frames_out: int = 0
    frames_in: int = 0
    bytes_in: int = 0
    retries: int = 0
    busy_waits: int = 0
    foreign: int = 0  # frames with another opcode or length than asked for
    unexpected: list[str] = field(default_factory=list)  # replies we did not ask for


class Link:
    """Frames to and from one open serial port (see the module docstring)."""

    def __init__(self, port: serial.SerialBase, trace: TraceFn | None = None) -> None:
        self.port = port
        self.trace = trace
        self.decoder = slip.SlipDecoder()
        self.stats = LinkStats()
        self.debug_text: list[str] = []  # 0xD1 frames (stub debug prints)
        self.sample = bytearray()  # the first bytes received, for diagnostics
        self._frames: deque[bytes] = deque()
        #: replies with these ops that arrive while another op is awaited are kept for a
        #: later recv() of their op instead of being skipped (a client that starts one
        #: command before the answer to another, see KfpyStage2.hash_list_ahead)
        self.keep_ops: frozenset[int] = frozenset()
        self._kept: deque[Response] = deque()
        self._clock = _port_clock(port)
        self._had_contact = False
        self._since = (0, 0, 0, 0)

    # --- time -------------------------------------------------------------------------

    def now(self) -> float:
        """Seconds on the port's clock (virtual on the simulator, monotonic otherwise)."""
        return self._clock()

    def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass by reading the port; frames that arrive are kept."""
        deadline = self.now() + seconds
        while (left := deadline - self.now()) > 0:
            self._read_some(left)

    # --- raw I/O -----------------------------------------------------------------------

    def send_packet(self, packet: bytes, tail: bytes = b"") -> None:
        """SLIP-encode and write one request packet, then ``tail`` unframed in the same
        write (nothing of the host's comes between them: the payload of the kflashpy
        bootstrap's LOAD)."""
        if self.trace:
            self.trace("tx", packet)
        try:
            self.port.write(slip.encode(packet) + tail)
            self.port.flush()
        except (serial.SerialException, OSError) as e:
            raise PortError(
                f"cannot write to {self.port.port}: {e}",
                "the board was unplugged or the port was taken by another program",
            ) from e
        self.stats.frames_out += 1

    def send(
        self,
        op: int,
        address: int = 0,
        data: bytes = b"",
        data_len: int | None = None,
        tail: bytes = b"",
    ) -> None:
        """Send one well-formed request (16-byte header, CRC-32 over address..data),
        followed by ``tail`` unframed (see :meth:`send_packet`)."""
        self.send_packet(build_request(op, address, data, data_len), tail)

    def _read_some(self, timeout: float) -> None:
        """Read what is waiting, or wait up to ``timeout`` (at most one slice) for a byte.

        Waiting in fixed slices keeps the port's timeout setting stable (changing it
        reconfigures a real port), and keeps Ctrl-C responsive.
        """
        wait = max(0.0, min(timeout, READ_SLICE))
        try:
            if self.port.timeout != wait:
                self.port.timeout = wait
            chunk = self.port.read(self.port.in_waiting or 1)
        except (serial.SerialException, OSError) as e:
            raise PortError(
                f"cannot read from {self.port.port}: {e}",
                "the board was unplugged or the port was taken by another program",
            ) from e
        if chunk:
            self.stats.bytes_in += len(chunk)
            if len(self.sample) < SAMPLE_SIZE:
                self.sample += chunk[: SAMPLE_SIZE - len(self.sample)]
            self._frames.extend(self.decoder.feed(chunk))

    def discard_input(self) -> None:
        """Forget everything received so far (decoded frames and partial ones)."""
        self._frames.clear()
        self._kept.clear()
        self.decoder.reset()
        with contextlib.suppress(serial.SerialException, OSError):
            self.port.reset_input_buffer()

    def discard_output(self) -> None:
        """Drop what was written but has not left the host yet (a frame cut this way
        fails its CRC at the far end, which answers it as damaged and reads on)."""
        with contextlib.suppress(serial.SerialException, OSError):
            self.port.reset_output_buffer()

    # --- replies -------------------------------------------------------------------------

    def recv(self, expect_op: int, timeout: float, extra_len: int | None = 0) -> Response:
        """Wait for the reply to ``expect_op`` and return it (any status).

        Debug-text frames (0xD1) are collected in :attr:`debug_text`; frames with another
        opcode, too short, or with unexpected extra bytes (``extra_len`` None = any) are
        recorded as unexpected and skipped. Raises :class:`NoResponseError` after
        ``timeout`` seconds of port time.
        """
        deadline = self.now() + timeout
        for kept in self._kept:
            if kept.op == expect_op:
                self._kept.remove(kept)
                return kept
        while True:
            while self._frames:
                frame = self._frames.popleft()
                self.stats.frames_in += 1
                if self.trace:
                    self.trace("rx", frame)
                resp = parse_response(frame)
                if resp is not None and resp.op in (RomOp.DEBUG_INFO, FlashOp.DEBUG_INFO):
                    self.debug_text.append(resp.extra.decode("ascii", "replace"))
                    continue
                if resp is not None and resp.op != expect_op and resp.op in self.keep_ops:
                    self._kept.append(resp)
                    continue
                if (
                    resp is None
                    or resp.op != expect_op
                    or (extra_len is not None and len(resp.extra) != extra_len)
                ):
                    self.stats.foreign += 1
                    if len(self.stats.unexpected) < 50:
                        self.stats.unexpected.append(frame[:16].hex(" "))
                    continue
                self._contact()
                return resp
            left = deadline - self.now()
            if left <= 0:
                raise NoResponseError(
                    f"no reply to op 0x{expect_op:02X} within {timeout:.1f} s",
                    self.diagnose(),
                )
            self._read_some(left)

    def _counters(self) -> tuple[int, int, int, int]:
        return (
            self.stats.bytes_in,
            self.stats.foreign,
            self.decoder.bad_frames,
            self.decoder.noise_bytes,
        )

    def _contact(self) -> None:
        """A valid reply arrived: diagnostics now describe what came after it."""
        self._since = self._counters()
        self._had_contact = True
        self.sample.clear()

    def diagnose(self) -> str:
        """A hint from what the line carried since the last good reply.

        Silence, a boot-failure message, firmware text, foreign frames and plain noise
        each point to a different cause.
        """
        got, foreign, broken, noise = (
            a - b for a, b in zip(self._counters(), self._since, strict=True)
        )
        if self._had_contact:
            if got == 0:
                return (
                    "the board answered before but went silent: it may have reset, lost "
                    "power or been unplugged"
                )
            return (
                f"the board answered before, but then sent {foreign} unexpected and "
                f"{broken} broken frames: a baud rate it cannot keep up with, or a flaky "
                "cable (a lower -b may help)"
            )
        if got == 0:
            return (
                "nothing came back at all: check the port, the board's power and the "
                "reset wiring (--board), and that no other program holds the port"
            )
        text = bytes(self.sample).decode("ascii", "replace")
        if "boot failed" in text:
            return (
                "the board reset but its boot ROM tried to start the program in flash instead "
                "of entering ISP (it printed a boot failure): BOOT was not held low, so the "
                "reset wiring is wrong for this board; try another --board (or --board auto)"
            )
        printable = sum(c.isprintable() or c in "\r\n" for c in text)
        if text and printable >= 0.8 * len(text):
            excerpt = " ".join(text.split())[:60]
            return (
                f"the board printed text instead of answering ({excerpt!r}): it is running its "
                "firmware, so the reset did not reach ISP mode; try another --board wiring, or "
                "hold BOOT, press RESET, release BOOT and retry with --reset-seq none"
            )
        if foreign or broken:
            return (
                f"the board sent frames we did not expect ({foreign} foreign, {broken} "
                "broken): a baud-rate mismatch, a flaky cable, or another device"
            )
        return (
            f"only non-protocol bytes came back ({noise} B): the board is probably running "
            "its firmware at another baud rate (not in ISP mode) or this is another device; "
            "try another --board wiring or another port"
        )

    def barrier(self, nop_op: int, timeout: float, attempts: int = 4) -> None:
        """Make sure no reply to an earlier frame is still on its way (see module doc).

        Each unanswered NOP doubles the wait for the next: a board still busy with a
        long command (or one that runs slower than real time, like an emulated board on
        a pty) is given time to finish before contact is declared lost."""
        for n in range(attempts):
            self.send(nop_op)
            try:
                resp = self.recv(nop_op, timeout * 2**n)
            except NoResponseError:
                continue
            if resp.ok:
                return
        raise NoResponseError(
            f"lost contact: the board did not answer a NOP (0x{nop_op:02X}) after {attempts} tries",
            self.diagnose(),
        )

    def request(
        self,
        op: int,
        address: int = 0,
        data: bytes = b"",
        data_len: int | None = None,
        *,
        timeout: float,
        nop_op: int,
        retries: int = 5,
        busy_timeout: float = 30.0,
        busy_poll: float = 0.5,
        what: str = "",
    ) -> Response:
        """Send a request and return its OK reply, resending when it did not arrive intact.

        Bounded: at most ``retries`` resends for checksum/length errors and timeouts
        (each timeout doubles the next wait, up to 4x ``timeout``), and busy replies (0xE7) for at most ``busy_timeout`` seconds with backoff.
        Every resend is preceded by :meth:`barrier`. Any other status raises
        :class:`ProtocolError` naming ``what``.
        """
        packet = build_request(op, address, data, data_len)
        what = what or f"op 0x{op:02X} at 0x{address:08X}"
        failures: list[str] = []
        busy_deadline: float | None = None
        poll = busy_poll
        wait = timeout
        while True:
            self.send_packet(packet)
            try:
                resp = self.recv(op, wait)
            except NoResponseError:
                failures.append(f"no reply within {wait:.1f} s")
                wait = min(wait * 2, timeout * 4)  # a slow board: give it longer next time
            else:
                if resp.ok:
                    return resp
                if resp.status == Status.FLASH_BUSY:
                    self.stats.busy_waits += 1
                    now = self.now()
                    busy_deadline = busy_deadline or now + busy_timeout
                    if now >= busy_deadline:
                        raise ProtocolError(
                            f"{what}: the flash stayed busy for {busy_timeout:.0f} s",
                            "power-cycle the board and try again; the flash chip may be faulty",
                        )
                    self.wait(poll)
                    poll = min(poll * 2, 5.0)
                    continue
                if resp.status not in RESEND_STATUSES:
                    raise ProtocolError(
                        f"{what}: the board refused it ({resp.describe()})",
                        _status_hint(resp.status),
                    )
                failures.append(resp.describe())
            if len(failures) > retries:
                raise NoResponseError(
                    f"{what}: failed {len(failures)} times ({'; '.join(failures[-3:])})",
                    self.diagnose() + "; a lower baud rate (-b) may help",
                )
            self.stats.retries += 1
            self.wait(min(RESEND_BACKOFF * 2 ** (len(failures) - 1), 1.0))
            self.barrier(nop_op, min(timeout, 3.0))

    # --- baud -------------------------------------------------------------------------

    def set_baud(self, baud: int) -> None:
        """Switch the host side of the line (the board must already be switching)."""
        try:
            self.port.baudrate = baud
        except (serial.SerialException, OSError, ValueError) as e:
            raise PortError(
                f"{self.port.port} cannot run at {baud} baud: {e}",
                "choose a rate the USB-serial bridge supports (e.g. 1500000 or 115200)",
            ) from e
        self.discard_input()


def _status_hint(status: int) -> str:
    if status == Status.INVALID_COMMAND:
        return "the flasher on the board does not know this command (wrong --stub?)"
    if status in (Status.BAD_INIT, Status.BAD_ERASE, Status.BAD_WRITE):
        return "the flash chip did not accept the operation; check the board and power"
    return "rerun with -vv to see the frames"


def _port_clock(port: serial.SerialBase) -> Callable[[], float]:
    """The clock the port's timeouts run on.

    A virtual port (the simulator) exposes its board as ``sim_board`` with a ``now``
    attribute in virtual seconds; waiting must be measured on that clock. Any other
    port runs on wall-clock time.
    """
    board = getattr(port, "sim_board", None)
    if board is not None and hasattr(board, "now"):
        return lambda: float(board.now)
    return time.monotonic
