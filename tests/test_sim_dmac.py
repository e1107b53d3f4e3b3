"""The DMAC model (kflashpy/sim/dmac.py): register semantics, memory-to-memory blocks,
the endpoint interface, the done interrupt, and the loud halts for what is not modelled."""

from __future__ import annotations

import math

import pytest

from kflashpy.sim.board import VirtualBoard
from kflashpy.sim.config import BoardConfig
from kflashpy.sim.dmac import (
    BLOCK_TS,
    CFG,
    CH_BASE,
    CH_CFG,
    CH_INTCLEAR,
    CH_INTSIGNAL_EN,
    CH_INTSTATUS,
    CH_INTSTATUS_EN,
    CHEN,
    CTL,
    DAR,
    INTSTATUS,
    RESET,
    SAR,
    STATUS,
    Channel,
    Dmac,
)
from kflashpy.sim.memory import SRAM_ALIAS, SRAM_BASE, Sram
from kflashpy.target import k210

W32 = 2 << 8 | 2 << 11  # SRC_TR_WIDTH = DST_TR_WIDTH = 32 bits


class Rig:
    """A DMAC on its own: SRAM, a SYSCTL dma_sel word pair, a clock, recorded halts."""

    def __init__(self) -> None:
        self.sram = Sram()
        self.sel = {0x64: 0, 0x68: 0}
        self.t = 0.0
        self.halts: list[str] = []
        self.dmac = Dmac(
            self.sram, lambda off: self.sel.get(off, 0), lambda: self.t, self.halts.append
        )

    def w(self, offset: int, value: int) -> None:
        """A 64-bit register written as two 32-bit halves, as the SDK's guests do."""
        self.dmac.write(offset, 4, value & 0xFFFF_FFFF)
        self.dmac.write(offset + 4, 4, value >> 32)

    def r(self, offset: int) -> int:
        return self.dmac.read(offset, 4) | self.dmac.read(offset + 4, 4) << 32

    def ch(self, n: int, offset: int) -> int:
        return CH_BASE + n * 0x100 + offset

    def single(self, n: int, sar: int, dar: int, items: int, ctl: int, cfg: int) -> None:
        """The SDK's dmac_set_single_mode sequence, ending with the channel enabled."""
        self.w(CHEN, 1 << (n + 8))  # disable
        self.w(self.ch(n, CH_INTCLEAR), 0xFFFF_FFFF)
        self.w(self.ch(n, CTL), ctl)
        self.w(self.ch(n, CH_CFG), cfg)
        self.w(self.ch(n, SAR), sar)
        self.w(self.ch(n, DAR), dar)
        self.w(self.ch(n, BLOCK_TS), items - 1)
        self.w(self.ch(n, CH_INTSTATUS_EN), 0x3)
        self.w(self.ch(n, CH_INTSIGNAL_EN), 0x2)
        self.w(CFG, 3)
        self.w(CHEN, 1 << n | 1 << (n + 8))


class FakeSource:
    """A peripheral -> memory endpoint that hands over what the test gives it."""

    def __init__(self) -> None:
        self.channel: Channel | None = None
        self.disarmed = 0
        self.refuse: str | None = None
        self.queue: list[tuple[float, int]] = []  # (arrival, value)

    def dma_arm(self, channel: Channel) -> str | None:
        if self.refuse:
            return self.refuse
        self.channel = channel
        return None

    def dma_sync(self, now: float) -> None:
        assert self.channel is not None
        while self.queue and self.queue[0][0] <= now and self.channel.remaining:
            at, value = self.queue.pop(0)
            self.channel.put([value], at)

    def dma_due(self) -> float:
        ch = self.channel
        if ch is None or len(self.queue) < ch.remaining:
            return math.inf
        return self.queue[ch.remaining - 1][0]

    def dma_disarm(self, channel: Channel) -> None:
        self.disarmed += 1
        self.channel = None


def test_mem_to_mem_block_copies_and_raises_done() -> None:
    rig = Rig()
    rig.sram.write(SRAM_BASE + 0x1000, bytes(range(64)))
    rig.t = 1.5
    rig.single(2, SRAM_BASE + 0x1000, SRAM_ALIAS + 0x2000, 16, W32, 0)
    assert rig.sram.read(SRAM_BASE + 0x2000, 64) == bytes(range(64))
    assert rig.r(CHEN) & 0x3F == 0  # CH_EN falls at completion
    assert rig.r(rig.ch(2, CH_INTSTATUS)) == 3
    assert rig.r(INTSTATUS) == 1 << 2
    assert rig.r(rig.ch(2, STATUS)) == 16
    ch = rig.dmac.channels[2]
    assert ch.done_at == 1.5 and ch.level()
    rig.w(rig.ch(2, CH_INTCLEAR), 2)
    assert rig.r(rig.ch(2, CH_INTSTATUS)) == 1 and not ch.level()  # bit 0 is not signalled
    rig.w(CFG, 1)  # INT_EN off: no line to the PLIC whatever the status
    rig.w(rig.ch(2, CH_INTSIGNAL_EN), 3)
    assert not ch.level()
    assert rig.halts == []


def test_fixed_source_and_byte_width_mem_to_mem() -> None:
    rig = Rig()
    rig.sram.write(SRAM_BASE, b"\xaa")
    rig.single(0, SRAM_BASE, SRAM_BASE + 0x100, 5, 1 << 4, 0)  # SINC fixed, 8-bit items
    assert rig.sram.read(SRAM_BASE + 0x100, 6) == b"\xaa" * 5 + b"\x00"


def test_chen_write_enable_bits_gate_each_channel() -> None:
    rig = Rig()
    rig.sel[0x64] = 18 << 6  # interface 1 <- UART3_RX
    src = FakeSource()
    rig.dmac.endpoints[k210.DMA_REQUEST["uart3_rx"]] = src
    rig.single(1, 0x5023_0000, SRAM_BASE, 4, W32 | 1 << 4, 2 << 32 | 1 << 39)
    assert rig.r(CHEN) & 0x3F == 0b10 and src.channel is rig.dmac.channels[1]
    rig.w(CHEN, 0)  # no write-enable bit: nothing changes
    assert rig.r(CHEN) & 0x3F == 0b10
    rig.w(CHEN, 1 << 9)  # CH_EN_WE[1] with CH_EN[1] = 0: disabled, the endpoint let go
    assert rig.r(CHEN) & 0x3F == 0 and src.disarmed == 1 and rig.dmac.armed == []


def test_peripheral_to_memory_through_an_endpoint_at_arrival_times() -> None:
    rig = Rig()
    rig.sel[0x68] = 18  # interface 5 <- UART3_RX
    src = FakeSource()
    rig.dmac.endpoints[18] = src
    src.queue = [(1.0 + i, 0x40 + i) for i in range(6)]
    rig.single(5, 0x5023_0000, SRAM_BASE + 0x40, 4, W32 | 1 << 4, 2 << 32 | 5 << 39)
    assert rig.dmac.due() == 4.0
    assert rig.dmac.irq_due(lambda irq: irq == k210.DMA_IRQ[5]) == 4.0
    assert rig.dmac.irq_due(lambda irq: False) == math.inf
    rig.t = 2.5
    assert rig.r(rig.ch(5, CH_INTSTATUS)) == 0  # a register read syncs: two items so far
    assert rig.sram.read(SRAM_BASE + 0x40, 12) == bytes.fromhex("40000000 41000000 00000000")
    rig.t = 4.0
    assert rig.r(INTSTATUS) == 1 << 5
    ch = rig.dmac.channels[5]
    assert ch.done_at == 4.0 and ch.remaining == 0 and src.disarmed == 1
    assert rig.sram.read(SRAM_BASE + 0x48, 8) == bytes.fromhex("42000000 43000000")
    assert src.queue == [(5.0, 0x44), (6.0, 0x45)]  # the block took exactly its items


@pytest.mark.parametrize(
    ("ctl", "cfg", "sel", "needle"),
    [
        (W32, 2 << 32 | 1 << 35, 18, "software handshake"),
        (W32, 3 << 32, 18, "TT_FC 3"),
        (W32, 2 << 32 | 1, 18, "multi-block"),
        (W32 | 1 << 63, 2 << 32, 18, "linked lists"),
        (2 << 8, 2 << 32, 18, "DST_TR_WIDTH 0"),
        (W32, 2 << 32, 20, "request 20"),
        (W32, 2 << 32 | 7 << 39, 18, "SRC_PER 7"),
    ],
)
def test_what_is_not_modelled_halts_naming_channel_and_register(ctl, cfg, sel, needle) -> None:
    rig = Rig()
    rig.sel[0x64] = sel
    rig.dmac.endpoints[18] = FakeSource()
    rig.single(0, 0x5023_0000, SRAM_BASE, 4, ctl, cfg)
    assert len(rig.halts) == 1 and "DMAC channel 0" in rig.halts[0]
    assert needle in rig.halts[0]
    assert rig.r(CHEN) & 0x3F == 0


def test_endpoint_refusal_and_non_sram_memory_halt() -> None:
    rig = Rig()
    src = FakeSource()
    src.refuse = "SAR must be RBR"
    rig.dmac.endpoints[0] = src
    rig.single(0, 0x5023_0004, SRAM_BASE, 4, W32, 2 << 32)
    assert rig.halts == ["DMAC channel 0 (request 0): SAR must be RBR"]
    rig.single(1, SRAM_BASE, 0x1000, 4, W32, 0)
    assert "DAR=0x00001000" in rig.halts[1] and "not SRAM" in rig.halts[1]


def test_suspension_software_handshake_and_reset() -> None:
    rig = Rig()
    rig.w(CHEN, 1 << 16 | 1 << 24)
    assert "suspension" in rig.halts[0]
    rig.w(rig.ch(3, 0x38), 1)
    assert "channel 3" in rig.halts[1] and "SWHSSRC" in rig.halts[1]
    rig.single(0, SRAM_BASE, SRAM_BASE + 64, 1, W32, 0)
    assert rig.r(INTSTATUS) == 1
    rig.w(RESET, 1)
    assert rig.r(INTSTATUS) == 0 and rig.r(CFG) == 0 and rig.r(RESET) == 0


def test_core_maps_the_dmac_and_its_done_interrupts() -> None:
    board = VirtualBoard(BoardConfig())
    try:
        board.start_core(SRAM_BASE, board.now)
        core = board.core
        assert core.dmac.channels[0].irq == 27
        for n, ch in enumerate(core.dmac.channels):
            assert core.plic.sources[27 + n] == ch.level
        # SYSCTL's dma_sel words are what the DMAC routes by
        core.sysctl.write(0x64, 4, 18 << 12)
        assert core.dmac.request_of(2) == 18
        core.sysctl.write(0x68, 4, 7)
        assert core.dmac.request_of(5) == 7
    finally:
        board.close()
