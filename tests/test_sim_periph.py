"""Peripheral models of the virtual K210 in isolation (sim-core)."""

from __future__ import annotations

import hashlib
import struct
import threading

import pytest

from kflashpy.sim.crypto import ShaEngine
from kflashpy.sim.flash import NorFlash
from kflashpy.sim.periph import CLK_SEL0, PLL0, PLL_LOCK, Plic, Sysctl
from kflashpy.sim.spi3 import NoDevice, Spi3
from kflashpy.sim.uarts import DwUart, Uarths
from kflashpy.sim.wire import Wire, baud_mismatch


def sysctl() -> Sysctl:
    return Sysctl(lambda: None, lambda: None)


def test_sysctl_pll_formula_and_lock() -> None:
    s = sysctl()
    assert s.cpu_hz() == 390_000_000  # as the ROM leaves it
    s.write(CLK_SEL0, 4, 0)
    assert s.cpu_hz() == 26_000_000  # ACLK from IN0
    # PLL0 = 26 MHz / (clkr+1) * (clkf+1) / (clkod+1) with clkr=0, clkf=31, clkod=0
    s.write(PLL0, 4, 31 << 4)
    s.write(CLK_SEL0, 4, 1)  # ACLK from PLL0, divider 2
    assert s.pll_hz(PLL0) == 26_000_000 * 32
    assert s.cpu_hz() == 26_000_000 * 16
    s.write(CLK_SEL0, 1, 1 | 1 << 3)  # byte store: APB0 = ACLK / 2
    assert s.apb0_hz() == 26_000_000 * 8
    assert s.read(PLL_LOCK, 4) & 0x30303 == 0x30303


def test_dw_uart_fractional_divisor_and_ptime() -> None:
    sent: list[int] = []
    u = DwUart("uart3", lambda: 26_000_000, lambda name, b: sent.append(b))
    divisor = 26_000_000 // 115200  # 225 -> DLH 0, DLL 14, DLF 1
    u.write(0x0C, 4, 0x80)  # DLAB
    u.write(0x00, 4, (divisor & 0xFFF) // 16)
    u.write(0x04, 4, divisor >> 12)
    u.write(0xC0, 4, divisor % 16)
    u.write(0x0C, 4, 0x03)
    assert u.baud() == pytest.approx(26_000_000 / 225)
    assert u.read(0x14, 4) & 0x20  # classic THRE
    u.write(0x04, 4, 0x81)  # ERBFI | PTIME: bit 5 now means "TX FIFO full"
    assert not u.read(0x14, 4) & 0x20
    u.write(0x00, 4, 0x41)
    assert sent == [0x41]
    assert not u.irq()
    u.receive(b"xy")
    assert u.irq() and u.read(0x08, 4) & 0xF == 0x4 and u.read(0x14, 4) & 1
    assert u.read(0x00, 4) == ord("x") and u.read(0x00, 4) == ord("y")
    u.receive(b"z" * 40)
    assert u.overruns == 40 - u.fifo_depth


def test_dw_uart_transmit_fifo_hands_bytes_to_the_line_at_once() -> None:
    """The model's transmit FIFO never holds a byte (docs/simulator.md, "Limits"): TFL,
    USR and LSR agree on that however many bytes were written, with PTIME or not."""
    sent: list[int] = []
    u = DwUart("uart3", lambda: 26_000_000, lambda name, b: sent.append(b))
    for ier in (0x00, 0x80):
        u.write(0x04, 4, ier)
        for b in range(40):
            u.write(0x00, 4, b)
        assert u.read(0x80, 4) == 0  # TFL
        assert u.read(0x7C, 4) & 0x06 == 0x06  # USR: TFE, TFNF
        assert u.read(0x14, 4) & 0x60 == (0x40 if ier else 0x60)  # TEMT; THRE / not full
    assert sent == list(range(40)) * 2


def test_dw_uart_rx_trigger_level_character_timeout_and_rfl() -> None:
    """FCR[7:6] sets the RX FIFO level that raises "received data available" (IIR 0x4);
    fewer bytes raise "character timeout" (IIR 0xC) once nothing came in or was read for
    four character times; RFL tells the level. irq_at() predicts both from the wire."""
    clock = {"t": 0.0}
    u = DwUart("uart3", lambda: 16 * 1_000_000, lambda name, b: None)  # 1 Mbaud
    u.now = lambda: clock["t"]
    u.write(0x0C, 4, 0x80)
    u.write(0x00, 4, 1)  # divisor 16
    u.write(0x0C, 4, 0x03)
    u.write(0x04, 4, 0x81)  # PTIME | ERBFI
    char = 10 / 1_000_000
    for fcr, level in ((0x41, 4), (0x81, 8), (0xC1, 14), (0x01, 1)):
        u.write(0x08, 4, fcr | 0x06)  # FIFOs cleared
        clock["t"] += 1.0
        u.receive(b"a" * (level - 1), clock["t"])
        assert u.read(0x84, 4) == level - 1
        if level > 1:
            assert not u.irq() and u.read(0x08, 4) == 0xC1  # none yet
            clock["t"] += 4 * char - 1e-9
            assert not u.irq()
            clock["t"] += 2e-9
            assert u.irq() and u.read(0x08, 4) == 0xCC  # character timeout
            u.read(0x00, 4)  # a read restarts the timeout
            assert not u.irq()
            clock["t"] += 4 * char
            assert u.read(0x08, 4) == 0xCC
        u.receive(b"b" * (level - u.read(0x84, 4)), clock["t"])
        assert u.irq() and u.read(0x08, 4) == 0xC4 and u.read(0x84, 4) == level
    # irq_at: the arrival that completes the trigger level, or a gap of a timeout
    wire = Wire()
    u.write(0x08, 4, 0x87)  # half full: 8
    clock["t"] = 10.0
    wire.send(b"x" * 20, 10.0, 1_000_000)
    assert u.irq_at(wire) == pytest.approx(10.0 + 8 * char)
    wire = Wire()
    wire.send(b"x" * 3, 10.0, 1_000_000)
    assert u.irq_at(wire) == pytest.approx(10.0 + 3 * char + 4 * char)
    assert u.irq_at(Wire()) is None
    u.write(0x04, 4, 0x80)  # ERBFI off: nothing rises
    assert u.irq_at(wire) is None


def test_uarths_divisor_and_rx_watermark() -> None:
    u = Uarths(lambda: 26_000_000, lambda name, b: None, div=224)
    assert u.baud() == pytest.approx(26_000_000 / 225)
    assert u.read(0x04, 4) == 0x8000_0000  # empty
    u.write(0x10, 4, 2)  # ie.rxwm
    u.receive(b"a")
    assert u.irq() and u.read(0x04, 4) == ord("a") and not u.irq()


def test_plic_claim_complete_and_threshold() -> None:
    plic = Plic()
    level = {"on": True}
    plic.sources[13] = lambda: level["on"]
    plic.sources[33] = lambda: True
    assert plic.read(0x20_0004, 4) == 0  # nothing enabled
    plic.write(4 * 13, 4, 1)
    plic.write(4 * 33, 4, 2)
    plic.write(0x2000, 4, 1 << 13)
    plic.write(0x2004, 4, 1 << 1)
    assert plic.read(0x20_0004, 4) == 33  # higher priority first
    assert plic.read(0x20_0004, 4) == 13  # 33 is in service
    assert plic.read(0x20_0004, 4) == 0
    plic.write(0x20_0004, 4, 13)
    plic.write(0x20_0000, 4, 1)  # threshold 1 masks priority-1 sources
    assert plic.best() == 0
    plic.write(0x20_0000, 4, 0)
    level["on"] = False
    assert plic.best() == 0


def spi(flash: NorFlash) -> Spi3:
    return Spi3(flash, lambda: 0.0, lambda: 26_000_000.0, lambda s: None, lambda t: None)


def test_spi3_eeprom_read_and_tx_program() -> None:
    flash = NorFlash(size=1 << 20, timing="instant")
    bus = spi(flash)
    # EEPROM mode JEDEC ID: cmd pushed before SER, 3 bytes received on demand
    bus.write(0x00, 4, 7 | 3 << 10)
    bus.write(0x04, 4, 2)
    bus.write(0x08, 4, 1)
    bus.write(0x60, 4, 0x9F)
    bus.write(0x10, 4, 1)
    assert bus.read(0x24, 4) == 3
    assert [bus.read(0x60, 4) for _ in range(3)] == list(flash.jedec_id)
    bus.write(0x10, 4, 0)
    bus.write(0x08, 4, 0)
    # TX-only: WREN, then page program of 36 FIFO entries (more than the FIFO depth)
    for frames in ([0x06], [0x02, 0, 0x10, 0] + list(range(32))):
        bus.write(0x00, 4, 7 | 1 << 10)
        bus.write(0x08, 4, 1)
        for f in frames:
            bus.write(0x60, 4, f)
        bus.write(0x10, 4, 1)
        assert bus.read(0x28, 4) & 0x05 == 0x04  # TFE, not busy
        bus.write(0x10, 4, 0)
        bus.write(0x08, 4, 0)
    assert flash.read(0x1000, 32) == bytes(range(32))


def test_spi3_frames_go_out_at_their_own_time_queued_or_not() -> None:
    """Frames queued before the slave is selected go out one after the other, each
    exchanged at the time its own transfer ends, exactly like frames written while
    selected (the queued ones take the batched path)."""

    class Recorder(NoDevice):
        def __init__(self) -> None:
            self.seen: list[tuple[bytes, float]] = []

        def exchange(self, tx: bytes, now: float) -> bytes:
            self.seen.append((tx, now))
            return bytes(b ^ 0xFF for b in tx)

    def run(queued: int) -> tuple[list[tuple[bytes, float]], list[int]]:
        device, stalls = Recorder(), []
        bus = Spi3(device, lambda: sum(stalls), lambda: 26e6, stalls.append, lambda t: None)
        bus.write(0x14, 4, 6)  # BAUDR
        bus.write(0x00, 4, 7)  # 8-bit frames, TX and RX
        bus.write(0x08, 4, 1)
        frames = [0x9F, 0x12, 0x34, 0x56, 0x78, 0x9A]
        for f in frames[:queued]:
            bus.write(0x60, 4, f)
        bus.write(0x10, 4, 1)
        for f in frames[queued:]:
            bus.write(0x60, 4, f)
        return device.seen, [bus.read(0x60, 4) for _ in frames]

    expected, t = [], 0.0
    for f in (0x9F, 0x12, 0x34, 0x56, 0x78, 0x9A):
        t += 8 * 6 / 26e6
        expected.append((bytes((f,)), t))
    for queued in (0, 3, 6):
        seen, rx = run(queued)
        assert seen == expected  # exact times: the same float sums either way
        assert rx == [0x60, 0xED, 0xCB, 0xA9, 0x87, 0x65]


def test_spi3_quad_read_costs_its_sclk_cycles() -> None:
    """0x6B quad output read: instruction and address on one line (8 + 24 cycles), 8
    wait cycles, then 2 cycles per byte on four lines; SCLK = 26 MHz / BAUDR 2."""
    flash = NorFlash(size=1 << 20, timing="instant")
    flash.data[0x100:0x140] = bytes(range(64))
    for command in (b"\x50", b"\x01\x00\x02"):  # volatile status write: QE
        flash.select(0.0)
        flash.exchange(command, 0.0)
        flash.deselect(0.0)
    assert flash.quad_enabled
    stalls: list[float] = []
    bus = Spi3(flash, lambda: 0.0, lambda: 26_000_000.0, stalls.append, lambda t: None)
    bus.write(0x14, 4, 2)  # BAUDR
    bus.write(0x00, 4, 31 | 2 << 10 | 2 << 22)  # 32-bit frames, RX only, quad
    bus.write(0xF4, 4, 8 << 11 | 2 << 8 | 6 << 2)  # wait 8, 8-bit inst, 24-bit addr
    bus.write(0x04, 4, 16 - 1)  # 16 frames = 64 bytes
    bus.write(0x08, 4, 1)
    bus.write(0x60, 4, 0x6B)
    bus.write(0x60, 4, 0x100)
    bus.write(0x10, 4, 1)
    words = [bus.read(0x60, 4) for _ in range(16)]
    assert b"".join(w.to_bytes(4, "big") for w in words) == bytes(range(64))
    assert sum(stalls) == pytest.approx((8 + 24 + 8 + 64 * 2) * 2 / 26e6)


def test_sha_engine_matches_hashlib() -> None:
    message = b"kflashpy virtual K210" * 7
    padded = (
        message + b"\x80" + bytes(-(len(message) + 9) % 64) + struct.pack(">Q", 8 * len(message))
    )
    sha = ShaEngine()
    sha.write(0x28, 4, len(padded) // 64)
    sha.write(0x2C, 4, 1 | 1 << 16)  # enable, memory byte order
    assert not sha.read(0x2C, 4) & 1
    for (word,) in struct.iter_unpack("<I", padded):
        sha.write(0x20, 4, word)
    assert sha.read(0x2C, 4) & 1
    digest = b"".join(sha.read(4 * (7 - i), 4).to_bytes(4, "little") for i in range(8))
    assert digest == hashlib.sha256(message).digest()


def test_wire_timing_and_garbage() -> None:
    w = Wire(seed=1)
    end = w.send(b"abcd", 0.0, 115200)
    assert end == pytest.approx(4 * 10 / 115200)
    assert w.receive(end / 2, 115200) == [(pytest.approx(2 * 10 / 115200), b"ab")]
    assert w.receive(end, 115200)[0][1] == b"cd"
    assert not baud_mismatch(115200, 115555) and baud_mismatch(115200, 1_500_000)
    w.send(b"hello" * 10, end, 115200)
    chunks = w.receive(1.0, 1_500_000)
    assert b"hello" not in b"".join(c for _, c in chunks)
    assert w.bytes_garbled > 50


def test_wire_delivers_a_byte_asked_for_at_its_exact_arrival_time() -> None:
    """A receiver woken at a byte's arrival time (``wfi`` jumps there) gets that byte.
    Here ``(until - t0) / dt`` rounds to just under 469 where ``t0 + 469 * dt`` equals
    ``until``: the receive loop used to take nothing and spin for ever (a wedged
    ``sim serve``)."""
    w = Wire()
    t0 = 80.50780226385478
    w.send(bytes(range(256)) * 4, t0, 1_500_000)
    first = w.receive(w.arrival_of(468), 1_500_000)  # bytes 0..467
    assert sum(len(c) for _, c in first) == 468
    until = w.arrival_of(1)
    assert int((until - t0) / (10 / 1_500_000) + 1e-9) == 468  # the rounding at issue
    got: list[list[tuple[float, bytes]]] = []
    worker = threading.Thread(target=lambda: got.append(w.receive(until, 1_500_000)), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "Wire.receive spins at a byte's exact arrival time"
    assert got == [[(until, bytes([468 % 256]))]]


def test_wire_arrival_times_in_one_pass() -> None:
    w = Wire()
    w.send(b"abcd", 0.0, 115200)
    w.send(b"ef", 1.0, 115200)  # a second segment after a gap
    w.receive(25 / 115200, 115200)  # "ab" delivered
    assert w.arrivals(3) == [w.arrival_of(k) for k in (1, 2, 3)]
    assert w.arrivals(3) == pytest.approx([30 / 115200, 40 / 115200, 1 + 10 / 115200])
    assert len(w.arrivals(10)) == 4 and w.arrivals(0) == []


def test_wire_inlined_arrival_times_are_the_segments_own() -> None:
    """``arrival_of``, ``arrivals`` and ``next_at`` after a receive compute arrival
    times inline (hot paths: every slice and wfi wake asks): the same sums as
    ``_Segment.arrival``, to the bit, across segments of different rates."""
    w = Wire()
    t0 = 80.50780226385478
    w.send(bytes(300), t0, 1_500_000)
    w.send(bytes(50), t0 + 1.0, 3_000_000)
    first, second = w._segments
    exact = [first.arrival(i) for i in range(300)] + [second.arrival(i) for i in range(50)]
    assert [w.arrival_of(k) for k in range(1, 351)] == exact
    assert w.arrivals(350) == exact
    w.receive(exact[122], 1_500_000)  # bytes 0..122 delivered
    assert w.next_at == exact[123]
    assert w.arrivals(5, skip=1) == exact[124:129]


def _status_poll(bus: Spi3) -> int:
    """One polled status read (05), as the flashers do it: EEPROM mode, one byte in."""
    bus.write(0x08, 4, 0)
    bus.write(0x00, 4, 7 | 3 << 10)
    bus.write(0x04, 4, 0)
    bus.write(0x08, 4, 1)
    bus.write(0x60, 4, 0x05)
    bus.write(0x10, 4, 1)
    value = bus.read(0x60, 4)
    bus.write(0x10, 4, 0)
    return value


@pytest.mark.parametrize("gap, skips", [(0.2e-6, True), (5e-6, False)])
def test_busy_polls_skip_ahead_only_back_to_back(gap: float, skips: bool) -> None:
    """Status reads that find the flash busy let the core jump to the end of the busy
    time only when nothing happens between them (a loop that only polls); a program that
    works between its polls (decoding while a page programs) runs as it would."""
    flash = NorFlash(size=1 << 20, timing="typical")
    clock = [0.0]
    skipped: list[float] = []

    def stall(seconds: float) -> None:
        clock[0] += seconds

    bus = Spi3(flash, lambda: clock[0], lambda: 48_750_000.0, stall, skipped.append)
    flash.select(0.0)
    flash.exchange(b"\x06", 0.0)
    flash.deselect(0.0)
    flash.select(0.0)
    flash.exchange(b"\x02\x00\x00\x00" + bytes(256), 0.0)
    flash.deselect(0.0)  # a page program: busy for ~0.67 ms
    for _ in range(6):
        assert _status_poll(bus) & 1
        clock[0] += gap
    assert bool(skipped) is skips
    if skips:
        assert skipped[0] == flash.busy_until
