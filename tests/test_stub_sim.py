"""kflashpy's flasher on the virtual K210 (sim://), through the real ROM upload path.

Nothing is mocked: the mask ROM takes the bootstrap, the bootstrap loads the flasher at
the transfer baud rate, and the emulated core runs both binaries against the UART3,
SPI3 and NOR flash models. Assertions read the virtual flash.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import os
import random
import zlib

import pytest
from support.paths import KMODELS

from kflashpy.cli import main
from kflashpy.errors import InputError, ProtocolError
from kflashpy.isp.burn import WriteRegion, burn_on
from kflashpy.isp.connect import connect
from kflashpy.isp.kfpy_stage2 import KfpyStage2
from kflashpy.sim.dmac import Channel
from kflashpy.sim.periph import Clint
from kflashpy.sim.uarts import DwUart
from kflashpy.stub import load

SIM = "sim://?board=maix-bit"


def _mixed(n: int, seed: int) -> bytes:
    """Half random, half compressible: exercises raw and deflate frames."""
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < n:
        out += rng.randbytes(3000) if rng.random() < 0.5 else bytes([rng.randrange(4)]) * 5000
    return bytes(out[:n])


@pytest.fixture(scope="module")
def dev():
    with connect(SIM, board="maix-bit", baud=1500000, stub="kflashpy") as d:
        yield d


def test_connect_identifies_flasher_and_chip(dev):
    s2 = dev.stage2
    assert isinstance(s2, KfpyStage2)
    info = s2.info
    assert info.jedec_id == 0xEF4018 and info.flash_size == 16 << 20
    assert info.cpu_hz == 390_000_000 and info.apb0_hz == 195_000_000
    # 195 MHz / 1.5 Mbaud = 130: the UART divisor is exact, the board agrees
    assert s2.actual_baud == 1_500_000 == dev.port.sim_board.board_baud()
    assert info.link_base == load().flasher.load_address
    # a board that answers at wire speed gets the timeouts as they are
    assert 1.0 <= s2.slowness < 1.5


def test_idle_flasher_sleeps_in_wfi_and_wakes_for_a_frame(dev):
    """With nothing to do the flasher sleeps in wfi (mstatus.MIE = 0, no trap taken):
    a virtual second costs a handful of instructions, not a poll every few us, and the
    next frame still wakes it (the UART's trigger level, then its character timeout)."""
    board = dev.port.sim_board
    core = board.core
    before = board.status()["core"]
    board.run_for(1.0)
    after = board.status()["core"]
    assert after["instructions"] - before["instructions"] < 1000
    assert core.uarts["uart3"].trigger == 8  # FCR: half the FIFO
    assert dev.stage2.sha256(0, 4096) == hashlib.sha256(board.flash.read(0, 4096)).digest()
    board.run_for(0.01)
    woken = board.status()["core"]
    assert woken["traps"] == 0 and woken["idle_skips"] > after["idle_skips"]  # asleep again


def test_unaligned_write_keeps_neighbours_and_reads_back(dev):
    board, s2 = dev.port.sim_board, dev.stage2
    before = os.urandom(0x30000)
    board.flash.data[0x10000:0x40000] = before  # old content around the write
    data = _mixed(70000, 1)
    at = 0x11234
    s2.write(at, data)
    flash = board.flash.read(0x10000, 0x30000)
    assert flash[at - 0x10000 : at - 0x10000 + len(data)] == data
    assert flash[: at - 0x10000] == before[: at - 0x10000]
    assert flash[at - 0x10000 + len(data) :] == before[at - 0x10000 + len(data) :]
    assert s2.read(at, len(data)) == data
    assert s2.sha256(at, len(data)) == hashlib.sha256(data).digest()


def test_whole_blocks_over_old_data_are_block_erased(dev):
    """Compressed whole-block frames over old content: one 64 KiB erase per block
    (started while the frame is decoded), the data programmed, nothing else touched."""
    board, s2 = dev.port.sim_board, dev.stage2
    board.flash.data[0x400000:0x430000] = random.Random(5).randbytes(0x30000)
    after = bytes(board.flash.data[0x420000:0x430000])
    data = _mixed(0x20000, 6)
    erased = board.flash.stats.bytes_erased
    erases = board.flash.stats.erases
    s2.write(0x400000, data)
    assert board.flash.read(0x400000, len(data)) == data
    assert board.flash.read(0x420000, 0x10000) == after
    assert board.flash.stats.erases - erases == 2
    assert board.flash.stats.bytes_erased - erased == 0x20000


@pytest.mark.parametrize(
    ("start", "size", "sector_erases"),
    [
        (0x501000, 3 * 4096, 3),  # three sectors: cheaper than a block erase
        (0x511000, 14 * 4096 + 100, 0),  # most of the block: erased whole, rest kept
    ],
)
def test_partial_block_picks_the_cheaper_erase(dev, start, size, sector_erases):
    board, s2 = dev.port.sim_board, dev.stage2
    base = start & ~0xFFFF
    old = random.Random(start).randbytes(0x10000)
    board.flash.data[base : base + 0x10000] = old
    data = random.Random(size).randbytes(size)
    erases, erased = board.flash.stats.erases, board.flash.stats.bytes_erased
    s2.write(start, data)
    expect = bytearray(old)
    expect[start - base : start - base + size] = data
    assert board.flash.read(base, 0x10000) == expect
    n, nbytes = board.flash.stats.erases - erases, board.flash.stats.bytes_erased - erased
    if sector_erases:
        assert (n, nbytes) == (sector_erases, sector_erases * 4096)
    else:
        assert (n, nbytes) == (1, 0x10000)


def test_link_is_served_fast_enough_at_3_mbaud():
    """At 3 Mbaud the UART's 16-byte FIFO fills in 53 us: every long loop of the flasher
    (SPI transfers, decoding, hashing, erase and program waits) must poll it. Frames
    keep arriving while earlier ones are written; no received byte may be lost."""
    with connect(SIM, board="maix-bit", baud=3000000, stub="kflashpy") as d:
        board, s2 = d.port.sim_board, d.stage2
        board.flash.data[0x600000:0x640000] = random.Random(9).randbytes(0x40000)
        s2.write(0x600000, _mixed(0x30000, 10))  # deflate and raw frames over old data
        s2.write(0x700000, _mixed(0x20000, 11))  # blank flash: no erases
        s2.write(0x631234, random.Random(12).randbytes(0x5000))  # partial blocks
        # a model over blank flash: 32 KiB frames, each decoded while the one before
        # programs in the background (a page checked and the next sent take ~30 us of
        # the 53); this one lost a byte before the flasher emptied the FIFO after them
        model = (KMODELS / "v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel").read_bytes()
        part = model[0xA0000:0xC8000]
        s2.write(0x3A0000, part, blank=[(0, len(part))])
        assert board.flash.read(0x3A0000, len(part)) == part
        assert s2.read(0x600000, 0x20000) == board.flash.read(0x600000, 0x20000)
        assert board.core.uarts["uart3"].overruns == 0
        assert d.link.stats.retries == 0


def test_rewrite_sends_only_changed_sectors(dev):
    """The pipeline decides from the hash list; the client sends the pieces it is given."""
    from kflashpy.isp.burn import WriteRegion, write_regions

    board = dev.port.sim_board
    data = bytearray(_mixed(0x10000, 2))
    write_regions(dev, [WriteRegion(0x80000, bytes(data), "d")], skip_unchanged=False)
    programs = board.flash.stats.programs
    frames = dev.link.stats.frames_out
    # unchanged: hash list and verify only, nothing programmed
    write_regions(dev, [WriteRegion(0x80000, bytes(data), "d")], skip_unchanged=False)
    assert board.flash.stats.programs == programs
    assert dev.link.stats.frames_out - frames <= 3
    data[0x5000:0x5010] = b"changed content!"
    write_regions(dev, [WriteRegion(0x80000, bytes(data), "d")])
    assert board.flash.read(0x80000, len(data)) == data
    assert board.flash.stats.programs - programs <= 16  # one sector's pages at most


def test_erase_region_and_bad_ranges(dev):
    board, s2 = dev.port.sim_board, dev.stage2
    board.flash.data[0x200000:0x212000] = b"\x00" * 0x12000
    s2.erase(0x200000, 0x11000)
    assert board.flash.read(0x200000, 0x11000) == b"\xff" * 0x11000
    assert board.flash.read(0x211000, 0x1000) == b"\x00" * 0x1000
    with pytest.raises(InputError):
        s2.erase(0x200100, 0x1000)
    with pytest.raises(ProtocolError, match="refused"):
        s2.read((16 << 20) - 16, 32)


def test_sram_write_and_exec_runs_a_program(dev):
    """Load the bootstrap through the flasher and start it: it answers at the same rate."""
    s2 = dev.stage2
    boot = load().boot
    s2.sram_write(boot.load_address, boot.with_param(1500000))
    s2.execute(boot.entry)
    s2.greet()
    # the bootstrap knows SRAM_WRITE/EXEC only: bring the flasher back the same way
    s2._running = False
    s2._ensure_flasher()
    s2.flash_init()
    assert s2.read(0x11234, 16) == dev.port.sim_board.flash.read(0x11234, 16)


def test_burn_pipeline_verifies_and_skips_unchanged(tmp_path):
    model = (KMODELS / "v3" / "mnist_maixpy-scripts.kmodel").read_bytes()[:72000]
    img = tmp_path / "board.img"
    img.write_bytes(b"\xff" * (16 << 20))
    with connect(f"{SIM}&flash={img}", board="maix-bit", baud=3000000, stub="kflashpy") as d:
        region = WriteRegion(0x300000, model, "model")
        first = burn_on(d, [region], reboot=False)
        again = burn_on(d, [region], reboot=False)
    assert first.verification == "sha256" and first.regions[0].status == "written"
    assert again.regions[0].status == "skipped"
    assert img.read_bytes()[0x300000 : 0x300000 + len(model)] == model
    assert len(zlib.compress(model)) < len(model)  # went out as deflate frames


def _burn_counting_hashes(url: str, data: bytes, at: int, monkeypatch):
    """Burn ``data`` at ``at``; return the result and how many whole-region hashes ran."""
    hashes = []
    real = KfpyStage2.sha256

    def counting(self, address, size):
        hashes.append((address, size))
        return real(self, address, size)

    monkeypatch.setattr(KfpyStage2, "sha256", counting)
    with connect(url, board="maix-bit", baud=3000000, stub="kflashpy") as d:
        return burn_on(d, [WriteRegion(at, data, "app")], reboot=False), hashes


def test_write_acknowledgements_verify_the_flash_without_a_hash_pass(tmp_path, monkeypatch):
    """Every frame comes back with the digest of what the board read back: a burn on a
    blank chip needs no separate hash of the region, a burn over old data whose frames
    share blocks does (an erase may rewrite bytes another frame checked)."""
    data = _mixed(0x28000, 40)
    img = tmp_path / "board.img"
    img.write_bytes(b"\xff" * (16 << 20))
    result, hashes = _burn_counting_hashes(f"{SIM}&flash={img}", data, 0x300000, monkeypatch)
    assert result.regions[0].verified == "sha256" and hashes == []
    assert img.read_bytes()[0x300000 : 0x300000 + len(data)] == data
    changed = bytes(b ^ 0x33 for b in data[:0x1800]) + data[0x1800:]  # two sectors differ
    result, hashes = _burn_counting_hashes(f"{SIM}&flash={img}", changed, 0x300000, monkeypatch)
    assert result.regions[0].verified == "sha256" and hashes == [(0x300000, len(data))]
    assert img.read_bytes()[0x300000 : 0x300000 + len(data)] == changed


def test_first_frames_go_out_while_the_board_checks_a_blank_region(tmp_path):
    """On erased flash the first (small) frames follow the hash-list request at once and
    are written right after it; over data nothing is sent before the list is back."""
    data = _mixed(0x30000, 41)
    img = tmp_path / "board.img"
    img.write_bytes(b"\xff" * (16 << 20))
    for expect_ahead in (True, False):
        with connect(f"{SIM}&flash={img}", board="maix-bit", baud=3000000, stub="kflashpy") as d:
            log: list[tuple[str, int]] = []
            d.stage2.link.trace = lambda way, frame, log=log: log.append((way, frame[0]))
            data = bytes(b ^ 0x5A for b in data)  # new content every round
            result = burn_on(d, [WriteRegion(0x300000, data, "app")], reboot=False)
        assert result.regions[0].status == "written"
        assert img.read_bytes()[0x300000 : 0x300000 + len(data)] == data
        first_write = log.index(("tx", 0xB6))
        last_list = max(i for i, x in enumerate(log) if x == ("rx", 0xB4))
        assert (first_write < last_list) is expect_ahead


@pytest.mark.parametrize("old", [False, True], ids=["blank", "over-old-data"])
@pytest.mark.parametrize("page", [0x305000, 0x305700, 0x305F00], ids=hex)
def test_a_page_that_programs_wrong_fails_the_burn(tmp_path, monkeypatch, page, old):
    """The flash keeps a bit at 1 in one page: the read-back after programming catches it,
    the acknowledgement says so (E8) and the burn stops with a verify error. Pages are
    read back a sector at a time: the page is the first, one in the middle or the last
    of its sector's run, programmed in the background (blank flash) or after an erase."""
    from kflashpy.errors import VerifyError
    from kflashpy.sim.flash import NorFlash

    real = NorFlash._program

    def stuck(self, address, body, clocked, now):
        if address & ~0xFF == page:
            body = bytes([body[0] | 0x01]) + body[1:]
        return real(self, address, body, clocked, now)

    monkeypatch.setattr(NorFlash, "_program", stuck)
    data = bytes(range(256)) * 0x100  # every page's first byte is even
    img = tmp_path / "board.img"
    flash = bytearray(b"\xff" * (16 << 20))
    if old:
        flash[0x300000 : 0x300000 + len(data)] = _mixed(len(data), 9)
    img.write_bytes(flash)
    with pytest.raises(VerifyError, match="read back other bytes"):
        _burn_counting_hashes(f"{SIM}&flash={img}", data, 0x300000, monkeypatch)


@pytest.mark.parametrize("old", [False, True], ids=["blank", "over-old-data"])
def test_programmed_pages_are_read_back_a_sector_at_a_time(tmp_path, old):
    """Every page programmed is read back, but in one read per run of pages of a sector
    (stub/flasher.c check_page), not one read per page: each read transaction costs the
    simulator ~25 device accesses and a DMA arm. Blank: the pages go in the background;
    over old data: after the erases."""
    data = _mixed(0x20000, 44)
    img = tmp_path / "board.img"
    flash = bytearray(b"\xff" * (16 << 20))
    if old:
        flash[0x300000 : 0x300000 + len(data)] = _mixed(len(data), 45)
    img.write_bytes(flash)
    with connect(f"{SIM}&flash={img}", board="maix-bit", baud=3000000, stub="kflashpy") as d:
        stats = d.port.sim_board.flash.stats
        reads, programs = stats.reads, stats.programs
        result = burn_on(d, [WriteRegion(0x300000, data, "app")], reboot=False)
        reads, programs = stats.reads - reads, stats.programs - programs
    assert result.regions[0].status == "written" and result.regions[0].verified == "sha256"
    assert img.read_bytes()[0x300000 : 0x300000 + len(data)] == data
    assert programs == len(data) // 256
    # 32 sectors: one read-back each, plus the hash list's and merges' reads (~70 in all;
    # one read-back per page made it ~570)
    assert reads < programs // 4


def test_cli_read_verify_flash_id(tmp_path, capsys):
    data = _mixed(9000, 3)
    img = tmp_path / "board.img"
    flash = bytearray(b"\xff" * (16 << 20))
    flash[0x1000 : 0x1000 + len(data)] = data
    img.write_bytes(flash)
    src = tmp_path / "data.bin"
    src.write_bytes(data)
    url = f"{SIM}&flash={img}"
    out = tmp_path / "out.bin"
    common = ["--json", "-p", url, "-B", "maix-bit", "-b", "1500000"]
    assert main([*common, "read", "--addr", "0x1000", "--size", "9000", "-o", str(out)]) == 0
    assert out.read_bytes() == data
    capsys.readouterr()
    assert main([*common, "flash-id"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"]["jedec_id"] == "0xEF4018" and doc["result"]["size"] == 16 << 20
    assert doc["result"]["sha256"] == "engine"  # checked on the board, docs/flasher-protocol.md
    assert main([*common, "verify", "0x1000", str(src)]) == 0
    capsys.readouterr()
    assert main([*common, "verify", "0x1000", str(src), "0x2000", str(src)]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert "0x00002000" in doc["error"]["message"]
    assert [r["ok"] for r in doc["result"]["regions"]] == [True, False]


def _hash_after_write(url: str, data: bytes, at: int = 0x200000):
    """Write ``data`` on a fresh board, hash it there; (board, digest, wide bytes read)."""
    with connect(url, board="maix-bit", baud=3000000, stub="kflashpy") as d:
        board = d.port.sim_board
        d.stage2.write(at, data)
        wide = board.flash.stats.bytes_read_wide
        digest = d.stage2.sha256(at, len(data))
        return board, digest, board.flash.stats.bytes_read_wide - wide


def test_reads_go_quad_once_checked_on_the_board():
    """Hashing reads on four data lines once one page of varied data read the same both
    ways; the hash is still right."""
    data = random.Random(21).randbytes(0x20000)
    board, digest, wide = _hash_after_write(SIM, data)
    assert digest == hashlib.sha256(data).digest()
    assert wide >= len(data)  # the whole region was read on four lines
    assert board.flash.quad_enabled  # set by the flasher (volatile status write)


def test_reads_stay_standard_when_quad_reads_differ(monkeypatch):
    """A board whose quad reads come back wrong (e.g. IO2/IO3 not wired) is caught by
    the flasher's own check: it keeps standard reads and the result is still right."""
    from kflashpy.sim.flash import NorFlash

    real = NorFlash.enhanced

    def broken(self, inst, addr, addr_bits, wait, tx, rx_len, lines, now):
        rx = real(self, inst, addr, addr_bits, wait, tx, rx_len, lines, now)
        return bytes(b ^ 0x04 for b in rx) if lines == 4 else rx

    monkeypatch.setattr(NorFlash, "enhanced", broken)
    data = random.Random(22).randbytes(0x20000)
    board, digest, wide = _hash_after_write(SIM, data)
    assert digest == hashlib.sha256(data).digest()
    assert wide == 0  # the hash read on one line
    assert board.flash.stats.bytes_read_wide == 256  # only the page of the check
    assert board.flash.stats.bytes_programmed_wide == 0


def test_reads_stay_standard_on_chips_without_a_known_quad_bit(monkeypatch):
    from kflashpy.sim import flash

    monkeypatch.setitem(flash.CHIPS, "n25q128", flash.ChipModel("n25q128", 0x20, 0xBA))
    data = random.Random(23).randbytes(0x12000)
    board, digest, wide = _hash_after_write(SIM + "&chip=n25q128", data)
    assert digest == hashlib.sha256(data).digest()
    assert wide == 0 and not board.flash.quad_enabled


def test_quad_programs_checked_on_the_first_page(monkeypatch):
    """Quad reads work but quad page programs come out wrong: the flasher's read-back
    of its first quad page catches it, rewrites that sector on one line and programs
    on one line from then on; the data ends up right."""
    from kflashpy.sim.flash import NorFlash

    real = NorFlash.enhanced
    quad_programs = []

    def broken(self, inst, addr, addr_bits, wait, tx, rx_len, lines, now):
        if inst == 0x32:
            quad_programs.append(addr)
            tx = bytes(b & 0xF7 for b in tx)
        return real(self, inst, addr, addr_bits, wait, tx, rx_len, lines, now)

    monkeypatch.setattr(NorFlash, "enhanced", broken)
    with connect(SIM, board="maix-bit", baud=3000000, stub="kflashpy") as d:
        board = d.port.sim_board
        board.flash.data[0x100000:0x101000] = random.Random(24).randbytes(0x1000)  # lets
        d.stage2.sha256(0x100000, 0x1000)  # the flasher check its quad reads
        data = random.Random(25).randbytes(0x8000)
        d.stage2.write(0x200000, data)
        assert board.flash.read(0x200000, len(data)) == data
        assert len(quad_programs) == 1


def test_quad_programs_used_once_reads_are(dev):
    board, s2 = dev.port.sim_board, dev.stage2
    board.flash.data[0x500000:0x501000] = random.Random(26).randbytes(0x1000)
    s2.sha256(0x500000, 0x1000)
    before = board.flash.stats.bytes_programmed_wide
    data = random.Random(27).randbytes(0x4000)
    s2.write(0x510000, data)
    assert board.flash.read(0x510000, len(data)) == data
    assert board.flash.stats.bytes_programmed_wide - before == len(data)


def test_bulk_flash_transfers_go_by_dma(dev):
    """Reads (channel 2, SSI3_RX) and page programs (channel 1, SSI3_TX) move their
    frames by DMA, one block per transaction: a read chunk is one block of more than a
    page (the link is served while it runs), a page program one of 64 frames."""
    board, s2 = dev.port.sim_board, dev.stage2
    tx, rx = board.core.dmac.channels[1], board.core.dmac.channels[2]
    data = random.Random(28).randbytes(0x4000)
    board.flash.data[0x520000:0x524000] = data
    assert s2.read(0x520000, len(data)) == data
    assert rx.reg(0x30) > 256 // 4 and rx.done_at > 0  # STATUS: the last block's items
    s2.write(0x530000, data[:0x1000])
    assert board.flash.read(0x530000, 0x1000) == data[:0x1000]
    assert tx.reg(0x30) == 256 // 4 and tx.done_at > 0
    assert board.stage == "core" and not board.halt_reason


def test_a_firmware_at_0_lets_quad_reads_be_checked_at_start(tmp_path):
    """Flash init reads page 0: with a firmware there, even the blank-check of an erased
    region (before anything is written) reads on four lines."""
    image = tmp_path / "board.img"
    flash = bytearray(b"\xff" * (16 << 20))
    flash[:4096] = random.Random(28).randbytes(4096)
    image.write_bytes(flash)
    with connect(f"{SIM}&flash={image}", board="maix-bit", baud=3000000, stub="kflashpy") as d:
        board = d.port.sim_board
        wide = board.flash.stats.bytes_read_wide
        d.stage2.hash_list(0x400000, 0x40000)
        assert board.flash.stats.bytes_read_wide - wide >= 0x40000


def test_long_reads_stream_at_wire_speed():
    """A read larger than the flasher's 32 KiB window streams without stalls: the
    host's acknowledgements reach the board while it sends (once lost to a stall that
    made reads restart with halved chunks)."""
    with connect(SIM, board="maix-bit", baud=3000000, stub="kflashpy") as d:
        board = d.port.sim_board
        data = random.Random(29).randbytes(0x30000)
        board.flash.data[0x400000 : 0x400000 + len(data)] = data
        t = board.now
        assert d.stage2.read(0x400000, len(data)) == data
        assert board.now - t < 1.1 * len(data) * 10 / 3000000
        assert d.link.stats.retries == 0


def _blank_check(tmp_path, data_at: int, data: bytes):
    """Hash list of 0x200000..+16 KiB on a board whose flash is erased but for ``data``
    (page 0 blank: quad reads stay unchecked); (digests, wide bytes, narrow bytes)."""
    image = bytearray(b"\xff" * (16 << 20))
    image[data_at : data_at + len(data)] = data
    flash = tmp_path / "flash.img"
    flash.write_bytes(bytes(image))
    with connect(f"{SIM}&flash={flash}", board="maix-bit", baud=3000000, stub="kflashpy") as d:
        stats = d.port.sim_board.flash.stats
        wide, narrow = stats.bytes_read_wide, stats.bytes_read  # narrow: all reads, so far
        got = d.stage2.hash_list(0x200000, 0x4000)
        want = [
            hashlib.sha256(bytes(image[a : a + 0x1000])).digest()
            for a in range(0x200000, 0x204000, 0x1000)
        ]
        assert got == want  # every digest right, data sector included
        wide = stats.bytes_read_wide - wide
        return wide, stats.bytes_read - narrow - wide


def test_blank_check_reads_on_four_lines_before_quad_is_checked(tmp_path):
    """On a blank chip the blank test of a hash list reads over four lines (the QE bit
    is set); a sector holding data is then hashed from standard reads."""
    wide, narrow = _blank_check(tmp_path, 0x202000, random.Random(31).randbytes(0x1000))
    assert wide >= 3 * 0x1000  # the three erased sectors
    assert narrow >= 0x1000  # the data sector, again on one line


def test_blank_check_on_broken_quad_reads_falls_back(tmp_path, monkeypatch):
    """Quad reads that come back wrong make erased pages look written: those sectors are
    read again on one line, and every digest is still right."""
    from kflashpy.sim.flash import NorFlash

    real = NorFlash.enhanced

    def broken(self, inst, addr, addr_bits, wait, tx, rx_len, lines, now):
        rx = real(self, inst, addr, addr_bits, wait, tx, rx_len, lines, now)
        return bytes(b ^ 0x04 for b in rx) if lines == 4 else rx

    monkeypatch.setattr(NorFlash, "enhanced", broken)
    _wide, narrow = _blank_check(tmp_path, 0x202000, random.Random(32).randbytes(0x1000))
    assert narrow >= 4 * 0x1000


def _count_reads(monkeypatch, cls: type) -> collections.Counter:
    """Count ``cls.read`` calls by (model name, offset); patched before the board is
    made, because the core binds each model's ``read`` when it maps it."""
    counts: collections.Counter = collections.Counter()
    read = cls.read

    def counted(self, offset: int, size: int) -> int:
        counts[(self.name, offset)] += 1
        return read(self, offset, size)

    monkeypatch.setattr(cls, "read", counted)
    return counts


def test_register_reads_the_link_and_the_clock_cost(monkeypatch):
    """The bootstrap takes the flasher's bytes after one RFL read per several (no LSR
    read per byte); the flasher reads mtime's low word alone (the high one only after a
    sleep without a deadline) and hashes a sector per SPI transaction, on one line too
    while quad reads are unchecked (a blank chip)."""
    uart = _count_reads(monkeypatch, DwUart)
    clint = _count_reads(monkeypatch, Clint)
    with connect(SIM, board="maix-bit", baud=3000000, stub="kflashpy") as d:
        flasher = len(load().flasher.image)
        assert uart[("uart3", 0x14)] < flasher / 20  # LSR: the replies' transmit checks
        assert uart[("uart3", 0x84)] < flasher / 4  # RFL
        clint.clear()
        d.stage2.write(0x200000, _mixed(0x10000, 40))
        assert clint[("clint", 0xBFF8)] > 4 * clint[("clint", 0xBFFC)]  # were equal
        blocks: list[int] = []
        start = Channel.start
        monkeypatch.setattr(Channel, "start", lambda ch, now: (blocks.append(ch.n), start(ch, now)))
        assert d.stage2.sha256(0x400000, 0x10000) == hashlib.sha256(b"\xff" * 0x10000).digest()
        assert blocks.count(2) == 0x10000 // 0x1000  # SPI3 reads: a sector each


def test_replies_fill_the_transmit_fifo_by_its_level(monkeypatch):
    """A reply longer than the transmit FIFO (a hash list: 32 bytes a sector) goes out
    with one TFL read per up to 16 bytes and never more bytes after a read than the room
    it showed. The model's FIFO never fills (it sends at once), so the levels are made
    up here: full, nearly full, a third, empty, in turn. The reply still comes whole."""
    levels = itertools.cycle([16, 16, 15, 11, 0, 4])
    log: list[int | None] = []  # the room each TFL read showed; None for a byte written
    read, write = DwUart.read, DwUart.write

    def tfl(self, offset: int, size: int) -> int:
        if self.name == "uart3" and offset == 0x80:
            level = next(levels)
            log.append(16 - level)
            return level
        return read(self, offset, size)

    def thr(self, offset: int, size: int, value: int) -> None:
        if self.name == "uart3" and offset == 0 and not self.lcr & 0x80:
            log.append(None)
        write(self, offset, size, value)

    monkeypatch.setattr(DwUart, "read", tfl)  # before the core binds the models
    monkeypatch.setattr(DwUart, "write", thr)
    with connect(SIM, board="maix-bit", baud=3000000, stub="kflashpy") as d:
        log.clear()
        got = d.stage2.hash_list(0x400000, 0x20000)
        assert got == [hashlib.sha256(b"\xff" * 0x1000).digest()] * 32
    room, sent, reads = 16, 0, 0  # before the first read: what the last reply left
    for entry in log:
        if entry is None:
            sent += 1
            assert sent <= room, "a byte written past the room the last TFL read showed"
        else:
            assert sent == room or not reads, "TFL read before the room it showed was used"
            room, sent, reads = entry, 0, reads + 1
    written = log.count(None)
    assert written > 32 * 32 and reads < written / 4


def _burn_and_hash(d, data: bytes, at: int):
    """Burn ``data`` (write frames, each acknowledged with its digest), hash it on the
    board; (digest, SHA-256 engine)."""
    burn_on(d, [WriteRegion(at, data, "data")], reboot=False)
    assert bytes(d.port.sim_board.flash.data[at : at + len(data)]) == data
    return d.stage2.sha256(at, len(data)), d.port.sim_board.core.sha


def test_digests_go_by_the_sha256_engine():
    """Checked at start, the engine's DMA mode hashes what is written (the write
    digests) and the hash after the burn; the model computes them with hashlib."""
    data = _mixed(0x28000, 31)
    with connect(SIM, board="maix-bit", baud=3000000, stub="kflashpy") as d:
        assert d.stage2.info.sha_engine
        digest, sha = _burn_and_hash(d, data, 0x300000)
        assert digest == hashlib.sha256(data).digest()
        # the check (3 blocks), each frame's data and the hash (one padding block each)
        assert sha.dma_blocks >= 3 + 2 * len(data) // 64 and sha.compressed == 0
        assert d.port.sim_board.core.dmac.channels[3].done_at > 0
        # an empty region: software (the engine cannot hash nothing), the engine kept
        assert d.stage2.sha256(0x300000, 0) == hashlib.sha256(b"").digest()
        blocks = sha.dma_blocks
        assert d.stage2.sha256(0x300000, 100) == hashlib.sha256(data[:100]).digest()
        assert sha.dma_blocks == blocks + 2


@pytest.mark.parametrize("fault", ["stall", "swap"])
def test_a_sha256_engine_that_fails_the_check_is_not_used(monkeypatch, fault):
    """An engine whose DMA mode never asks for data, or takes it in the other byte
    order: the check at start fails, digests stay in software, the burn is right."""
    from kflashpy.sim.crypto import ShaEngine

    monkeypatch.setattr(ShaEngine, "dma_fault", fault)
    data = _mixed(0x12000, 32)
    with connect(SIM, board="maix-bit", baud=3000000, stub="kflashpy") as d:
        assert not d.stage2.info.sha_engine
        digest, sha = _burn_and_hash(d, data, 0x300000)
        assert digest == hashlib.sha256(data).digest()
        assert sha.dma_blocks == (0 if fault == "stall" else 3)  # only the check's
        assert not d.port.sim_board.halt_reason


def test_a_sha256_engine_that_stops_later_is_given_up():
    """The engine passed the check, then stops asking for data: the write digest in
    flight and the hash in flight are redone in software; the burn is right."""
    data = _mixed(0x12000, 33)
    with connect(SIM, board="maix-bit", baud=3000000, stub="kflashpy") as d:
        assert d.stage2.info.sha_engine
        sha = d.port.sim_board.core.sha
        sha.dma_fault = "stall"
        digest, _ = _burn_and_hash(d, data, 0x300000)
        assert digest == hashlib.sha256(data).digest()
        assert sha.dma_blocks == 3 and not d.port.sim_board.halt_reason
        sha.dma_fault = None  # given up for the session: not asked again
        assert d.stage2.sha256(0x300000, len(data)) == digest and sha.dma_blocks == 3
