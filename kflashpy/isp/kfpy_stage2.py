"""Client of kflashpy's own flasher (``kflashpy/stub``, protocol in
``docs/flasher-protocol.md``).

Connection: the mask ROM uploads the small bootstrap at 115200; :meth:`KfpyStage2.set_baud`
moves the bootstrap to the transfer rate and then loads the flasher at that rate (an
operation before any baud change loads it at 115200). After that:

* writes are pipelined: up to ``window`` frames are on their way while the flash erases
  and programs, each 64 KiB frame raw-DEFLATE compressed when that makes it smaller; the
  caller says which pieces to send (the burn pipeline skips sectors whose on-board
  SHA-256 already matches, from :meth:`KfpyStage2.hash_list`);
* long replies come in checked pieces: a hash list is asked for a few dozen sectors at a
  time, fewer after a damaged reply, and resumed from the last good piece;
* :meth:`read` streams with flow control and per-chunk CRC, and ends with the SHA-256 of
  the region computed on the board;
* :meth:`sha256` hashes a region on the board (what the burn pipeline verifies with).

Every reply to an extension opcode (0xB0-0xBF) ends with a CRC-32, so a reply damaged on
the wire is detected and the request repeated instead of trusted. The client keeps no
memory between calls: every method is a primitive the burn pipeline combines.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from ..errors import NoResponseError, ProtocolError, VerifyError
from ..progress import Progress, ProgressFn, report
from ..stub import FlasherBuild
from ..stub import load as load_build
from ..target import k210
from .frames import FlashOp, Response, Status, build_request, crc32, parse_response
from .link import Link
from .slip import SlipDecoder
from .stage2 import (
    BLOCK_SIZE,
    CAP_BAUD,
    CAP_CHIP_ERASE,
    CAP_COMPRESSED_WRITE,
    CAP_ERASE,
    CAP_HASH,
    CAP_IDENTIFY,
    CAP_READ,
    CAP_REBOOT,
    CAP_UNALIGNED_WRITE,
    CAP_WRITE,
    CHIP_ERASE_TIMEOUT,
    DEFAULT_TIMEOUT,
    ERASE_TIMEOUT_PER_MB,
    GREETING_TIMEOUT,
    FlashInfo,
    Pieces,
    Stage2,
    StubProgram,
    WriteLedger,
    check_sector_range,
    join_pieces,
    scaled_timeout,
    sector_blocks,
)
from .timeouts import TIMEOUTS


class KfpyOp(IntEnum):
    """kflashpy extension opcodes (0xB0-0xBF: used by no other K210 flasher or ROM)."""

    IDENTIFY = 0xB0
    READ = 0xB1
    READ_ACK = 0xB2
    HASH = 0xB3
    HASH_LIST = 0xB4
    WRITE = 0xB5
    WRITE_DEFLATE = 0xB6
    ERASE = 0xB7
    CHIP_ERASE = 0xB8
    SRAM_WRITE = 0xB9
    EXEC = 0xBA
    SET_BAUD = 0xBB
    WRITE_DEFLATE_DICT = 0xBC
    LOAD = 0xBD  # the bootstrap's: a raw payload by DMA


SECTOR = k210.FLASH_SECTOR
FRAME = 65536
# a damaging line shrinks frames down to this: at one bad byte in 1000 towards the board,
# a 1 KiB frame gets through one time in three, a 256-byte one three times in four
MIN_FRAME = 256
BOOT_CHUNK = 32768  # the bootstrap's LOAD buffer (stub/boot.c LOAD_MAX): the flasher at once
#: the bootstrap's mtime rate, in which a LOAD's wait is given
BOOT_MTIME_HZ = k210.CPU_HZ // k210.MTIME_DIVIDER
READ_CHUNK = 4096
MIN_READ_CHUNK = 256
READ_WINDOW = 8
#: sectors per hash-list request: a 2 KiB reply; halved after a damaged or lost one
HASH_PIECE = 64
#: the frames sent ahead at the start of a region while the board checks the rest
#: (:meth:`hash_list_ahead`): 48 KiB, about as long on the wire at 3 Mbaud as the blank
#: check of 1.5 MB takes on the board, so the line does not idle meanwhile; the first is
#: short, so that programming starts as soon as the check is done
AHEAD = tuple(k * SECTOR for k in (1, 3, 8))
#: sectors at the start of a region checked first: where they read erased, the frames
#: ahead go out
HEAD_SECTORS = sum(AHEAD) // SECTOR
RETRIES = 6
#: a write acknowledgement's status when the pages read back differ (flasher protocol 2)
WRITE_CHECK_FAILED = 0xE8
#: a BC frame's dictionary is not what the board holds (flasher protocol 3): sent again
#: without one
NO_DICTIONARY = 0xE9
#: IDENTIFY capability bit of BC frames (flasher protocol 3)
CAP_BIT_DICTIONARY = 1 << 11
#: the longest preset dictionary: DEFLATE's window
DICT = 32768
FLASH_S_PER_FRAME = TIMEOUTS["flash_per_frame"]
ACK_TIMEOUT = TIMEOUTS["ack"]  # a late ack only costs a (harmless) resend
HASH_S_PER_MB = TIMEOUTS["hash_per_mb"]
COMMAND_TIMEOUT = TIMEOUTS["command"]
START_WAIT = 0.002  # a program needs this long after EXEC/baud change to listen
BOOT_PAYLOAD_WAIT = TIMEOUTS["boot_payload"]
MAX_SLOWNESS = 100.0  # longest stretch of the timeouts (see KfpyStage2.slowness)

CAPABILITIES = frozenset(
    {
        CAP_WRITE,
        CAP_UNALIGNED_WRITE,
        CAP_ERASE,
        CAP_CHIP_ERASE,
        CAP_BAUD,
        CAP_REBOOT,
        CAP_READ,
        CAP_HASH,
        CAP_IDENTIFY,
        CAP_COMPRESSED_WRITE,
    }
)


@dataclass(frozen=True)
class FlasherInfo:
    """Everything IDENTIFY reports (see docs/flasher-protocol.md)."""

    protocol: int
    version: int
    caps: int
    jedec_id: int
    flash_ok: bool
    unique_id: bytes
    flash_size: int
    cpu_hz: int
    apb0_hz: int
    sclk_hz: int
    baud: int
    max_frame: int
    slots: int
    window: int
    link_base: int
    sram_lo: int
    sram_hi: int
    #: the flasher hashes with the K210's SHA-256 engine (by DMA, checked on the board at
    #: start), not in software (docs/flasher-protocol.md, "Hashing")
    sha_engine: bool = False

    @classmethod
    def parse(cls, p: bytes) -> FlasherInfo:
        if len(p) != 64 or p[:4] != b"KFPY":
            raise ProtocolError(
                f"IDENTIFY reply is not from kflashpy's flasher ({p[:8].hex()})",
                "the program on the board is another flasher: use --stub kflash",
            )
        proto, ver, caps = struct.unpack_from("<HHI", p, 4)
        v = struct.unpack_from("<10I", p, 24)
        return cls(
            proto,
            ver,
            caps,
            int.from_bytes(p[12:15], "big"),  # manufacturer, type, capacity
            bool(p[15] & 1),
            p[16:24],
            v[0],
            v[1],
            v[2],
            v[3],
            v[4],
            v[5],
            v[6] & 0xFFFF,
            v[6] >> 16,
            v[7],
            v[8],
            v[9],
            bool(p[15] & 2),
        )


Tail = tuple[int, bytes]  # the flash address a frame's data ended at, and its last bytes


def _deflate(chunk: bytes, zdict: bytes = b"") -> bytes:
    c = (
        zlib.compressobj(9, zlib.DEFLATED, -15, zdict=zdict)
        if zdict
        else zlib.compressobj(9, zlib.DEFLATED, -15)
    )
    return c.compress(chunk) + c.flush()


class _Frame:
    """One write frame: raw bytes, the request packet (compressed if smaller), tries.

    ``prior``: the tail of the frame sent before it, which the board keeps as a preset
    dictionary (docs/flasher-protocol.md, BC); the frame goes as BC when that makes it
    smaller. A frame sent again goes without one (:meth:`alone`): the board may not
    hold that tail any more."""

    def __init__(self, at: int, chunk: bytes, prior: Tail | None = None) -> None:
        self.at = at
        self.chunk = chunk
        self.tries = 0
        #: what each failed try saw ("no reply", "damaged reply", "request damaged")
        self.failures: list[str] = []
        self.packet = self._pack(prior)

    def _pack(self, prior: Tail | None) -> bytes:
        at, chunk, raw = self.at, self.chunk, struct.pack("<I", len(self.chunk))
        self.dictionary = False
        best = (len(chunk), KfpyOp.WRITE, chunk)
        packed = _deflate(chunk)
        if len(packed) + 4 < best[0]:
            best = (len(packed) + 4, KfpyOp.WRITE_DEFLATE, raw + packed)
        if prior is not None:
            end, tail = prior
            packed = _deflate(chunk, tail)
            if len(packed) + 16 < best[0]:
                head = struct.pack("<III", end, len(tail), crc32(tail))
                best = (len(packed) + 16, KfpyOp.WRITE_DEFLATE_DICT, raw + head + packed)
                self.dictionary = True
        return build_request(best[1], at, best[2])

    def alone(self) -> _Frame:
        """This frame, sent again: without a dictionary."""
        if self.dictionary:
            self.packet = self._pack(None)
        return self

    def tail(self) -> Tail:
        """What the board keeps of this frame as the next frame's dictionary."""
        return self.at + len(self.chunk), self.chunk[-DICT:]


def _digest_matches(frame: _Frame, digest: bytes) -> bool:
    """A write acknowledgement's digest is the SHA-256 of the frame's data as the board
    decoded it, every page of it read back from the flash and compared after writing
    (docs/flasher-protocol.md, B5): equal to ours, the frame is verified on the flash."""
    if hashlib.sha256(frame.chunk).digest() == digest:
        return True
    raise VerifyError(
        f"write of {len(frame.chunk)} B at 0x{frame.at:08X}: the board wrote other bytes "
        "than were sent (its digest of the frame differs)",
        "burn again; if it repeats, lower the baud rate (-b)",
    )


#: frame sizes from either end of a write over erased flash: each about 1.5x the one
#: before, so that the two frames queued behind a frame the board is writing take at
#: least as long on the wire as that frame takes to write (at 1.5-3 Mbaud)
TAPER = tuple(k * SECTOR for k in (1, 1, 2, 3, 4, 6, 8, 12))
#: a page program, typical (0.7 ms, the 25-series datasheets), with the flasher's 31 us
#: between one page and the next (its read-back and the next page's 256 bytes)
PAGE_S = 0.731e-3
#: wire time over program time of a write within which the two go at about the same pace
#: (:func:`frame_size`)
BALANCED = (0.85, 1.25)


def frame_size(data: bytes, baud: int) -> int:
    """The frame size of a write over erased flash: 32 KiB where the line brings the
    bytes (compressed) about as fast as the board programs them, else 64 KiB.

    A frame is programmed only once all of it has arrived and been decoded, so the board
    works a frame behind the line; where both go at the same pace it never catches up,
    and after the last byte the frames of the last 64 KiB are still to program (the
    1.35 MB kmodel at 3 Mbaud: 0.2 s). Half frames halve that. Where either side is
    clearly faster, the board catches up (the line is slower) or always has frames
    queued (the line is faster), and 64 KiB frames cost less. The compressed size is
    estimated with zlib level 1 (a few ms per MB)."""
    wire = len(zlib.compress(data, 1)) * 10 / baud
    program = max(1, -(-len(data) // 256)) * PAGE_S
    return FRAME // 2 if BALANCED[0] <= wire / program <= BALANCED[1] else FRAME


def tapered(
    cuts: list[tuple[int, int]], blank: Pieces, frame: int = FRAME
) -> list[tuple[int, int]]:
    """Re-cut the frames at the ends of a write that go to erased flash into frames that
    grow from the start (:data:`TAPER`) and shrink towards the end: the board starts
    programming after a short first frame, and once the last byte has arrived it has only
    a sector left to program. Frames still end at sectors and never cross a 64 KiB
    block; past the ramp they are ``frame`` long (:func:`frame_size`) and never cross a
    ``frame`` boundary.

    Only over erased flash: over old data each frame of a block would erase again.
    ``cuts`` are the ``(address, length)`` frames in order, ``blank`` the erased ranges.
    """
    groups: list[list[int]] = []  # [start, end] of runs of contiguous frames
    for at, n in cuts:
        if groups and groups[-1][1] == at:
            groups[-1][1] = at + n
        else:
            groups.append([at, at + n])

    def erased(lo: int, hi: int) -> bool:
        return any(b <= lo and hi <= b + m for b, m in blank)

    def plain(lo: int, hi: int) -> list[tuple[int, int]]:
        return [(lo + off, n) for off, n in sector_blocks(lo, hi - lo, frame)]

    def ramp(lo: int, hi: int) -> tuple[list[tuple[int, int]], int]:
        out, pos = [], lo
        for size in TAPER:
            if pos >= hi:
                break
            cut = max((pos + size) // SECTOR * SECTOR, pos - pos % SECTOR + SECTOR)
            cut = min(cut, hi, pos - pos % FRAME + FRAME)
            out.append((pos, cut - pos))
            pos = cut
        return out, pos

    def ladder(lo: int, hi: int) -> tuple[list[tuple[int, int]], int]:
        out: list[tuple[int, int]] = []
        pos = hi
        for size in TAPER:
            if pos <= lo:
                break
            cut = -(-(pos - size) // SECTOR) * SECTOR
            cut = max(cut if cut < pos else (pos - 1) // SECTOR * SECTOR, lo)
            start = max(lo, (pos - 1) // frame * frame)
            if cut - start < size:  # no short frame left between this one and its block's start
                cut = start
            out.insert(0, (cut, pos - cut))
            pos = cut
        return out, pos

    out: list[tuple[int, int]] = []
    last = len(groups) - 1
    for i, (lo, hi) in enumerate(groups):
        head: list[tuple[int, int]] = []
        tail: list[tuple[int, int]] = []
        if erased(lo, hi) and i in (0, last):
            mid = (lo + (hi - lo) // 2) // SECTOR * SECTOR if i == 0 == last else None
            if i == 0 and last > 0 or mid is not None:
                head, lo = ramp(lo, mid if mid and mid > lo else hi)
            if i == last:
                tail, hi = ladder(lo, hi)
        out += head + plain(lo, hi) + tail
    return out


_ERASED_SECTOR = hashlib.sha256(b"\xff" * SECTOR).digest()


def _minus(cuts: list[tuple[int, int]], taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``(address, length)`` frames ``cuts`` without the ``[start, end)`` spans
    ``taken`` (frames already on their way: they end at sectors, as cuts do)."""
    out = []
    for at, n in cuts:
        pieces = [(at, at + n)]
        for lo, hi in taken:
            pieces = [
                (s, e) for a, b in pieces for s, e in ((a, min(b, lo)), (max(a, hi), b)) if s < e
            ]
        out += [(s, e - s) for s, e in pieces]
    return out


def _piece(at: int, n: int, sectors: dict[int, bytes]) -> bytes | None:
    """The digest of ``[at, at + n)``, inside one sector, from the digests of whole
    ``sectors``: a whole sector is its own digest, a piece of an erased one is erased;
    None for a piece of a sector that holds data (it has to be asked for)."""
    whole = sectors[at - at % SECTOR]
    if n == SECTOR:
        return whole
    return hashlib.sha256(b"\xff" * n).digest() if whole == _ERASED_SECTOR else None


class _BadReply(Exception):
    """A reply whose CRC does not match: treated like a lost reply."""


def _seen(failures: list[str], diagnosis: str) -> str:
    """The hint after repeated failures: what came back, not only what the line says."""
    replies = failures.count("damaged reply")
    requests = len(failures) - replies - failures.count("no reply")
    seen = [
        f"{replies} replies came back damaged (CRC mismatch)" if replies else "",
        f"the board received {requests} requests damaged" if requests else "",
    ]
    if replies or requests:
        return (
            f"of {len(failures)} tries, {' and '.join(x for x in seen if x)}: a noisy line or "
            "a baud rate the cable cannot carry; a lower baud rate (-b) may help"
        )
    return diagnosis + "; a lower baud rate (-b) may help"


def _received(
    read: Callable[[], tuple[Response, bytes]], failures: list[str]
) -> tuple[Response, bytes] | None:
    """``read()``'s reply and checked payload; None, with why noted in ``failures``,
    when no reply came or it came damaged (a try of a retry loop that failed)."""
    try:
        return read()
    except NoResponseError:
        failures.append("no reply")
    except _BadReply:
        failures.append("damaged reply")
    return None


def _payload(resp) -> bytes:
    """Check the trailing CRC-32 of an extension reply and return what it covers."""
    extra = resp.extra
    if len(extra) < 4:
        raise _BadReply
    body = bytes((resp.op, resp.status)) + extra[:-4]
    if crc32(body) != struct.unpack("<I", extra[-4:])[0]:
        raise _BadReply
    return extra[:-4]


class _ReplyStream:
    """Bulk reception of a stream of replies (flash reads).

    :meth:`Link.recv` reads what is waiting or a single byte, which is right for short
    replies; a read streams kilobytes, and asking the port for the bytes a frame needs at
    least lets a virtual board run in one step per frame instead of one per byte.
    """

    def __init__(self, link: Link) -> None:
        self.link = link
        self.decoder = SlipDecoder()
        self.frames: deque[bytes] = deque()
        self.since_end = 0  # raw bytes received after the last frame delimiter

    def next(self, op: int, timeout: float, payload_min: int):
        """The next reply with ``op``; ``payload_min`` = its smallest possible payload."""
        port = self.link.port
        deadline = self.link.now() + timeout
        while True:
            while self.frames:
                resp = parse_response(self.frames.popleft())
                if resp is not None and resp.op == op:
                    return resp
            left = deadline - self.link.now()
            if left <= 0:
                raise NoResponseError(f"no reply to op 0x{op:02X} within {timeout:.1f} s")
            need = max(1, payload_min + 2 + 4 + 2 - self.since_end - 2, port.in_waiting)
            port.timeout = left
            chunk = port.read(need)
            end = chunk.rfind(b"\xc0")
            self.since_end = len(chunk) - end - 1 if end >= 0 else self.since_end + len(chunk)
            self.frames.extend(self.decoder.feed(chunk))


class KfpyStage2(Stage2):
    """Drives kflashpy's flasher (see the module docstring)."""

    name = "kflashpy"

    def __init__(self, link: Link, *, bootstrap: bool = True, build: FlasherBuild | None = None):
        super().__init__(link)
        self.build = build or load_build()
        self.version = f"kflashpy {self.build.protocol_version}"
        self.capabilities = CAPABILITIES
        self._running = not bootstrap
        self.info: FlasherInfo | None = None
        self.actual_baud: int | None = None
        self._frame_limit = FRAME
        #: write frames sent ahead by :meth:`hash_list_ahead`, taken over by :meth:`write`
        self._ahead: list[_Frame] = []
        #: digests of the pieces past the end of that write's region, up to the end of
        #: its last erase unit, from the same request: :meth:`hash_list` answers the burn
        #: pipeline's question about those bytes (kept if not erased) from them instead
        #: of a request queued behind the frames ahead. Dropped by anything that writes.
        self._beyond: dict[tuple[int, int], bytes] = {}
        #: how much every timeout is stretched (1 on a real board): set from the flasher's
        #: upload (how much slower than its wire time the bootstrap answered: a network
        #: serial link, a slow adapter), then raised by the flasher's own replies where one
        #: used more than half of its timeout (an emulated board on a pty that runs slower
        #: than real time: the bootstrap, which sleeps while DMA takes the upload, costs
        #: the emulator almost nothing and cannot stand for the flasher), see _observe
        self.slowness = 1.0

    # --- plumbing ---------------------------------------------------------------------
    def _barrier(self) -> None:
        self.link.barrier(FlashOp.NOP, COMMAND_TIMEOUT * self.slowness)

    def _resend(self) -> None:
        """A try failed: count it and let whatever is still on its way pass before the
        request goes again."""
        self.link.stats.retries += 1
        self._barrier()

    def _gave_up(self, what: str, failures: list[str]) -> NoResponseError:
        """The error once every try of ``what`` failed, with what each one saw."""
        return NoResponseError(
            f"{what}: failed {len(failures)} times ({', '.join(failures[-3:])})",
            _seen(failures, self.link.diagnose()),
        )

    def _observe(self, took: float, timeout: float) -> None:
        """A flasher reply came ``took`` seconds after its request, whose unstretched
        timeout was ``timeout``: if that used more than half of it, stretch every timeout
        so that it would have used half (never shrunk: a board that ran slow once may
        again). The margin keeps the next, perhaps longer, wait from running out."""
        if took > timeout / 2:
            self.slowness = min(MAX_SLOWNESS, max(self.slowness, 2 * took / timeout))

    def _call(
        self,
        op: int,
        address: int = 0,
        data: bytes = b"",
        *,
        timeout: float,
        what: str,
        tries: int = RETRIES + 1,
    ):
        """One extension request with CRC-checked reply; resends on damage or loss."""
        failures: list[str] = []
        for _ in range(tries):
            start = self.link.now()
            self.link.send(op, address, data)

            def read(start: float = start) -> tuple[Response, bytes]:
                resp = self.link.recv(op, timeout * self.slowness, extra_len=None)
                self._observe(self.link.now() - start, timeout)
                return resp, _payload(resp)

            got = _received(read, failures)
            if got is not None:
                resp, payload = got
                if resp.status == Status.OK:
                    return payload
                if resp.status != Status.BAD_DATA_CHECKSUM:
                    raise ProtocolError(
                        f"{what}: the flasher refused it ({resp.describe()})",
                        "check the address and size against the flash size (kflashpy flash-id)",
                    )
                failures.append("request damaged on the wire")
            self._resend()
        raise self._gave_up(what, failures)

    def _legacy(self, op: int, address: int = 0, data: bytes = b"", data_len=None, what=""):
        return self.link.request(
            op,
            address,
            data,
            data_len,
            timeout=DEFAULT_TIMEOUT * self.slowness,
            nop_op=FlashOp.NOP,
            what=what,
        )

    # --- start-up ---------------------------------------------------------------------
    def greet(self, attempts: int = 10, timeout: float | None = None) -> None:
        for _ in range(attempts):
            self.link.send(FlashOp.NOP)
            try:
                if self.link.recv(FlashOp.NOP, timeout or GREETING_TIMEOUT * self.slowness).ok:
                    self.link.discard_input()
                    return
            except NoResponseError:
                continue
        raise NoResponseError(
            f"kflashpy's flasher did not answer after {attempts} greetings",
            self.link.diagnose() + "; try a lower -b, or --stub kflash",
        )

    def set_baud(self, baud: int) -> None:
        old = self.link.port.baudrate
        p = self._call(
            KfpyOp.SET_BAUD,
            0,
            struct.pack("<I", baud),
            timeout=COMMAND_TIMEOUT,
            what=f"baud {baud}",
        )
        self.actual_baud = struct.unpack_from("<I", p)[0]
        # the reply came at the old rate; the board switches 0.2 ms after sending it
        self._follow_baud(old, baud, settle=START_WAIT)
        self._ensure_flasher()

    def _ensure_flasher(self) -> None:
        """Load the flasher through the bootstrap (once), at the current rate."""
        if self._running:
            return
        prog = self.build.flasher
        pos, chunk = 0, BOOT_CHUNK
        while pos < len(prog.image):
            piece = prog.image[pos : pos + chunk]
            try:  # big pieces first; on a line that damages them, halve them
                took = self._load(
                    prog.load_address + pos,
                    piece,
                    what=f"flasher upload at 0x{prog.load_address + pos:08X}",
                    tries=2 if chunk > MIN_FRAME else RETRIES + 1,
                )
            except NoResponseError:
                if chunk <= MIN_FRAME:
                    raise
                chunk //= 2
                continue
            if pos == 0:  # the link's speed (see slowness)
                self.slowness = min(MAX_SLOWNESS, max(self.slowness, took))
            pos += len(piece)
        self._call(KfpyOp.EXEC, prog.entry, timeout=COMMAND_TIMEOUT, what="flasher start")
        self.link.wait(START_WAIT)
        self.greet()
        self._running = True

    def _load(self, address: int, piece: bytes, *, what: str, tries: int) -> float:
        """Write ``piece`` to SRAM at ``address`` with the bootstrap's LOAD; how much
        slower than its wire time it was answered.

        The request (CRC-checked like any other) announces the payload: its length, its
        CRC-32 and how long the board waits for it; the payload follows at once, raw, in
        the same write (no round trip, no gap of the host's: the board arms its DMA as
        the request ends, the bytes that came meanwhile wait in the FIFO). The board
        answers "ready" (no payload) when armed,
        then address and length once it has the payload and its CRC matches (``E2``
        otherwise: damaged, or cut short when the wait ran out, e.g. a byte lost on the
        way). A request damaged on the way is answered ``E2`` and its payload read as
        frames (each answered ``E2``, a valid one would need a matching CRC-32). Each
        failure is followed by a barrier, which lets all that pass, and the whole LOAD is
        sent again.
        """
        wire = (len(piece) + 40) * 10 / self.link.port.baudrate
        # the board's wait: the wire time and a margin for gaps on the way (a USB bridge's)
        wait = (wire + BOOT_PAYLOAD_WAIT) * self.slowness
        ticks = min(int(wait * BOOT_MTIME_HZ), 0xFFFF_FFFF)
        header = struct.pack("<III", len(piece), crc32(piece), ticks)
        done = struct.pack("<II", address, len(piece))
        failures: list[str] = []
        for _ in range(tries):
            start = self.link.now()
            self.link.send(KfpyOp.LOAD, address, header, tail=piece)
            # the board answers within its wait, even when bytes went missing
            timeout = wait + COMMAND_TIMEOUT * self.slowness

            def read(timeout: float = timeout) -> tuple[Response, bytes]:
                resp = self.link.recv(KfpyOp.LOAD, timeout, extra_len=None)
                payload = _payload(resp)
                if resp.status == Status.OK and not payload:  # "ready" (if it was not lost)
                    resp = self.link.recv(KfpyOp.LOAD, timeout, extra_len=None)
                    payload = _payload(resp)
                return resp, payload

            got = _received(read, failures)
            if got is not None:
                resp, payload = got
                if resp.status == Status.OK and payload == done:
                    # ~wire time plus a USB round trip on a real board
                    return (self.link.now() - start) / (wire + 0.02)
                if resp.status not in (Status.OK, Status.BAD_DATA_CHECKSUM):
                    raise ProtocolError(
                        f"{what}: the bootstrap refused it ({resp.describe()})",
                        "the bootstrap and this client do not match: reinstall kflashpy",
                    )
                damaged = "payload" if payload else "request"
                failures.append(f"{damaged} damaged on the wire")
            self._resend()
        raise self._gave_up(what, failures)

    def flash_init(self) -> None:
        self._ensure_flasher()
        self._legacy(FlashOp.FLASH_INIT, 0, data_len=0, what="flash init")
        self.info = FlasherInfo.parse(
            self._call(KfpyOp.IDENTIFY, timeout=COMMAND_TIMEOUT, what="identify")
        )
        if not self.info.flash_ok:
            raise ProtocolError(
                f"the flash chip answered JEDEC id 0x{self.info.jedec_id:06X}",
                "no SPI flash found: check the board",
            )

    def identify(self) -> FlashInfo:
        self._ensure_flasher()
        if self.info is None:
            self.info = FlasherInfo.parse(
                self._call(KfpyOp.IDENTIFY, timeout=COMMAND_TIMEOUT, what="identify")
            )
        return FlashInfo(self.info.jedec_id, self.info.flash_size, self.info.unique_id)

    # --- hashing ----------------------------------------------------------------------
    def _hash_timeout(self, size: int, extra_bytes: int = 0) -> float:
        wire = extra_bytes * 10 / self.link.port.baudrate
        return DEFAULT_TIMEOUT + wire + HASH_S_PER_MB * size / (1 << 20)

    def hash_list(self, address: int, size: int) -> list[bytes]:
        """SHA-256 of each piece of the range cut at 4 KiB sector boundaries.

        Asked for in requests of up to :data:`HASH_PIECE` sectors, each reply CRC-checked:
        a damaged or lost reply is asked again, then halved, and the list resumes after
        the last good piece, so a noisy line costs retries, not the whole list.
        """
        self._ensure_flasher()
        blocks = sector_blocks(address, size)
        known = [self._beyond.get((address + off, n)) for off, n in blocks]
        if all(known):
            return known  # type: ignore[return-value]
        out: list[bytes] = []
        per = HASH_PIECE
        while len(out) < len(blocks):
            first = blocks[len(out)]
            if first[1] < SECTOR and len(out) == 0 and len(blocks) > 1:
                k = 1  # an unaligned start: its own request, so the rest is sector-aligned
            else:
                k = min(per, len(blocks) - len(out))
            last = blocks[len(out) + k - 1]
            at, n = address + first[0], last[0] + last[1] - first[0]
            try:
                p = self._call(
                    KfpyOp.HASH_LIST,
                    at,
                    struct.pack("<III", n, max(first[1], SECTOR if k > 1 else n), 0),
                    timeout=self._hash_timeout(n, 32 * k),
                    what=f"hash list at 0x{at:08X}",
                    tries=2 if k > 1 else RETRIES + 1,
                )
            except NoResponseError:
                if k == 1:
                    raise
                per = max(1, k // 2)
                continue
            if len(p) != 8 + 32 * k:
                raise ProtocolError(f"hash list at 0x{at:08X}: {len(p)} bytes of reply")
            out += [p[8 + 32 * i : 40 + 32 * i] for i in range(k)]
        return out

    def hash_list_ahead(
        self, address: int, data: bytes, ledger: WriteLedger | None = None
    ) -> list[bytes]:
        """:meth:`hash_list` of the region ``data`` will be written to; where its first
        sectors read erased, the first frames of that write (the small ones of
        :func:`tapered`) are sent while the board checks the rest, in one request: a
        first burn's blank check then costs no time. :meth:`write` of the same ``data``
        at ``address`` takes them over (they are in ``ledger`` as sent from now on).
        Nothing is sent ahead over data, where those frames could mean extra erases."""
        self._ahead, self._beyond = [], {}
        size, head = len(data), HEAD_SECTORS * SECTOR
        if address % FRAME or size < 2 * FRAME or self._frame_limit != FRAME:
            return self.hash_list(address, size)
        first = self.hash_list(address, head)
        if any(d != _ERASED_SECTOR for d in first):
            return first + self.hash_list(address + head, size - head)
        ledger = ledger or WriteLedger()
        self.link.keep_ops = frozenset({KfpyOp.WRITE})  # their acknowledgements wait for write()
        # the request runs on to the end of the last erase unit (whole sectors): the
        # bytes past the region that the write may erase are checked in the same pass
        end = address + size
        unit_end = self.erase_units(address, size)[-1][1]
        if self.info is None or unit_end > self.info.flash_size:
            unit_end = -(-end // SECTOR) * SECTOR
        rest, k = unit_end - address - head, (unit_end - address - head) // SECTOR
        self.link.send(KfpyOp.HASH_LIST, address + head, struct.pack("<III", rest, SECTOR, 0))
        at, prior = address, None
        for n in AHEAD:
            self._ahead.append(_Frame(at, data[at - address : at - address + n], prior))
            prior = self._ahead[-1].tail() if self._dictionaries() else None
            ledger.sent(at, n)
            self.link.send_packet(self._ahead[-1].packet)
            at += n
        try:
            resp = self.link.recv(
                KfpyOp.HASH_LIST,
                self._hash_timeout(rest, 32 * k) * self.slowness,
                extra_len=None,
            )
            p = _payload(resp)
            if resp.status != Status.OK or len(p) != 8 + 32 * k:
                raise _BadReply
        except (NoResponseError, _BadReply):
            # the usual pieces; acknowledgements of the frames ahead that arrive meanwhile
            # are kept for write()
            self._resend()
            return first + self.hash_list(address + head, size - head)
        sectors = {address + head + SECTOR * i: p[8 + 32 * i : 40 + 32 * i] for i in range(k)}
        out = first + [
            _piece(at, n, sectors) or self.hash_list(at, n)[0]
            for at, n in ((address + off, n) for off, n in sector_blocks(address, size))
            if at >= address + head
        ]
        for off, n in sector_blocks(end, unit_end - end):
            d = _piece(end + off, n, sectors)
            if d is not None:
                self._beyond[(end + off, n)] = d
        return out

    def sha256(self, address: int, size: int) -> bytes:
        """On-board SHA-256 of a region (a 32-byte reply)."""
        self._ensure_flasher()
        return self._call(
            KfpyOp.HASH,
            address,
            struct.pack("<I", size),
            timeout=self._hash_timeout(size),
            what=f"hash at 0x{address:08X}",
        )

    # --- reading ----------------------------------------------------------------------
    def read(self, address: int, size: int, progress: ProgressFn | None = None) -> bytes:
        """Read flash; checked per chunk (CRC-32) and as a whole (the board's SHA-256).

        On a line that damages most chunks the stream restarts from where it stopped
        with smaller chunks; the region is then hashed once more on the board.
        """
        self._ensure_flasher()
        out = bytearray()
        report(progress, Progress("read", 0, size))
        chunk, restarts = READ_CHUNK, 0
        while len(out) < size:
            if self._read_stream(address, size, chunk, out, progress):
                continue
            restarts += 1
            if restarts > RETRIES or chunk <= MIN_READ_CHUNK and restarts > 2:
                raise NoResponseError(
                    f"read at 0x{address + len(out):08X}: the board stopped sending",
                    self.link.diagnose() + "; a lower baud rate (-b) may help",
                )
            chunk = max(MIN_READ_CHUNK, chunk // 2)
            self.link.discard_input()
            self._barrier()  # ends the board's read; its late frames are thrown away
        if restarts:
            return self._check_read(address, out, self.sha256(address, size))
        return bytes(out)

    def _read_stream(
        self, address: int, size: int, chunk: int, out: bytearray, progress: ProgressFn | None
    ) -> bool:
        """One READ command for the rest of the range; False if the line gave up on it."""
        base = address + len(out)
        left = size - len(out)
        got = bytearray()
        self.link.send(KfpyOp.READ, base, struct.pack("<III", left, chunk, READ_WINDOW))
        stream = _ReplyStream(self.link)
        timeout = (DEFAULT_TIMEOUT / 3 + READ_WINDOW * chunk * 10 / self.link.port.baudrate) * (
            self.slowness
        )
        acked, failures, last_nak = 0, 0, -1
        while True:
            if not got:
                expect = 8  # the first reply may be a refusal (address and size only)
            elif len(got) < left:
                expect = min(chunk, left - len(got)) + 4
            else:
                expect = 36
            try:
                resp = stream.next(KfpyOp.READ, timeout, expect)
                p = _payload(resp)
                if resp.status != Status.OK:
                    raise ProtocolError(
                        f"read of {left} B at 0x{base:08X}: refused ({resp.describe()})",
                        "check the range against the flash size (kflashpy flash-id)",
                    )
                off = struct.unpack_from("<I", p)[0]
            except (NoResponseError, _BadReply):
                failures += 1
                if len(got) == left:  # only the final digest was lost: hash separately
                    out += self._check_read(base, got, self.sha256(base, left))
                    return True
                if failures > 8:
                    out += got
                    return False
                self.link.send(KfpyOp.READ_ACK, len(got), data_len=1)  # resend from here
                last_nak = len(got)
                continue
            if off == left and len(p) == 36 and len(got) == left:
                out += self._check_read(base, got, p[4:])
                return True
            if off == len(got) and len(p) > 4:
                got += p[4:]
                failures = 0
                report(progress, Progress("read", len(out) + len(got), size))
                if len(got) - acked >= chunk * READ_WINDOW // 2 or len(got) == left:
                    self.link.send(KfpyOp.READ_ACK, len(got), data_len=0)
                    acked = len(got)
            elif off > len(got) and last_nak != len(got):
                self.link.send(KfpyOp.READ_ACK, len(got), data_len=1)
                last_nak = len(got)

    @staticmethod
    def _check_read(address: int, data: bytearray, digest: bytes) -> bytes:
        if hashlib.sha256(data).digest() != digest:
            raise ProtocolError(
                f"read of {len(data)} B at 0x{address:08X}: the data does not match the "
                "board's SHA-256 of the region",
                "read again; if it repeats, lower the baud rate",
            )
        return bytes(data)

    # --- writing ----------------------------------------------------------------------
    def erase_units(self, at: int, n: int) -> list[tuple[int, int]]:
        """What the flasher may erase to write ``[at, at + n)``: the 64 KiB block where
        the write covers two sectors or more of it (it erases a whole block when that is
        quicker), else the 4 KiB sectors (``write_range`` in stub/flasher.c)."""
        out, pos, end = [], at, at + n
        while pos < end:
            base = pos - pos % BLOCK_SIZE
            hi = min(end, base + BLOCK_SIZE)
            if hi - pos < 2 * SECTOR:
                base = pos - pos % SECTOR
                hi = min(end, base + SECTOR)
                out.append((base, base + SECTOR))
            else:
                out.append((base, base + BLOCK_SIZE))
            pos = hi
        return out

    def _dictionaries(self) -> bool:
        """Does the flasher take BC frames (protocol 3)?"""
        return self.info is not None and bool(self.info.caps & CAP_BIT_DICTIONARY)

    def _failed(self, frame: _Frame, seen: str) -> list[_Frame]:
        """A frame to send again: smaller, on a line that damages big frames."""
        frame.failures.append(seen)
        if len(frame.chunk) <= MIN_FRAME:
            frame.tries += 1
            if frame.tries > RETRIES:
                raise NoResponseError(
                    f"write at 0x{frame.at:08X}: not acknowledged after {frame.tries} tries",
                    _seen(frame.failures, self.link.diagnose()),
                )
            return [frame.alone()]
        self._frame_limit = max(MIN_FRAME, len(frame.chunk) // 2)
        return [
            _Frame(frame.at + off, frame.chunk[off : off + n])
            for off, n in sector_blocks(frame.at, len(frame.chunk), self._frame_limit)
        ]

    def write(
        self,
        address: int,
        data: bytes,
        progress: ProgressFn | None = None,
        *,
        pieces: Pieces | None = None,
        ledger: WriteLedger | None = None,
        blank: Pieces = (),
    ) -> None:
        """See :meth:`Stage2.write`. Where ``blank`` (the parts of ``data`` the board's
        hash list showed erased) covers the first or last frame, that frame is sent as
        frames that halve down to one sector (see :func:`tapered`)."""
        self._ensure_flasher()
        self._beyond = {}
        total = len(data)
        ledger = ledger or WriteLedger()
        report(progress, Progress("write", 0, total))
        runs = join_pieces(address, [(0, total)] if pieces is None else pieces, FRAME)
        frames = [(address + off, data[off : off + n]) for off, n in runs]
        done = total - sum(len(c) for _, c in frames)
        if done:
            report(progress, Progress("write", done, total, message=f"{done} B unchanged"))
        full_window = window = self.info.window if self.info else 2
        cuts = [
            (at + off, n)
            for at, chunk in frames
            for off, n in sector_blocks(at, len(chunk), self._frame_limit)
        ]
        if self._frame_limit == FRAME and blank:
            cuts = tapered(
                cuts,
                [(address + off, n) for off, n in blank],
                frame_size(data, self.link.port.baudrate),
            )
        # frames hash_list_ahead() sent: in flight already (sent again if not acknowledged)
        inflight = deque(
            f
            for f in self._ahead
            if f.at >= address and data[f.at - address : f.at - address + len(f.chunk)] == f.chunk
        )
        self.link.keep_ops = frozenset()
        if len(inflight) < len(self._ahead):  # sent ahead for another write: let them pass
            inflight.clear()
            self._barrier()
            self.link.discard_input()
        self._ahead = []
        todo: deque[_Frame] = deque()
        prior = inflight[-1].tail() if inflight else None
        for at, n in _minus(cuts, [(f.at, f.at + len(f.chunk)) for f in inflight]):
            todo.append(_Frame(at, data[at - address : at - address + n], prior))
            prior = todo[-1].tail() if self._dictionaries() else None
        baud = self.link.port.baudrate
        streak = 0
        while todo or inflight:
            while todo and len(inflight) < window:
                inflight.append(todo.popleft())
                ledger.sent(inflight[-1].at, len(inflight[-1].chunk))
                self.link.send_packet(inflight[-1].packet)
            wire = sum(len(f.packet) for f in inflight) * 10 / baud
            timeout = ACK_TIMEOUT + wire + FLASH_S_PER_FRAME * len(inflight)
            try:
                seen = "no reply"
                start = self.link.now()
                resp = self.link.recv(KfpyOp.WRITE, timeout * self.slowness, extra_len=None)
                self._observe(self.link.now() - start, timeout)
                seen = "damaged reply"
                p = _payload(resp)
            except (NoResponseError, _BadReply):
                self._barrier()  # nothing older is still coming: resend what is unanswered
                retry = [g for f in inflight for g in self._failed(f, seen)]
                todo.extendleft(reversed(retry))
                inflight.clear()
                window, streak = 1, 0
                continue
            if resp.status == Status.BAD_DATA_CHECKSUM or len(p) not in (8, 44):
                failed = self._failed(inflight.popleft(), "request damaged")  # arrived damaged
                todo.extendleft(reversed(failed))
                # a frame that arrives while the flash works may be the problem (a slow
                # bridge, a core that misses bytes): one frame at a time for a while
                window, streak = 1, 0
                continue
            at, n = struct.unpack_from("<II", p)
            lost = 0
            while inflight and inflight[0].at != at:
                todo.appendleft(inflight.popleft().alone())  # lost on the way: send again
                lost += 1
            if resp.status == NO_DICTIONARY:
                # the board does not hold the tail this frame was packed against (the
                # frame before it was lost): again, on its own, after the lost ones
                if inflight:
                    todo.insert(lost, inflight.popleft().alone())
                continue
            if resp.status == WRITE_CHECK_FAILED:
                raise VerifyError(
                    f"write of {n} B at 0x{at:08X}: the flash read back other bytes than "
                    "were programmed",
                    "burn again; if it repeats, the flash chip may be worn or faulty",
                )
            if resp.status != Status.OK:
                raise ProtocolError(
                    f"write of {n} B at 0x{at:08X}: refused ({resp.describe()})",
                    "check the range against the flash size (kflashpy flash-id)",
                )
            if inflight:
                frame = inflight.popleft()
                checked = len(p) == 44 and n == len(frame.chunk) and _digest_matches(frame, p[8:40])
                ledger.ack(at, n, checked, erased=not checked or bool(p[40] & 1))
                done += n
                report(progress, Progress("write", min(done, total), total))
                streak += 1
                if streak >= 8:  # the line got better
                    self._frame_limit = min(FRAME, self._frame_limit * 2)
                    window, streak = full_window, 0

    # --- erase, reboot ------------------------------------------------------------------
    def erase(self, address: int, size: int, progress: ProgressFn | None = None) -> None:
        check_sector_range(address, size, "erase")
        self._ensure_flasher()
        self._beyond = {}
        report(progress, Progress("erase", 0, size))
        self._call(
            KfpyOp.ERASE,
            address,
            struct.pack("<I", size),
            timeout=scaled_timeout(size, ERASE_TIMEOUT_PER_MB),
            what=f"erase of 0x{size:X} B at 0x{address:08X}",
        )
        report(progress, Progress("erase", size, size))

    def chip_erase(self, progress: ProgressFn | None = None) -> None:
        self._ensure_flasher()
        self._beyond = {}
        report(progress, Progress("erase", 0, 1))
        self._call(KfpyOp.CHIP_ERASE, timeout=CHIP_ERASE_TIMEOUT, what="chip erase")
        report(progress, Progress("erase", 1, 1))

    def reboot(self) -> None:
        self._ensure_flasher()
        self._legacy(FlashOp.REBOOT, 0, data_len=0, what="reboot")

    def sram_write(self, address: int, data: bytes) -> None:
        """Write a program into SRAM below the flasher (at the full baud rate)."""
        self._ensure_flasher()
        for pos in range(0, len(data), FRAME):
            self._call(
                KfpyOp.SRAM_WRITE,
                address + pos,
                data[pos : pos + FRAME],
                timeout=DEFAULT_TIMEOUT,
                what=f"SRAM write at 0x{address + pos:08X}",
            )

    def execute(self, entry: int) -> None:
        """Jump to ``entry`` (the program gets a0 = 0x4B465059, a1 = the baud rate)."""
        self._call(KfpyOp.EXEC, entry, timeout=COMMAND_TIMEOUT, what=f"exec 0x{entry:08X}")


def kflashpy_program() -> StubProgram:
    """The registry entry for ``--stub kflashpy``: the bootstrap, then :class:`KfpyStage2`."""
    build = load_build()
    boot = build.boot
    return StubProgram(
        "kflashpy",
        boot.image,
        boot.load_address,
        boot.entry,
        lambda link: KfpyStage2(link, bootstrap=True, build=build),
        # the boot command's 18 bytes take 1.6 ms at 115200 and the ROM jumps after the
        # last one: a greeting sent sooner reaches the ROM's UART instead (and is lost)
        start_wait=0.003,
    )
