"""The DMAC model (kflashpy/sim/dmac.py): register semantics, memory-to-memory blocks,
the endpoint interface, the done interrupt, and the loud halts for what is not modelled."""

from __future__ import annotations

import math
import random
import struct

import pytest
from support.simwire import reply
from unicorn import riscv_const as rv

from kflashpy.isp.connect import connect
from kflashpy.isp.frames import build_request
from kflashpy.isp.slip import encode
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
from kflashpy.sim.uarts import DwUart
from kflashpy.sim.wire import Wire
from kflashpy.target import k210

W32 = 2 << 8 | 2 << 11  # SRC_TR_WIDTH = DST_TR_WIDTH = 32 bits


def test_request_numbers_and_irqs_are_the_sdks() -> None:
    """sysctl_dma_select_t (Kendryte SDK sysctl.h) and the PLIC's IRQN_DMA0..5."""
    req = k210.DMA_REQUEST
    assert (req["ssi0_rx"], req["ssi3_rx"], req["ssi3_tx"]) == (0, 6, 7)
    assert (req["uart1_rx"], req["uart3_rx"], req["uart3_tx"]) == (14, 18, 19)
    assert (req["aes_req"], req["sha_rx"], req["i2s2_rx"], req["i2s0_bf_voice"]) == (20, 21, 30, 32)
    assert len(set(req.values())) == len(req) == 33
    assert k210.DMA_IRQ == (27, 28, 29, 30, 31, 32)


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
    assert rig.dmac.due(lambda irq: irq == k210.DMA_IRQ[5]) == 4.0
    assert rig.dmac.due(lambda irq: False) == math.inf
    rig.t = 2.5
    assert rig.r(rig.ch(5, CH_INTSTATUS)) == 0  # a register read syncs: two items so far
    assert rig.sram.read(SRAM_BASE + 0x40, 12) == bytes.fromhex("40000000 41000000 00000000")
    rig.t = 4.0
    assert rig.r(INTSTATUS) == 1 << 5
    ch = rig.dmac.channels[5]
    assert ch.done_at == 4.0 and ch.remaining == 0 and src.disarmed == 1
    assert rig.sram.read(SRAM_BASE + 0x48, 8) == bytes.fromhex("42000000 43000000")
    assert src.queue == [(5.0, 0x44), (6.0, 0x45)]  # the block took exactly its items


@pytest.mark.parametrize(("width_code", "fmt"), [(0, "<B"), (1, "<H"), (2, "<I"), (3, "<Q")])
def test_peripheral_to_memory_items_of_each_width_keep_their_low_bytes(
    width_code: int, fmt: str
) -> None:
    """``Channel.put`` stores each item's low ``width`` bytes, whether the endpoint hands
    over a list of ints, a numpy array of any unsigned frame type or bytes (a UART's),
    and ``put_raw`` the items as given (SPI3's received frames): each checked against
    struct packing."""
    import numpy as np

    rig = Rig()
    rig.sel[0x68] = 18  # interface 5 <- UART3_RX
    rig.dmac.endpoints[18] = FakeSource()
    size = struct.calcsize(fmt)
    ctl = width_code << 8 | width_code << 11 | 1 << 4  # SAR fixed
    rig.single(5, 0x5023_0000, SRAM_BASE + 0x100, 16, ctl, 2 << 32 | 5 << 39)
    ch = rig.dmac.channels[5]
    assert rig.halts == [] and ch.remaining == 16
    wide = [0xF1E2_D3C4_B5A6_9788 ^ i << 5 for i in range(4)]
    frames = np.array([0x8899_AABB + i for i in range(4)], dtype=">u4")
    packed = [0x7766_5544_3322_1100 + i for i in range(5)]
    assert ch.put(wide, 1.0) == 4
    assert ch.put(frames, 2.0) == 4
    # put_raw: items already as memory holds them (SPI3's reads), a partial item ignored
    raw = b"".join(struct.pack(fmt, v & ((1 << 8 * size) - 1)) for v in packed)
    assert ch.put_raw(raw + b"\xee" * (size - 1), 2.5) == 5
    assert ch.put(b"\x01\x02\x03\x04\x05", 3.0) == 3  # the block's last three items
    items = [v & ((1 << 8 * size) - 1) for v in [*wide, *map(int, frames), *packed, 1, 2, 3]]
    got = rig.sram.read(SRAM_BASE + 0x100, 16 * size)
    assert got == b"".join(struct.pack(fmt, v) for v in items)
    assert ch.done_at == 3.0 and ch.remaining == 0


def test_arming_a_block_tells_the_core_whether_its_end_is_known() -> None:
    """``Dmac.end_slice`` after every arming: True where the endpoint knows when the
    block completes (the core ends the slice, so that the next one ends there), False
    where it does not yet (as an SPI3 block before the chip is selected: the core then
    ends only a long slice, Core._end_slice)."""
    rig = Rig()
    ends: list[bool] = []
    rig.dmac.end_slice = ends.append
    rig.sel[0x68] = 18  # interface 5 <- UART3_RX
    src = FakeSource()
    rig.dmac.endpoints[18] = src
    src.queue = [(1.0, 0x40), (2.0, 0x41)]  # fewer items than the block: end unknown
    rig.single(5, 0x5023_0000, SRAM_BASE + 0x40, 4, W32 | 1 << 4, 2 << 32 | 5 << 39)
    rig.w(CHEN, 1 << 13)  # disabled,
    src.queue += [(3.0, 0x42), (4.0, 0x43)]
    rig.w(CHEN, 1 << 5 | 1 << 13)  # and enabled again: the fourth item ends it at 4.0
    assert ends == [False, True] and rig.dmac.due() == 4.0


class FakeSink:
    """A memory -> peripheral endpoint that takes ``per_sync`` items at each sync."""

    def __init__(self, per_sync: int) -> None:
        self.per_sync = per_sync
        self.channel: Channel | None = None
        self.got: list[int] = []

    def dma_arm(self, channel: Channel) -> str | None:
        self.channel = channel
        return None if not channel.to_memory else "a sink"

    def dma_sync(self, now: float) -> None:
        if self.channel is not None:
            self.got += self.channel.take(self.per_sync, now)

    def dma_due(self) -> float:
        return math.inf

    def dma_disarm(self, channel: Channel) -> None:
        self.channel = None


@pytest.mark.parametrize(("width_code", "fmt"), [(0, "<B"), (1, "<H"), (2, "<I"), (3, "<Q")])
def test_memory_to_peripheral_items_of_each_width(width_code: int, fmt: str) -> None:
    rig = Rig()
    rig.sel[0x64] = 7 << 6  # interface 1 <- SSI3_TX
    sink = FakeSink(per_sync=3)
    rig.dmac.endpoints[7] = sink
    size = struct.calcsize(fmt)
    values = [0x1122_3344_5566_7788 >> (64 - 8 * size) ^ i for i in range(7)]
    rig.sram.write(SRAM_BASE + 0x300, b"".join(struct.pack(fmt, v) for v in values))
    ctl = width_code << 8 | width_code << 11 | 1 << 6  # DAR fixed
    rig.single(1, SRAM_BASE + 0x300, 0x5400_0060, 7, ctl, 1 << 32 | 1 << 44)
    assert rig.halts == []
    rig.t = 1.0
    assert sink.got == values[:3]  # CHEN's upper half was written after the enable
    rig.dmac.read(INTSTATUS, 4)  # each register access syncs: 3 more, then the last one
    assert sink.got == values[:6]
    assert rig.r(INTSTATUS) == 1 << 1 and sink.got == values
    assert rig.dmac.channels[1].done_at == 1.0 and sink.channel is None


def test_memory_to_peripheral_from_a_fixed_source() -> None:
    rig = Rig()
    rig.sel[0x64] = 7
    sink = FakeSink(per_sync=10)
    rig.dmac.endpoints[7] = sink
    rig.sram.write(SRAM_BASE + 0x40, bytes.fromhex("efbeadde"))
    rig.single(0, SRAM_BASE + 0x40, 0x5400_0060, 4, W32 | 1 << 4 | 1 << 6, 1 << 32)
    rig.r(CHEN)
    assert sink.got == [0xDEADBEEF] * 4


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


# --------------------------------------------------------------------------- UART3 RX by DMA
UART3 = 0x5023_0000
DIVISOR = 1693  # 115200 at the APB0 clock the ROM leaves (195 MHz)
BYTE_S = 10 * DIVISOR / 195e6  # one character on the wire at that rate
RX_CTL = W32 | 1 << 4  # 32-bit items, SAR fixed, DAR incrementing, MSIZE 1
RX_CFG = 2 << 32 | 0 << 39  # peripheral -> memory, hardware handshake, interface 0
BUF = SRAM_BASE + 0x10_0000
WFI_J = (0x1050_0073, 0x0000_006F)  # wfi; j . (a hart that sleeps, then spins)


def _link_board(code: tuple[int, ...] = WFI_J) -> VirtualBoard:
    """A board whose core runs ``code`` from SRAM, UART3 on IO4 at 115200 (set up from
    Python: the tests look at the DMAC, not at UART set-up code), dma_sel0 interface 0 =
    UART3_RX."""
    board = VirtualBoard(BoardConfig())
    board.sram.write(SRAM_BASE, b"".join(w.to_bytes(4, "little") for w in code))
    board.start_core(SRAM_BASE, board.now)
    core = board.core
    core.fpioa.write(4 * 4, 4, 68 | 1 << 20 | 1 << 23)  # IO4 = UART3 RX
    uart = core.uarts["uart3"]
    for off, value in ((0x0C, 0x80), (0x00, DIVISOR >> 4), (0x04, 0), (0x0C, 3)):
        uart.write(off, 4, value)
    uart.write(0xC0, 4, DIVISOR & 15)
    uart.write(0x08, 4, 0x01)  # FIFOs on, trigger 1
    core.sysctl.write(0x64, 4, k210.DMA_REQUEST["uart3_rx"])
    assert core.rx_uart is uart and abs(uart.baud() - 195e6 / DIVISOR) < 1
    return board


def _send(board: VirtualBoard, data: bytes) -> None:
    board.to_board.send(data, board.now, board.core.uarts["uart3"].baud())


def _arm(board: VirtualBoard, items: int, signal: int = 2) -> Channel:
    dmac = board.core.dmac
    for off, value in (
        (CH_BASE + CTL, RX_CTL),
        (CH_BASE + CH_CFG, RX_CFG),
        (CH_BASE + SAR, UART3),
        (CH_BASE + DAR, BUF),
        (CH_BASE + BLOCK_TS, items - 1),
        (CH_BASE + CH_INTSTATUS_EN, 3),
        (CH_BASE + CH_INTSIGNAL_EN, signal),
        (CFG, 3),
        (CHEN, 0x101),
    ):
        dmac.write(off, 4, value & 0xFFFF_FFFF)
        dmac.write(off + 4, 4, value >> 32)
    return dmac.channels[0]


def _words(board: VirtualBoard, count: int) -> list[int]:
    raw = board.sram.read(BUF, 4 * count)
    return [int.from_bytes(raw[i : i + 4], "little") for i in range(0, len(raw), 4)]


def test_uart_rx_block_takes_fifo_bytes_first_then_arrivals_at_their_times() -> None:
    board = _link_board()
    try:
        _send(board, b"abc")
        board.run_for(5 * BYTE_S)
        board.core._sync_rx()  # a slice boundary: what arrived is delivered
        uart = board.core.uarts["uart3"]
        assert bytes(uart.rx) == b"abc"  # in the FIFO before the channel exists
        ch = _arm(board, 8)
        assert uart.rx == b"" and ch.remaining == 5
        _send(board, b"defghijklm")
        t_h = board.to_board.arrival_of(5)  # the block's last byte
        board.run_for(20 * BYTE_S)
        board.core._sync_rx()  # the sleeping hart looks (the next slice would)
        assert _words(board, 9) == [*b"abcdefgh", 0]  # one 32-bit word per byte
        assert ch.done_at == t_h and not ch.enabled
        assert board.core.dmac.read(INTSTATUS, 4) == 1
        assert bytes(uart.rx) == b"ijklm" and uart.overruns == 0  # the rest: the FIFO
    finally:
        board.close()


def test_uart_rx_bytes_after_the_block_overrun_the_fifo_as_without_dma() -> None:
    board = _link_board()
    try:
        ch = _arm(board, 4)
        _send(board, bytes(range(30)))
        board.run_for(40 * BYTE_S)
        board.core._sync_rx()
        uart = board.core.uarts["uart3"]
        assert _words(board, 4) == [0, 1, 2, 3] and ch.remaining == 0
        assert bytes(uart.rx) == bytes(range(4, 20)) and uart.overruns == 10
    finally:
        board.close()


def test_slices_end_at_block_completion_not_for_fifo_room() -> None:
    board = _link_board((0x0000_006F,))  # j . (awake: the idle detector skips ahead)
    try:
        core = board.core
        wire = board.to_board
        _send(board, bytes(200))
        assert core._next_event(1.0, 0) == wire.arrival_of(16)  # the FIFO would fill
        _arm(board, 100)
        assert core._next_event(1.0, 0) == wire.arrival_of(100)  # the block completes
        done = wire.arrival_of(100)
        board.run_for(done + BYTE_S / 2 - board.now)
        assert core.dmac.armed == [] and core.dmac.channels[0].done_at == done
        assert core._next_event(1.0, 0) == wire.arrival_of(16)
    finally:
        board.close()


def _done_wake_board(monkeypatch, signal: int) -> tuple[VirtualBoard, list[float]]:
    """wfi with mie.MEIE (mstatus.MIE 0), PLIC source 27 enabled above threshold 0; after
    the wake the hart writes a byte to UARTHS (the link's TX) and spins."""
    # wfi; lui t0, 0x38000; sw x0, 0(t0); j .
    board = _link_board((0x1050_0073, 0x3800_02B7, 0x0002_A023, 0x0000_006F))
    core = board.core
    core.plic.write(4 * 27, 4, 1)
    core.plic.write(0x2000, 4, 1 << 27)
    core.plic.write(0x20_0000, 4, 0)
    core._rw(rv.UC_RISCV_REG_MIE, 1 << 11)
    sent: list[float] = []
    transmit = board.board_transmit
    monkeypatch.setattr(
        board, "board_transmit", lambda d, t, b: (sent.append(t), transmit(d, t, b))
    )
    board.run_for(1e-4)  # asleep
    _arm(board, 6, signal)
    _send(board, b"0123456789")
    return board, sent


def test_wfi_wakes_exactly_at_block_completion(monkeypatch) -> None:
    board, sent = _done_wake_board(monkeypatch, signal=2)
    try:
        done = board.to_board.arrival_of(6)
        board.run_for(20 * BYTE_S)
        assert len(sent) == 1 and done <= sent[0] < done + 10e-9  # two instructions later
        assert board.core.dmac.channels[0].done_at == done
        assert board.core.status()["traps"] == 0
    finally:
        board.close()


def test_wfi_sleeps_on_when_the_done_interrupt_is_not_signalled(monkeypatch) -> None:
    board, sent = _done_wake_board(monkeypatch, signal=0)  # INTSIGNAL_EN = 0
    try:
        board.run_for(20 * BYTE_S)
        assert board.core._wfi_wake(board.now + 1.0) is None  # (it delivers, too)
        assert sent == [] and board.core.dmac.channels[0].done_at > 0
    finally:
        board.close()


def test_guest_enabling_an_unmodelled_channel_halts_the_board() -> None:
    # lui t0, 0x50000; addi t1, x0, 0x101; sw t1, 0x18(t0); j .
    board = _link_board((0x5000_02B7, 0x1010_0313, 0x0062_AC23, 0x0000_006F))
    try:
        dmac = board.core.dmac
        dmac.write(CH_BASE + CTL, 4, RX_CTL)
        dmac.write(CH_BASE + SAR, 4, UART3 + 4)  # IER, not RBR
        dmac.write(CH_BASE + DAR, 4, BUF)
        dmac.write(CH_BASE + CH_CFG + 4, 4, RX_CFG >> 32)
        dmac.write(CFG, 4, 3)
        board.run_for(1e-4)
        assert board.stage == "halted"
        assert board.halt_reason.startswith("DMAC channel 0 (request 18): SAR=0x50230004")
    finally:
        board.close()


def test_wire_arrivals_after_a_skip_cross_segments() -> None:
    w = Wire()
    w.send(b"abc", 0.0, 115200)
    w.send(b"defg", 1.0, 115200)
    assert w.arrivals(3, skip=2) == [w.arrival_of(k) for k in (3, 4, 5)]
    assert w.arrivals(2, skip=5) == [w.arrival_of(6), w.arrival_of(7)]
    assert w.arrivals(5, skip=6) == [w.arrival_of(7)]


def test_fifo_interrupt_comes_after_the_bytes_the_block_takes() -> None:
    board = _link_board()
    try:
        uart = board.core.uarts["uart3"]
        uart.write(0x08, 4, 0x81)  # trigger level 8
        uart.write(0x04, 4, 0x01)  # ERBFI
        _arm(board, 4)
        _send(board, bytes(20))
        assert uart.room() == 16 + 4
        assert uart.irq_at(board.to_board) == board.to_board.arrival_of(4 + 8)
    finally:
        board.close()


def _b_type(f3: int, rs1: int, rs2: int, offset: int) -> int:
    o = offset & 0x1FFF
    return (
        (o >> 12 & 1) << 31
        | (o >> 5 & 0x3F) << 25
        | rs2 << 20
        | rs1 << 15
        | f3 << 12
        | (o >> 1 & 0xF) << 8
        | (o >> 11 & 1) << 7
        | 0x63
    )


def test_a_block_armed_mid_slice_is_seen_in_memory_at_its_completion(monkeypatch) -> None:
    """The guest enables the channel, then polls the block's last word in SRAM (no MMIO)
    and writes UARTHS when it lands: the slice the enable happened in ends there, so the
    next one ends at the completion and the word is there at once (not a slice late)."""
    t0, t1, t2, t3, t4, t5 = 5, 6, 7, 28, 29, 30
    code = (
        0x5000_0000 >> 12 << 12 | t0 << 7 | 0x37,  # lui t0, DMAC
        0x101 << 20 | t1 << 7 | 0x13,  # addi t1, x0, 0x101
        (0x18 >> 5) << 25 | t1 << 20 | t0 << 15 | 2 << 12 | (0x18 & 31) << 7 | 0x23,  # CHEN
        (BUF - SRAM_BASE + SRAM_ALIAS) >> 12 << 12 | t2 << 7 | 0x37,  # lui t2, buffer
        0xFFF << 20 | t4 << 7 | 0x13,  # addi t4, x0, -1
        12 << 20 | t2 << 15 | 2 << 12 | t3 << 7 | 0x03,  # loop: lw t3, 12(t2)
        _b_type(0, t3, t4, -4),  # beq t3, t4, loop
        0x3800_0000 >> 12 << 12 | t5 << 7 | 0x37,  # lui t5, UARTHS
        t5 << 15 | 2 << 12 | 0x23,  # sw x0, 0(t5)
        0x0000_006F,  # j .
    )
    board = _link_board(code)
    try:
        core = board.core
        uart = core.uarts["uart3"]
        for off, value in ((0x0C, 0x80), (0x00, 1), (0x0C, 3), (0xC0, 0)):  # divisor 16
            uart.write(off, 4, value)
        dmac = core.dmac
        for off, value in (
            (CH_BASE + CTL, RX_CTL),
            (CH_BASE + CH_CFG, RX_CFG),
            (CH_BASE + SAR, UART3),
            (CH_BASE + DAR, BUF),
            (CH_BASE + BLOCK_TS, 3),
            (CFG, 3),
        ):
            dmac.write(off, 4, value & 0xFFFF_FFFF)
            dmac.write(off + 4, 4, value >> 32)
        board.sram.write(BUF, b"\xff" * 16)
        sent: list[float] = []
        transmit = board.board_transmit
        monkeypatch.setattr(
            board, "board_transmit", lambda d, t, b: (sent.append(t), transmit(d, t, b))
        )
        _send(board, bytes(10))
        done = board.to_board.arrival_of(4)
        board.run_for(50e-6)
        assert dmac.channels[0].done_at == done
        assert len(sent) == 1 and done <= sent[0] < done + 0.1e-6
    finally:
        board.close()


def test_time_a_device_stalls_the_core_moves_the_armed_transfers() -> None:
    """An SPI transfer charges its time inside the slice: the bytes that arrive meanwhile
    are in the block's memory when the core goes on (its next poll sees them)."""
    board = _link_board()
    try:
        ch = _arm(board, 8)
        _send(board, b"abcdef")
        board.core._add_stall(3.5 * BYTE_S)
        assert _words(board, 4) == [*b"abc", 0] and ch.remaining == 5
    finally:
        board.close()


# --------------------------------------------------------------------------- the flasher
SIM = "sim://?board=maix-bit"


def _count_rbr_reads(monkeypatch) -> list[int]:
    reads = [0]
    read = DwUart.read

    def counted(self: DwUart, offset: int, size: int) -> int:
        if offset == 0 and self.name == "uart3":
            reads[0] += 1
        return read(self, offset, size)

    monkeypatch.setattr(DwUart, "read", counted)
    return reads


def test_flasher_receives_write_frames_by_dma(monkeypatch) -> None:
    """A 64 KiB write at 3 Mbaud: the frame's bytes come by DMA (channel 0 from UART3's
    RBR, blocks of at most 1024 words), not one RBR read each; nothing is lost."""
    data = random.Random(3).randbytes(0x10000)
    reads = _count_rbr_reads(monkeypatch)  # before the core binds the model's read
    with connect(SIM, board="maix-bit", baud=3_000_000, stub="kflashpy") as dev:
        board = dev.port.sim_board
        uart = board.core.uarts["uart3"]
        reads[0] = 0
        blocks: list[int] = []
        start = Channel.start
        monkeypatch.setattr(Channel, "start", lambda ch, now: (blocks.append(ch.n), start(ch, now)))
        sent = board.to_board.bytes_sent
        dev.stage2.write(0x200000, data)
        wire = board.to_board.bytes_sent - sent
        assert board.flash.read(0x200000, len(data)) == data
        assert uart.overruns == 0
        rx_blocks = blocks.count(0)  # channels 1 and 2 carry SPI3's frames
        assert 0.95 * wire / 1024 <= rx_blocks <= 1.05 * wire / 1024
        assert 0 < reads[0] < wire / 50  # headers and escapes
        # blocks armed mid-slice end it through the slice's limit, not a code hook (one
        # would send every instruction through unicorn's hook-list walk from then on)
        assert board.core._code_hooks == 0


def test_flasher_decodes_escapes_across_its_dma_blocks(monkeypatch) -> None:
    """A write frame dense with bytes SLIP escapes (C0 and DB, a third of its bytes, in
    runs of every length between plain runs of every length): its DMA blocks end inside
    escape pairs (DB as a block's last byte, the escaped byte the next one's first) and
    inside the 8-byte groups the decoder packs, and every byte lands in place."""
    rng = random.Random(6)
    data = bytearray()
    while len(data) < 0xF000:
        data += rng.randbytes(rng.randrange(20))
        data += bytes(rng.choices((0xC0, 0xDB), k=rng.randrange(1, 9)))
    data = bytes(data[:0xF000])
    blocks: list[bytearray] = []
    start, put = Channel.start, Channel.put

    def started(ch: Channel, now: float) -> None:
        if ch.n == 0:
            blocks.append(bytearray())
        start(ch, now)

    def landed(ch: Channel, values, at: float) -> int:
        taken = put(ch, values, at)
        if ch.n == 0:
            blocks[-1] += bytes(values[:taken])
        return taken

    with connect(SIM, board="maix-bit", baud=3_000_000, stub="kflashpy") as dev:
        port, board = dev.port, dev.port.sim_board
        monkeypatch.setattr(Channel, "start", started)
        monkeypatch.setattr(Channel, "put", landed)
        port.write(encode(build_request(0xB5, 0x200000, data)))
        got = reply(port, 1.0)
        assert got is not None and got[:2] == b"\xb5\xe0"
        assert board.flash.read(0x200000, len(data)) == data
        assert board.core.uarts["uart3"].overruns == 0
        assert len(blocks) > 20 and all(len(b) <= 1024 for b in blocks)
        assert sum(b[-1] == 0xDB for b in blocks[:-1]) >= 3  # pairs split between blocks


def test_flasher_ends_a_block_the_line_stopped_short_of(monkeypatch) -> None:
    """A write frame with one byte lost on the way and nothing after it: the last DMA
    block planned for it never completes (the frame's closing C0 lands in it, but no
    interrupt wakes the sleeping flasher); the timer wake 2 ms past its due time stops
    the channel and decodes what came, and the frame is answered as damaged (BAD_CRC)."""
    # no byte to escape: the frame is exactly as long on the wire as its plan
    data = bytes(b for b in random.Random(4).randbytes(4100) if b not in (0xC0, 0xDB))[:4000]
    with connect(SIM, board="maix-bit", baud=3_000_000, stub="kflashpy") as dev:
        port, board = dev.port, dev.port.sim_board
        frame = encode(build_request(0xB5, 0x200000, data))
        cut = next(
            i
            for i in range(2000, len(frame))
            if frame[i - 1] not in (0xDB, 0xC0) and frame[i] not in (0xDB, 0xC0)
        )
        sent: list[float] = []
        transmit = board.board_transmit
        monkeypatch.setattr(
            board, "board_transmit", lambda d, t, b: (sent.append(t), transmit(d, t, b))
        )
        t0 = board.now
        port.write(frame[:cut] + frame[cut + 1 :])
        got = reply(port, 0.1)
        assert got is not None and got[:2] == b"\xb5\xe2"
        took = sent[0] - t0
        assert len(frame) * 10 / 3e6 + 2e-3 < took < len(frame) * 10 / 3e6 + 4e-3
        assert board.core.dmac.armed == [] and board.core.uarts["uart3"].rx == b""
        assert board.flash.read(0x200000, 16) == b"\xff" * 16
        monkeypatch.undo()
        dev.stage2.write(0x200000, data)  # the link is as good as before
        assert board.flash.read(0x200000, len(data)) == data


def test_flasher_answers_promptly_after_a_write_frame_cut_short(monkeypatch) -> None:
    """The host stops in the middle of a 64 KiB write frame (a Ctrl-C'd burn at 115200)
    and greets the board. The flasher's DMA plan for that frame must not swallow the
    greeting: the greeting's C0 ends the cut frame, which then needs less than is still
    planned, so the flasher stops the plan and the FIFO takes the greeting. It is
    answered within a block's time (256 bytes: 22 ms), not when the rest of the cut
    frame would have come (5.5 s)."""
    data = random.Random(5).randbytes(0x10000)
    with connect(SIM, board="maix-bit", baud=115200, stub="kflashpy") as dev:
        port, board = dev.port, dev.port.sim_board
        port.write(encode(build_request(0xB5, 0x200000, data))[:2048])
        port.timeout = 0.3  # its 2048 bytes are 0.18 s of wire
        assert port.read(64) == b""  # the cut frame is not answered before it ends
        sent: list[tuple[float, bytes]] = []
        transmit = board.board_transmit
        monkeypatch.setattr(
            board, "board_transmit", lambda d, t, b: (sent.append((t, d)), transmit(d, t, b))
        )
        t0 = board.now
        port.write(encode(build_request(0xD2, 0, data_len=0)))
        port.timeout = 0.2
        answers = [f for f in port.read(256).split(b"\xc0") if f]
        assert [a[:2] for a in answers] == [b"\xb5\xe2", b"\xd2\xe0"]  # the cut frame, the NOP
        assert sent[-1][0] - t0 < 0.03
        assert board.core.uarts["uart3"].overruns == 0
