"""kmodel header recognition (kflashpy.model.detect)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.paths import KMODELS as FIXTURES

from kflashpy.errors import InputError
from kflashpy.model import KmodelSignature, detect, detect_path, swap_words

EXPECTED = {
    "v3/iris_nncase-v0.1.0-rc5.kmodel": 3,
    "v3/mnist_maixpy-scripts.kmodel": 3,
    "v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel": 3,
    "v4/iris_nncase-v0.2.0-beta4.kmodel": 4,
    "v4/slim-320_nncase-v0.2.0-beta4.kmodel": 4,
    "generated_v5/iris_k210.kmodel": 5,
    "generated_v5/tiny1_k210.kmodel": 5,
}


@pytest.mark.parametrize("rel,version", sorted(EXPECTED.items()))
def test_fixtures_plain_and_swapped(rel, version):
    data = (FIXTURES / rel).read_bytes()
    assert detect(data) == KmodelSignature(version, False, None)
    assert detect(data[:64]) == detect(data)
    swapped = swap_words(data[: len(data) // 4 * 4])
    assert detect(swapped) == KmodelSignature(version, True, None)
    assert detect_path(FIXTURES / rel).version == version


def test_v1_header():
    # version 1, 8-bit, 2 layers, max_start 0, args at 20 + 2*28
    head = struct.pack("<5I", 1, 1, 2, 0, 76) + bytes(56)
    assert detect(head) == KmodelSignature(1, False, None)
    assert detect(swap_words(head)) == KmodelSignature(1, True, None)
    # argument block start inside the metadata table: not a V1 model
    assert detect(struct.pack("<5I", 1, 1, 2, 0, 40) + bytes(56)) is None


def test_not_kmodels():
    assert detect(b"") is None
    assert detect(b"\xff" * 4096) is None  # erased flash
    assert detect(bytes(4096)) is None
    assert detect(b"\x03\x00\x00\x00") is None  # too short for a V3 header
    # V3 with arch != 0 is refused by every loader
    assert detect(struct.pack("<7I", 3, 1, 1, 2, 0, 0, 1)) is None
    assert detect(b"LDMK" + struct.pack("<I", 0)) is None
    assert detect(b"PK\x03\x04" + bytes(60)) is None


def test_later_kmdl_version_reported_as_is():
    assert detect(b"LDMK" + struct.pack("<I", 6) + bytes(24)).version == 6


def test_opaque_by_name(tmp_path):
    blob = bytes(range(256))
    assert detect(blob, "face.smodel") == KmodelSignature(0, False, "smodel")
    assert detect(blob, Path("x/Face.EMODEL")).opaque == "emodel"
    assert detect(blob, "face.kmodel") is None
    v3 = (FIXTURES / "v3/iris_nncase-v0.1.0-rc5.kmodel").read_bytes()
    assert detect(v3, "iris.smodel") == KmodelSignature(3, False, "smodel")
    p = tmp_path / "m.emodel"
    p.write_bytes(blob)
    assert detect_path(p).opaque == "emodel"
    assert KmodelSignature(0, False, "emodel").label.startswith("MaixHub .emodel")


def test_label():
    assert KmodelSignature(3).label == "kmodel V3"
    assert "swapped" in KmodelSignature(4, True).label


def test_detect_path_missing(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        detect_path(tmp_path / "nope.kmodel")


def test_swap_words_involution_and_length():
    data = bytes(range(16))
    assert swap_words(data)[:4] == b"\x03\x02\x01\x00"
    assert swap_words(swap_words(data)) == data
    with pytest.raises(ValueError):
        swap_words(b"abc")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80), st.sampled_from([None, "a.kmodel", "a.smodel"]))
def test_detect_never_raises(data, name):
    sig = detect(data, name)
    assert sig is None or isinstance(sig, KmodelSignature)
