"""SPI3's DMA endpoints (kflashpy/sim/spi3.py, SSI3_TX and SSI3_RX through the DMAC of
kflashpy/sim/dmac.py): frames in bulk to and from the flash, exact wire times, the FIFO
levels the guest can read meanwhile, and the loud halts for what is not modelled."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kflashpy.sim import dmac as D
from kflashpy.sim.flash import NorFlash
from kflashpy.sim.memory import SRAM_BASE, Sram
from kflashpy.sim.spi3 import Spi3

SPI3_DR = 0x5400_0060
HZ = 97_500_000.0  # SPI3 clock; BAUDR 2: SCLK 48.75 MHz
CLK = 2 / HZ  # one SCLK cycle
W32 = 2 << 8 | 2 << 11
TX_CH, RX_CH = 1, 2
BUF = SRAM_BASE + 0x1000


class Rig:
    """SRAM, the DMAC, SPI3 and a flash on one clock (``t``), halts and skips recorded."""

    def __init__(self, quad: bool = False) -> None:
        self.t = 0.0
        self.halts: list[str] = []
        self.skips: list[float] = []
        self.stalls: list[float] = []
        self.sram = Sram()
        self.flash = NorFlash(size=1 << 20, timing="instant")
        self.flash.data[0x300:0x400] = bytes((i * 7 + 3) & 0xFF for i in range(256))
        if quad:  # volatile status write: QE
            for command in (b"\x50", b"\x01\x00\x02"):
                self._cmd(command)
        # interface 1 <- SSI3_TX (7), interface 2 <- SSI3_RX (6)
        sel = {0x64: 7 << 6 | 6 << 12}
        self.dmac = D.Dmac(
            self.sram, lambda off: sel.get(off, 0), lambda: self.t, self.halts.append
        )
        self.spi = Spi3(
            self.flash, lambda: self.t, lambda: HZ, self.stalls.append, self.skips.append
        )
        self.dmac.endpoints.update(self.spi.dma_ports())
        self.spi.write(0x14, 4, 2)  # BAUDR

    def _cmd(self, data: bytes) -> None:
        self.flash.select(self.t)
        self.flash.exchange(data, self.t)
        self.flash.deselect(self.t)

    def w(self, offset: int, value: int) -> None:
        self.dmac.write(offset, 4, value & 0xFFFF_FFFF)
        self.dmac.write(offset + 4, 4, value >> 32)

    def ch(self, n: int, offset: int) -> int:
        return D.CH_BASE + n * 0x100 + offset

    def channel(self, n: int, sar: int, dar: int, items: int, ctl: int, cfg: int) -> None:
        """Program channel ``n`` for one block as the SDK does and enable it."""
        for offset, value in (
            (D.CH_INTCLEAR, 0xFFFF_FFFF),
            (D.CTL, ctl),
            (D.CH_CFG, cfg),
            (D.SAR, sar),
            (D.DAR, dar),
            (D.BLOCK_TS, items - 1),
            (D.CH_INTSTATUS_EN, 3),
            (D.CH_INTSIGNAL_EN, 2),
        ):
            self.w(self.ch(n, offset), value)
        self.w(D.CFG, 3)
        self.w(D.CHEN, 1 << n | 1 << (n + 8))

    def tx(self, items: int, msize: int = 1) -> None:
        """Memory (BUF, incrementing) -> SPI3 DR (fixed), bursts of 4 items."""
        ctl = W32 | 1 << 6 | msize << 14 | msize << 18
        self.channel(TX_CH, BUF, SPI3_DR, items, ctl, 1 << 32 | TX_CH << 44)

    def rx(self, items: int, width: int = W32) -> None:
        """SPI3 DR (fixed) -> memory (BUF, incrementing), one item per request."""
        self.channel(RX_CH, SPI3_DR, BUF, items, width | 1 << 4, 2 << 32 | RX_CH << 39)

    def done(self, n: int) -> bool:
        return bool(self.dmac.read(self.ch(n, D.CH_INTSTATUS), 4) & 2)

    def status(self) -> int:
        return self.spi.read(0x28, 4)


def words_be(data: bytes) -> bytes:
    """Bytes as the flasher lays them out for 32-bit frames: each frame a little-endian
    memory word whose most significant byte goes first on the wire."""
    return np.frombuffer(data, ">u4").astype("<u4").tobytes()


def test_standard_page_program_by_dma_at_sclk_pace() -> None:
    """0x02 with 32-bit frames: the CPU queues the instruction frame, the DMA the 64
    data frames in bursts of 4 whenever TXFLR <= DMATDLR (4): burst b enters when entry
    4b - 4 leaves the FIFO, the last one at 56 frame times; the wire ends at 65."""
    rig = Rig()
    page = bytes(range(256))
    rig.sram.write(BUF, words_be(page))
    rig._cmd(b"\x06")
    spi = rig.spi
    spi.write(0x00, 4, 31 | 1 << 10)  # 32-bit frames, transmit only
    spi.write(0x50, 4, 4)  # DMATDLR
    spi.write(0x08, 4, 1)
    spi.write(0x60, 4, 0x02 << 24 | 0x500)
    spi.write(0x4C, 4, 2)  # TDMAE
    rig.tx(64)
    assert spi.read(0x20, 4) == 5  # the first burst is in before the slave is selected
    rig.t = 1e-6
    spi.write(0x10, 4, 1)
    frame = 32 * CLK
    assert rig.dmac.due() == pytest.approx(1e-6 + 56 * frame)
    rig.t = 1e-6 + 10.5 * frame  # entries 0-10 have left: bursts 0-3 came in, TXFLR > 4
    assert spi.read(0x20, 4) == 1 + 16 - 11
    assert rig.status() & 1 and not rig.done(TX_CH)
    rig.t = rig.dmac.due()
    assert rig.done(TX_CH)
    assert spi.read(0x20, 4) == 65 - 57
    end = 1e-6 + 65 * frame
    for _ in range(3):  # tight BUSY polls stall the core to the end
        assert rig.status() & 1
    assert rig.stalls == [pytest.approx(end - rig.t)] and rig.skips == []
    rig.t = end
    assert rig.status() == 0x06
    spi.write(0x10, 4, 0)
    assert rig.flash.read(0x500, 256) == page
    assert rig.flash.stats.programs == 1 and rig.flash.stats.bytes_programmed == 256
    assert rig.halts == []


def test_standard_read_by_dma_lands_in_memory_as_frames_arrive() -> None:
    rig = Rig()
    spi = rig.spi
    spi.write(0x00, 4, 31 | 3 << 10)  # 32-bit frames, EEPROM read
    spi.write(0x04, 4, 64 - 1)
    spi.write(0x08, 4, 1)
    spi.write(0x60, 4, 0x03 << 24 | 0x300)
    spi.write(0x4C, 4, 1)  # RDMAE
    rig.rx(64)
    spi.write(0x10, 4, 1)
    frame = 32 * CLK
    want = words_be(rig.flash.read(0x300, 256))
    assert rig.dmac.due() == pytest.approx(65 * frame)
    rig.t = 21.5 * frame  # the command frame, then 20 received ones
    assert not rig.done(RX_CH) and spi.read(0x24, 4) == 0
    assert rig.sram.read(BUF, 84) == want[:80] + bytes(4)
    rig.t = rig.dmac.due()
    assert rig.done(RX_CH) and rig.sram.read(BUF, 256) == want
    assert rig.status() == 0x06
    spi.write(0x10, 4, 0)
    assert rig.stalls == [] and rig.halts == []


def test_quad_read_and_quad_program_by_dma() -> None:
    """0x6B: instruction 8 and address 24 cycles on one line, 8 wait cycles, 8 cycles a
    32-bit frame on four lines; 0x32: the same header, no wait, the program starts when
    the slave is deselected."""
    rig = Rig(quad=True)
    spi = rig.spi
    spi.write(0x00, 4, 31 | 2 << 10 | 2 << 22)  # 32-bit frames, RX only, quad
    spi.write(0xF4, 4, 8 << 11 | 2 << 8 | 6 << 2)
    spi.write(0x04, 4, 64 - 1)
    spi.write(0x08, 4, 1)
    spi.write(0x60, 4, 0x6B)
    spi.write(0x60, 4, 0x300)
    spi.write(0x4C, 4, 1)
    rig.rx(64)
    spi.write(0x10, 4, 1)
    assert rig.dmac.due() == pytest.approx((8 + 24 + 8 + 64 * 8) * CLK)
    rig.t = rig.dmac.due()
    assert rig.done(RX_CH)
    assert rig.sram.read(BUF, 256) == words_be(rig.flash.read(0x300, 256))
    spi.write(0x10, 4, 0)
    spi.write(0x08, 4, 0)

    rig._cmd(b"\x06")
    rig.sram.write(BUF, words_be(bytes(range(256))))
    spi.write(0x00, 4, 31 | 1 << 10 | 2 << 22)  # TX only, quad
    spi.write(0xF4, 4, 2 << 8 | 6 << 2)
    spi.write(0x50, 4, 4)
    spi.write(0x08, 4, 1)
    spi.write(0x60, 4, 0x32)
    spi.write(0x60, 4, 0x400)
    spi.write(0x4C, 4, 2)
    rig.tx(64)
    start = rig.t
    spi.write(0x10, 4, 1)
    # burst b enters when entry 4b - 3 leaves; entry j >= 2 leaves at 32 + (j - 2) * 8
    assert rig.dmac.due() == pytest.approx(start + (32 + (4 * 15 - 3 - 2) * 8) * CLK)
    end = start + (32 + 64 * 8) * CLK
    rig.t = end
    assert rig.done(TX_CH) and rig.status() == 0x06
    spi.write(0x10, 4, 0)
    assert rig.flash.read(0x400, 256) == bytes(range(256))
    assert rig.flash.stats.bytes_programmed_wide == 256
    assert rig.stalls == [] and rig.halts == []


def test_pio_transfers_are_untouched_by_an_idle_dmac() -> None:
    rig = Rig()
    spi = rig.spi
    spi.write(0x00, 4, 7 | 3 << 10)  # 8-bit frames, EEPROM read, no DMACR
    spi.write(0x04, 4, 3)
    spi.write(0x08, 4, 1)
    for b in (0x03, 0x00, 0x03, 0x00):
        spi.write(0x60, 4, b)
    spi.write(0x10, 4, 1)
    assert [spi.read(0x60, 4) for _ in range(4)] == list(rig.flash.read(0x300, 4))
    assert sum(rig.stalls) == pytest.approx(8 * 8 * CLK)
    assert rig.dmac.due() == math.inf


def _armed_tx(rig: Rig) -> None:
    spi = rig.spi
    spi.write(0x00, 4, 31 | 1 << 10)
    spi.write(0x50, 4, 4)
    spi.write(0x08, 4, 1)
    spi.write(0x60, 4, 0x02 << 24)
    spi.write(0x4C, 4, 2)
    rig.tx(64)


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        (lambda rig: rig.rx(4, width=0), "32-bit DR access"),  # 8-bit items
        (
            lambda rig: rig.channel(
                RX_CH, SPI3_DR - 0x3C, BUF, 4, W32 | 1 << 4, 2 << 35 >> 3 | 2 << 39
            ),
            "is not spi3's DR",
        ),
        (lambda rig: rig.tx(64, msize=3), "overflow"),  # 16 items above DMATDLR 16+
        (lambda rig: (rig.spi.write(0x54, 4, 3), rig.rx(4)), "DMARDLR 3"),
        (lambda rig: (_armed_tx(rig), rig.spi.write(0x60, 4, 0)), "DR written"),
        (
            lambda rig: (_armed_tx(rig), rig.spi.write(0x10, 4, 1), rig.spi.write(0x10, 4, 0)),
            "deselected",
        ),
        (
            lambda rig: (
                rig.spi.write(0x4C, 4, 2),
                rig.tx(4),
                rig.spi.write(0x08, 4, 1),
                rig.spi.write(0x10, 4, 1),
            ),
            "TMOD 0",
        ),
    ],
)
def test_what_is_not_modelled_halts(setup, needle) -> None:  # type: ignore[no-untyped-def]
    rig = Rig()
    rig.spi.write(0x50, 4, 17)
    setup(rig)
    assert rig.halts and needle in rig.halts[0]


@pytest.mark.parametrize("fb", range(1, 9))
def test_frames_go_on_the_wire_most_significant_byte_first(fb: int) -> None:
    """``_wire_bytes`` (the frames of a DMA transfer or an enhanced one) against one
    ``int.to_bytes`` per frame, for every frame size: the numpy cast it takes for 1, 2,
    4 and 8 bytes and the byte slicing for the others give the same bytes; and back:
    ``_frame_items`` (a DMA read's frames as the 32-bit items memory gets) for the
    frame sizes SSI frames have (up to 32 bits)."""
    from kflashpy.sim.spi3 import _frame_items, _wire_bytes

    frames = [0xF1E2_D3C4_B5A6_9788 ^ i * 0x0101_0101 for i in range(5)]
    want = b"".join((f & ((1 << 8 * fb) - 1)).to_bytes(fb, "big") for f in frames)
    assert _wire_bytes(frames, fb) == want
    assert _wire_bytes(np.array(frames, dtype=np.uint64), fb) == want
    assert _wire_bytes([], fb) == b""
    if fb <= 4:  # received frames become the DMA's 32-bit items in memory
        items = b"".join((f & ((1 << 8 * fb) - 1)).to_bytes(4, "little") for f in frames)
        assert _frame_items(want, fb) == items


@pytest.mark.parametrize("header", [(), (8 * CLK,), (8 * CLK, 24 * CLK)])
def test_wire_counts_agree_with_the_entry_times(header: tuple[float, ...]) -> None:
    """``_Wire.count`` (inlined entry times past the header, a quotient to start from)
    against counting ``begins``/``done`` one entry at a time, at every entry's own
    time, a hair either side of it, and between entries: the DMA's FIFO levels and
    the items it moves come from these counts."""
    from kflashpy.sim.spi3 import _Wire

    wire = _Wire(0.1 + 3e-7, header, 8 * CLK, 32 * CLK / 4)

    def slow(now: float, at) -> int:  # type: ignore[no-untyped-def]
        n = 0
        while at(n) <= now:
            n += 1
        return n

    times = [wire.start - CLK, wire.start]
    for j in range(70):
        for t in (wire.begins(j), wire.done(j)):
            times += [t, math.nextafter(t, -math.inf), math.nextafter(t, math.inf), t + CLK / 3]
    for now in times:
        assert wire.count(now, False) == slow(now, wire.begins)
        assert wire.count(now, True) == slow(now, wire.done)
