"""SPI NOR flash model (W25Q128 / GD25LQ128 class) for the virtual board.

The SPI3 controller model of the virtual board talks to this chip through a
transaction interface: :meth:`NorFlash.select`, any number of
:meth:`NorFlash.exchange` calls (full duplex, 8-bit frames, one byte out for every
byte in), then :meth:`NorFlash.deselect`, which is where a page program, an erase
or a status-register write is executed and starts its busy time. Quad and dual
commands, which the DW SSI sends field by field, arrive as one
:meth:`NorFlash.enhanced` call.

What is modelled, because flashers depend on it:

* JEDEC (0x9F), manufacturer/device (0x90), release/device (0xAB) and unique (0x4B) IDs;
* status registers SR1..SR3 with BUSY/WIP, WEL, the block-protect bits and QE,
  non-volatile writes (with tW busy time) and volatile writes after 0x50;
* write-enable rules: program, erase and status writes need WEL, and WEL clears when
  the operation completes; every command except the status reads is ignored while busy;
* programming only clears bits; a page program wraps inside its 256-byte page and
  keeps only the last 256 bytes clocked in; reads wrap at the end of the array;
* 4 KiB / 32 KiB / 64 KiB / chip erase, refused on block-protected areas;
* busy times from datasheet figures (``typical``, ``worst``, or ``instant`` for tests);
* a power cut during a program or erase leaves the cells half done, as NOR does:
  a program has cleared the bits of the bytes already programmed, an erase has set a
  pseudo-random part of the bits (deterministic for a given cut time).

Timing figures are the commonly published Winbond W25Q128FV/JV numbers (see
docs/simulator.md); GigaDevice parts use the same profiles.
"""

from __future__ import annotations

import mmap
import os
import random
from dataclasses import asdict, dataclass
from hashlib import sha256
from pathlib import Path
from typing import BinaryIO

from ..errors import InputError
from ..fileio import write_atomic
from ..target import k210

PAGE_SIZE = k210.FLASH_PAGE
SECTOR_SIZE = k210.FLASH_SECTOR
MAX_SIZE = k210.FLASH_MAX_SIZE
MIN_SIZE = k210.FLASH_MIN_SIZE

# status register bits
SR1_BUSY = 0x01
SR1_WEL = 0x02
SR2_QE = 0x02

# bits a status write may change (BUSY, WEL and SUS are read-only)
_SR_WRITABLE = (0xFC, 0x7B, 0xE4)


@dataclass(frozen=True)
class FlashTiming:
    """Busy times of the chip, in seconds.

    A page program of ``n`` bytes takes ``byte_program_first + (n - 1) *
    byte_program_next``, at most ``page_program``: that is how the datasheets
    describe partial-page programming, and it matters because stock stubs program
    32 bytes per command.
    """

    write_status: float
    page_program: float
    byte_program_first: float
    byte_program_next: float
    sector_erase: float
    block32_erase: float
    block64_erase: float
    chip_erase: float

    @classmethod
    def profile(cls, name: str) -> FlashTiming:
        """Return a named profile: ``typical``, ``worst`` or ``instant``."""
        try:
            return TIMING_PROFILES[name]
        except KeyError:
            raise InputError(
                f"unknown flash timing profile {name!r}",
                hint=f"use one of: {', '.join(TIMING_PROFILES)}",
            ) from None

    def program_time(self, nbytes: int) -> float:
        """Busy time of one page program command carrying ``nbytes`` data bytes."""
        if nbytes <= 0:
            return 0.0
        return min(
            self.page_program, self.byte_program_first + (nbytes - 1) * self.byte_program_next
        )


TIMING_PROFILES: dict[str, FlashTiming] = {
    # W25Q128FV "typ" column (tW, tPP, tBP1, tBP2, tSE, tBE1, tBE2, tCE)
    "typical": FlashTiming(10e-3, 0.7e-3, 30e-6, 2.5e-6, 45e-3, 120e-3, 150e-3, 40.0),
    # W25Q128FV "max" column
    "worst": FlashTiming(15e-3, 3e-3, 50e-6, 12e-6, 400e-3, 1.6, 2.0, 200.0),
    # no busy time at all: for tests that only care about contents
    "instant": FlashTiming(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
}


@dataclass(frozen=True)
class ChipModel:
    """Identity of a flash part: what its ID commands answer."""

    name: str
    manufacturer: int
    memory_type: int
    #: status registers after power-up (SR1, SR2, SR3)
    status: tuple[int, int, int] = (0x00, 0x00, 0x60)


CHIPS: dict[str, ChipModel] = {
    "w25q128": ChipModel("w25q128", 0xEF, 0x40),
    "gd25lq128": ChipModel("gd25lq128", 0xC8, 0x60),
}


@dataclass
class FlashStats:
    """Counters for the live status line and for tests."""

    commands: int = 0
    reads: int = 0
    bytes_read: int = 0
    #: of bytes_read: those read on two or four data lines (dual/quad reads)
    bytes_read_wide: int = 0
    programs: int = 0
    bytes_programmed: int = 0
    #: of bytes_programmed: those clocked in on four data lines (quad page program)
    bytes_programmed_wide: int = 0
    erases: int = 0
    bytes_erased: int = 0
    status_writes: int = 0
    #: commands the chip refused (busy, no WEL, protected area, bad framing, no QE)
    ignored: int = 0
    #: opcodes the model does not know
    unknown: int = 0
    last_op: str = ""

    def to_dict(self) -> dict[str, int | str]:
        return asdict(self)


@dataclass
class _Pending:
    """An operation in its busy time, kept so a power cut can leave it half done."""

    kind: str  # "program", "erase", "status"
    start: float
    end: float
    address: int = 0
    old: bytes = b""
    #: program: the column of the first data byte, and the data bytes
    column: int = 0
    values: bytes = b""

    def offsets(self) -> list[int]:
        """A program's target offsets, in the order of :attr:`values`. Computed only when
        a power cut needs them: a page program is the hot path of every burn."""
        return _page_offsets(self.address, self.column, len(self.values))


def _page_offsets(page: int, column: int, count: int) -> list[int]:
    """The offsets ``count`` bytes programmed from ``column`` of ``page`` reach (the
    column wraps inside the page)."""
    return [page + ((column + k) & (PAGE_SIZE - 1)) for k in range(count)]


# opcode -> (name, header bytes after the opcode: address + dummy)
_COMMANDS: dict[int, tuple[str, int]] = {
    0x03: ("read", 3),
    0x0B: ("fast-read", 4),
    0x05: ("rdsr1", 0),
    0x35: ("rdsr2", 0),
    0x15: ("rdsr3", 0),
    0x06: ("wren", 0),
    0x04: ("wrdi", 0),
    0x50: ("vwren", 0),
    0x01: ("wrsr", 0),
    0x31: ("wrsr2", 0),
    0x11: ("wrsr3", 0),
    0x02: ("page-program", 3),
    0x20: ("erase-4k", 3),
    0x52: ("erase-32k", 3),
    0xD8: ("erase-64k", 3),
    0x60: ("chip-erase", 0),
    0xC7: ("chip-erase", 0),
    0x9F: ("jedec-id", 0),
    0x90: ("manufacturer-id", 3),
    0xAB: ("release-power-down", 3),
    0x4B: ("unique-id", 4),
    0xB9: ("power-down", 0),
    0x66: ("reset-enable", 0),
    0x99: ("reset", 0),
    0xFF: ("exit-continuous", 0),
}
_STATUS_READS = {0x05: 0, 0x35: 1, 0x15: 2}
_STATUS_WRITES = {0x01: 0, 0x31: 1, 0x11: 2}
_ERASE_SIZES = {0x20: SECTOR_SIZE, 0x52: 32 * 1024, 0xD8: 64 * 1024}

# enhanced (dual/quad) commands: opcode -> (name, data lines, dummy clocks after a
# 24-bit address when the mode byte is not part of the address field)
_ENHANCED: dict[int, tuple[str, int, int]] = {
    0x3B: ("dual-output-read", 2, 8),
    0x6B: ("quad-output-read", 4, 8),
    0xBB: ("dual-io-read", 2, 4),
    0xEB: ("quad-io-read", 4, 6),
    0x32: ("quad-page-program", 4, 0),
}


def _check_size(size: int) -> int:
    if size < MIN_SIZE or size > MAX_SIZE or size & (size - 1):
        raise InputError(
            f"flash size {size} is not supported",
            hint="use a power of two from 64K to 16M (3-byte addressing), e.g. flash_size=16M",
        )
    return size


def open_backing(path: str | os.PathLike[str], size: int) -> tuple[mmap.mmap, bool]:
    """Map ``path`` as the flash contents; create it erased (0xFF) when missing.

    Returns the map and whether the file was created. A new file is written to a
    temporary name and renamed, so an interrupted run never leaves a short image.
    The map is shared: other processes see the contents as the board writes them.
    """
    p = Path(path)
    created = False
    if not p.exists():

        def erased(f: BinaryIO) -> None:
            chunk = b"\xff" * (1 << 20)
            for offset in range(0, size, len(chunk)):
                f.write(chunk[: size - offset])

        write_atomic(p, erased)
        created = True
    try:
        actual = p.stat().st_size
        if actual != size:
            raise InputError(
                f"flash file {p} is {actual} bytes, the flash is {size} bytes",
                hint="use a file of exactly the flash size, pass a matching flash_size, "
                "or give a new file name (it is created erased)",
            )
        with open(p, "r+b") as f:
            return mmap.mmap(f.fileno(), size), created
    except OSError as exc:
        raise InputError(
            f"cannot open flash file {p}: {exc.strerror}",
            hint="check the path and that the file is readable and writable",
        ) from None


class NorFlash:
    """A 3-byte-address SPI NOR flash chip with realistic command semantics.

    ``data`` holds the array (a ``bytearray``, or an ``mmap`` of ``backing``);
    ``busy_until`` is the virtual time at which the running program/erase ends;
    ``stats`` counts operations. Times (``now``) are virtual seconds supplied by
    the board, so the model never looks at the host clock.
    """

    def __init__(
        self,
        size: int = MAX_SIZE,
        chip: str | ChipModel = "w25q128",
        timing: str | FlashTiming = "typical",
        backing: str | os.PathLike[str] | None = None,
        unique_id: bytes | None = None,
        jedec_id: bytes | None = None,
    ) -> None:
        self.size = _check_size(size)
        if isinstance(chip, str):
            if chip not in CHIPS:
                raise InputError(
                    f"unknown flash chip {chip!r}", hint=f"use one of: {', '.join(CHIPS)}"
                )
            chip = CHIPS[chip]
        self.chip = chip
        self.timing = FlashTiming.profile(timing) if isinstance(timing, str) else timing
        self.capacity_code = self.size.bit_length() - 1
        self.jedec_id = jedec_id or bytes((chip.manufacturer, chip.memory_type, self.capacity_code))
        if self.jedec_id[2] != self.capacity_code:
            raise InputError(
                f"JEDEC id {self.jedec_id.hex().upper()} says 2^{self.jedec_id[2]} bytes, "
                f"but the flash has {self.size} bytes",
                hint=f"end the JEDEC id with {self.capacity_code:02X}, or change flash_size",
            )
        self.unique_id = unique_id or sha256(f"{chip.name}:{size}".encode()).digest()[:8]
        self.backing = Path(backing) if backing is not None else None
        self.data: bytearray | mmap.mmap
        if self.backing is not None:
            self.data, self.created = open_backing(self.backing, self.size)
        else:
            self.data, self.created = bytearray(b"\xff" * self.size), True
        self.stats = FlashStats()
        self.busy_until = 0.0
        self._sr_nv = list(chip.status)
        self._sr = list(chip.status)
        self._wel = False
        self._volatile_we = False
        self._reset_enabled = False
        self._powered_down = False
        self.continuous_read = False
        self._pending: _Pending | None = None
        self._selected = False
        self._clear_transaction()

    # ------------------------------------------------------------------ state
    def _clear_transaction(self) -> None:
        self._op: int | None = None
        self._name = ""
        self._hdr_need = 0
        self._hdr = bytearray()
        self._body = bytearray()
        self._body_len = 0
        self._refused = False
        self._addr = 0
        self._out_pos = 0

    def _settle(self, now: float) -> None:
        if self._pending is not None and now >= self.busy_until:
            self._pending = None
            self._wel = False

    def busy(self, now: float) -> bool:
        """True while a program, erase or status write is in progress."""
        self._settle(now)
        return now < self.busy_until

    def status_register(self, index: int, now: float) -> int:
        """Value of SR1/SR2/SR3 (``index`` 0..2) as the chip would answer it."""
        self._settle(now)
        if index == 0:
            value = self._sr[0] & ~(SR1_BUSY | SR1_WEL)
            if self._wel:
                value |= SR1_WEL
            if now < self.busy_until:
                value |= SR1_BUSY
            return value
        return self._sr[index]

    @property
    def quad_enabled(self) -> bool:
        return bool(self._sr[1] & SR2_QE)

    def protected_range(self) -> tuple[int, int]:
        """``[start, end)`` locked by the block-protect bits (W25Q128 table)."""
        sr1, sr2 = self._sr[0], self._sr[1]
        bp = (sr1 >> 2) & 7
        tb = bool(sr1 & 0x20)
        sec = bool(sr1 & 0x40)
        cmp_ = bool(sr2 & 0x40)
        if bp == 0:
            start, end = 0, 0
        elif bp == 7:
            start, end = 0, self.size
        else:
            length = 4096 << min(bp - 1, 3) if sec else self.size >> (7 - bp)
            start, end = (0, length) if tb else (self.size - length, self.size)
        if cmp_:
            if start == 0 and end == 0:
                return 0, self.size
            if end == self.size and start == 0:
                return 0, 0
            return (end, self.size) if start == 0 else (0, start)
        return start, end

    def _is_protected(self, address: int, length: int) -> bool:
        start, end = self.protected_range()
        return start < end and address < end and address + length > start

    # ------------------------------------------------------------------ host side
    def read(self, address: int, length: int) -> bytes:
        """Bytes of the array (no chip semantics); for tests, tools and the ROM model."""
        if address < 0 or length < 0 or address + length > self.size:
            raise InputError(
                f"flash read of {length} bytes at {address:#x} is outside the {self.size}-byte flash"
            )
        return bytes(self.data[address : address + length])

    def preload(self, address: int, data: bytes) -> None:
        """Put ``data`` into the array directly, as if programmed at the factory."""
        if address < 0 or address + len(data) > self.size:
            raise InputError(
                f"{len(data)} bytes at {address:#x} do not fit the {self.size}-byte flash"
            )
        self.data[address : address + len(data)] = data

    def flush(self) -> None:
        """Write a file-backed array to disk."""
        if isinstance(self.data, mmap.mmap):
            self.data.flush()

    def close(self) -> None:
        """Flush and release the backing file (the model is unusable afterwards)."""
        if isinstance(self.data, mmap.mmap) and not self.data.closed:
            self.data.flush()
            self.data.close()

    def __enter__(self) -> NorFlash:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ SPI side
    def select(self, now: float) -> None:
        """CS goes low: a new command starts with the next byte."""
        self._settle(now)
        self._selected = True
        self._clear_transaction()

    def exchange(self, tx: bytes, now: float) -> bytes:
        """Clock ``tx`` in on MOSI; return the bytes the chip drove on MISO meanwhile."""
        self._settle(now)
        n = len(tx)
        if not self._selected:
            return b"\xff" * n
        if self._op is not None and len(self._hdr) >= self._hdr_need:
            # command and address already in: the data phase only (one call per data
            # byte of a page program or a read when the master sends byte by byte)
            return self._data_phase(tx, now)
        out = bytearray()
        i = 0
        while i < n:
            if self._op is None:
                self._start(tx[i], now)
                out.append(0xFF)
                i += 1
                continue
            need = self._hdr_need - len(self._hdr)
            if need > 0:
                take = min(need, n - i)
                self._hdr += tx[i : i + take]
                out += b"\xff" * take
                i += take
                if len(self._hdr) == self._hdr_need:
                    self._header_done()
                continue
            out += self._data_phase(tx[i:], now)
            break
        return bytes(out)

    def _start(self, op: int, now: float) -> None:
        self.stats.commands += 1
        self._op = op
        name, hdr = _COMMANDS.get(op, ("", 0))
        self._name = name or f"unknown-{op:02x}"
        self._hdr_need = hdr
        if not name:
            self.stats.unknown += 1
            self._refused = True
        elif (self._powered_down and op != 0xAB) or (
            now < self.busy_until and op not in _STATUS_READS
        ):
            self._refused = True
        if self._hdr_need == 0:
            self._header_done()

    def _header_done(self) -> None:
        if len(self._hdr) >= 3:
            self._addr = int.from_bytes(self._hdr[:3], "big") & (self.size - 1)

    def _data_phase(self, chunk: bytes, now: float) -> bytes:
        op = self._op
        n = len(chunk)
        if self._refused:
            return b"\xff" * n
        if op in (0x03, 0x0B):
            data = self._read_wrapped(self._addr + self._out_pos, n)
            self._out_pos += n
            self.stats.bytes_read += n
            return data
        if op in _STATUS_READS:
            return bytes((self.status_register(_STATUS_READS[op], now),)) * n
        if op in (0x02, 0x01, 0x31, 0x11):
            self._body += chunk
            self._body_len += n
            if len(self._body) > PAGE_SIZE:
                del self._body[: len(self._body) - PAGE_SIZE]
            return b"\xff" * n
        ident = self._id_sequence()
        if ident:
            out = bytes(ident[(self._out_pos + k) % len(ident)] for k in range(n))
            self._out_pos += n
            return out
        self._body_len += n
        return b"\xff" * n

    def _id_sequence(self) -> bytes:
        op = self._op
        if op == 0x9F:
            return self.jedec_id
        if op == 0x90:
            pair = bytes((self.jedec_id[0], self.capacity_code - 1))
            return pair[::-1] if self._addr & 1 else pair
        if op == 0xAB:
            return bytes((self.capacity_code - 1,))
        if op == 0x4B:
            return self.unique_id
        return b""

    def _read_wrapped(self, address: int, n: int) -> bytes:
        address &= self.size - 1
        if address + n <= self.size:
            return bytes(self.data[address : address + n])
        out = bytearray()
        while n:
            take = min(n, self.size - address)
            out += self.data[address : address + take]
            n -= take
            address = 0
        return bytes(out)

    def deselect(self, now: float) -> None:
        """CS goes high: complete the command (program/erase/status writes start here)."""
        self._settle(now)
        if not self._selected:
            return
        self._selected = False
        op = self._op
        if op is None:
            return
        reset_enabled = self._reset_enabled
        self._reset_enabled = False
        if self._refused:
            self._refuse()
            return
        complete_header = len(self._hdr) == self._hdr_need
        if op in (0x03, 0x0B):
            self.stats.reads += 1
            self.stats.last_op = f"read {self._addr:#08x}"
        elif op == 0x06:
            self._wel = True
        elif op == 0x04:
            self._wel = False
        elif op == 0x50:
            self._volatile_we = True
            return
        elif op in _STATUS_WRITES:
            self._write_status(_STATUS_WRITES[op], now)
        elif op == 0x02:
            if complete_header and self._body_len:
                self._program(self._addr, bytes(self._body), self._body_len, now)
            else:
                self._refuse()
        elif op in _ERASE_SIZES or op in (0x60, 0xC7):
            if complete_header and not self._body_len:
                self._erase(op, now)
            else:
                self._refuse()
        elif op == 0x66:
            self._reset_enabled = True
        elif op == 0x99:
            if reset_enabled:
                self._software_reset()
        elif op == 0xB9:
            self._powered_down = True
        elif op == 0xAB:
            self._powered_down = False
        elif op == 0xFF:
            self.continuous_read = False
        self._volatile_we = False

    def _refuse(self) -> None:
        self.stats.ignored += 1
        self.stats.last_op = f"ignored {self._name}"

    def _software_reset(self) -> None:
        self._wel = False
        self._volatile_we = False
        self.continuous_read = False
        self._sr = list(self._sr_nv)

    def _write_status(self, index: int, now: float) -> None:
        values = bytes(self._body[:2]) if index == 0 else bytes(self._body[:1])
        if not values or self._body_len > 2 or (index and self._body_len > 1):
            self._refuse()
            return
        volatile = self._volatile_we
        if not volatile and not self._wel:
            self._refuse()
            return
        old = bytes(self._sr + self._sr_nv)
        for k, value in enumerate(values):
            reg = index + k
            mask = _SR_WRITABLE[reg]
            new = (self._sr[reg] & ~mask) | (value & mask)
            if reg == 1:  # the security-register lock bits are one-time programmable
                new |= self._sr[1] & 0x38
            self._sr[reg] = new
            if not volatile:
                self._sr_nv[reg] = new
        self.stats.status_writes += 1
        self.stats.last_op = f"write SR{index + 1}"
        if not volatile:
            self._begin("status", now, self.timing.write_status, old=old)

    def _begin(self, kind: str, now: float, duration: float, **kw: object) -> None:
        self.busy_until = now + duration
        self._pending = _Pending(kind, now, self.busy_until, **kw)  # type: ignore[arg-type]
        self._settle(now)

    def _program(self, address: int, body: bytes, clocked: int, now: float) -> None:
        """Program ``body``, the last (at most 256) of ``clocked`` data bytes."""
        if not self._wel or self._is_protected(address & ~(PAGE_SIZE - 1), PAGE_SIZE):
            self._refuse()
            return
        page = address & ~(PAGE_SIZE - 1)
        col = (address + clocked - len(body)) & (PAGE_SIZE - 1)
        old = bytes(self.data[page : page + PAGE_SIZE])
        if col + len(body) <= PAGE_SIZE:
            start = page + col
            cur = int.from_bytes(self.data[start : start + len(body)], "big")
            new = cur & int.from_bytes(body, "big")
            self.data[start : start + len(body)] = new.to_bytes(len(body), "big")
        else:
            for off, value in zip(_page_offsets(page, col, len(body)), body, strict=True):
                self.data[off] &= value
        self.stats.programs += 1
        self.stats.bytes_programmed += len(body)
        self.stats.last_op = f"program {address:#08x}+{len(body)}"
        self._begin(
            "program",
            now,
            self.timing.program_time(len(body)),
            address=page,
            old=old,
            column=col,
            values=body,
        )

    def _erase(self, op: int, now: float) -> None:
        if op in _ERASE_SIZES:
            length = _ERASE_SIZES[op]
            address = self._addr & ~(length - 1)
            duration = {
                SECTOR_SIZE: self.timing.sector_erase,
                32 * 1024: self.timing.block32_erase,
                64 * 1024: self.timing.block64_erase,
            }[length]
        else:
            address, length, duration = 0, self.size, self.timing.chip_erase
        if not self._wel or self._is_protected(address, length):
            self._refuse()
            return
        old = bytes(self.data[address : address + length])
        self.data[address : address + length] = b"\xff" * length
        self.stats.erases += 1
        self.stats.bytes_erased += length
        self.stats.last_op = f"erase {address:#08x}+{length // 1024}K"
        self._begin("erase", now, duration, address=address, old=old)

    # ------------------------------------------------------------------ dual / quad
    def enhanced(
        self,
        inst: int | None,
        addr: int,
        addr_bits: int,
        wait_cycles: int,
        tx_data: bytes,
        rx_len: int,
        lines: int,
        now: float,
    ) -> bytes:
        """One whole dual/quad transaction as the DW SSI enhanced mode sends it.

        ``inst`` None continues a quad I/O read in continuous-read mode (no opcode).
        For 0xBB/0xEB a 32-bit ``addr`` carries the mode byte in its low 8 bits.
        Wrong dummy-clock counts shift the returned bits as on a real chip.
        """
        self._settle(now)
        self.stats.commands += 1
        if inst is None:
            inst = 0xEB if self.continuous_read else -1
        spec = _ENHANCED.get(inst)
        if spec is None:
            if inst in _COMMANDS:  # a standard command sent through the enhanced path
                self.select(now)
                self.exchange(bytes((inst,)) + addr.to_bytes(addr_bits // 8, "big") + tx_data, now)
                rx = self.exchange(b"\0" * rx_len, now) if rx_len else b""
                self.stats.commands -= 1
                self.deselect(now)
                return rx
            self.stats.unknown += 1
            return b"\xff" * rx_len
        name, want_lines, dummy = spec
        self._name = name
        if (
            now < self.busy_until
            or self._powered_down
            or (want_lines == 4 and not self.quad_enabled)
            or lines != want_lines
        ):
            self._refuse()
            return b"\xff" * rx_len
        mode = None
        if inst in (0xBB, 0xEB) and addr_bits == 32:
            addr, mode = addr >> 8, addr & 0xFF
            dummy -= 8 // lines
        address = addr & (self.size - 1)
        if inst == 0x32:
            if not self._wel:
                self._refuse()
                return b""
            if tx_data:
                programmed = self.stats.bytes_programmed
                self._program(address, tx_data[-PAGE_SIZE:], len(tx_data), now)
                self.stats.bytes_programmed_wide += self.stats.bytes_programmed - programmed
            else:
                self._refuse()
            return b""
        if mode is not None:
            self.continuous_read = (mode & 0x30) == 0x20
        self.stats.reads += 1
        self.stats.bytes_read += rx_len
        self.stats.bytes_read_wide += rx_len
        self.stats.last_op = f"{name} {address:#08x}"
        shift = (wait_cycles - dummy) * lines  # bits the host skips (>0) or reads early (<0)
        if shift == 0:
            return self._read_wrapped(address, rx_len)
        extra = (abs(shift) + 7) // 8
        raw = self._read_wrapped(address, rx_len + extra)
        bits = (len(raw)) * 8
        value = int.from_bytes(raw, "big")
        if shift > 0:
            value = (value << shift) & ((1 << bits) - 1)
            value |= (1 << shift) - 1
        else:
            value = (value >> -shift) | (((1 << -shift) - 1) << (bits + shift))
        return value.to_bytes(len(raw), "big")[:rx_len]

    # ------------------------------------------------------------------ power
    def power_cut(self, now: float) -> dict[str, object]:
        """Remove power at ``now``: an operation in progress is left half done.

        A page program has cleared the bits of the bytes it already reached (in
        column order) and part of the bits of the byte in progress; an erase has set
        a growing, pseudo-random part of the bits of its range. The result only
        depends on the contents and the cut time, so fault tests are repeatable.
        The chip then powers up again: WEL, busy, volatile status bits reset.
        Returns a description of what was interrupted (``{"interrupted": None}``
        when the chip was idle).
        """
        self._settle(now)
        info: dict[str, object] = {"interrupted": None, "time": now}
        pending = self._pending
        if pending is not None and now < pending.end:
            span = pending.end - pending.start
            done = (now - pending.start) / span if span > 0 else 1.0
            rng = random.Random(f"{pending.kind}:{pending.address}:{now!r}")
            if pending.kind == "program":
                self._cut_program(pending, done, rng)
            elif pending.kind == "erase":
                self._cut_erase(pending, done, rng)
            else:
                self._sr, self._sr_nv = list(pending.old[:3]), list(pending.old[3:])
            info = {
                "interrupted": pending.kind,
                "address": pending.address,
                "done": round(done, 4),
                "time": now,
            }
        self._pending = None
        self.busy_until = now
        self._wel = False
        self._selected = False
        self._powered_down = False
        self._reset_enabled = False
        self._software_reset()
        self._clear_transaction()
        self.flush()
        return info

    def _cut_program(self, pending: _Pending, done: float, rng: random.Random) -> None:
        page = pending.address
        self.data[page : page + PAGE_SIZE] = pending.old
        reached = int(done * len(pending.values))
        for k, (off, value) in enumerate(zip(pending.offsets(), pending.values, strict=True)):
            if k < reached:
                self.data[off] &= value
            elif k == reached:
                self.data[off] &= value | rng.getrandbits(8)
            else:
                break

    def _cut_erase(self, pending: _Pending, done: float, rng: random.Random) -> None:
        import numpy as np

        old = np.frombuffer(pending.old, dtype=np.uint8)
        gen = np.random.default_rng(rng.getrandbits(64))
        erased = gen.random(old.size) < done
        weak = gen.integers(0, 256, old.size, dtype=np.uint8) & gen.integers(
            0, 256, old.size, dtype=np.uint8
        )
        new = np.where(erased, np.uint8(0xFF), old | weak).astype(np.uint8)
        self.data[pending.address : pending.address + old.size] = new.tobytes()

    def info(self) -> dict[str, object]:
        """Identity and state, for ``kflashpy sim info`` and the status line."""
        return {
            "chip": self.chip.name,
            "size": self.size,
            "jedec_id": self.jedec_id.hex(),
            "unique_id": self.unique_id.hex(),
            "status": list(self._sr),
            "backing": str(self.backing) if self.backing else None,
            "stats": self.stats.to_dict(),
        }
