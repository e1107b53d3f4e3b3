from hypothesis import given
from hypothesis import strategies as st

from kflashpy.isp import frames, slip


@given(st.lists(st.binary(min_size=1, max_size=300), max_size=8), st.binary(max_size=50))
def test_slip_round_trip_with_leading_noise(payloads, noise):
    d = slip.SlipDecoder()
    wire = noise.replace(b"\xc0", b"") + b"".join(slip.encode(p) for p in payloads)
    got = []
    for i in range(0, len(wire), 7):  # arbitrary split points
        got += d.feed(wire[i : i + 7])
    assert got == payloads


def test_empty_frames_skipped_and_bad_escape_dropped():
    d = slip.SlipDecoder()
    assert d.feed(b"\xc0\xc0\xc0ab\xdb\x01c\xc0\xc0ok\xc0") == [b"ok"]
    assert d.bad_frames == 1


@given(st.integers(0, 0xFF), st.integers(0, 2**32 - 1), st.binary(max_size=200))
def test_request_crc_round_trip(op, addr, data):
    req = frames.parse_request(frames.build_request(op, addr, data))
    assert req.crc_ok and req.address == addr and req.data == data
    assert req.data_len == len(data)
