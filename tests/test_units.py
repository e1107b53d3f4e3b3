import pytest
from hypothesis import given
from hypothesis import strategies as st

from kflashpy.errors import InputError
from kflashpy.units import fmt_addr, parse_int


@pytest.mark.parametrize(
    "text,value",
    [
        ("0x300000", 0x300000),
        ("3145728", 3145728),
        ("3M", 3 * 1024 * 1024),
        ("64k", 65536),
        ("64KiB", 65536),
        ("0x10_0000", 0x100000),
        ("16MB", 16 << 20),
        (" 0 ", 0),
    ],
)
def test_parse_int_spellings(text, value):
    assert parse_int(text) == value


@pytest.mark.parametrize("text", ["", "0x", "3X", "-1", "1.3", "1.2.3M", "abc", "0xZZ"])
def test_parse_int_rejects_with_field_name(text):
    with pytest.raises(InputError) as e:
        parse_int(text, "--addr")
    assert "--addr" in e.value.message


@given(st.integers(min_value=0, max_value=2**40))
def test_parse_int_round_trips_hex_and_decimal(n):
    assert parse_int(hex(n)) == n
    assert parse_int(str(n)) == n
    assert parse_int(fmt_addr(n)) == n
