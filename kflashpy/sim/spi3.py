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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

CTRLR0, CTRLR1, SSIENR, SER, BAUDR = 0x00, 0x04, 0x08, 0x10, 0x14
TXFLR, RXFLR, SR, DR0, DR_END, SPI_CTRLR0 = 0x20, 0x24, 0x28, 0x60, 0xF0, 0xF4
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
                self._fill()
            if len(self.rxq) < fb:
                return 0
            value = int.from_bytes(self.rxq[:fb], "big")
            del self.rxq[:fb]
            return value
        if offset == RXFLR:
            self._fill()
            return min(FIFO_DEPTH, len(self.rxq) // self._fb)
        if offset == SR:
            self._fill()
            return 0x06 | (0x08 if self.rxq else 0)
        if offset == TXFLR:
            return 0 if self.selected else min(FIFO_DEPTH, len(self.txq))
        return int.from_bytes(self.regs[offset : offset + size], "little")

    def write(self, offset: int, size: int, value: int) -> None:
        if DR0 <= offset < DR_END:
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
            if value & 1:
                self._maybe_select()
            else:
                self._deselect()
                self.txq.clear()
                self.rxq.clear()
                self.rx_left = 0
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
        if self.enh:
            if self._tmod_v == TMOD_RX:
                self.rx_left = self._reg(CTRLR1) + 1
            return
        self.flash.select(self._now())
        pending, self.txq = self.txq, []
        self._send(pending)
        if self._tmod_v in (TMOD_RX, TMOD_EEPROM):
            self.rx_left = self._reg(CTRLR1) + 1

    def _to_bytes(self, frame: int) -> bytes:
        return (frame & self._fmask).to_bytes(self._fb, "big")

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
            self._enhanced(rx_frames=self.rx_left)
            return
        n = min(self.rx_left, FIFO_DEPTH - len(self.rxq) // fb)
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

    def _enhanced(self, rx_frames: int = 0) -> None:
        """Run a dual/quad transfer from the queued TX entries (inst, addr, data...)."""
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
        tx = b"".join(self._to_bytes(f) for f in entries)
        self.rx_left = 0
        # SCLK cycles: the instruction on one line unless TRANS_TYPE 2, the address on
        # one line for TRANS_TYPE 0, the wait cycles, and the data on every line
        clocks = (
            (inst_bits if inst is not None else 0) // (lines if trans_type == 2 else 1)
            + addr_bits // (lines if trans_type else 1)
            + wait
            + (len(tx) + rx_frames * fb) * 8 // lines
        )
        self._stall(clocks * self._bits_cost / 8 / self._src())
        rx = self.flash.enhanced(
            inst, addr, addr_bits, wait, tx, rx_frames * fb, lines, self._now()
        )
        self.rxq += rx

    def _deselect(self) -> None:
        if not self.selected:
            return
        if self.enh:
            if self.txq:
                self._enhanced()
        else:
            self.flash.deselect(self._now())
        self.selected = False
        self.rx_left = 0
