"""Host-side pieces of the kflashpy flasher client that need no board."""

from __future__ import annotations

import hashlib
import random
import struct
import zlib

import pytest

from kflashpy.errors import NoResponseError, ProtocolError
from kflashpy.isp.burn import WriteRegion, _checked_on_write, _pieces
from kflashpy.isp.frames import Response, crc32, parse_request
from kflashpy.isp.kfpy_stage2 import (
    FlasherInfo,
    KfpyOp,
    KfpyStage2,
    _BadReply,
    _Frame,
    _payload,
    frame_size,
    tapered,
)
from kflashpy.isp.link import LinkStats
from kflashpy.isp.stage2 import WriteLedger, join_pieces, sector_blocks


def test_sector_blocks_split_at_absolute_boundaries():
    assert sector_blocks(0x1234, 0x3000) == [
        (0, 0xDCC),
        (0xDCC, 0x1000),
        (0x1DCC, 0x1000),
        (0x2DCC, 0x234),
    ]
    assert sector_blocks(0x10000, 0x20000, 0x10000) == [(0, 0x10000), (0x10000, 0x10000)]


class _Hashes:
    """A flasher that answers hash lists from a table (the pipeline's only question)."""

    def __init__(self, digests):
        self.digests = digests

    def hash_list(self, address, size):
        return self.digests

    def hash_list_ahead(self, address, data, ledger=None):
        return self.hash_list(address, len(data))


def test_pipeline_sends_only_changed_sectors_in_frames_that_never_cross_64k():
    data = bytes(range(256)) * (0x30000 // 256)
    old = [hashlib.sha256(data[o : o + n]).digest() for o, n in sector_blocks(0xF000, len(data))]
    for i in (0, 1, 2, 20):  # sectors at 0xF000, 0x10000, 0x11000, 0x23000
        old[i] = b"stale"
    old[3] = hashlib.sha256(b"\xff" * 0x1000).digest()  # 0x12000 reads erased
    pieces, blank = _pieces(_Hashes(old), WriteRegion(0xF000, data), skip_unchanged=True)
    assert blank == [(0x3000, 0x1000)]
    frames = join_pieces(0xF000, pieces)
    assert [(0xF000 + off, n) for off, n in frames] == [
        (0xF000, 0x1000),
        (0x10000, 0x3000),
        (0x23000, 0x1000),
    ]
    assert all((0xF000 + o) // 0x10000 == (0xF000 + o + n - 1) // 0x10000 for o, n in frames)


def _frames_ok(cuts, taper):
    """Same bytes, in order, cut at sectors (or the ends), no frame across 64 KiB."""
    assert [x for at, n in taper for x in range(at, at + n)] == [
        x for at, n in cuts for x in range(at, at + n)
    ]
    for at, n in taper:
        assert 0 < n <= 0x10000 and at // 0x10000 == (at + n - 1) // 0x10000
        assert at % 0x1000 == 0 or (at, n) == taper[0] or any(at == a for a, _ in cuts)


def test_frames_over_erased_flash_grow_from_the_start_and_shrink_to_the_end():
    at, size = 0x300000, 1352588  # ends inside a sector
    cuts = [(at + o, n) for o, n in sector_blocks(at, size, 0x10000)]
    taper = tapered(cuts, [(at, 0x200000)])
    _frames_ok(cuts, taper)
    sizes = [n for _, n in taper]
    assert sizes[:4] == [0x1000, 0x1000, 0x2000, 0x3000] and max(sizes) == 0x10000
    assert taper[-2:] == [(0x449000, 0x1000), (0x44A000, at + size - 0x44A000)]
    # down to 16 KiB, each frame after the ramp at most 1.5x the next two on the wire
    tail = sizes[sizes.index(0x10000) :]
    assert all(
        a <= 1.5 * (b + c) for a, b, c in zip(tail, tail[1:], tail[2:], strict=False) if a > 0x4000
    )
    # over old data (or where the hash list did not show erased flash) nothing changes
    assert tapered(cuts, []) == cuts
    assert tapered(cuts, [(at, 0x10000)]) == cuts
    # a single short frame: sectors
    assert tapered([(0, 5000)], [(0, 0x2000)]) == [(0, 0x1000), (0x1000, 904)]


def test_half_frames_where_the_line_and_the_board_go_at_the_same_pace():
    """The board programs a frame once all of it has arrived: where the line brings the
    bytes as fast as the board programs them it stays a frame behind to the end, so the
    frames between the ends are 32 KiB there; 64 KiB where either side is faster."""
    # a 1.35 MB kmodel's compressibility: ~0.9 of its size after zlib
    rng = random.Random(5)
    data = b"".join(rng.randbytes(230) + bytes(26) for _ in range(4000))
    assert frame_size(data, 3000000) == 0x8000
    assert frame_size(data, 1500000) == 0x10000  # the line is slower: the board catches up
    assert frame_size(data, 115200) == 0x10000
    # compressible data (0.6): at 3 Mbaud the board is slower and always has frames queued
    firmware = b"".join(rng.randbytes(150) + bytes(106) for _ in range(4000))
    assert frame_size(firmware, 3000000) == 0x10000
    assert frame_size(b"", 3000000) == 0x10000
    at, size = 0x300000, 1352588
    cuts = [(at + o, n) for o, n in sector_blocks(at, size, 0x10000)]
    taper = tapered(cuts, [(at, 0x200000)], 0x8000)
    _frames_ok(cuts, taper)
    sizes = [n for _, n in taper]
    assert sizes[:4] == [0x1000, 0x1000, 0x2000, 0x3000]
    # past the ramp, no frame is longer than 32 KiB or crosses a 32 KiB boundary
    past = [(a, n) for a, n in taper if a >= 0x320000]
    assert max(n for _, n in past) == 0x8000
    assert all(a // 0x8000 == (a + n - 1) // 0x8000 for a, n in past)
    assert taper[-2:] == [(0x449000, 0x1000), (0x44A000, at + size - 0x44A000)]


def test_ack_digest_proves_the_region_unless_an_erase_reaches_another_frame():
    s2 = KfpyStage2.__new__(KfpyStage2)
    region = WriteRegion(0x10000, bytes(0x20000))
    frames = [(0x10000, 0x1000), (0x11000, 0x7000), (0x18000, 0x8000), (0x20000, 0x10000)]
    ledger = WriteLedger()
    for at, n in frames:
        ledger.sent(at, n)
        ledger.ack(at, n, checked=True, erased=False)
    assert _checked_on_write(s2, region, ledger)
    # a frame that erased: its 64 KiB block also holds the other frames of that block
    ledger.checked[1] = (0x11000, 0x7000, True)
    assert not _checked_on_write(s2, region, ledger)
    # one that erased a block of its own is fine
    ledger.checked[1] = (0x11000, 0x7000, False)
    ledger.checked[3] = (0x20000, 0x10000, True)
    assert _checked_on_write(s2, region, ledger)
    # an acknowledgement without a digest, or a frame never acknowledged: hash it
    ledger.ack(0x30000, 0x100)
    assert not _checked_on_write(s2, region, ledger)
    ledger = WriteLedger(checked=[(0x10000, 0x20000, False)])
    ledger.sent(0x30000, 0x100)
    assert not _checked_on_write(s2, region, ledger)


def test_erase_units_follow_the_flasher():
    s2 = KfpyStage2.__new__(KfpyStage2)
    # two sectors or more of a block: the flasher may erase the whole block
    assert s2.erase_units(0x310000, 0x86A0) == [(0x310000, 0x320000)]
    # less than two sectors: only the sectors it touches
    assert s2.erase_units(0x318800, 0x1000) == [(0x318000, 0x319000), (0x319000, 0x31A000)]


def test_frame_is_compressed_only_when_smaller():
    zeros = _Frame(0x1000, bytes(4096))
    req = parse_request(zeros.packet)
    assert req.op == KfpyOp.WRITE_DEFLATE and req.crc_ok
    raw_len = struct.unpack_from("<I", req.data)[0]
    assert raw_len == 4096 and zlib.decompress(req.data[4:], -15) == bytes(4096)
    noise = _Frame(0x2000, b"".join(hashlib.sha256(bytes([i])).digest() for i in range(8)))
    assert parse_request(noise.packet).op == KfpyOp.WRITE


def test_extension_replies_carry_a_crc():
    body = b"\x01\x02\x03"
    good = Response(0xB3, 0xE0, body + struct.pack("<I", crc32(bytes((0xB3, 0xE0)) + body)))
    assert _payload(good) == body
    bad = Response(0xB3, 0xE0, body + struct.pack("<I", 0))
    with pytest.raises(_BadReply):
        _payload(bad)
    with pytest.raises(_BadReply):
        _payload(Response(0xB3, 0xE0, b"\x00"))


def test_identify_parse_and_foreign_reply():
    p = bytearray(64)
    p[:4] = b"KFPY"
    struct.pack_into("<HHI", p, 4, 1, 1, 0x3FF)
    p[12:16] = bytes((0xEF, 0x40, 0x18, 1))
    p[16:24] = b"UNIQUEID"
    struct.pack_into("<10I", p, 24, 16 << 20, 390_000_000, 195_000_000, 48_750_000,
                     3_000_000, 65536, 4 | 2 << 16, 0x80570000, 0x80000000, 0x80570000)  # fmt: skip
    info = FlasherInfo.parse(bytes(p))
    assert (info.jedec_id, info.flash_ok, info.slots, info.window) == (0xEF4018, True, 4, 2)
    assert not info.sha_engine
    p[15] = 2  # the flash did not answer, digests by the SHA-256 engine
    info = FlasherInfo.parse(bytes(p))
    assert not info.flash_ok and info.sha_engine
    assert info.unique_id == b"UNIQUEID" and info.baud == 3_000_000
    with pytest.raises(ProtocolError, match="not from kflashpy") as e:
        FlasherInfo.parse(b"\x00" * 64)
    assert "another flasher" in e.value.hint


class _LaggingLink:
    """A link to a flasher whose replies come ``lag`` seconds of port time after each
    request (an emulated board that runs slower than real time): too late for the
    request's timeout, the request is lost."""

    def __init__(self, lag: float) -> None:
        self.lag, self.t, self.stats = lag, 0.0, LinkStats()

    def now(self) -> float:
        return self.t

    def send(self, op, address=0, data=b""):
        self.op = op

    def recv(self, op, timeout, extra_len=0):
        if self.lag > timeout:
            self.t += timeout
            raise NoResponseError("late")
        self.t += self.lag
        return Response(op, 0xE0, struct.pack("<I", crc32(bytes((op, 0xE0)))))

    def barrier(self, nop_op, timeout):
        pass

    def diagnose(self):
        return ""


def test_slow_replies_of_the_flasher_stretch_the_timeouts():
    """The bootstrap costs the emulator almost nothing (its DMA upload), so the flasher's
    own replies set the stretch: one that used more than half its timeout makes the
    next ones twice as long as it took, before a longer wait can run out."""
    link = _LaggingLink(0.3)
    s2 = KfpyStage2(link, bootstrap=False)  # type: ignore[arg-type]
    s2._call(KfpyOp.IDENTIFY, timeout=1.0, what="identify")
    assert s2.slowness == 1.0  # a third of the timeout: as expected
    link.lag = 0.8
    s2._call(KfpyOp.IDENTIFY, timeout=1.0, what="identify")
    assert s2.slowness == pytest.approx(1.6)
    link.lag = 1.3  # past the unstretched timeout: answered now, not resent
    s2._call(KfpyOp.IDENTIFY, timeout=1.0, what="identify", tries=1)
    assert s2.slowness == pytest.approx(2.6)
    link.lag = 0.1  # a fast reply never shrinks it
    s2._call(KfpyOp.IDENTIFY, timeout=1.0, what="identify")
    assert s2.slowness == pytest.approx(2.6)
