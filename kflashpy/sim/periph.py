"""K210 system peripherals: SYSCTL, FPIOA, CLINT, PLIC and plain register files.

Each model is a small class with a register map (docs/simulator.md, "The core and the peripherals") and
``read(offset, size) -> int`` / ``write(offset, size, value)`` hooks that the core maps
into the guest address space. Sub-word accesses are allowed everywhere because the SDK
writes bit-fields with byte and half-word stores.
"""

from __future__ import annotations

from collections.abc import Callable

from ..target import k210

IN0 = 26_000_000  # the board's oscillator

# FPIOA function numbers of the UART pins the serial link can use
FUNC_UARTHS_RX, FUNC_UARTHS_TX = 18, 19
UART_RX_FUNCS = {18: "uarths", 64: "uart1", 66: "uart2", 68: "uart3"}
UART_TX_FUNCS = {19: "uarths", 65: "uart1", 67: "uart2", 69: "uart3"}
LINK_RX_PIN, LINK_TX_PIN = 4, 5  # IO4 = the K210's RX, IO5 = its TX (wired to the USB-UART)


class RegisterFile:
    """Memory-like registers: what is written reads back. The base of the other models."""

    def __init__(self, name: str, size: int = 0x1000) -> None:
        self.name = name
        self.size = size
        self.regs = bytearray(size)

    def reset(self) -> None:
        self.regs[:] = bytes(self.size)

    def word(self, offset: int) -> int:
        return int.from_bytes(self.regs[offset : offset + 4], "little")

    def set_word(self, offset: int, value: int) -> None:
        self.regs[offset : offset + 4] = (value & 0xFFFF_FFFF).to_bytes(4, "little")

    def read(self, offset: int, size: int) -> int:
        return int.from_bytes(self.regs[offset : offset + size], "little")

    def write(self, offset: int, size: int, value: int) -> None:
        self.regs[offset : offset + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(
            size, "little"
        )


def merge(old: int, offset: int, size: int, value: int, width: int = 4) -> tuple[int, int]:
    """Apply a sub-word write to a register of ``width`` bytes (32-bit unless said):
    return (register offset, new value)."""
    base = offset & ~(width - 1)
    if size >= width:
        return base, value & ((1 << (8 * width)) - 1)
    shift = (offset & (width - 1)) * 8
    mask = ((1 << (8 * size)) - 1) << shift
    return base, (old & ~mask) | ((value << shift) & mask)


# --------------------------------------------------------------------------- SYSCTL
PLL0, PLL1, PLL2, PLL_LOCK = 0x08, 0x0C, 0x10, 0x18
CLK_SEL0, CLK_TH1, SOFT_RESET, PERI_RESET = 0x20, 0x3C, 0x30, 0x34
PLL_LOCKED = 0x0003_0303  # lock bits of the three PLLs
# What the mask ROM leaves behind (inferred): stage-2 stubs take one UART byte per
# interrupt at up to 3 Mbaud on real boards, which needs a CPU clock of hundreds of MHz,
# and they do not program the PLLs themselves. PLL0 = 26 MHz * 30 = 780 MHz (powered,
# output enabled), ACLK = PLL0 / 2 = 390 MHz, APB0 = ACLK / 2.
ROM_PLL0 = 29 << 4 | 1 << 21 | 1 << 25
ROM_CLK_SEL0 = 1 | 1 << 3
ROM_CPU_HZ = k210.CPU_HZ


class Sysctl(RegisterFile):
    """Clocks and resets. PLLs lock at once; frequencies follow the SDK formulas."""

    def __init__(self, on_clock_change: Callable[[], None], on_soft_reset: Callable[[], None]):
        super().__init__("sysctl")
        self._clock_changed = on_clock_change
        self._soft_reset = on_soft_reset
        self.peri_reset_hooks: dict[int, Callable[[], None]] = {}
        self.set_word(PLL0, ROM_PLL0)
        self.set_word(CLK_SEL0, ROM_CLK_SEL0)

    def read(self, offset: int, size: int) -> int:
        if offset & ~3 == PLL_LOCK:
            word = self.word(PLL_LOCK) | PLL_LOCKED
            return (word >> ((offset & 3) * 8)) & ((1 << (8 * size)) - 1)
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        base, new = merge(self.word(offset & ~3), offset, size, value)
        old = self.word(base)
        self.set_word(base, new)
        if base in (PLL0, PLL1, PLL2, CLK_SEL0, CLK_TH1) and new != old:
            self._clock_changed()
        elif base == SOFT_RESET and new & 1:
            self._soft_reset()
        elif base == PERI_RESET:
            for bit, hook in self.peri_reset_hooks.items():
                if new >> bit & 1 and not old >> bit & 1:
                    hook()

    def pll_hz(self, offset: int) -> float:
        reg = self.word(offset)
        if reg >> 23 & 1:  # bypass
            return IN0
        clkr, clkf, clkod = reg & 0xF, reg >> 4 & 0x3F, reg >> 10 & 0xF
        return IN0 / (clkr + 1) * (clkf + 1) / (clkod + 1)

    def cpu_hz(self) -> float:
        sel = self.word(CLK_SEL0)
        if not sel & 1:
            return IN0
        return self.pll_hz(PLL0) / (2 << (sel >> 1 & 3))

    def apb0_hz(self) -> float:
        return self.cpu_hz() / ((self.word(CLK_SEL0) >> 3 & 7) + 1)

    def spi3_hz(self) -> float:
        src = self.pll_hz(PLL0) if self.word(CLK_SEL0) >> 12 & 1 else IN0
        return src / (((self.word(CLK_TH1) >> 24) + 1) * 2)


# --------------------------------------------------------------------------- FPIOA
class Fpioa(RegisterFile):
    """Pad function selection; tells the board which UART sits on IO4/IO5."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        super().__init__("fpioa", 0x1000)
        self._changed = on_change
        self.set_rom_state()

    def set_rom_state(self) -> None:
        """IO4/IO5 on UARTHS, as the ROM leaves them."""
        self.set_word(4 * LINK_RX_PIN, 0x0090_0000 | FUNC_UARTHS_RX)
        self.set_word(4 * LINK_TX_PIN, 0x0000_1F00 | FUNC_UARTHS_TX)

    def write(self, offset: int, size: int, value: int) -> None:
        super().write(offset, size, value)
        if offset < 0xC0 and offset >> 2 in (LINK_RX_PIN, LINK_TX_PIN):
            self._changed()

    def function(self, pin: int) -> int:
        return self.regs[4 * pin]


# --------------------------------------------------------------------------- CLINT
class Clint(RegisterFile):
    """msip, mtimecmp and mtime (CPU clock / 50, derived from the virtual clock)."""

    MTIMECMP, MTIME = 0x4000, 0xBFF8

    def __init__(self, ticks: Callable[[], int]) -> None:
        super().__init__("clint", 0x10000)
        self._ticks = ticks
        self.set_word(self.MTIMECMP, 0xFFFF_FFFF)
        self.set_word(self.MTIMECMP + 4, 0xFFFF_FFFF)
        self.cmp = (1 << 64) - 1  # mtimecmp, kept as an int for the per-interrupt checks

    def read(self, offset: int, size: int) -> int:
        if offset == self.MTIME and size == 4:  # the low word: timing loops poll it
            return self._ticks() & 0xFFFF_FFFF
        if self.MTIME <= offset < self.MTIME + 8:
            value = self._ticks() >> ((offset - self.MTIME) * 8)
            return value & ((1 << (8 * size)) - 1)
        return super().read(offset, size)

    def write(self, offset: int, size: int, value: int) -> None:
        super().write(offset, size, value)
        self.cmp = int.from_bytes(self.regs[self.MTIMECMP : self.MTIMECMP + 8], "little")

    def msip(self) -> bool:
        return bool(self.regs[0] & 1)


# --------------------------------------------------------------------------- PLIC
class Plic:
    """Platform-level interrupt controller, hart 0 machine context only (context 0).

    Sources are level-triggered callables; a claimed source stays invisible until the
    handler writes it back to claim/complete, as the gateway does.
    """

    size = 0x400_0000
    name = "plic"

    def __init__(self) -> None:
        self.priority = [0] * 66
        self.enable = [0, 0, 0]  # 96 bits for context 0
        self.threshold = 0
        self.claimed: set[int] = set()
        self.sources: dict[int, Callable[[], bool]] = {}
        self.claims = 0
        # Enabled sources with a priority, best first as (priority, irq, level); rebuilt
        # lazily after a priority/enable write, because best() runs on every interrupt,
        # mret and mip read (the threshold changes twice per interrupt: not part of it).
        self._order: list[tuple[int, int, Callable[[], bool]]] | None = None
        self._order_sources = 0

    def _enabled(self, irq: int) -> bool:
        return bool(self.enable[irq >> 5] >> (irq & 31) & 1)

    def _candidates(self) -> list[tuple[int, int, Callable[[], bool]]]:
        live = [
            (self.priority[irq], irq, level)
            for irq, level in self.sources.items()
            if self.priority[irq] and self._enabled(irq)
        ]
        # stable sort: equal priorities keep source order (the lowest ID wins a tie)
        live.sort(key=lambda item: -item[0])
        self._order, self._order_sources = live, len(self.sources)
        return live

    def best(self) -> int:
        """The source a claim would return now (0 = none)."""
        order = self._order
        if order is None or self._order_sources != len(self.sources):
            order = self._candidates()
        claimed, threshold = self.claimed, self.threshold
        for prio, irq, level in order:
            if prio <= threshold:
                break
            if level() and irq not in claimed:
                return irq
        return 0

    def passes(self, irq: int) -> bool:
        """Would source ``irq`` raise MEIP when its level is up (enabled, priority above
        the threshold, not claimed)?"""
        return (
            self.priority[irq] > self.threshold and self._enabled(irq) and irq not in self.claimed
        )

    def read(self, offset: int, size: int) -> int:
        if offset == 0x20_0004:  # claim (the hot path: once per interrupt)
            irq = self.best()
            if irq:
                self.claimed.add(irq)
                self.claims += 1
            return irq
        if offset == 0x20_0000:
            return self.threshold
        if offset < 0x1000:
            irq = offset >> 2
            return self.priority[irq] if irq < len(self.priority) else 0
        if offset < 0x2000:
            word = (offset - 0x1000) >> 2
            bits = 0
            for irq, level in self.sources.items():
                if irq >> 5 == word and level():
                    bits |= 1 << (irq & 31)
            return bits
        if 0x2000 <= offset < 0x200C:
            return self.enable[(offset - 0x2000) >> 2]
        return 0

    def write(self, offset: int, size: int, value: int) -> None:
        if offset == 0x20_0004:  # complete
            self.claimed.discard(value & 0x7F)
        elif offset == 0x20_0000:
            self.threshold = value & 7
        elif offset < 0x1000:
            irq = offset >> 2
            if irq < len(self.priority):
                self.priority[irq] = value & 7
                self._order = None
        elif 0x2000 <= offset < 0x200C:
            self.enable[(offset - 0x2000) >> 2] = value & 0xFFFF_FFFF
            self._order = None
