"""The stage-2 (flash-mode) connection: one interface, capabilities discovered per flasher.

After the mask ROM has booted a flasher program from SRAM, everything goes through a
:class:`Stage2`. Flashers differ (the PyPI kflash stub has a non-blocking erase; older
kflash stubs do not; our own flasher adds read-back and hashing), so callers ask
``CAP_... in stage2.capabilities`` instead of assuming. Optional methods raise
:class:`~kflashpy.errors.UnsupportedError` when the capability is missing.
"""

from __future__ import annotations

import hashlib
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import InputError, NoResponseError, UnsupportedError
from ..progress import Progress, ProgressFn, report
from ..target import k210
from .frames import STAGE2_MAX_CHUNK, FlashOp, Status
from .link import Link
from .timeouts import TIMEOUTS

# --- capability names (strings, so other flashers can add their own) ---------------------
CAP_WRITE = "write"  # program flash (the flasher erases what it writes)
CAP_UNALIGNED_WRITE = "unaligned-write"  # writes may start/end anywhere, not on 4 KiB
CAP_ERASE = "erase"  # erase a 4 KiB-aligned region
CAP_CHIP_ERASE = "chip-erase"  # erase the whole chip
CAP_BAUD = "baud"  # change the line rate
CAP_REBOOT = "reboot"  # reset the SoC into the flashed program by command
CAP_READ = "read"  # read flash back
CAP_HASH = "hash"  # SHA-256 of a flash range computed on the board
CAP_IDENTIFY = "identify"  # JEDEC id / size of the flash chip
CAP_COMPRESSED_WRITE = "compressed-write"  # writes of compressed data

SECTOR = k210.FLASH_SECTOR
BLOCK_SIZE = k210.FLASH_BLOCK  # the flash's large erase unit

#: reply timeouts (seconds of port time), from the one table (isp/timeouts.py)
DEFAULT_TIMEOUT = TIMEOUTS["reply"]
GREETING_TIMEOUT = TIMEOUTS["stage2_greeting"]
ERASE_TIMEOUT_PER_MB = TIMEOUTS["erase_per_mb"]
#: a kflash flasher rewrites a whole 64 KiB block for every write frame, however short
#: (read, erase, program in 32-byte pieces): up to ~8 s with worst-case chip timings
BLOCK_REWRITE_TIMEOUT = TIMEOUTS["block_rewrite"]
CHIP_ERASE_TIMEOUT = TIMEOUTS["chip_erase"]
FLASH_INIT_TIMEOUT = TIMEOUTS["flash_init"]


def scaled_timeout(nbytes: int, per_mb: float, baud: int | None = None) -> float:
    """A timeout that grows with the size of the operation, never below the default.

    ``baud`` adds the time the bytes need on the wire (10 bits per byte).
    """
    wire = nbytes * 10 / baud if baud else 0.0
    return max(DEFAULT_TIMEOUT, DEFAULT_TIMEOUT + wire + per_mb * nbytes / (1 << 20))


#: ``(offset, length)`` pieces of a write's data to send (the burn pipeline's choice)
Pieces = Sequence[tuple[int, int]]


def sector_blocks(address: int, size: int, block: int = SECTOR) -> list[tuple[int, int]]:
    """Split a range at absolute ``block`` boundaries: [(offset in range, length)]."""
    out, pos = [], 0
    while pos < size:
        n = min(block - (address + pos) % block, size - pos)
        out.append((pos, n))
        pos += n
    return out


def join_pieces(address: int, pieces: Pieces, limit: int = BLOCK_SIZE) -> list[tuple[int, int]]:
    """Join adjacent ``(offset, length)`` pieces into runs that do not cross a ``limit``
    boundary of the flash (a write frame's extent)."""
    runs: list[tuple[int, int]] = []
    for off, n in pieces:
        if runs:
            start, length = runs[-1]
            if start + length == off and (address + start) % limit + length + n <= limit:
                runs[-1] = (start, length + n)
                continue
        runs.append((off, n))
    return runs


@dataclass
class WriteLedger:
    """What a write sent and what the board acknowledged, for the damage report.

    The burn pipeline owns it and reads it after a failure; a client only records into
    it. ``pending`` holds the frames sent at least once and not acknowledged: the board
    may have erased or half-programmed the flash its write of them touches (see
    :meth:`Stage2.erase_units`). ``checked`` holds the frames whose acknowledgement
    proved what the flash holds (an on-board digest of bytes read back after writing,
    equal to the host's) and whether their write erased anything; ``unchecked`` counts
    the bytes acknowledged without that proof.
    """

    pending: dict[int, int] = field(default_factory=dict)  # address -> length
    acked: int = 0  # bytes acknowledged
    checked: list[tuple[int, int, bool]] = field(default_factory=list)  # address, length, erased
    unchecked: int = 0

    def sent(self, at: int, n: int) -> None:
        self.pending[at] = max(n, self.pending.get(at, 0))

    def ack(self, at: int, n: int, checked: bool = False, erased: bool = True) -> None:
        self.pending.pop(at, None)
        self.acked += n
        if checked:
            self.checked.append((at, n, erased))
        else:
            self.unchecked += n


@dataclass(frozen=True)
class FlashInfo:
    """What a flasher reports about the flash chip (capability "identify")."""

    jedec_id: int
    size: int
    unique_id: bytes = b""


class Stage2(ABC):
    """A connection to a running stage-2 flasher (see the module docstring)."""

    #: short name shown to the user ("kflash-1.1.6", "kflashpy 1.0", ...)
    name: str = "stage2"
    capabilities: frozenset[str] = frozenset()

    def __init__(self, link: Link) -> None:
        self.link = link

    def has(self, capability: str) -> bool:
        return capability in self.capabilities

    def _require(self, capability: str, what: str) -> None:
        if capability not in self.capabilities:
            raise UnsupportedError(
                f"the flasher {self.name!r} cannot {what} (no {capability!r} capability)",
                "use a flasher that can (--stub kflashpy when available)",
            )

    @abstractmethod
    def greet(self, attempts: int = 10, timeout: float | None = None) -> None:
        """Wait until the flasher answers its NOP; also a barrier for stale replies.
        Each attempt waits ``timeout`` seconds of port time (default: the flasher's
        greeting timeout)."""

    @abstractmethod
    def flash_init(self) -> None:
        """Prepare the SPI flash (quad mode etc.); needed before writes and erases."""

    @abstractmethod
    def set_baud(self, baud: int) -> None:
        """Move both ends of the line to ``baud`` and check the flasher still answers."""

    @abstractmethod
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
        """Write ``data`` at ``address``; returns only once every frame was acknowledged.

        ``pieces``: only these ``(offset, length)`` parts of ``data`` are sent (the
        caller knows the rest is on flash already); ``ledger`` records what was sent and
        acknowledged, so a failure can say what it may have damaged; ``blank``: the parts
        the board reported erased (a client may frame them differently, nothing more).
        """

    #: the flash a write of any byte inside it may erase and rewrite (see erase_units)
    erase_unit: int = SECTOR

    def erase_units(self, at: int, n: int) -> list[tuple[int, int]]:
        """The flash ranges the board may erase to write ``n`` bytes at ``at``."""
        unit = self.erase_unit
        return [(at - at % unit, -(-(at + n) // unit) * unit)]

    @abstractmethod
    def erase(self, address: int, size: int, progress: ProgressFn | None = None) -> None:
        """Erase ``size`` bytes at ``address`` (both multiples of 4 KiB)."""

    @abstractmethod
    def chip_erase(self, progress: ProgressFn | None = None) -> None:
        """Erase the whole flash chip."""

    @abstractmethod
    def reboot(self) -> None:
        """Reset the SoC into the flashed program (raises UnsupportedError if it cannot)."""

    def _follow_baud(self, old: int, baud: int, settle: float = 0.05) -> None:
        """After telling the flasher to change rate: follow it and check it still answers.

        The flasher's reply to the rate change may come at either rate, so it is not
        relied upon; a greeting at the new rate is.
        """
        self.link.wait(settle)
        self.link.set_baud(baud)
        try:
            self.greet(attempts=5)
        except NoResponseError as e:
            raise NoResponseError(
                f"the flasher stopped answering after switching {old} -> {baud} baud",
                "use a lower --baud; CH340/CH552 boards are reliable up to 1500000",
            ) from e

    # --- optional capabilities ------------------------------------------------------------

    def read(self, address: int, size: int, progress: ProgressFn | None = None) -> bytes:
        self._require(CAP_READ, "read flash")
        raise AssertionError("unreachable")  # pragma: no cover

    def sha256(self, address: int, size: int) -> bytes:
        self._require(CAP_HASH, "hash flash on the board")
        raise AssertionError("unreachable")  # pragma: no cover

    def identify(self) -> FlashInfo:
        self._require(CAP_IDENTIFY, "identify the flash chip")
        raise AssertionError("unreachable")  # pragma: no cover

    def hash_list(self, address: int, size: int) -> list[bytes]:
        """SHA-256 of each piece of the range cut at 4 KiB sector boundaries."""
        self._require(CAP_HASH, "hash flash on the board")
        raise AssertionError("unreachable")  # pragma: no cover

    def hash_list_ahead(
        self, address: int, data: bytes, ledger: WriteLedger | None = None
    ) -> list[bytes]:
        """:meth:`hash_list` of the range ``data`` is about to be written to; a client
        may start that write meanwhile (recording what it sends in ``ledger``)."""
        return self.hash_list(address, len(data))


def check_sector_range(address: int, size: int, what: str) -> None:
    """Erase ranges must start and end on 4 KiB sectors."""
    if address % SECTOR or size % SECTOR or size <= 0:
        raise InputError(
            f"{what}: 0x{address:08X} + 0x{size:X} is not a whole number of 4 KiB sectors",
            "round the address down and the size up to multiples of 0x1000",
        )


# --- kflash-compatible flashers ------------------------------------------------------------

#: capability sets of the kflash-family flashers we can recognise
KFLASH_VARIANTS: dict[str, frozenset[str]] = {
    # PyPI kflash 1.1.6 (vowstar): D2-D9; D8 = non-blocking erase, D9 = status
    "kflash-1.1.6": frozenset(
        {CAP_WRITE, CAP_UNALIGNED_WRITE, CAP_ERASE, CAP_CHIP_ERASE, CAP_BAUD, CAP_REBOOT}
    ),
    # any other kflash-compatible program: only the D2-D7 meanings all of them share
    "kflash-compatible": frozenset({CAP_WRITE, CAP_BAUD}),
}

ERASE_POLL = 0.25  # seconds between D9 status polls while an erase runs


@dataclass(frozen=True)
class StubProgram:
    """A stage-2 program ready to upload."""

    name: str
    image: bytes
    load_address: int
    entry: int
    make_client: Callable[[Link], Stage2]
    #: seconds the program needs after boot before it can answer (kflash-family
    #: stubs set up their UART first; a program that answers at once uses 0)
    start_wait: float = 0.1

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.image).hexdigest()


class KflashStage2(Stage2):
    """Drives a kflash-compatible flasher (opcodes D2-D7, plus D8/D9 on kflash 1.1.6)."""

    #: FLASH_INIT chip-select argument kflash sends by default (the on-board SPI flash)
    FLASH_CHIP = 1

    def __init__(self, link: Link, variant: str = "kflash-compatible") -> None:
        super().__init__(link)
        if variant not in KFLASH_VARIANTS:
            raise ValueError(f"unknown kflash variant {variant!r}")
        self.name = variant
        self.capabilities = KFLASH_VARIANTS[variant]

    def _request(self, op: int, address: int = 0, data: bytes = b"", data_len=None, **kw):
        kw.setdefault("timeout", DEFAULT_TIMEOUT)
        return self.link.request(op, address, data, data_len, nop_op=FlashOp.NOP, **kw)

    def greet(self, attempts: int = 10, timeout: float | None = None) -> None:
        for _ in range(attempts):
            self.link.send(FlashOp.NOP)
            try:
                if self.link.recv(FlashOp.NOP, timeout or GREETING_TIMEOUT).ok:
                    self.link.discard_input()
                    return
            except NoResponseError:
                continue
        raise NoResponseError(
            f"the flasher did not answer after {attempts} greetings",
            self.link.diagnose() + "; it may have failed to start (try --stub or a lower -b)",
        )

    def flash_init(self) -> None:
        self._request(
            FlashOp.FLASH_INIT,
            self.FLASH_CHIP,
            data_len=0,
            timeout=FLASH_INIT_TIMEOUT,
            what="flash init",
        )

    def set_baud(self, baud: int) -> None:
        old = self.link.port.baudrate
        self.link.send(FlashOp.UARTHS_BAUDRATE_SET, 0, struct.pack("<I", baud))
        self._follow_baud(old, baud)

    def _chunks(self, address: int, data: bytes) -> list[tuple[int, bytes]]:
        """Split a write into frames that end on 64 KiB boundaries.

        Flashers without unaligned writes need 4 KiB-aligned starts and whole sectors;
        the tail is padded with 0xFF (the erased value).
        """
        if not self.has(CAP_UNALIGNED_WRITE):
            if address % SECTOR:
                raise InputError(
                    f"0x{address:08X}: the flasher {self.name!r} needs 4 KiB-aligned addresses",
                    "burn at a multiple of 0x1000, or use --stub kflash",
                )
            if len(data) % SECTOR:
                data = data + b"\xff" * (SECTOR - len(data) % SECTOR)
        chunks = []
        pos = 0
        while pos < len(data):
            at = address + pos
            n = min(STAGE2_MAX_CHUNK - at % STAGE2_MAX_CHUNK, len(data) - pos)
            chunks.append((at, data[pos : pos + n]))
            pos += n
        return chunks

    #: every write frame rewrites its whole 64 KiB block (read, erase, program)
    erase_unit = STAGE2_MAX_CHUNK

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
        baud = self.link.port.baudrate
        done = 0
        total = len(data)
        ledger = ledger or WriteLedger()
        report(progress, Progress("write", 0, total))
        for at, chunk in self._chunks(address, data):
            if pieces is not None and not any(
                address + off < at + len(chunk) and at < address + off + n for off, n in pieces
            ):
                done = min(total, done + len(chunk))
                continue
            ledger.sent(at, len(chunk))
            self._request(
                FlashOp.FLASH_WRITE,
                at,
                chunk,
                timeout=scaled_timeout(len(chunk), 0, baud) + BLOCK_REWRITE_TIMEOUT,
                busy_poll=0.5,
                what=f"write of {len(chunk)} B at 0x{at:08X}",
            )
            ledger.ack(at, len(chunk))
            done = min(total, done + len(chunk))
            report(progress, Progress("write", done, total))

    def _wait_idle(self, timeout: float, progress: ProgressFn | None, total: int) -> None:
        """Poll D9 until the flash reports idle; progress shows elapsed vs expected time."""
        start = self.link.now()
        while True:
            self.link.send(FlashOp.FLASH_STATUS)
            try:
                resp = self.link.recv(FlashOp.FLASH_STATUS, DEFAULT_TIMEOUT)
            except NoResponseError:
                resp = None
            elapsed = self.link.now() - start
            if resp is not None and resp.status == Status.OK:
                report(progress, Progress("erase", total, total))
                return
            if elapsed > timeout:
                raise NoResponseError(
                    f"the erase did not finish within {timeout:.0f} s",
                    "power-cycle the board and try again",
                )
            report(
                progress, Progress("erase", min(total - 1, int(total * elapsed / timeout)), total)
            )
            self.link.wait(ERASE_POLL)

    def erase(self, address: int, size: int, progress: ProgressFn | None = None) -> None:
        self._require(CAP_ERASE, "erase a region")
        check_sector_range(address, size, "erase")
        report(progress, Progress("erase", 0, size))
        self._request(
            FlashOp.FLASH_ERASE_NONBLOCKING,
            address,
            data_len=size,
            what=f"erase at 0x{address:08X}",
        )
        self._wait_idle(scaled_timeout(size, ERASE_TIMEOUT_PER_MB), progress, size)

    def chip_erase(self, progress: ProgressFn | None = None) -> None:
        self._require(CAP_CHIP_ERASE, "erase the whole chip")
        report(progress, Progress("erase", 0, 1))
        self._request(FlashOp.FLASH_ERASE_NONBLOCKING, 0, data_len=0, what="chip erase")
        self._wait_idle(CHIP_ERASE_TIMEOUT, progress, 1)

    def reboot(self) -> None:
        self._require(CAP_REBOOT, "reboot by command")
        self._request(FlashOp.REBOOT, 0, data_len=0, busy_poll=1.0, what="reboot")
