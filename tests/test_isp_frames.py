"""SLIP and request/response frames: exact bytes, garbage resync, property tests."""

import struct
import zlib

import serial
from hypothesis import given, settings
from hypothesis import strategies as st

from kflashpy.isp import frames, slip
from kflashpy.isp.frames import FlashOp, RomOp, Status


def test_encode_escapes_db_before_c0():
    assert slip.encode(b"\xc0") == b"\xc0\xdb\xdc\xc0"
    assert slip.encode(b"\xdb") == b"\xc0\xdb\xdd\xc0"
    # a literal DB DC in the payload must not turn into C0 on the way back
    assert slip.encode(b"\xdb\xdc") == b"\xc0\xdb\xdd\xdc\xc0"
    assert slip.SlipDecoder().feed(slip.encode(b"\xdb\xdc")) == [b"\xdb\xdc"]


def test_request_bytes_match_the_protocol_layout():
    pkt = frames.build_request(FlashOp.FLASH_WRITE, 0x300000, b"\x01\x02\x03")
    op, reserved, crc, addr, length = struct.unpack_from("<HHIII", pkt)
    assert (op, reserved, addr, length) == (0xD4, 0, 0x300000, 3)
    assert crc == zlib.crc32(pkt[8:]) & 0xFFFFFFFF
    assert pkt[16:] == b"\x01\x02\x03"
    # parameter-only form: data_len carries a value, no data, CRC over the 8 bytes
    param = frames.build_request(FlashOp.FLASH_INIT, 1, data_len=0)
    assert len(param) == 16 and struct.unpack_from("<I", param, 4)[0] == zlib.crc32(param[8:])


def test_legacy_short_frame_is_13_bytes():
    assert frames.legacy_short_request(RomOp.NOP) == b"\xc2" + bytes(12)


def test_response_parse_and_describe():
    r = frames.parse_response(b"\xd4\xe2")
    assert r == frames.Response(0xD4, Status.BAD_DATA_CHECKSUM) and not r.ok
    assert "bad data checksum" in r.describe()
    assert frames.parse_response(b"\xc3\x00").ok  # the ROM's "default" status is success
    assert frames.parse_response(b"\xd4") is None


@settings(max_examples=200)
@given(
    st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=6),
    st.lists(st.binary(max_size=40), min_size=7, max_size=7),
    st.integers(1, 64),
)
def test_frames_survive_any_garbage_between_them(payloads, garbage, split):
    """Whatever noise lies between frames (C0 and DB included), every frame is decoded
    intact and in order; noise may add extra frames, which the link rejects by op/length."""
    wire = garbage[0] + b"".join(slip.encode(p) + garbage[i + 1] for i, p in enumerate(payloads))
    d = slip.SlipDecoder()
    got = []
    for i in range(0, len(wire), split):
        got += d.feed(wire[i : i + split])
    it = iter(got)
    assert all(any(p == g for g in it) for p in payloads)  # ordered subsequence
    assert b"" not in got


@given(st.binary(max_size=300))
def test_round_trip_through_loop_port(payload):
    port = serial.serial_for_url("loop://", timeout=0)
    port.write(slip.encode(payload) + slip.encode(payload))
    got = slip.SlipDecoder().feed(port.read(10000))
    assert got == ([payload, payload] if payload else [])


def test_unterminated_escape_drops_the_frame_only():
    d = slip.SlipDecoder()
    assert d.feed(b"\xc0\xd4\xdb\xc0\xd4\xe0\xc0") == [b"\xd4\xe0"]
    assert d.bad_frames == 1
