"""Hostile manifests: every value a clean FormatError naming the field (issue #17)."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.zips import make_zip

from kflashpy.cli import main
from kflashpy.errors import FormatError, KflashError
from kflashpy.image.kfpkg import parse_manifest

ENTRY = '{"files": [{"address": %s, "bin": "a.bin", "sha256Prefix": %s}]}'


@pytest.mark.parametrize(
    "text,match",
    [
        (ENTRY % ("9" * 5000, "false"), r"files\[0\]: address a number of 5000 characters"),
        (ENTRY % ("0x" + "f" * 4000, "false"), r"files\[0\]: address '0xfff.*beyond 32 bits"),
        (ENTRY % ('"' + "9" * 5000 + '"', "false"), r"files\[0\]: address .* beyond 32 bits"),
        (ENTRY % ('"0x' + "f" * 4000 + '"', "false"), r"files\[0\]: address .* beyond 32 bits"),
        (ENTRY % ('"' + "9" * 4000 + 'M"', "false"), r"files\[0\]: address .* beyond 32 bits"),
        (ENTRY % ("1e999", "false"), r"files\[0\]: address inf is not a number"),
        (ENTRY % ("NaN", "false"), r"files\[0\]: address nan is not a number"),
        (ENTRY % ("-5", "false"), r"files\[0\]: address: -5 is negative"),
        (ENTRY % ("[1]", "false"), r"files\[0\]: address \[1\] is not a number"),
        (ENTRY % ("4096", "1" * 5000), r"sha256Prefix must be true or false, got a number"),
        (ENTRY % ("4096", '"' + "x" * 10_000 + '"'), r"sha256Prefix .*10002 characters"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"files": [' + "[" * 100_000 + "]" * 100_000 + "]}", "nested too deeply"),
        ('{"files": {"address": 0}}', 'no "files" list'),
        ('{"files": [' + "9" * 5000 + "]}", r"files\[0\]: expected an object, got int"),
    ],
)
def test_hostile_manifest_values_are_clean_errors(text, match):
    with pytest.raises(FormatError, match=match) as err:
        parse_manifest(text)
    assert len(err.value.message) < 300  # the value is shown cut short


def test_huge_values_outside_the_checked_fields_are_harmless():
    text = '{"version": %s, "files": [{"address": 1, "bin": "a", "sha256Prefix": false, "x": %s}]}'
    version, files, _ = parse_manifest(text % ("7" * 5000, "9" * 5000))
    assert version == "7" * 5000 and files[0]["address"] == 1


def test_cli_exits_2_on_a_5000_digit_address(tmp_path, capsys):
    pkg = tmp_path / "huge.kfpkg"
    pkg.write_bytes(make_zip([("flash-list.json", ENTRY % ("9" * 5000, "false")), ("a.bin", b"x")]))
    assert main(["check-layout", str(pkg)]) == 2
    err = capsys.readouterr().err
    assert "files[0]: address" in err and "Traceback" not in err and "internal" not in err
    assert main(["burn", "--addr", "9" * 5000, str(pkg)]) == 2
    assert "a number of 5000 characters is too large" in capsys.readouterr().err


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["0x" + "f" * 300, "9" * 300, "0x1000", "3M", "-1"]),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
entries = st.dictionaries(
    st.sampled_from(["address", "bin", "sha256Prefix", "swap", "reverse4Bytes", "SWAP", ""]),
    json_values | st.sampled_from(["a.bin", "../x", "/etc/passwd", "C:x", "a\\b"]),
    max_size=6,
)
manifests = st.fixed_dictionaries(
    {}, optional={"version": json_values, "files": st.lists(entries, max_size=4) | json_values}
)


def _accepted_or_clean(text: str) -> None:
    try:
        _, files, _ = parse_manifest(text)
    except FormatError:
        return
    for f in files:  # what is accepted is well-formed
        assert 0 <= f["address"] <= 0xFFFFFFFF and isinstance(f["bin"], str)
        assert all(isinstance(f[k], bool) for k in ("sha256Prefix", "swap", "reverse4Bytes"))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests)
def test_fuzz_manifest_structures(doc):
    _accepted_or_clean(json.dumps(doc))


@settings(max_examples=300, deadline=None)
@given(manifests, st.integers(0, 200), st.text(max_size=30))
def test_fuzz_manifest_text_damage(doc, at, insert):
    text = json.dumps(doc)
    at = at % (len(text) + 1)
    try:
        _accepted_or_clean(text[:at] + insert + text[at:])
    except KflashError as e:  # any other deliberate error is still clean
        assert e.exit_code == 2
