"""Host-side pieces of the kflashpy flasher client that need no board."""

from __future__ import annotations

import hashlib
import struct
import zlib

import pytest

from kflashpy.errors import ProtocolError
from kflashpy.isp.frames import Response, crc32, parse_request
from kflashpy.isp.kfpy_stage2 import (
    FlasherInfo,
    KfpyOp,
    KfpyStage2,
    _BadReply,
    _Frame,
    _payload,
    sector_blocks,
)


def test_sector_blocks_split_at_absolute_boundaries():
    assert sector_blocks(0x1234, 0x3000) == [
        (0, 0xDCC),
        (0xDCC, 0x1000),
        (0x1DCC, 0x1000),
        (0x2DCC, 0x234),
    ]
    assert sector_blocks(0x10000, 0x20000, 0x10000) == [(0, 0x10000), (0x10000, 0x10000)]


def test_frames_send_only_changed_sectors_and_never_cross_64k():
    data = bytes(range(256)) * (0x30000 // 256)
    old = [hashlib.sha256(data[o : o + n]).digest() for o, n in sector_blocks(0xF000, len(data))]
    for i in (0, 1, 2, 20):  # sectors at 0xF000, 0x10000, 0x11000, 0x23000
        old[i] = b"stale"
    s2 = KfpyStage2.__new__(KfpyStage2)
    s2._hash_cache = {(0xF000, len(data)): old}
    frames = s2._frames(0xF000, data)
    assert [(at, len(c)) for at, c in frames] == [
        (0xF000, 0x1000),
        (0x10000, 0x2000),
        (0x23000, 0x1000),
    ]
    assert all(at // 0x10000 == (at + len(c) - 1) // 0x10000 for at, c in frames)
    assert frames[1][1] == data[0x1000:0x3000]


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
                     3_000_000, 65536, 4 | 2 << 16, 0x80580000, 0x80000000, 0x80580000)  # fmt: skip
    info = FlasherInfo.parse(bytes(p))
    assert (info.jedec_id, info.flash_ok, info.slots, info.window) == (0xEF4018, True, 4, 2)
    assert info.unique_id == b"UNIQUEID" and info.baud == 3_000_000
    with pytest.raises(ProtocolError, match="not from kflashpy") as e:
        FlasherInfo.parse(b"\x00" * 64)
    assert "another flasher" in e.value.hint
