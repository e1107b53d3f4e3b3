"""Sealed containers: round trips, tamper/truncation/wrong-key refusal, key handling,
and the MicroPython board helper run under CPython with ucryptolib/uhashlib shims."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import types

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st
from support.paths import KMODELS as FIXTURES

from kflashpy.cli import main
from kflashpy.errors import FormatError, IntegrityError, KeyMaterialError, UsageError
from kflashpy.model.board import helper_path
from kflashpy.model.seal import (
    HEADER_SIZE,
    TAG_SIZE,
    is_sealed,
    key_id,
    load_seal_key,
    read_header,
    seal_bytes,
    unseal_bytes,
)

V3_IRIS = FIXTURES / "v3/iris_nncase-v0.1.0-rc5.kmodel"
KEY = bytes(range(32))
OTHER = bytes(range(1, 33))


def test_roundtrip_and_header():
    data = V3_IRIS.read_bytes()
    blob = seal_bytes(data, KEY)
    assert is_sealed(blob) and len(blob) == HEADER_SIZE + (len(data) // 16 + 1) * 16 + TAG_SIZE
    assert unseal_bytes(blob, KEY) == data
    head = read_header(blob)
    assert head.content == "kmodel" and head.plaintext_size == len(data)
    assert head.key_id == key_id(KEY)
    assert seal_bytes(data, KEY) != blob  # fresh salt and iv every time
    assert KEY.hex() not in json.dumps(head.to_dict())


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=600))
def test_roundtrip_any_length(data):
    assert unseal_bytes(seal_bytes(data, KEY), KEY) == data


def _regions(blob: bytes) -> dict[str, range]:
    n = len(blob)
    return {
        "magic": range(0, 8), "version": range(8, 9), "suite": range(9, 10),
        "content": range(10, 11), "reserved": range(11, 12), "length": range(12, 16),
        "salt": range(16, 32), "key_id": range(32, 40), "iv": range(40, 56),
        "ciphertext": range(56, n - 32), "tag": range(n - 32, n),
    }  # fmt: skip


def test_every_byte_of_every_region_is_authenticated():
    data = b"K210 model bytes " * 5
    blob = seal_bytes(data, KEY)
    for name, region in _regions(blob).items():
        for pos in region:
            bad = bytearray(blob)
            bad[pos] ^= 0x01
            with pytest.raises((IntegrityError, FormatError)):
                unseal_bytes(bytes(bad), KEY, name)


def test_truncation_and_extension_refused():
    blob = seal_bytes(b"x" * 100, KEY)
    for cut in (1, 15, 16, 32, 33, len(blob) - 1):
        with pytest.raises((IntegrityError, FormatError)):
            unseal_bytes(blob[:cut] if cut < 9 else blob[:-cut], KEY)
    with pytest.raises(IntegrityError):
        unseal_bytes(blob + bytes(16), KEY)


def test_wrong_key_and_messages_never_contain_key():
    blob = seal_bytes(b"secret model", KEY)
    with pytest.raises(IntegrityError, match="different key") as e:
        unseal_bytes(blob, OTHER)
    text = f"{e.value.message} {e.value.hint}"
    assert KEY.hex() not in text and OTHER.hex() not in text
    with pytest.raises(FormatError, match="not a kflashpy sealed"):
        unseal_bytes(b"PK\x03\x04" + bytes(200), KEY)
    with pytest.raises(KeyMaterialError):
        seal_bytes(b"x", b"short")


def test_key_sources(tmp_path, monkeypatch):
    raw = tmp_path / "raw.key"
    raw.write_bytes(KEY)
    hexf = tmp_path / "hex.key"
    hexf.write_text(KEY.hex() + "\n")
    assert load_seal_key(file=raw) == KEY == load_seal_key(file=hexf)
    monkeypatch.setenv("MY_SEAL", KEY.hex())
    assert load_seal_key(env="MY_SEAL") == KEY
    assert load_seal_key(hex_text="0x" + KEY.hex()) == KEY
    with pytest.raises(UsageError):
        load_seal_key()
    with pytest.raises(UsageError):
        load_seal_key(hex_text=KEY.hex(), env="MY_SEAL")
    monkeypatch.setenv("MY_SEAL", "abcd")
    with pytest.raises(KeyMaterialError) as e:
        load_seal_key(env="MY_SEAL")
    assert "abcd" not in e.value.message
    with pytest.raises(KeyMaterialError, match="cannot read"):
        load_seal_key(file=tmp_path / "nope")


def test_cli_keygen_seal_unseal(tmp_path, capsys, monkeypatch):
    key = tmp_path / "k.key"
    assert main(["model", "keygen", str(key)]) == 0
    out = capsys.readouterr().out
    secret = key.read_text().strip()
    assert len(secret) == 64 and secret not in out and (key.stat().st_mode & 0o777) == 0o600
    assert main(["model", "keygen", str(key)]) == 2  # no silent overwrite
    capsys.readouterr()
    sealed, plain = tmp_path / "m.sealed", tmp_path / "m.kmodel"
    assert (
        main(["-v", "model", "seal", str(V3_IRIS), "-o", str(sealed), "--key-file", str(key)]) == 0
    )
    assert main(["model", "unseal", str(sealed), "-o", str(plain), "--key-file", str(key)]) == 0
    assert plain.read_bytes() == V3_IRIS.read_bytes()
    monkeypatch.setenv("KFLASHPY_SEAL_KEY", secret)  # default env var
    assert main(["--json", "model", "unseal", str(sealed), "-o", str(plain)]) == 0
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    bad = bytearray(sealed.read_bytes())
    bad[100] ^= 0x80
    sealed.write_bytes(bytes(bad))
    plain.unlink()
    assert main(["model", "unseal", str(sealed), "-o", str(plain)]) == 3
    err = capsys.readouterr().err
    assert "modified" in err and secret not in err and not plain.exists()


# --- the MicroPython helper under CPython ------------------------------------------------


class _Aes:
    """ucryptolib.aes(key, mode, iv) for mode 2 (CBC), decrypt only, like MicroPython."""

    def __init__(self, key, mode, iv):
        assert mode == 2 and len(key) == 32 and len(iv) == 16
        self._dec = Cipher(algorithms.AES(bytes(key)), modes.CBC(bytes(iv))).decryptor()

    def decrypt(self, data):
        assert len(data) % 16 == 0
        return self._dec.update(bytes(data))


@pytest.fixture()
def kseal(monkeypatch):
    monkeypatch.setitem(sys.modules, "ucryptolib", types.SimpleNamespace(aes=_Aes))
    monkeypatch.setitem(sys.modules, "uhashlib", types.SimpleNamespace(sha256=hashlib.sha256))
    spec = importlib.util.spec_from_file_location("kseal_under_test", helper_path())
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.CHUNK = 64  # exercise the chunked CBC chaining with small data
    return mod


def test_board_helper_decrypts_host_sealed(kseal, tmp_path):
    data = V3_IRIS.read_bytes()
    blob = seal_bytes(data, KEY)
    assert kseal.unseal_bytes(blob, KEY) == data
    src, dst = tmp_path / "m.sealed", tmp_path / "m.kmodel"
    src.write_bytes(blob)
    assert kseal.unseal_file(str(src), str(dst), KEY) == len(data)
    assert dst.read_bytes() == data
    for n in (0, 15, 16, 17, 64, 65):
        assert kseal.unseal_bytes(seal_bytes(b"\xa5" * n, KEY), KEY) == b"\xa5" * n


def test_board_helper_refuses_tamper_truncation_wrong_key(kseal, tmp_path):
    blob = seal_bytes(b"model" * 40, KEY)
    with pytest.raises(kseal.SealError, match="different key"):
        kseal.unseal_bytes(blob, OTHER)
    for region in _regions(blob).values():
        bad = bytearray(blob)
        bad[region[len(region) // 2]] ^= 0x04
        with pytest.raises(kseal.SealError):
            kseal.unseal_bytes(bytes(bad), KEY)
    with pytest.raises(kseal.SealError):
        kseal.unseal_bytes(blob[:-1], KEY)
    src, dst = tmp_path / "t.sealed", tmp_path / "t.out"
    bad = bytearray(blob)
    bad[-1] ^= 1
    src.write_bytes(bytes(bad))
    with pytest.raises(kseal.SealError, match="authentication"):
        kseal.unseal_file(str(src), str(dst), KEY)
    assert not dst.exists()  # nothing written before the tag is checked


def test_board_helper_is_micropython_1_11_syntax():
    text = helper_path().read_text()
    assert 'f"' not in text and "f'" not in text  # no f-strings on MicroPython 1.11
    assert "import ucryptolib" in text and "import uhashlib" in text
    assert "from __future__" not in text and "->" not in text
