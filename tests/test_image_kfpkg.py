import contextlib
import json
import random
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.zips import make_zip

from kflashpy.errors import FormatError, InputError, KflashError
from kflashpy.image.kfpkg import (
    KfpkgEntry,
    KfpkgLimits,
    build_manifest,
    parse_manifest,
    read_kfpkg,
    unpack_kfpkg,
    write_kfpkg,
)


def manifest(*files, version="0.1.0"):
    return json.dumps({"version": version, "files": list(files)})


def test_portable_manifest_text_shape():
    text = build_manifest(
        [KfpkgEntry(0, "fw.bin", True, b""), KfpkgEntry(0x300000, "m.kmodel", False, b"")]
    )
    lines = text.splitlines()
    # kflash.py's regex needs `"address": <n>,` on its own line, address first
    assert '            "address": 0,' in lines and '            "address": 3145728,' in lines
    doc = json.loads(text)
    assert doc["version"] == "0.1.0"
    assert list(doc["files"][0]) == ["address", "bin", "sha256Prefix"]


@pytest.mark.parametrize(
    "text,address",
    [
        (
            '{"version": "0.1.0", "files": [{"address": 0x00A00000, "bin": "a", "sha256Prefix": false}]}',
            0xA00000,
        ),
        (
            '{"version": "0.1.0", "files": [{"address": "0x1000", "bin": "a", "sha256Prefix": false}]}',
            0x1000,
        ),
        (
            '{"version": "0.1.0", "files": [{"address": "3M", "bin": "a", "sha256Prefix": false}]}',
            3 << 20,
        ),
        ('{"files": [{"address": 4096, "bin": "a", "sha256Prefix": false}]}', 4096),
        ('{"": "0.1.0", "files": [{"address": 8192, "bin": "a", "sha256Prefix": false}]}', 8192),
    ],
)
def test_producer_quirks_accepted(text, address):
    version, files, warnings = parse_manifest(text)
    assert files[0]["address"] == address
    if '"version"' not in text:
        assert warnings


def test_swap_and_reverse4bytes_keys():
    _, files, _ = parse_manifest(
        manifest(
            {"address": 0, "bin": "a", "sha256Prefix": False, "swap": True},
            {"address": 4096, "bin": "b", "sha256Prefix": False, "Reverse4Bytes": True},
        )
    )
    assert files[0]["swap"] and not files[0]["reverse4Bytes"]
    assert files[1]["reverse4Bytes"] and not files[1]["swap"]


@pytest.mark.parametrize(
    "text,match",
    [
        ("not json", "not valid JSON"),
        ("[]", "files"),
        ('{"files": [1]}', "expected an object"),
        ('{"files": [{"bin": "a", "sha256Prefix": true}]}', "no address"),
        ('{"files": [{"address": 0, "sha256Prefix": true}]}', "bin"),
        ('{"files": [{"address": 0, "bin": "a"}]}', "sha256Prefix"),
        ('{"files": [{"address": -5, "bin": "a", "sha256Prefix": true}]}', "address"),
        ('{"files": [{"address": true, "bin": "a", "sha256Prefix": true}]}', "address"),
        ('{"files": [{"address": 0, "bin": "a", "sha256Prefix": "yes"}]}', "true or false"),
        ('{"files": [{"address": 0, "bin": "../evil", "sha256Prefix": true}]}', "unsafe"),
        ('{"files": [{"address": 0, "bin": "/etc/passwd", "sha256Prefix": true}]}', "unsafe"),
        ('{"files": [{"address": 0, "bin": "C:evil", "sha256Prefix": true}]}', "unsafe"),
        ('{"files": [{"address": 0, "bin": "a\\\\b", "sha256Prefix": true}]}', "unsafe"),
        ('{"files": [{"address": 99999999999, "bin": "a", "sha256Prefix": true}]}', "32 bits"),
    ],
)
def test_bad_manifests(text, match):
    with pytest.raises(FormatError, match=match):
        parse_manifest(text)


def good_members():
    return [
        ("flash-list.json", manifest({"address": 0, "bin": "fw.bin", "sha256Prefix": True})),
        ("fw.bin", b"\x21\xa8" + bytes(100)),
    ]


def test_reads_package_and_warns_about_unlisted_members():
    data = make_zip([*good_members(), ("README.txt", b"hello")])
    pkg = read_kfpkg(data)
    assert [(e.address, e.name, e.sha256_prefix) for e in pkg.entries] == [(0, "fw.bin", True)]
    assert pkg.unlisted == ["README.txt"] and any("README.txt" in w for w in pkg.warnings)


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize(
    "members,match",
    [
        ([("fw.bin", b"x")], "no flash-list.json"),
        ([("pkg/flash-list.json", b"{}"), ("fw.bin", b"x")], "found pkg/flash-list.json"),
        (
            [
                (
                    "flash-list.json",
                    manifest({"address": 0, "bin": "gone.bin", "sha256Prefix": True}),
                )
            ],
            "does not contain",
        ),
        ([*good_members(), ("../../evil.sh", b"x")], "unsafe"),
        ([*good_members(), ("/abs/evil", b"x")], "unsafe"),
        ([*good_members(), ("fw.bin", b"other")], "appears twice"),
        ([("flash-list.json", b"\xff\xfe\x00")], "not UTF-8"),
    ],
)
def test_hostile_or_broken_packages(members, match):
    with pytest.raises(FormatError, match=match):
        read_kfpkg(make_zip(members))


def test_not_a_zip_and_missing_file(tmp_path):
    with pytest.raises(FormatError, match="not a readable zip"):
        read_kfpkg(b"PK\x03\x04 truncated")
    with pytest.raises(InputError, match="no such file"):
        read_kfpkg(tmp_path / "missing.kfpkg")


def test_zip_bomb_limits_judge_the_expanded_size_against_the_flash():
    # a whole-flash erase image compresses a thousandfold, yet is legitimate
    erase = manifest({"address": 0, "bin": "ff.bin", "sha256Prefix": False})
    pkg = read_kfpkg(make_zip([("flash-list.json", erase), ("ff.bin", b"\xff" * (16 << 20))]))
    assert len(pkg.entries[0].data) == 16 << 20
    bomb = make_zip([*good_members(), ("zeros.bin", bytes((16 << 20) + 1))])
    with pytest.raises(FormatError, match="inflates to 16777217 bytes"):
        read_kfpkg(bomb)
    with pytest.raises(FormatError, match="limit"):
        read_kfpkg(bomb, KfpkgLimits(max_entry=1 << 20))
    with pytest.raises(FormatError, match="members"):
        read_kfpkg(make_zip(good_members()), KfpkgLimits(max_members=1))
    with pytest.raises(FormatError, match="inflate"):
        read_kfpkg(make_zip([*good_members(), ("b.bin", bytes(3000))]), KfpkgLimits(max_total=2000))


def test_lying_size_header_is_caught():
    data = bytearray(make_zip(good_members(), zipfile.ZIP_STORED))
    # shrink the declared uncompressed size of fw.bin in the central directory
    cd = data.rfind(b"PK\x01\x02")
    size_at = cd + 24
    data[size_at : size_at + 4] = (10).to_bytes(4, "little")
    with pytest.raises(FormatError):
        read_kfpkg(bytes(data))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 0xFFFFFF), st.booleans(), st.binary(max_size=300)),
        min_size=1,
        max_size=6,
    )
)
def test_pack_read_round_trip(tmp_path_factory, files):
    entries = [KfpkgEntry(a, f"f{i}.bin", p, d) for i, (a, p, d) in enumerate(files)]
    path = write_kfpkg(tmp_path_factory.mktemp("rt") / "x.kfpkg", entries)
    pkg = read_kfpkg(path)
    assert pkg.entries == entries and pkg.version == "0.1.0" and not pkg.warnings
    out = path.parent / "out"
    unpack_kfpkg(pkg, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {
        "flash-list.json": build_manifest(entries).encode(),
        **{e.name: e.data for e in entries},
    }


def test_write_is_deterministic_and_rejects_name_clashes(tmp_path):
    e = [KfpkgEntry(0, "fw.bin", True, b"abc")]
    a = write_kfpkg(tmp_path / "a.kfpkg", e).read_bytes()
    b = write_kfpkg(tmp_path / "b.kfpkg", e).read_bytes()
    assert a == b
    with pytest.raises(InputError, match="both named"):
        write_kfpkg(tmp_path / "c.kfpkg", [*e, KfpkgEntry(4096, "fw.bin", False, b"xyz")])
    with pytest.raises(InputError, match="member name"):
        write_kfpkg(tmp_path / "d.kfpkg", [KfpkgEntry(0, "flash-list.json", False, b"x")])
    assert not (tmp_path / "c.kfpkg").exists() and not list(tmp_path.glob(".*tmp"))


def test_unpack_stays_inside_and_refuses_overwrite(tmp_path):
    data = make_zip(
        [
            (
                "flash-list.json",
                manifest({"address": 0, "bin": "sub/fw.bin", "sha256Prefix": True}),
            ),
            ("sub/fw.bin", b"fw"),
        ]
    )
    pkg = read_kfpkg(data)
    out = tmp_path / "out"
    written = unpack_kfpkg(pkg, out)
    assert (out / "sub" / "fw.bin").read_bytes() == b"fw" and len(written) == 2
    with pytest.raises(InputError, match="already exists"):
        unpack_kfpkg(pkg, out)
    unpack_kfpkg(pkg, out, force=True)
    assert sorted(
        p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()
    ) == [
        "out/flash-list.json",
        "out/sub/fw.bin",
    ]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        pos = rng.randrange(len(b)) if b else 0
        if op < 0.5 and b:
            b[pos] = rng.randrange(256)
        elif op < 0.7:
            b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op < 0.9 and b:
            del b[pos : pos + rng.randint(1, 16)]
        else:
            b = b[: rng.randrange(len(b) + 1)]
    return bytes(b)


MANIFEST_TEXT = build_manifest(
    [KfpkgEntry(0, "fw.bin", True, b""), KfpkgEntry(0x300000, "m.kmodel", False, b"")]
)


def test_fuzz_archives_only_clean_errors(tmp_path):
    """Mutated archives: either read, or a KflashError; never another exception, never a hang."""
    members = [
        ("flash-list.json", MANIFEST_TEXT),
        ("fw.bin", b"\x21\xa8" + bytes(300)),
        ("m.kmodel", b"\x03" + bytes(99)),
    ]
    bases = [make_zip(members, zipfile.ZIP_DEFLATED), make_zip(members, zipfile.ZIP_STORED)]
    rng = random.Random(1234)
    outcomes = {"ok": 0, "error": 0}
    for n in range(400):
        if n % 2:  # a valid zip around a mutated manifest reaches the manifest parser
            text = _mutate(rng, MANIFEST_TEXT.encode())
            data = make_zip(
                [("flash-list.json", text), ("fw.bin", b"\x21\xa8"), ("m.kmodel", b"\x03")]
            )
        else:
            data = _mutate(rng, bases[n % 4 // 2])
        try:
            pkg = read_kfpkg(data)
        except KflashError:
            outcomes["error"] += 1
            continue
        outcomes["ok"] += 1
        unpack_kfpkg(pkg, tmp_path / "fuzz", force=True)
    assert outcomes["error"] > 0 and outcomes["ok"] > 0
    escaped = [p for p in tmp_path.rglob("*") if tmp_path / "fuzz" not in (p, *p.parents)]
    assert escaped == []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_manifest_text_only_clean_errors(data):
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    text = _mutate(rng, MANIFEST_TEXT.encode()).decode("utf-8", "replace")
    with contextlib.suppress(KflashError):
        parse_manifest(text)


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=10), c, max_size=4),
    )
)
def test_any_json_document_gives_clean_result(doc):
    with contextlib.suppress(KflashError):
        parse_manifest(json.dumps({"files": [doc]}))


def test_path_sanity(tmp_path):
    assert Path(write_kfpkg(tmp_path / "p.kfpkg", [KfpkgEntry(0, "a.bin", False, b"1")])).exists()
