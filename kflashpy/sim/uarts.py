"""The K210 UARTs: UARTHS (SiFive) and the three DesignWare APB UARTs (UART1–3).

A UART that the FPIOA routes to IO4 receives what the host sends, at the rate its own
divisor gives (a mismatch with the host's rate yields garbage); one routed to IO5 puts
bytes on the wire to the host. Register behaviour follows docs/simulator.md
("The core and the peripherals"), including the K210 DW UART quirks: with IER.PTIME set, LSR bit 5 means "TX FIFO
full" (never, here: the wire takes bytes at once and paces them), and the divisor has a
fractional part (DLF), so ``baud = f_APB0 / (4096*DLH + 16*DLL + DLF)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..target import k210
from .dmac import CTL, Channel
from .periph import merge
from .wire import BITS_PER_BYTE, Wire

Transmit = Callable[[str, int], None]  # (uart name, byte)


def _nothing() -> None:
    pass


class _Uart:
    """What the board needs from any UART: a name, a rate, an RX FIFO and an IRQ level."""

    fifo_depth = 16
    size = 0x1000

    def __init__(self, name: str, clock: Callable[[], float], transmit: Transmit) -> None:
        self.name = name
        self._clock = clock
        self._transmit = transmit
        self.rx = bytearray()
        self.overruns = 0
        self.dma: Channel | None = None  # a DMA channel armed on the RX request
        # called before the guest reads receive state: the board delivers the bytes that
        # have arrived by the core's current time (a no-op until a core is attached)
        self.pull: Callable[[], None] = _nothing

    def receive(self, data: bytes, at: float = 0.0) -> None:
        """Bytes arrived on the RX pin, the last one complete at ``at``; those that do not
        fit the FIFO are lost."""
        room = self.fifo_depth - len(self.rx)
        if len(data) > room:
            self.overruns += len(data) - room
            data = data[:room]
        self.rx += data

    def room(self) -> int:
        """Bytes that can still arrive before one is lost: the FIFO's free entries, plus
        what an armed DMA channel still takes first."""
        dma = self.dma  # armed (enabled) while set: Channel.remaining inlined, every slice asks
        return self.fifo_depth - len(self.rx) + (dma.items - dma.moved if dma else 0)

    def baud(self) -> float:
        raise NotImplementedError

    def irq(self) -> bool:
        raise NotImplementedError

    def irq_at(self, wire: Wire) -> float | None:
        """When :meth:`irq` rises if the guest touches nothing meanwhile, given the bytes
        in flight on ``wire`` (its receive state delivered up to now): 0.0 if it is up
        already, None if it stays down until the guest acts. The core skips a hart in
        ``wfi`` straight to it."""
        raise NotImplementedError


class Uarths(_Uart):
    """SiFive UART at 0x3800_0000: baud = f_cpu / (div + 1), 8-byte FIFOs."""

    fifo_depth = 8

    def __init__(self, clock: Callable[[], float], transmit: Transmit, div: int) -> None:
        super().__init__("uarths", clock, transmit)
        self.regs = [0] * 7  # txdata, rxdata, txctrl, rxctrl, ie, ip, div
        self.regs[2] = self.regs[3] = 1  # the ROM left TX and RX enabled
        self.regs[6] = div

    def baud(self) -> float:
        return self._clock() / ((self.regs[6] & 0xFFFF) + 1)

    def _ip(self) -> int:
        txwm = 1 if (self.regs[2] >> 16 & 7) > 0 else 0  # TX FIFO (always drained) < txcnt
        rxwm = 2 if len(self.rx) > (self.regs[3] >> 16 & 7) else 0
        return txwm | rxwm

    def irq(self) -> bool:
        return bool(self.regs[4] & self._ip())

    def irq_at(self, wire: Wire) -> float | None:
        if self.irq():
            return 0.0
        if not self.regs[4] & 2:  # only rxwm can rise by itself
            return None
        return wire.arrival_of((self.regs[3] >> 16 & 7) + 1 - len(self.rx))

    def read(self, offset: int, size: int) -> int:
        reg = offset >> 2
        if reg in (1, 5):
            self.pull()
        if reg == 1:
            if not self.rx:
                value = 0x8000_0000
            else:
                value = self.rx[0]
                del self.rx[0]
        elif reg == 0:
            value = 0  # TX FIFO never full
        elif reg == 5:
            value = self._ip()
        elif reg < 7:
            value = self.regs[reg]
        else:
            return 0
        return (value >> ((offset & 3) * 8)) & ((1 << (8 * size)) - 1)

    def write(self, offset: int, size: int, value: int) -> None:
        reg = offset >> 2
        if reg == 0 and offset & 3 == 0:
            if self.regs[2] & 1:
                self._transmit(self.name, value & 0xFF)
        elif reg in (2, 3, 4, 6):
            _, self.regs[reg] = merge(self.regs[reg], offset, size, value)


# DW APB UART register offsets
RBR, IER, IIR, LCR, MCR, LSR, MSR, SCR, USR, TFL, RFL, DLF = (
    0x00,
    0x04,
    0x08,
    0x0C,
    0x10,
    0x14,
    0x18,
    0x1C,
    0x7C,
    0x80,
    0x84,
    0xC0,
)
IER_ERBFI, IER_ETBEI, IER_PTIME = 0x01, 0x02, 0x80
# FCR[7:6]: the RX FIFO level that raises "received data available" (IIR 0x4): one
# character, a quarter, half, two less than full
RX_TRIGGERS = (1, 4, 8, 14)
# "character timeout" (IIR 0xC): characters wait in the RX FIFO below the trigger level
# and none came in or was read for this many character times
TIMEOUT_CHARS = 4
_RX_STATE = frozenset((RBR, IIR, LSR, USR, RFL))  # registers that show received data
LCR_DLAB = 0x80


class DwUart(_Uart):
    """DesignWare APB UART (UART1/2/3) as the K210 SDK programs it.

    The receive interrupt (IER.ERBFI) follows the FIFO: "received data available" once
    the RX FIFO holds the FCR trigger level, "character timeout" when fewer wait there
    and nothing came in or was read for :data:`TIMEOUT_CHARS` character times."""

    def __init__(self, name: str, clock: Callable[[], float], transmit: Transmit) -> None:
        super().__init__(name, clock, transmit)
        # the virtual time (the core's, mid-slice included), for the character timeout
        self.now: Callable[[], float] = lambda: 0.0
        self.reset()

    def reset(self) -> None:
        """Peripheral reset (SYSCTL peri_reset): registers to defaults, FIFOs emptied."""
        self.dll = self.dlh = self.dlf = 0
        self.ier = self.lcr = self.mcr = self.scr = self.fcr = 0
        self.trigger = 1
        self.rx_activity = 0.0  # when a byte last came into or left the RX FIFO
        self.rx.clear()

    def receive(self, data: bytes, at: float = 0.0) -> None:
        super().receive(data, at)
        if at > self.rx_activity:  # no max() call: see UartRxDma.dma_sync
            self.rx_activity = at

    def baud(self) -> float:
        divisor = 4096 * self.dlh + 16 * self.dll + self.dlf
        return self._clock() / divisor if divisor else 0.0

    def _timeout_s(self) -> float:
        baud = self.baud()
        return TIMEOUT_CHARS * BITS_PER_BYTE / baud if baud else float("inf")

    def _rx_irq(self) -> int:
        """The receive interrupt's IIR code (0x4, 0xC) or 0, ERBFI set."""
        if self.trigger > 1:
            self.pull()  # only programs that set a trigger level pay for an exact level
        n = len(self.rx)
        if not n:
            return 0
        if n >= self.trigger:
            return 0x04
        return 0x0C if self.now() >= self.rx_activity + self._timeout_s() else 0

    def irq(self) -> bool:
        # the PLIC asks on every claim, mret and mip read: comparisons, no bool() calls
        ier = self.ier
        if ier & IER_ERBFI != 0 and (self._rx_irq() if self.trigger > 1 else len(self.rx) != 0):
            return True
        return ier & IER_ETBEI != 0

    def irq_at(self, wire: Wire) -> float | None:
        if self.irq():
            return 0.0
        if not self.ier & IER_ERBFI:
            return None
        # walk the bytes in flight: the trigger level is reached at the arrival of the
        # one that completes it, unless a gap of a timeout comes first with bytes waiting
        # (the bytes an armed DMA channel takes first never reach the FIFO)
        count, last, timeout = len(self.rx), self.rx_activity, self._timeout_s()
        skip = self.dma.remaining if self.dma else 0
        for arrival in wire.arrivals(self.trigger - count, skip):
            if count and arrival > last + timeout:
                return last + timeout
            count, last = count + 1, arrival
        if count >= self.trigger:
            return last
        return last + timeout if count else None

    def _iir(self) -> int:
        fifo = 0xC0 if self.fcr & 1 else 0
        code = self._rx_irq() if self.ier & IER_ERBFI else 0
        if code:
            return fifo | code
        if self.ier & IER_ETBEI:
            return fifo | 0x02
        return fifo | 0x01

    def read(self, offset: int, size: int) -> int:
        # the receive registers first, in the order programs read them most: RBR (one
        # read per byte, with no status read before it once RFL said how many), LSR
        if offset == RBR:
            self.pull()
            if self.lcr & LCR_DLAB:
                return self.dll
            if not self.rx:
                return 0
            value = self.rx[0]
            del self.rx[0]
            if self.trigger > 1:  # a read restarts the character timeout
                self.rx_activity = self.now()
            return value
        if offset == LSR:
            self.pull()
            # TEMT always; bit 5 = THRE (classic) or "TX FIFO full" with PTIME: never full
            return 0x40 | (0 if self.ier & IER_PTIME else 0x20) | (1 if self.rx else 0)
        if offset in _RX_STATE:
            self.pull()
        if offset == IIR:
            return self._iir()
        if offset == IER:
            return self.dlh if self.lcr & LCR_DLAB else self.ier
        if offset == USR:
            return (
                0x06 | (0x08 if self.rx else 0) | (0x10 if len(self.rx) >= self.fifo_depth else 0)
            )
        if offset == RFL:
            return len(self.rx)
        if offset == TFL:
            # the transmit FIFO hands each byte to the line at once (the line paces them,
            # see the module docstring): it never holds one, as LSR and USR say too
            return 0
        if offset == LCR:
            return self.lcr
        if offset == MCR:
            return self.mcr
        if offset == SCR:
            return self.scr
        if offset == DLF:
            return self.dlf
        return 0  # MSR, and anything unmodelled

    def write(self, offset: int, size: int, value: int) -> None:
        value &= 0xFFFF_FFFF
        if offset == RBR:
            if self.lcr & LCR_DLAB:
                self.dll = value & 0xFF
            else:
                self._transmit(self.name, value & 0xFF)
        elif offset == IER:
            if self.lcr & LCR_DLAB:
                self.dlh = value & 0xFF
            else:
                self.ier = value & 0xFF
        elif offset == IIR:
            self.fcr = value & 0xFF
            self.trigger = RX_TRIGGERS[value >> 6 & 3] if value & 1 else 1
            if value & 0x02:
                self.rx.clear()
        elif offset == LCR:
            self.lcr = value & 0xFF
        elif offset == MCR:
            self.mcr = value & 0xFF
        elif offset == SCR:
            self.scr = value & 0xFF
        elif offset == DLF:
            self.dlf = value & 0xF


class UartRxDma:
    """The DMAC endpoint of a DW UART's RX request (docs/simulator.md, "The DMAC").

    A channel armed on it takes the received bytes, each as one item (8- or 32-bit: the
    byte in bits 0-7, upper bits 0) at the byte's arrival time, from the data register
    (RBR, fixed address) in single transfers (SRC_MSIZE 1 item), as the SDK's
    ``uart_receive_data_dma`` programs it. Bytes already in the RX FIFO when the channel
    is enabled go first; while it has room the FIFO stays empty; bytes after its block
    go to the FIFO again, with its overrun rules. ``linked()`` says whether the UART
    listens on the serial line (the FPIOA routes it to IO4), ``wire`` carries the line."""

    def __init__(self, uart: DwUart, wire: Wire, linked: Callable[[], bool]) -> None:
        self.uart = uart
        self.wire = wire
        self.linked = linked
        self.rbr = k210.PERIPHERALS[uart.name].base + RBR
        self.channel: Channel | None = None
        self.armed_at = 0.0

    def dma_arm(self, channel: Channel) -> str | None:
        ctl = channel.reg(CTL)
        name = self.uart.name.upper()
        if not channel.to_memory:
            return f"{name}'s RX request serves peripheral -> memory transfers (TT_FC 2) only"
        if channel.prf_address != self.rbr or not channel.prf_fixed:
            fixed = "fixed" if channel.prf_fixed else "incrementing"
            return (
                f"SAR=0x{channel.prf_address:08x} ({fixed}): the source must be {name}'s"
                f" RBR, 0x{self.rbr:08x}, fixed (CTL.SINC = 1)"
            )
        if channel.width not in (1, 4):
            return f"CTL=0x{ctl:016x}: items of {channel.width} bytes (8 or 32 bits are modelled)"
        if ctl >> 14 & 0xF:
            return f"CTL=0x{ctl:016x}: SRC_MSIZE {ctl >> 14 & 0xF} (single transfers only)"
        uart = self.uart
        now = channel.dmac.now()
        uart.pull()  # what has arrived by now is in the FIFO, with its overrun rules
        self.channel, self.armed_at = channel, now
        uart.dma = channel
        taken = channel.put(bytes(uart.rx), now)  # may complete (and disarm) at once
        del uart.rx[:taken]
        return None

    def dma_sync(self, now: float) -> None:
        channel, wire, uart = self.channel, self.wire, self.uart
        if channel is None or wire.next_at > now or not self.linked():
            return
        # the DMAC syncs at every slice start and stall, and at 3 Mbaud a byte or more
        # has come almost every time: Channel.remaining inlined (armed: enabled), and
        # comparisons, not max() calls (docs/simulator.md, "Cheaper device accesses")
        armed_at = self.armed_at
        for at, chunk in wire.receive(now, uart.baud(), channel.items - channel.moved):
            taken = channel.put(chunk, at if at > armed_at else armed_at)
            if at > uart.rx_activity:
                uart.rx_activity = at
            if taken < len(chunk):  # a garbled chunk can decode to more bytes than sent
                uart.receive(chunk[taken:], at)

    def dma_due(self) -> float:
        channel = self.channel
        if channel is None or not self.linked():
            return math.inf
        at = self.wire.arrival_of(channel.items - channel.moved)  # as in dma_sync
        if at is None:
            return math.inf
        return at if at > self.armed_at else self.armed_at

    def dma_disarm(self, channel: Channel) -> None:
        self.channel = None
        self.uart.dma = None
