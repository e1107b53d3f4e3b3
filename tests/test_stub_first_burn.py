"""A first burn with kflashpy's flasher at the floor (docs/flasher-protocol.md): frames
packed against the frame before them (BC), writes over sectors a hash list found erased,
page programs that go out as soon as the chip is done, and the start of a burn (frames
ahead, the bytes past the region checked in the same request). On the virtual K210.
"""

from __future__ import annotations

import bisect
import hashlib
import random
import statistics
import struct

import pytest

from kflashpy.isp.burn import WriteRegion, burn_on
from kflashpy.isp.connect import connect
from kflashpy.isp.kfpy_stage2 import (
    NO_DICTIONARY,
    KfpyOp,
    _Frame,
    _minus,
    _payload,
)
from kflashpy.sim import flash as flash_model
from kflashpy.sim.periph import Clint

SIM = "sim://?board=maix-bit"


def _code_like(n: int, seed: int) -> bytes:
    """Like firmware: words from a small vocabulary, so later frames repeat earlier ones."""
    rng = random.Random(seed)
    vocab = [rng.randbytes(4) for _ in range(512)]
    return b"".join(rng.choices(vocab, [1 / (k + 1) for k in range(512)], k=n // 4))


@pytest.fixture(scope="module")
def dev():
    with connect(SIM, board="maix-bit", baud=1500000, stub="kflashpy") as d:
        yield d


def _send(dev, frame: _Frame):
    dev.stage2.link.send_packet(frame.packet)
    resp = dev.stage2.link.recv(KfpyOp.WRITE, 5.0, extra_len=None)
    return resp.status, _payload(resp)


def test_a_frame_packed_against_the_one_before_it_is_written(dev):
    """The board keeps the tail of the last frame it decoded; a BC frame naming it
    decodes against it and lands as sent."""
    data = _code_like(0x20000, 1)
    first, second = _Frame(0x500000, data[:0x10000]), None
    second = _Frame(0x510000, data[0x10000:], first.tail())
    assert second.dictionary and second.packet[0] == KfpyOp.WRITE_DEFLATE_DICT
    assert len(second.packet) < len(_Frame(0x510000, data[0x10000:]).packet)
    for frame in (first, second):
        status, p = _send(dev, frame)
        assert status == 0xE0 and p[8:40] == hashlib.sha256(frame.chunk).digest()
    assert bytes(dev.port.sim_board.flash.data[0x500000:0x520000]) == data


@pytest.mark.parametrize("wrong", ["end", "bytes", "longer"])
def test_a_frame_whose_dictionary_the_board_does_not_hold_is_refused(dev, wrong):
    """Another end address, other bytes (a stale frame of the same range) or more bytes
    than the board kept: E9, nothing written; the same frame on its own then goes in."""
    data = _code_like(0x9000, 2)
    at = 0x600000 + 0x20000 * ["end", "bytes", "longer"].index(wrong)
    first = _Frame(at, data[:0x1000])
    assert _send(dev, first)[0] == 0xE0
    end, tail = first.tail()
    prior = {
        "end": (end + 0x1000, tail),
        "bytes": (end, tail[:-1] + bytes([tail[-1] ^ 1])),
        "longer": (end, bytes(0x100) + tail),
    }[wrong]
    second = _Frame(at + 0x1000, data[0x1000:], prior)
    assert second.dictionary
    status, p = _send(dev, second)
    assert status == NO_DICTIONARY and struct.unpack_from("<II", p) == (at + 0x1000, 0x8000)
    assert bytes(dev.port.sim_board.flash.data[at + 0x1000 : at + 0x2000]) == b"\xff" * 0x1000
    assert _send(dev, second.alone())[0] == 0xE0 and not second.dictionary
    assert bytes(dev.port.sim_board.flash.data[at : at + len(data)]) == data


def test_a_lost_frame_is_sent_again_on_its_own_and_the_chain_goes_on(dev, monkeypatch):
    """A frame damaged on the way (E2) is sent again without a dictionary; the frame
    packed against it meanwhile is refused (E9) and sent again on its own; the frames
    after them are packed against the frames before them again."""
    s2, link = dev.stage2, dev.stage2.link
    data = _code_like(0x60000, 3)
    sent, seen = [], []
    real = link.send_packet

    def damaging(packet: bytes) -> None:
        sent.append(packet[0])
        if packet[0] == KfpyOp.WRITE_DEFLATE_DICT and sent.count(packet[0]) == 2:
            packet = packet[:-1] + bytes([packet[-1] ^ 0xFF])  # its CRC fails on the board
        real(packet)

    monkeypatch.setattr(link, "send_packet", damaging)
    link.trace = lambda way, frame: seen.append(frame[1]) if way == "rx" else None
    try:
        s2.write(0x700000, data)
    finally:
        link.trace = None
    assert 0xE2 in seen and NO_DICTIONARY in seen
    assert sent.count(KfpyOp.WRITE_DEFLATE_DICT) >= 4  # and BC frames again after that
    assert bytes(dev.port.sim_board.flash.data[0x700000:0x760000]) == data


def test_a_burn_packs_frames_against_each_other(tmp_path):
    """A whole burn of code-like data: its frames after the first go as BC."""
    data = _code_like(0x48000, 4)
    img = tmp_path / "board.img"
    img.write_bytes(b"\xff" * (16 << 20))
    with connect(f"{SIM}&flash={img}", board="maix-bit", baud=3000000, stub="kflashpy") as d:
        ops: list[int] = []
        d.stage2.link.trace = lambda way, frame: ops.append(frame[0]) if way == "tx" else None
        result = burn_on(d, [WriteRegion(0x300000, data, "app")], reboot=False)
    assert result.regions[0].verified == "sha256"
    assert ops.count(KfpyOp.WRITE_DEFLATE_DICT) >= 6
    assert img.read_bytes()[0x300000 : 0x300000 + len(data)] == data


def test_a_write_over_sectors_found_erased_reads_them_only_back(dev):
    """Sectors a hash list read erased are merged without reading them again: the write
    reads each page once, to check it; elsewhere it reads them first too."""
    s2, stats = dev.stage2, dev.port.sim_board.flash.stats
    data = _code_like(0x10000, 5)
    s2.write(0x800000, data)  # quad reads and programs are checked by now
    for at, listed in ((0x810000, True), (0x820000, False)):
        if listed:
            s2.hash_list(at, 0x10000)
        before = stats.bytes_read
        s2.write(at, data)
        read = stats.bytes_read - before
        assert read < 0x11000 if listed else read >= 0x20000
        assert bytes(dev.port.sim_board.flash.data[at : at + 0x10000]) == data


def test_quad_reads_that_read_erased_do_not_skip_the_merge(tmp_path, monkeypatch):
    """Quad reads that always return FF (a chip whose quad mode does not work) make old
    data look erased to the blank check: the board still reads it on one line before
    writing, so the burn erases what it must and every byte is right."""
    real = flash_model.NorFlash.enhanced

    def blind(self, inst, addr, addr_bits, wait, tx, rx_len, lines, now):
        rx = real(self, inst, addr, addr_bits, wait, tx, rx_len, lines, now)
        return b"\xff" * len(rx) if lines == 4 and rx else rx

    monkeypatch.setattr(flash_model.NorFlash, "enhanced", blind)
    old = random.Random(6).randbytes(0x30000)
    image = bytearray(b"\xff" * (16 << 20))
    image[0x300000:0x330000] = old
    img = tmp_path / "board.img"
    img.write_bytes(bytes(image))
    data = _code_like(0x28000, 6)
    with connect(f"{SIM}&flash={img}", board="maix-bit", baud=3000000, stub="kflashpy") as d:
        burn_on(d, [WriteRegion(0x300000, data, "app")], reboot=False)
    assert img.read_bytes()[0x300000:0x330000] == data + old[len(data) :]


@pytest.mark.parametrize("page_s", [0.4e-3, 0.7e-3, 1.2e-3])
def test_pages_go_out_as_soon_as_the_chip_is_done(tmp_path, monkeypatch, page_s):
    """The background programmer learns the chip's page time: on a faster or a slower
    chip than the datasheet's typical one, the next page still goes out right after the
    last one is done (its read-back and the next program: ~30 us), not at a fixed time.
    It learns it closely enough to read most pages' status once, at their end (four
    status reads a page before, about 28 mtime reads: every one a device access the
    virtual board pays for)."""
    typical = flash_model.TIMING_PROFILES["typical"]
    step = (page_s - typical.byte_program_first) / 255
    monkeypatch.setitem(
        flash_model.TIMING_PROFILES,
        "typical",
        flash_model.FlashTiming(
            typical.write_status,
            page_s,
            typical.byte_program_first,
            step,
            typical.sector_erase,
            typical.block32_erase,
            typical.block64_erase,
            typical.chip_erase,
        ),
    )
    programs: list[tuple[float, float]] = []
    status_reads: list[float] = []
    real, status = flash_model.NorFlash._program, flash_model.NorFlash.status_register

    def timed(self, address, body, clocked, now):
        real(self, address, body, clocked, now)
        programs.append((now, self.busy_until))

    def status_read(self, index, now):
        if index == 0:
            status_reads.append(now)
        return status(self, index, now)

    mtime = 0
    clint_read = Clint.read

    def clint_counted(self, offset, size):
        nonlocal mtime
        mtime += offset == Clint.MTIME
        return clint_read(self, offset, size)

    monkeypatch.setattr(flash_model.NorFlash, "_program", timed)
    monkeypatch.setattr(flash_model.NorFlash, "status_register", status_read)
    monkeypatch.setattr(Clint, "read", clint_counted)  # before the core binds it
    img = tmp_path / "board.img"
    img.write_bytes(b"\xff" * (16 << 20))
    data = _code_like(0x40000, 7)
    with connect(f"{SIM}&flash={img}", board="maix-bit", baud=3000000, stub="kflashpy") as d:
        status_reads.clear()
        mtime = 0
        burn_on(d, [WriteRegion(0x300000, data, "app")], reboot=False)
    assert img.read_bytes()[0x300000 : 0x300000 + len(data)] == data
    gaps = [b[0] - a[1] for a, b in zip(programs, programs[1:], strict=False)]
    assert statistics.median(gaps) < 40e-6
    # the first block goes page by page (quad programs checked first), the others in
    # the background: status reads from the start of one page program to the next
    starts = [start for start, _ in programs]
    reads = [
        bisect.bisect_left(status_reads, b) - bisect.bisect_left(status_reads, a)
        for a, b in zip(starts, starts[1:], strict=False)
    ]
    background = reads[len(reads) // 4 :]
    assert statistics.median(background) == 1
    # about 1.06 (1.2 without the hold after a page caught busy, 2.4-3.0 with early reads)
    assert sum(background) < 1.12 * len(background)
    assert mtime < 14 * len(programs)  # 10 (20 with a clock check at every link poll)


def test_the_bytes_past_a_region_are_checked_with_it(tmp_path):
    """The blank check of a region runs on to the end of its last erase unit: on a blank
    chip the burn asks for no other hash list; data just past the end is kept."""
    data = _code_like(0x2F000, 8)[:-100]  # ends inside a sector
    for tail in (b"", b"keep me"):
        image = bytearray(b"\xff" * (16 << 20))
        end = 0x300000 + len(data)
        image[end + 0x20 : end + 0x20 + len(tail)] = tail
        img = tmp_path / "board.img"
        img.write_bytes(bytes(image))
        with connect(f"{SIM}&flash={img}", board="maix-bit", baud=3000000, stub="kflashpy") as d:
            ops: list[int] = []
            d.stage2.link.trace = lambda way, f, ops=ops: ops.append(f[0]) if way == "tx" else 0
            burn_on(d, [WriteRegion(0x300000, data, "app")], reboot=False)
        flash = img.read_bytes()
        assert flash[0x300000:end] == data
        assert flash[end : end + 0x100] == bytes(image[end : end + 0x100])
        if not tail:
            assert ops.count(KfpyOp.HASH_LIST) == 2  # the first sectors, then the rest


def test_frames_already_sent_are_cut_out_of_the_write():
    cuts = [(0, 0x1000), (0x1000, 0x1000), (0x2000, 0x2000), (0x4000, 0x3000), (0x7000, 0x9000)]
    taken = [(0, 0x1000), (0x1000, 0x4000), (0x4000, 0xC000)]
    assert _minus(cuts, taken) == [(0xC000, 0x4000)]
    assert _minus(cuts, []) == cuts
    assert _minus([(0, 0x10000)], [(0x4000, 0x8000)]) == [(0, 0x4000), (0x8000, 0x8000)]
