import hashlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kflashpy.errors import FormatError, KeyMaterialError, UsageError
from kflashpy.image.bootimage import (
    FLAG_AES,
    FLAG_DIO,
    OVERHEAD,
    aes_padded_size,
    parse_boot_image,
    probe_boot_image,
    unwrap_boot_image,
    wrap_boot_image,
    wrapped_size,
)
from kflashpy.keys import load_key, parse_key_text

KEY = bytes.fromhex("000102030405060708090a0b0c0d0e0f")


def test_layout_of_a_plain_image():
    img = wrap_boot_image(b"abc", dio=False)
    assert img[0] == 0 and struct.unpack_from("<I", img, 1)[0] == 3
    assert img[5:8] == b"abc" and img[8:] == hashlib.sha256(img[:8]).digest()
    assert len(img) == 3 + OVERHEAD == wrapped_size(3)


def test_dio_is_the_default_flag():
    assert wrap_boot_image(b"x")[0] == FLAG_DIO
    assert wrap_boot_image(b"x", key=KEY)[0] == FLAG_DIO | FLAG_AES


@given(st.binary(min_size=1, max_size=2000), st.booleans())
def test_wrap_unwrap_round_trip(payload, dio):
    img = wrap_boot_image(payload, dio=dio)
    parsed = parse_boot_image(img)
    assert parsed.sha_valid and parsed.dio == dio and not parsed.aes
    assert unwrap_boot_image(img) == payload


@given(st.binary(min_size=1, max_size=500), st.binary(min_size=16, max_size=16))
def test_aes_round_trip_returns_zero_padded_plaintext(payload, key):
    img = wrap_boot_image(payload, key=key)
    assert (
        len(img) == wrapped_size(len(payload), aes=True) == aes_padded_size(len(payload)) + OVERHEAD
    )
    plain = unwrap_boot_image(img, key=key)
    assert plain == payload + bytes(len(plain) - len(payload))
    assert len(plain) % 16 == 0


def test_encrypted_image_needs_the_key():
    img = wrap_boot_image(b"secret firmware", key=KEY)
    with pytest.raises(KeyMaterialError):
        unwrap_boot_image(img)
    assert b"secret" not in img


def test_corrupted_sha_is_reported_and_refused():
    img = bytearray(wrap_boot_image(b"firmware" * 10))
    img[10] ^= 1
    assert probe_boot_image(bytes(img)).sha_valid is False
    with pytest.raises(FormatError, match="SHA-256"):
        unwrap_boot_image(bytes(img), name="fw.img")
    assert unwrap_boot_image(bytes(img), check_sha=False)[5] == ord("a") ^ 1


@pytest.mark.parametrize(
    "data,match",
    [
        (b"\x00" * 10, "too short"),
        (b"\x80" + struct.pack("<I", 1) + b"x" + bytes(32), "flag byte"),
        (b"\x00" + struct.pack("<I", 100) + bytes(40), "length field"),
        (b"\x01" + struct.pack("<I", 5) + bytes(37), "not valid"),
    ],
)
def test_malformed_images(data, match):
    with pytest.raises(FormatError, match=match):
        parse_boot_image(data, "x.img")


def test_wrong_key_length():
    with pytest.raises(KeyMaterialError):
        wrap_boot_image(b"x", key=b"short")


def test_keys_from_file_env_and_hex(tmp_path, monkeypatch):
    raw = tmp_path / "k.bin"
    raw.write_bytes(KEY)
    text = tmp_path / "k.txt"
    text.write_text("00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f\n")
    monkeypatch.setenv("MY_KEY", "0x000102030405060708090A0B0C0D0E0F")
    assert load_key(file=raw) == load_key(file=text) == load_key(env="MY_KEY") == KEY
    assert load_key(hex_text="000102030405060708090a0b0c0d0e0f") == KEY
    assert load_key() is None
    with pytest.raises(UsageError):
        load_key(hex_text="00" * 16, env="MY_KEY")


@pytest.mark.parametrize("bad", ["00" * 15, "00" * 17, "zz" * 16, ""])
def test_bad_keys_never_echo_the_key(bad):
    with pytest.raises(KeyMaterialError) as e:
        parse_key_text(bad, "--key-hex")
    if bad:
        assert bad not in e.value.message and bad not in e.value.hint


def test_missing_env_and_file(tmp_path, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(KeyMaterialError, match="NO_SUCH_KEY_VAR"):
        load_key(env="NO_SUCH_KEY_VAR")
    with pytest.raises(KeyMaterialError, match="cannot read"):
        load_key(file=tmp_path / "missing")
    binary = tmp_path / "k.bin"
    binary.write_bytes(b"\xff" * 20)
    with pytest.raises(KeyMaterialError) as e:
        load_key(file=binary)
    assert "ff" not in e.value.message.lower().replace("file", "")


def test_other_key_sizes_for_other_areas():
    assert load_key(hex_text="ab" * 32, size=32, what="seal key") == b"\xab" * 32
    with pytest.raises(KeyMaterialError, match="seal key from --key-hex: expected 64 hex digits"):
        load_key(hex_text="ab" * 16, size=32, what="seal key")


@given(st.binary(max_size=600), st.integers(0, 3), st.integers(0, 700))
def test_content_detection_never_raises(tail, flag, length):
    from kflashpy.image.content import detect_content

    for data in (tail, bytes([flag]) + struct.pack("<I", length) + tail):
        info = detect_content(data)
        assert info.size == len(data) and info.kind
        probe_boot_image(data)
