"""SPI3 (DesignWare APB SSI, K210 "SPI3" register layout), hard-wired to the NOR flash.

Transaction model (docs/simulator.md, "The core and the peripherals"): a transaction is everything between
SER≠0 with SSIENR=1 and SER=0 or SSIENR=0; chip select follows it. Frames pushed to DR
before the slave is selected wait in the TX FIFO and go out at selection. The TX FIFO
drains at once (TXFLR=0, TFE=1); RX data of EEPROM-read/RX-only transfers is generated
lazily when RXFLR, SR or DR is read, so the 32-entry RX FIFO never overflows. Enhanced
(dual/quad) transfers take the instruction and address from the first TX entries, as the
SDK sends them, and go to ``NorFlash.enhanced``.

Time: every transfer costs its SCLK cycles of virtual time (charged to the core as a
stall): one per bit in standard mode; in dual/quad mode the fields sent on several
lines (data always, address and instruction as TRANS_TYPE says) take one cycle per 2 or
4 bits, and the wait cycles count as they are. Status reads that find the flash busy
back to back (each starting within :data:`TIGHT_POLL_GAP` of the end of the one before:
a loop that only polls) let the core skip ahead to the end of the busy time after
:data:`BUSY_POLLS_BEFORE_SKIP` of them instead of emulating every poll. Polls with other
work between them (a program decoding while the flash programs) are never skipped: the
skip would drop that work and leave the UART's FIFO full.

DMA (docs/simulator.md, "The DMAC"): SPI3 serves the DMAC's requests SSI3_RX and SSI3_TX
(:class:`DmaPort`, one 32-bit DR access per frame) when DMACR enables them. A DMA
transaction is computed, not stepped: its frames reach the flash in bulk and the CPU is
not stalled; a :class:`_Wire` says when each FIFO entry leaves (TX) or arrives (RX) at
SCLK pace, and the DMA moves items at those times: a transmit burst of DST_MSIZE items
enters the FIFO as soon as TXFLR <= DMATDLR, a receive burst of SRC_MSIZE items
(= DMARDLR + 1) leaves it as soon as it is there. SR shows BUSY until the last frame is
on the wire; tight BUSY polls stall the core to that end (the DMA needs no CPU), as PIO
transfers are charged.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..target import k210
from .dmac import CTL, Channel

CTRLR0, CTRLR1, SSIENR, SER, BAUDR = 0x00, 0x04, 0x08, 0x10, 0x14
TXFLR, RXFLR, SR, DR0, DR_END, SPI_CTRLR0 = 0x20, 0x24, 0x28, 0x60, 0xF0, 0xF4
DMACR, DMATDLR, DMARDLR = 0x4C, 0x50, 0x54
RDMAE, TDMAE = 1, 2
FIFO_DEPTH = 32
TMOD_TXRX, TMOD_TX, TMOD_RX, TMOD_EEPROM = 0, 1, 2, 3
BUSY_POLLS_BEFORE_SKIP = 3
#: the most virtual time between two busy status reads of a loop that only polls (a
#: status read and a look at the UART take well under a microsecond at 390 MHz)
TIGHT_POLL_GAP = 1e-6
_LINES = {1: 2, 2: 4, 3: 8}


class NoDevice:
    """An SPI bus with nothing on it: MISO floats high, commands go nowhere."""

    busy_until = 0.0

    def select(self, now: float) -> None:
        pass

    def deselect(self, now: float) -> None:
        pass

    def exchange(self, tx: bytes, now: float) -> bytes:
        return b"\xff" * len(tx)

    def enhanced(self, inst, addr, addr_bits, wait, tx, rx_len, lines, now):  # type: ignore[no-untyped-def]
        return b"\xff" * rx_len


def _wire_bytes(frames: Sequence[int], fb: int) -> bytes:
    """Frames of ``fb`` bytes as they go on the wire (most significant byte first)."""
    if fb == 4:  # SSI words (every burn): DR writes and DMA items are 32-bit values
        try:
            return struct.pack(f">{len(frames)}I", *frames)
        except struct.error:  # a value wider than its frame: the cast below truncates it
            pass
    wide = np.asarray(frames, dtype=np.uint64)
    if fb in (1, 2, 4, 8):  # a frame per SPI word (every burn): an unsigned cast keeps them
        return wide.astype(f">u{fb}").tobytes()
    return wide.astype(">u8").view(np.uint8).reshape(-1, 8)[:, 8 - fb :].tobytes()


def _frame_items(data: bytes, fb: int) -> bytes:
    """Received bytes (frames of ``fb`` <= 4 bytes, most significant byte first) as the
    DMA's 32-bit items in memory: each frame's value, little-endian, upper bytes 0.
    Strided copies, one per frame byte: no per-frame Python work."""
    n = len(data) // fb
    out = bytearray(4 * n)
    for k in range(fb):
        out[k::4] = data[fb - 1 - k : n * fb : fb]
    return bytes(out)


class _Wire:
    """When the FIFO entries of one DMA transaction move, entries numbered in FIFO order
    from 0 (the received frames of a receive transfer follow the transmitted ones). From
    ``start``: ``hdr`` the shifting times of the header entries (instruction and address
    of an enhanced transfer), then ``gap`` (wait cycles), then ``frame`` per entry."""

    def __init__(self, start: float, hdr: Sequence[float], gap: float, frame: float) -> None:
        self.start = start
        self.ends: list[float] = []
        t = start
        for h in hdr:
            t += h
            self.ends.append(t)
        self.h = len(hdr)
        self.body = t + gap  # the first entry after the header starts shifting
        self.frame = frame

    def begins(self, j: int) -> float:
        """When entry ``j`` leaves the TX FIFO for the shift register."""
        if j < self.h:
            return self.ends[j - 1] if j else self.start
        return self.body + (j - self.h) * self.frame

    def done(self, j: int) -> float:
        """When entry ``j`` has been shifted completely (a received frame is in the FIFO)."""
        if j < self.h:
            return self.ends[j]
        return self.body + (j - self.h + 1) * self.frame

    def count(self, now: float, done: bool) -> int:
        """How many entries have begun shifting (``done``: been shifted completely) by
        ``now``. Past the header, :meth:`begins` and :meth:`done` are inlined (entry
        ``j`` at ``body + (j - h + done) * frame``, the same sums): every status poll
        of a DMA transaction asks this once or twice."""
        h = self.h
        n = 0
        if h:
            at = self.done if done else self.begins
            while n < h and at(n) <= now:
                n += 1
            if n < h:
                return n
        body, frame, k = self.body, self.frame, h - done  # entry j at body + (j - k) * frame
        n = h + int((now - body) / frame)
        if n < h:  # comparisons, not max() (docs/simulator.md, "Cheaper device accesses")
            n = h
        while n > h and body + (n - 1 - k) * frame > now:
            n -= 1
        while body + (n - k) * frame <= now:
            n += 1
        return n


class _Dma:
    """A DMA block SPI3 serves: the channel, its burst, the FIFO threshold, and once the
    slave is selected, when its frames move (``wire``)."""

    def __init__(self, channel: Channel, rx: bool, burst: int, level: int) -> None:
        self.ch: Channel | None = channel
        self.n = channel.n
        self.refuse = channel.dmac.refuse  # halts the board: what is not modelled
        self.rx = rx
        self.burst = burst
        self.level = level  # DMATDLR (transmit) or DMARDLR (receive)
        self.items = channel.items
        self.bursts = -(-self.items // burst)
        self.moved = 0  # items taken from or put into memory
        self.t0: float | None = None  # transmit: when the DMA began to fill the FIFO
        self.queued = 0  # transmit: entries the CPU had queued before that
        self.first = 0  # receive: the entry number of the first received frame
        self.items_raw: bytes | None = None  # receive: every frame as memory gets it
        self.wire: _Wire | None = None
        self.end = math.inf  # when the last frame is on the wire

    def entered(self, now: float, begun: int | None = None) -> int:
        """Transmit: items in the FIFO by ``now`` (a burst enters once TXFLR <= DMATDLR);
        ``begun``: the wire's entries begun by ``now``, if the caller has counted them."""
        if self.t0 is None or now < self.t0:
            return 0
        if begun is None:
            begun = self.wire.count(now, False) if self.wire else 0
        room = begun + self.level - self.queued
        if room < 0:
            return 0
        n = (room // self.burst + 1) * self.burst
        return n if n < self.items else self.items  # no min(): see _Wire.count

    def burst_at(self, b: int) -> float:
        """Transmit: when burst ``b`` enters the FIFO (inf: not before the slave is selected)."""
        assert self.t0 is not None
        j = self.queued + b * self.burst - self.level - 1  # that entry's leaving makes room
        if j < 0:
            return self.t0
        return max(self.t0, self.wire.begins(j)) if self.wire else math.inf

    def arrived(self, now: float) -> int:
        """Receive: frames in the FIFO or already moved by ``now``."""
        if self.wire is None:
            return 0
        n = self.wire.count(now, True) - self.first  # no min()/max(): see _Wire.count
        if n > self.items:
            return self.items
        return n if n > 0 else 0

    def due(self) -> float:
        """When the block completes if nothing else happens."""
        if self.ch is None:
            return math.inf
        if self.rx:
            return self.wire.done(self.first + self.items - 1) if self.wire else math.inf
        return math.inf if self.t0 is None else self.burst_at(self.bursts - 1)


class DmaPort:
    """One of an SSI's DMA requests (SSIn_RX or SSIn_TX) as a DMAC endpoint
    (kflashpy/sim/dmac.py)."""

    def __init__(self, spi: Spi3, rx: bool) -> None:
        self.spi = spi
        self.rx = rx

    def dma_arm(self, channel: Channel) -> str | None:
        return self.spi._dma_arm(channel, self.rx)

    def dma_sync(self, now: float) -> None:
        self.spi._dma_sync(now)

    def dma_due(self) -> float:
        d = self.spi._drx if self.rx else self.spi._dtx
        return math.inf if d is None else d.due()

    def dma_disarm(self, channel: Channel) -> None:
        self.spi._dma_disarm(self.rx)


class Spi3:
    """A DW SSI master. SPI3 (the flash on CS0) by default; SPI0/SPI1 use another
    CTRLR0 layout (``layout="spi01"``) and, on the boards modelled, have nothing attached."""

    size = 0x1000

    def __init__(
        self,
        flash: Any,
        now: Callable[[], float],
        sclk_source: Callable[[], float],
        stall: Callable[[float], None],
        skip_to: Callable[[float], None],
        name: str = "spi3",
    ) -> None:
        self.name = name
        # (DFS shift, DFS mask, TMOD shift, FRF shift) of CTRLR0
        self._layout = (0, 0x1F, 10, 22) if name == "spi3" else (16, 0x1F, 8, 21)
        self.flash = flash
        self._now = now
        self._src = sclk_source
        self._stall = stall
        self._skip_to = skip_to
        self.regs = bytearray(0x120)
        self.reset()

    def reset(self) -> None:
        for d in (getattr(self, "_dtx", None), getattr(self, "_drx", None)):
            if d is not None and d.ch is not None:
                d.refuse(f"{self.name} reset while DMA channel {d.n} is armed on it")
        self._dtx: _Dma | None = None  # the transmit block armed (SSIn_TX)
        self._drx: _Dma | None = None  # the receive block armed (SSIn_RX)
        self._live: _Dma | None = None  # the block of the transaction in progress
        self._wire_polls = 0
        self._wire_poll_t = -1.0
        self.regs[:] = bytes(len(self.regs))
        self._decode()
        self.txq: list[int] = []
        self.rxq = bytearray()
        self.rx_left = 0  # frames still to receive (generated on demand)
        self.selected = False
        self.enh = False
        self._first = -1  # first byte of a standard transaction (its opcode)
        self._busy_polls = 0
        self._poll_end = -1.0  # when the last status read that found the flash busy ended
        self.transactions = 0

    def _reg(self, off: int) -> int:
        return int.from_bytes(self.regs[off : off + 4], "little")

    def _decode(self) -> None:
        """Cache the CTRLR0/BAUDR fields the data path needs on every frame."""
        ctrlr0 = self._reg(CTRLR0)
        dfs_shift, dfs_mask, tmod_shift, frf_shift = self._layout
        self._fb = ((ctrlr0 >> dfs_shift & dfs_mask) + 1 + 7) // 8
        self._fmask = (1 << (8 * self._fb)) - 1
        self._tmod_v = ctrlr0 >> tmod_shift & 3
        self._frf_v = ctrlr0 >> frf_shift & 3
        self._bits_cost = 8 * (self._reg(BAUDR) & 0xFFFE or 2)

    def _charge(self, nbytes: int) -> None:
        self._stall(nbytes * self._bits_cost / self._src())

    # ------------------------------------------------------------------ MMIO
    def read(self, offset: int, size: int) -> int:
        if DR0 <= offset < DR_END:
            fb = self._fb
            if len(self.rxq) < fb:
                if self._live is not None and self._live.rx:
                    self._live.refuse(
                        f"{self.name}: DR read while DMA channel {self._live.n} receives"
                    )
                self._fill()
            if len(self.rxq) < fb:
                return 0
            value = int.from_bytes(self.rxq[:fb], "big")
            del self.rxq[:fb]
            return value
        if self._live is not None and offset in (RXFLR, SR, TXFLR):
            return self._dma_status(offset, self._live)
        if offset == RXFLR:
            self._fill()
            n = len(self.rxq) // self._fb  # no min(): see _Wire.count
            return n if n < FIFO_DEPTH else FIFO_DEPTH
        if offset == SR:
            self._fill()
            return 0x06 | (0x08 if self.rxq else 0)
        if offset == TXFLR:
            if self.selected:
                return 0
            if self._dtx is not None:
                self._dma_sync(self._now())
            return min(FIFO_DEPTH, len(self.txq))
        return int.from_bytes(self.regs[offset : offset + size], "little")

    def write(self, offset: int, size: int, value: int) -> None:
        if DR0 <= offset < DR_END:
            if self._dtx is not None and self._dtx.t0 is not None:
                self._dtx.refuse(
                    f"{self.name}: DR written while DMA channel {self._dtx.n} fills the TX FIFO"
                )
            if self.selected and not self.enh:
                self._send((value & 0xFFFF_FFFF,))
            else:
                self.txq.append(value & 0xFFFF_FFFF)
            return
        new = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        if offset in (CTRLR0, BAUDR):
            # flashers rewrite the same frame format for every transaction
            if self.regs[offset : offset + size] != new:
                self.regs[offset : offset + size] = new
                self._decode()
            return
        self.regs[offset : offset + size] = new
        if offset == SSIENR:
            # every transaction enables and disables the SSI around SER (twice per
            # flash page and more): the calls that would do nothing are not made
            if value & 1:
                if self._dtx is not None:
                    self._tx_ready()
                if self.regs[SER] & 1:
                    self._maybe_select()
            else:
                if self.selected:
                    self._deselect()
                if self._dtx is not None or self._drx is not None:
                    self._drop_dma()
                self.txq.clear()
                self.rxq.clear()
                self.rx_left = 0
        elif offset == DMACR:
            self._tx_ready()
        elif offset == SER:
            if value & 1:
                self._maybe_select()
            else:
                self._deselect()

    # ------------------------------------------------------------------ transactions
    def _maybe_select(self) -> None:
        if self.selected or not self.regs[SSIENR] & 1 or not self.regs[SER] & 1:
            return
        self.selected = True
        self.transactions += 1
        self.enh = bool(self._frf_v)
        self._first = -1
        dmacr = self.regs[DMACR]
        dtx = self._dtx if dmacr & TDMAE else None
        drx = self._drx if dmacr & RDMAE else None
        if dtx is not None or drx is not None:
            self._dma_select(dtx, drx)
            return
        if self.enh:
            if self._tmod_v == TMOD_RX:
                self.rx_left = self._reg(CTRLR1) + 1
            return
        self.flash.select(self._now())
        pending, self.txq = self.txq, []
        self._send(pending)
        if self._tmod_v in (TMOD_RX, TMOD_EEPROM):
            self.rx_left = self._reg(CTRLR1) + 1

    def _send(self, frames: Sequence[int]) -> None:
        """Clock ``frames`` out in a standard transfer, each at its own time (after the
        transfer time of the ones before it). The hot path of page programs: one frame
        per data byte, or the frames queued before the slave was selected."""
        fb, fmask = self._fb, self._fmask
        cost = fb * self._bits_cost  # SCLK cycles of one frame (times the divider)
        hz = self._src()  # the clock cannot change while the frames go out
        stall, now, exchange = self._stall, self._now, self.flash.exchange
        received = self._tmod_v == TMOD_TXRX
        for frame in frames:
            data = (frame & fmask).to_bytes(fb, "big")
            if self._first < 0:
                self._first = data[0]
            stall(cost / hz)
            rx = exchange(data, now())
            if received:
                self.rxq += rx

    def _fill(self) -> None:
        """Clock in the next RX frames (up to a FIFO's worth) of a receive transfer."""
        if not self.selected or not self.rx_left or len(self.rxq) >= FIFO_DEPTH:
            return
        fb = self._fb
        if self.enh:
            self.rxq += self._enhanced(rx_frames=self.rx_left)
            return
        n = FIFO_DEPTH - len(self.rxq) // fb  # no min(): see _Wire.count
        if self.rx_left < n:
            n = self.rx_left
        self.rx_left -= n
        start = self._now()
        self._charge(n * fb)
        now = self._now()
        rx = self.flash.exchange(bytes(n * fb), now)
        self.rxq += rx
        if self._first == 0x05 and rx and rx[0] & 1:
            tight = start - self._poll_end <= TIGHT_POLL_GAP
            self._busy_polls = self._busy_polls + 1 if tight else 1
            self._poll_end = now
            if self._busy_polls >= BUSY_POLLS_BEFORE_SKIP and self.flash.busy_until > now:
                self._busy_polls = 0
                self._skip_to(self.flash.busy_until)
        elif self._first == 0x05:
            self._busy_polls = 0

    def _enhanced(self, rx_frames: int = 0, charge: bool = True) -> bytes:
        """Run a dual/quad transfer from the queued TX entries (inst, addr, data...) and
        return what it received; ``charge``: stall the CPU for its SCLK time (not for a
        DMA transfer, whose time passes on the wire while the CPU runs)."""
        spi = self._reg(SPI_CTRLR0)
        inst_bits = (0, 4, 8, 16)[spi >> 8 & 3]
        addr_bits = (spi >> 2 & 0xF) * 4
        wait = spi >> 11 & 0x1F
        trans_type = spi & 3
        lines = _LINES.get(self._frf_v, 1)
        entries, self.txq = self.txq, []
        inst = entries.pop(0) & 0xFF if inst_bits and entries else None
        addr = entries.pop(0) if addr_bits and entries else 0
        fb = self._fb
        tx = _wire_bytes(entries, fb) if entries else b""
        self.rx_left = 0
        # SCLK cycles: the instruction on one line unless TRANS_TYPE 2, the address on
        # one line for TRANS_TYPE 0, the wait cycles, and the data on every line
        clocks = (
            (inst_bits if inst is not None else 0) // (lines if trans_type == 2 else 1)
            + addr_bits // (lines if trans_type else 1)
            + wait
            + (len(tx) + rx_frames * fb) * 8 // lines
        )
        if charge:
            self._stall(clocks * self._bits_cost / 8 / self._src())
        return self.flash.enhanced(
            inst, addr, addr_bits, wait, tx, rx_frames * fb, lines, self._now()
        )

    def _deselect(self) -> None:
        if not self.selected:
            return
        if self._live is not None:
            self._dma_deselect(self._live)
            return
        if self.enh:
            if self.txq:
                self._enhanced()
        else:
            self.flash.deselect(self._now())
        self.selected = False
        self.rx_left = 0

    # ------------------------------------------------------------------ DMA
    def dma_ports(self) -> dict[int, DmaPort]:
        """The DMAC endpoints of this SSI's requests, by request number."""
        n = self.name[3:]
        return {
            k210.DMA_REQUEST[f"ssi{n}_rx"]: DmaPort(self, True),
            k210.DMA_REQUEST[f"ssi{n}_tx"]: DmaPort(self, False),
        }

    def _dma_arm(self, ch: Channel, rx: bool) -> str | None:
        """A channel routed to SSIn_RX (``rx``) or SSIn_TX was enabled: check that it moves
        one 32-bit DR access per frame in bursts the FIFO takes, and keep it."""
        dr = ch.prf_address - k210.PERIPHERALS[self.name][0]
        if not ch.prf_fixed or not DR0 <= dr < DR_END or dr % 4:
            side = "SAR" if rx else "DAR"
            how = "fixed" if ch.prf_fixed else "incrementing"
            return f"{side}=0x{ch.prf_address:08x} ({how}) is not {self.name}'s DR"
        if ch.width != 4:
            return f"{self.name} moves one 32-bit DR access per frame, not {ch.width}-byte items"
        if (self._drx if rx else self._dtx) is not None or self.selected:
            return f"{self.name}: enabled while a transfer is under way (not modelled)"
        msize = ch.reg(CTL) >> (14 if rx else 18) & 0xF
        burst = 1 << (msize + 1) if msize else 1
        if rx:
            level = self._reg(DMARDLR) & 0x1F
            if burst != level + 1 or ch.items % burst:
                return (
                    f"SRC_MSIZE {burst} items, {self.name} DMARDLR {level}, a block of"
                    f" {ch.items}: modelled are bursts of DMARDLR + 1 items that divide"
                    " the block"
                )
            self._drx = _Dma(ch, rx, burst, level)
            return None
        level = self._reg(DMATDLR) & 0x1F
        if level + burst > FIFO_DEPTH:
            return (
                f"DST_MSIZE {burst} items above {self.name} DMATDLR {level} overflow the"
                f" {FIFO_DEPTH}-entry TX FIFO"
            )
        self._dtx = _Dma(ch, rx, burst, level)
        self._tx_ready()
        return None

    def _tx_ready(self) -> None:
        """The transmit DMA starts filling the FIFO once its channel is armed, DMACR.TDMAE
        is set and the SSI is enabled."""
        d = self._dtx
        if d is not None and d.t0 is None and self.regs[SSIENR] & 1 and self.regs[DMACR] & TDMAE:
            d.t0 = self._now()
            d.queued = len(self.txq)

    def _dma_disarm(self, rx: bool) -> None:
        d = self._drx if rx else self._dtx
        if d is None:
            return
        d.ch = None
        if d.moved < d.items:  # the guest disabled the channel before the block's end
            if d.wire is not None:
                d.refuse(f"DMA channel {d.n} disabled while {self.name} moves its frames")
            if rx:
                self._drx = None
            else:
                self._dtx = None

    def _drop_dma(self) -> None:
        """SSIENR = 0 empties the FIFOs: blocks no longer armed are forgotten."""
        for d in (self._dtx, self._drx):
            if d is not None and d.ch is not None:
                d.refuse(f"{self.name} disabled while DMA channel {d.n} is armed on it")
        self._dtx = self._drx = None

    def _dma_wire(self, start: float) -> _Wire:
        """The SCLK timing of the transaction starting now (header from the TX FIFO)."""
        unit = (self._reg(BAUDR) & 0xFFFE or 2) / self._src()  # seconds per SCLK cycle
        if not self.enh:
            return _Wire(start, (), 0.0, 8 * self._fb * unit)
        spi = self._reg(SPI_CTRLR0)
        inst_bits = (0, 4, 8, 16)[spi >> 8 & 3]
        addr_bits = (spi >> 2 & 0xF) * 4
        trans_type = spi & 3
        lines = _LINES.get(self._frf_v, 1)
        hdr: list[float] = []
        if inst_bits and self.txq:
            hdr.append(inst_bits // (lines if trans_type == 2 else 1) * unit)
        if addr_bits and len(self.txq) > len(hdr):
            hdr.append(addr_bits // (lines if trans_type else 1) * unit)
        return _Wire(start, hdr, (spi >> 11 & 0x1F) * unit, 8 * self._fb // lines * unit)

    def _dma_select(self, dtx: _Dma | None, drx: _Dma | None) -> None:
        """The slave is selected with DMA enabled: the transaction's frames move at SCLK
        pace from now, and the flash sees them (receive: answers them) in bulk."""
        now = self._now()
        d = dtx or drx
        assert d is not None
        tmod = self._tmod_v
        if dtx is not None and drx is not None:
            d.refuse(f"{self.name}: DMA in both directions in one transaction (not modelled)")
            return
        if (d.rx and tmod not in ((TMOD_RX,) if self.enh else (TMOD_RX, TMOD_EEPROM))) or (
            not d.rx and tmod != TMOD_TX
        ):
            way = "receive" if d.rx else "transmit"
            d.refuse(f"{self.name}: DMA {way} in TMOD {tmod} (not modelled)")
            return
        self._live = d
        d.wire = self._dma_wire(now)
        if not d.rx:
            d.end = d.wire.done(d.queued + d.items - 1)
            if not self.enh:
                self.flash.select(now)
                pending, self.txq = self.txq, []
                self._shift(pending, now)
            self._dma_sync(now)
            return
        n = self._reg(CTRLR1) + 1
        if n != d.items:
            d.refuse(f"{self.name} CTRLR1 asks for {n} frames, DMA channel {d.n} for {d.items}")
            return
        if self.enh:
            d.first = d.wire.h
            rx = self._enhanced(rx_frames=n, charge=False)
        else:
            self.flash.select(now)
            cmd, self.txq = self.txq, []
            self._shift(cmd, now)
            d.first = len(cmd)
            rx = self.flash.exchange(bytes(n * self._fb), now)
        d.items_raw = _frame_items(rx, self._fb)
        d.end = d.wire.done(d.first + n - 1)

    def _shift(self, frames: Sequence[int], at: float) -> None:
        """Standard-mode frames to the flash at once (their SCLK time is the wire's)."""
        if len(frames):
            data = _wire_bytes(frames, self._fb)
            if self._first < 0:
                self._first = data[0]
            self.flash.exchange(data, at)

    def _dma_sync(self, now: float) -> None:
        """Move the DMA items that have moved by ``now`` (the DMAC's dma_sync)."""
        d = self._dtx
        if d is not None and d.ch is not None and d.t0 is not None:
            n = d.entered(now)
            if n > d.moved:
                at = d.burst_at((n - 1) // d.burst)
                count, d.moved = n - d.moved, n
                values = d.ch.take(count, at)  # the last burst completes the channel
                if self.selected and not self.enh:
                    self._shift(values, at)
                else:
                    self.txq += values
        d = self._drx
        if d is not None and d.ch is not None and d.items_raw is not None:
            got = d.arrived(now)
            got -= got % d.burst  # a burst leaves the FIFO once complete
            if got > d.moved and d.wire is not None:
                items = d.items_raw[4 * d.moved : 4 * got]  # 32-bit items (_dma_arm)
                d.moved = got
                d.ch.put_raw(items, d.wire.done(d.first + got - 1))  # the last completes it

    def _dma_status(self, offset: int, d: _Dma) -> int:
        """TXFLR, RXFLR or SR while a DMA transaction runs, from its wire times. Tight
        BUSY polls stall the core to the transaction's end (the DMA goes on without the
        CPU), as a PIO transfer's time is charged: the slice goes on."""
        now = self._now()
        assert d.wire is not None
        if d.rx:
            level = d.arrived(now) % d.burst
        else:
            begun = d.wire.count(now, False)
            level = d.queued + d.entered(now, begun) - begun
            if level < 0:
                level = 0
        if offset == TXFLR:
            return 0 if d.rx else level
        if offset == RXFLR:
            return level if d.rx else 0
        busy = now < d.end
        if busy:
            tight = now - self._wire_poll_t <= TIGHT_POLL_GAP
            self._wire_polls = self._wire_polls + 1 if tight else 1
            self._wire_poll_t = now
            if self._wire_polls >= BUSY_POLLS_BEFORE_SKIP:
                self._wire_polls = 0
                self._stall(d.end - now)  # the rest of the spin, as PIO transfers charge it
        if d.rx:
            return int(busy) | 0x06 | (0x08 if level else 0)
        return int(busy) | (0x02 if level < FIFO_DEPTH else 0) | (0x04 if not level else 0)

    def _dma_deselect(self, d: _Dma) -> None:
        """The slave is deselected after a DMA transaction (before its end: not modelled)."""
        now = self._now()
        self._dma_sync(now)
        if d.ch is not None or now < d.end:
            d.refuse(
                f"{self.name} deselected at {now:.9f} s before the end of DMA channel"
                f" {d.n}'s transfer ({d.end:.9f} s)"
            )
        self._live = None
        if d.rx:
            self._drx = None
        else:
            self._dtx = None
        if not self.enh:
            self.flash.deselect(now)
        elif not d.rx and self.txq:
            self._enhanced(charge=False)
        self.selected = False
        self.rx_left = 0
