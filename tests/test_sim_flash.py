"""SPI NOR flash model: command semantics a flasher relies on."""

from __future__ import annotations

import pytest

from kflashpy.errors import InputError
from kflashpy.sim.flash import PAGE_SIZE, FlashTiming, NorFlash

T = FlashTiming.profile("typical")


def cmd(flash: NorFlash, out: bytes, rx: int = 0, now: float = 0.0) -> bytes:
    """One CS-framed transaction: send ``out``, then clock ``rx`` bytes back."""
    flash.select(now)
    got = flash.exchange(out + b"\0" * rx, now)
    flash.deselect(now)
    assert len(got) == len(out) + rx
    return got[len(out) :]


def a24(address: int) -> bytes:
    return address.to_bytes(3, "big")


def sr1(flash: NorFlash, now: float) -> int:
    return cmd(flash, b"\x05", 1, now)[0]


def program(flash: NorFlash, address: int, data: bytes, now: float = 0.0) -> float:
    cmd(flash, b"\x06", now=now)
    cmd(flash, b"\x02" + a24(address) + data, now=now)
    return flash.busy_until


def erase(flash: NorFlash, op: int, address: int, now: float = 0.0) -> float:
    cmd(flash, b"\x06", now=now)
    cmd(flash, bytes((op,)) + a24(address), now=now)
    return flash.busy_until


@pytest.fixture
def flash() -> NorFlash:
    return NorFlash(size=1 << 20, timing="typical")


def test_ids_per_chip() -> None:
    w = NorFlash(chip="w25q128")
    g = NorFlash(chip="gd25lq128", size=8 << 20)
    assert cmd(w, b"\x9f", 3) == bytes.fromhex("ef4018")
    assert cmd(g, b"\x9f", 3) == bytes.fromhex("c86017")
    assert cmd(w, b"\x90" + a24(0), 4) == bytes.fromhex("ef17ef17")
    assert cmd(w, b"\x90" + a24(1), 2) == bytes.fromhex("17ef")
    assert cmd(g, b"\xab" + a24(0), 1) == b"\x16"
    uid = cmd(w, b"\x4b" + b"\0" * 4, 8)
    assert uid == w.unique_id and len(set(uid)) > 1
    assert NorFlash(unique_id=b"12345678").unique_id == b"12345678"


def test_read_wraps_and_splits_anywhere(flash: NorFlash) -> None:
    flash.preload(0, b"head")
    flash.preload(flash.size - 3, b"end")
    flash.select(0)
    got = b"".join(
        flash.exchange(bytes((b,)), 0) for b in b"\x03" + a24(flash.size - 3) + b"\0" * 7
    )
    flash.deselect(0)
    assert got[4:] == b"endhead"
    assert cmd(flash, b"\x0b" + a24(0) + b"\0", 4) == b"head"  # fast read: one dummy byte
    assert flash.stats.reads == 2 and flash.stats.bytes_read == 11


def test_transactions_split_anywhere_do_the_same() -> None:
    """A master that sends a transaction one byte per ``exchange`` (as SPI3 does for the
    kflash stub, whose data bytes take the data-phase shortcut) gets the same answers
    and leaves the chip in the same state as one that sends it in one piece."""
    data = bytes((i * 37 + 5) & 0xFF for i in range(300))
    script = [
        (b"\x9f\0\0\0", 0.0),
        (b"\x06", 0.0),
        (b"\x02" + a24(0x1F0) + data, 0.0),  # wraps in its page, keeps the last 256
        (b"\x05\0\0", 1e-4),  # busy
        (b"\x06", 2e-4),  # ignored while busy
        (b"\x03" + a24(0x1F0) + b"\0" * 40, 2e-4),  # refused while busy
        (b"\x05\0", 1.0),
        (b"\x0b" + a24(0x100) + b"\0" * 300, 1.0),
        (b"\x4b" + b"\0" * 12, 1.0),
        (b"\x77\1\2", 1.0),  # unknown
    ]
    whole, split = NorFlash(size=1 << 20), NorFlash(size=1 << 20)
    for out, now in script:
        for chip in (whole, split):
            chip.select(now)
        got_whole = whole.exchange(out, now)
        got_split = b"".join(split.exchange(out[i : i + 1], now) for i in range(len(out)))
        for chip in (whole, split):
            chip.deselect(now)
        assert got_split == got_whole, out[:1].hex()
    assert whole.read(0, 0x400) == split.read(0, 0x400) != b"\xff" * 0x400
    assert whole.stats == split.stats and whole.busy_until == split.busy_until


def test_program_needs_wel_and_only_clears_bits(flash: NorFlash) -> None:
    cmd(flash, b"\x02" + a24(0x100) + b"\x00")  # no WREN: ignored
    assert flash.read(0x100, 1) == b"\xff" and flash.stats.ignored == 1
    end = program(flash, 0x100, b"\xf0\x0f")
    assert end == pytest.approx(T.byte_program_first + T.byte_program_next)
    assert sr1(flash, 0) & 0x03 == 0x03  # BUSY and WEL during the program
    assert sr1(flash, end) == 0  # both clear when it completes
    program(flash, 0x100, b"\x3c\x3c", now=end)
    assert flash.read(0x100, 2) == b"\x30\x0c"  # AND of both writes, never sets a bit


def test_commands_ignored_while_busy(flash: NorFlash) -> None:
    end = erase(flash, 0x20, 0)
    cmd(flash, b"\x06", now=end / 2)
    cmd(flash, b"\x02" + a24(0) + b"\x00", now=end / 2)
    assert cmd(flash, b"\x9f", 3, now=end / 2) == b"\xff\xff\xff"
    assert flash.read(0, 1) == b"\xff"
    assert sr1(flash, end) == 0
    assert cmd(flash, b"\x9f", 3, now=end)[0] == 0xEF


def test_page_program_wraps_in_page_and_keeps_last_256(flash: NorFlash) -> None:
    program(flash, 0x2FE, b"\x01\x02\x03\x04")
    assert flash.read(0x2FE, 2) == b"\x01\x02"
    assert flash.read(0x200, 2) == b"\x03\x04"
    assert flash.read(0x300, 1) == b"\xff"
    data = bytes(range(256)) + b"\xaa\xbb"  # 258 bytes from column 0: first two are dropped
    end = program(flash, 0x400, data, now=1.0)
    assert end - 1.0 == pytest.approx(T.program_time(256)) and T.program_time(300) <= T.page_program
    page = flash.read(0x400, PAGE_SIZE)
    assert page[2:] == bytes(range(2, 256)) and page[:2] == b"\xaa\xbb"


@pytest.mark.parametrize(
    ("op", "size", "seconds"),
    [(0x20, 4096, T.sector_erase), (0x52, 32768, T.block32_erase), (0xD8, 65536, T.block64_erase)],
)
def test_erase_sizes_align_down(flash: NorFlash, op: int, size: int, seconds: float) -> None:
    flash.preload(0, b"\0" * (2 * size))
    end = erase(flash, op, size + 123)
    assert end == pytest.approx(seconds)
    assert flash.read(0, size) == b"\0" * size
    assert flash.read(size, size) == b"\xff" * size
    assert flash.stats.erases == 1 and flash.stats.bytes_erased == size


def test_erase_needs_exact_framing(flash: NorFlash) -> None:
    flash.preload(0, b"\0" * 16)
    cmd(flash, b"\x06")
    cmd(flash, b"\x20" + a24(0) + b"\x00")  # one byte too many: not executed
    cmd(flash, b"\x20\x00")  # address incomplete
    assert flash.read(0, 16) == b"\0" * 16 and flash.stats.ignored == 2


def test_chip_erase_and_worst_case_timing() -> None:
    flash = NorFlash(size=1 << 16, timing="worst")
    flash.preload(0, b"\x12" * 100)
    cmd(flash, b"\x06")
    cmd(flash, b"\xc7\x00")  # chip erase takes no address: not executed
    assert flash.read(0, 1) == b"\x12"
    cmd(flash, b"\xc7")
    assert flash.busy_until == pytest.approx(200.0)
    assert flash.read(0, 100) == b"\xff" * 100
    assert NorFlash(size=1 << 16, timing="instant").timing.chip_erase == 0


def test_status_write_sets_qe_and_protection(flash: NorFlash) -> None:
    cmd(flash, b"\x31\x02")  # no WEL: ignored
    assert not flash.quad_enabled
    cmd(flash, b"\x06")
    cmd(flash, b"\x31\x02")
    assert flash.busy(0) and flash.busy_until == pytest.approx(T.write_status)
    assert flash.quad_enabled and cmd(flash, b"\x35", 1, now=1)[0] == 0x02
    # SR1 + SR2 in one 0x01 command; BP=111 locks everything
    cmd(flash, b"\x06", now=1)
    cmd(flash, b"\x01\x1c\x02", now=1)
    assert flash.protected_range() == (0, flash.size)
    erase(flash, 0x20, 0, now=2)
    program(flash, 0, b"\x00", now=2)
    assert flash.read(0, 1) == b"\xff"
    # volatile write after 0x50 needs no WEL and is lost at reset
    cmd(flash, b"\x50", now=2)
    cmd(flash, b"\x01\x00\x02", now=2)
    assert flash.protected_range() == (0, 0) and not flash.busy(2)
    cmd(flash, b"\x66", now=2)
    cmd(flash, b"\x99", now=2)
    assert flash.protected_range() == (0, flash.size)


@pytest.mark.parametrize(
    ("sr1", "sr2", "expected"),
    [
        (0x04, 0x00, ((1 << 20) - (1 << 14), 1 << 20)),  # BP=001: upper 1/64
        (0x24, 0x00, (0, 1 << 14)),  # TB: lower
        (0x48, 0x00, ((1 << 20) - 8192, 1 << 20)),  # SEC, BP=010: upper 8 KiB
        (0x04, 0x40, (0, (1 << 20) - (1 << 14))),  # CMP inverts
        (0x00, 0x40, (0, 1 << 20)),
    ],
)
def test_block_protect_table(flash: NorFlash, sr1: int, sr2: int, expected: tuple) -> None:
    cmd(flash, b"\x50")
    cmd(flash, bytes((0x01, sr1, sr2)))
    assert flash.protected_range() == expected


def test_power_down_and_release(flash: NorFlash) -> None:
    cmd(flash, b"\xb9")
    assert cmd(flash, b"\x9f", 3) == b"\xff\xff\xff"
    assert cmd(flash, b"\xab" + a24(0), 1) == b"\x13"
    assert cmd(flash, b"\x9f", 3) == bytes.fromhex("ef4014")


def test_unknown_opcode_and_deselected_bus(flash: NorFlash) -> None:
    assert cmd(flash, b"\x5a" + a24(0), 2) == b"\xff\xff"
    assert flash.stats.unknown == 1
    assert flash.exchange(b"\x9f\x00", 0) == b"\xff\xff"


def test_quad_program_and_reads_need_qe(flash: NorFlash) -> None:
    assert flash.enhanced(0x6B, 0, 24, 8, b"", 2, 4, 0) == b"\xff\xff"
    assert flash.stats.ignored == 1
    cmd(flash, b"\x50")
    cmd(flash, b"\x31\x02")
    cmd(flash, b"\x06")
    flash.enhanced(0x32, 0x10, 24, 0, b"quad", 0, 4, 0)
    assert flash.read(0x10, 4) == b"quad"
    now = flash.busy_until
    assert flash.enhanced(0x6B, 0x10, 24, 8, b"", 4, 4, now) == b"quad"
    assert flash.enhanced(0x3B, 0x10, 24, 8, b"", 4, 2, now) == b"quad"
    # 0xEB with the mode byte in the address field, 4 dummy clocks
    assert flash.enhanced(0xEB, 0x10 << 8, 32, 4, b"", 4, 4, now) == b"quad"
    assert not flash.continuous_read
    assert flash.enhanced(0xEB, (0x10 << 8) | 0x20, 32, 4, b"", 1, 4, now) == b"q"
    assert flash.continuous_read
    assert flash.enhanced(None, 0x11 << 8 | 0x20, 32, 4, b"", 1, 4, now) == b"u"
    cmd(flash, b"\xff\xff", now=now)
    assert not flash.continuous_read
    # two dummy clocks too many on 4 lines: the host misses one byte
    assert flash.enhanced(0x6B, 0x10, 24, 10, b"", 3, 4, now) == b"uad"
    # two too few: the host first sees one undriven byte
    assert flash.enhanced(0x6B, 0x10, 24, 6, b"", 3, 4, now) == b"\xffqu"
    # standard commands may also come through the enhanced path
    assert flash.enhanced(0x03, 0x10, 24, 0, b"", 4, 1, now) == b"quad"


def test_power_cut_mid_program_is_half_done(flash: NorFlash) -> None:
    data = b"\x00" * 200
    end = program(flash, 0x1000, data)
    info = flash.power_cut(end / 2)
    assert info["interrupted"] == "program" and 0.4 < info["done"] < 0.6
    got = flash.read(0x1000, 200)
    zeros = got.count(0)
    assert 90 <= zeros <= 110 and got[:90] == b"\0" * 90 and got[110:] == b"\xff" * 90
    assert sr1(flash, end) == 0  # power-up state: not busy, no WEL
    # deterministic: same cut, same result
    again = NorFlash(size=1 << 20)
    program(again, 0x1000, data)
    again.power_cut(end / 2)
    assert again.read(0x1000, 200) == got


def test_program_wrapping_inside_its_page_and_cut_mid_wrap(flash: NorFlash) -> None:
    """Data past the page's end wraps to its start, in a completed program and in one a
    power cut leaves half done: the bytes reached first (from the column on) are
    programmed, those after the byte in progress are not."""
    data = bytes(range(0x20, 0x40))  # 32 bytes from column 0xF0: 16 wrap to 0x1000
    end = program(flash, 0x10F0, data)
    assert flash.read(0x10F0, 16) == data[:16] and flash.read(0x1000, 16) == data[16:]
    assert flash.read(0x1010, 0xE0) == b"\xff" * 0xE0
    cut = NorFlash(size=1 << 20, timing="typical")
    program(cut, 0x10F0, data)
    cut.power_cut(end * 0.75)  # 24 of 32 bytes reached (8 after the wrap)
    assert cut.read(0x10F0, 16) == data[:16] and cut.read(0x1000, 8) == data[16:24]
    assert cut.read(0x1009, 0xE7) == b"\xff" * 0xE7  # (0x1008: the byte in progress)


def test_power_cut_mid_erase_and_when_idle(flash: NorFlash) -> None:
    flash.preload(0, b"\x00" * 4096)
    end = erase(flash, 0x20, 0)
    flash.power_cut(end * 0.3)
    got = flash.read(0, 4096)
    erased = got.count(0xFF)
    assert 0.2 * 4096 < erased < 0.5 * 4096  # ~30 % fully erased plus weak bytes
    assert got != b"\x00" * 4096
    assert flash.power_cut(10.0) == {"interrupted": None, "time": 10.0}


def test_power_cut_mid_status_write_keeps_old_value(flash: NorFlash) -> None:
    cmd(flash, b"\x06")
    cmd(flash, b"\x31\x02")
    flash.power_cut(T.write_status / 2)
    assert not flash.quad_enabled


def test_file_backing_created_erased_and_kept(tmp_path) -> None:
    path = tmp_path / "board.img"
    with NorFlash(size=1 << 16, backing=path, timing="instant") as flash:
        assert flash.created
        program(flash, 0, b"kept")
    assert path.stat().st_size == 1 << 16
    raw = path.read_bytes()
    assert raw[:4] == b"kept" and raw[4:] == b"\xff" * ((1 << 16) - 4)
    with NorFlash(size=1 << 16, backing=path) as again:
        assert not again.created and again.read(0, 4) == b"kept"
    with pytest.raises(InputError, match="board.img is 65536 bytes"):
        NorFlash(size=1 << 20, backing=path)


@pytest.mark.parametrize("kwargs", [{"size": 3 << 20}, {"chip": "mx25"}, {"timing": "slow"}])
def test_bad_configuration(kwargs: dict) -> None:
    with pytest.raises(InputError):
        NorFlash(**kwargs)


def test_host_side_bounds(flash: NorFlash) -> None:
    with pytest.raises(InputError):
        flash.read(flash.size - 1, 2)
    with pytest.raises(InputError):
        flash.preload(flash.size, b"x")
