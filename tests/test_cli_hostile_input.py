"""Hostile-input regression tests for the finished CLI areas (images, packages,
layouts, kmodels, the `run` command line).

The rules checked for every failing command: the documented exit code, one
``error:`` line naming the culprit plus a ``hint:`` line, no traceback, with
``--json`` exactly one envelope on stdout, and no output file left behind (nor an
existing one clobbered).
"""

from __future__ import annotations

import json
import os
import stat
import zipfile
from pathlib import Path

import pytest
from support.paths import KMODELS

from kflashpy.cli import main
from kflashpy.errors import KflashError
from kflashpy.image.kfpkg import read_kfpkg

MNIST = KMODELS / "v3" / "mnist_maixpy-scripts.kmodel"
ENVELOPE = {"kflashpy_version", "schema", "status", "error", "warnings", "result"}
SEAL_KEY = "ab" * 32
#: RISC-V ``nop`` words: looks like code, not like a kmodel, boot image or erased flash
NOPS = b"\x13\x00\x00\x00"


def _manifest_pkg(path: Path, manifest: bytes | str, members: dict[str, bytes] | None = None):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("flash-list.json", manifest)
        for name, data in (members or {}).items():
            z.writestr(name, data)


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KFLASHPY_SEAL_KEY", raising=False)
    (tmp_path / "fw15.bin").write_bytes(NOPS * (1_572_864 // 4))
    (tmp_path / "maixpy.bin").write_bytes((NOPS * 373_344)[:1_493_375])
    (tmp_path / "model.kmodel").write_bytes(MNIST.read_bytes())
    (tmp_path / "empty.bin").write_bytes(b"")
    (tmp_path / "adir").mkdir()
    (tmp_path / "out.bin").write_bytes(b"precious")
    (tmp_path / "seal.key").write_text(SEAL_KEY + "\n")
    (tmp_path / "v9.kmodel").write_bytes(b"LDMK" + (9).to_bytes(4, "little") + bytes(100))
    for name, address, binname, prefix in (
        ("negative", -5, "a.bin", True),
        ("huge", 99999999999, "a.bin", True),
        ("binint", 0, 5, True),
        ("flagstr", 0, "a.bin", "yes"),
    ):
        files = [{"address": address, "bin": binname, "sha256Prefix": prefix}]
        _manifest_pkg(tmp_path / f"{name}.kfpkg", json.dumps({"files": files}), {"a.bin": b"x"})
    (tmp_path / "app.elf").write_bytes(b"\x7fELF\x01\x01\x01" + bytes(200))
    (tmp_path / "erased.bin").write_bytes(b"\xff" * 8192)
    files = [{"address": 0, "bin": "a.bin", "sha256Prefix": True}]
    _manifest_pkg(tmp_path / "one.kfpkg", json.dumps({"files": files}), {"a.bin": NOPS})
    _manifest_pkg(tmp_path / "notobj.kfpkg", '{"files": [5]}')
    _manifest_pkg(tmp_path / "noaddr.kfpkg", '{"files": [{"bin": "a.bin"}]}')
    _manifest_pkg(tmp_path / "latin1.kfpkg", b"\xff\xfe\x00")
    return tmp_path


def _check_failure(capsys, argv: list[str], code: int, needle: str) -> str:
    """Human and --json runs both fail cleanly with a named culprit and a hint.

    Returns everything both runs printed (stdout and stderr)."""
    assert main(argv) == code, argv
    out, err = capsys.readouterr()
    printed = out + err
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and needle in errors[0], err
    hint = lines[lines.index(errors[0]) + 1 :]
    assert hint and hint[0].startswith("  hint: ") and len(hint[0]) > len("  hint: "), err
    assert main(["--json", *argv]) == code
    out, err = capsys.readouterr()
    doc = json.loads(out)  # exactly one JSON document, nothing else on stdout
    assert set(doc) == ENVELOPE and doc["status"] == code
    assert needle in doc["error"]["message"] and doc["error"]["hint"]
    assert "Traceback" not in err
    return printed + out + err


PREP = "model prep-flash model.kmodel -o out.bin"
LAYOUT = "check-layout 0x300000 model.kmodel"
FAILURES = [
    # kfpkg manifests: every refusal names the package and says how to fix it
    ("info missing.kfpkg", 2, "missing.kfpkg: no such file"),
    ("info negative.kfpkg", 2, "files[0]: address: -5 is negative"),
    ("info huge.kfpkg", 2, "beyond 32 bits"),
    ("info binint.kfpkg", 2, '"bin" must be a file name'),
    ("info flagstr.kfpkg", 2, "sha256Prefix must be true or false"),
    ("info notobj.kfpkg", 2, "expected an object, got int"),
    ("info noaddr.kfpkg", 2, "files[0]: no address"),
    ("info latin1.kfpkg", 2, "flash-list.json is not UTF-8"),
    ("unpack missing.kfpkg -d x", 2, "missing.kfpkg: no such file"),
    ("check-layout missing.kfpkg", 2, "missing.kfpkg: no such file"),
    # per-address options must point at a file, and not contradict each other
    (f"{LAYOUT} --raw-at 0x400000", 2, "--raw-at 0x00400000: no file"),
    (f"{LAYOUT} --prefix-at 0x10", 2, "--prefix-at 0x00000010: no file"),
    (f"{LAYOUT} --kpu-load 0x500000", 2, "--kpu-load 0x00500000: no file"),
    (f"{LAYOUT} --kpu-load 3M --load-flash 3M", 2, "contradicting options"),
    (f"{LAYOUT} --layout missing.toml", 2, "missing.toml"),
    ("check-layout 0 fw15.bin 0x180000 model.kmodel", 2, "fw15.bin (0x00000000-0x00180024) and"),
    # seal keys and prep-flash parameters
    ("model seal model.kmodel -o out.bin --key-file nokey", 2, "seal key file nokey"),
    (f"{PREP} --spi-speed 0", 2, "--spi-speed 0"),
    (f"{PREP} -a 0", 2, "--address must be > 0"),
    (f"{PREP} -a 0xFF0000", 2, "past the 16 MiB flash"),
    (f"{PREP} -a 16M", 2, "past the 16 MiB flash"),
    (f"{PREP} --firmware nosuch", 2, "unknown firmware layout 'nosuch'"),
    # wrap takes a firmware .bin: nothing the ROM cannot run
    ("wrap empty.bin -o out.bin", 2, "empty.bin is empty"),
    ("wrap model.kmodel -o out.bin", 2, "model.kmodel: kmodel V3, not a firmware"),
    ("wrap app.elf -o out.bin", 2, "app.elf: ELF executable"),
    ("wrap erased.bin -o out.bin", 2, "erased.bin: erased flash"),
    ("wrap one.kfpkg -o out.bin", 2, "one.kfpkg: kfpkg package (1 file besides"),
    # run: option ranges are checked before anything runs
    ("run model.kmodel -i x.npy --top -3", 2, "--top"),
    ("run model.kmodel -i x.npy --threshold 5", 2, "--threshold"),
    ("run model.kmodel -i x.npy --nms -1", 2, "--nms"),
]


@pytest.mark.parametrize(("command", "code", "needle"), FAILURES, ids=[f[0] for f in FAILURES])
def test_failure_names_culprit_gives_hint_and_writes_nothing(work, capsys, command, code, needle):
    before = {p.name: p.read_bytes() for p in work.iterdir() if p.is_file()}
    _check_failure(capsys, command.split(), code, needle)
    after = {p.name: p.read_bytes() for p in work.iterdir() if p.is_file()}
    assert after == before  # no output written, none clobbered, no temp file left
    assert not (work / "x").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["pack", "-o", "out.bin", "0x300000", "model.kmodel", "--raw-at", "0x400000"],
        ["pack", "-o", "out.bin", "0", "fw15.bin", "0x180000", "model.kmodel"],
        ["pack", "-o", "new.kfpkg", "0", "fw15.bin", "0x180000", "model.kmodel"],
        ["model", "prep-flash", "model.kmodel", "-o", "new.kmodel", "-a", "0xFF0000"],
        # --force writes despite layout errors, but never a package no reader accepts
        ["pack", "-o", "new.kfpkg", "--force", "0x100000000", "model.kmodel"],
    ],
)
def test_failed_pack_or_prep_leaves_no_file(work, capsys, argv):
    assert main(argv) == 2
    capsys.readouterr()
    assert (work / "out.bin").read_bytes() == b"precious"
    assert not (work / "new.kfpkg").exists() and not (work / "new.kmodel").exists()


def test_check_layout_acceptance(work, capsys):
    assert main(["check-layout", "0", "fw15.bin", "0x180000", "model.kmodel"]) == 2
    out, err = capsys.readouterr()
    assert "fw15.bin" in err and "model.kmodel" in err and "overlap" in err
    assert main(["check-layout", "0", "maixpy.bin", "0x180000", "model.kmodel"]) == 0
    out, err = capsys.readouterr()
    assert "maixpy.bin" in out and "can grow 79,452 B" in out


def test_read_kfpkg_on_a_directory_is_an_input_error(work):
    with pytest.raises(KflashError) as e:
        read_kfpkg(work / "adir")
    assert e.value.exit_code == 2 and "adir" in e.value.message and e.value.hint


def test_outputs_get_normal_permissions_and_keys_stay_private(work, capsys):
    old = os.umask(0o022)
    try:
        assert main(["pack", "-o", "app.kfpkg", "0x300000", "model.kmodel"]) == 0
        assert main(["wrap", "fw15.bin", "-o", "app.img"]) == 0
        assert main(["model", "keygen", "new.key"]) == 0
    finally:
        os.umask(old)
    out = capsys.readouterr().out
    assert stat.S_IMODE((work / "app.kfpkg").stat().st_mode) == 0o644
    assert stat.S_IMODE((work / "app.img").stat().st_mode) == 0o644
    assert stat.S_IMODE((work / "new.key").stat().st_mode) == 0o600
    assert (work / "new.key").read_text().strip() not in out  # only the key id is printed
    assert "wrote app.kfpkg (1 file)\n" in out


def test_image_info_does_not_promise_a_loader_for_later_kmodels(work, capsys):
    assert main(["image-info", "v9.kmodel"]) == 0
    out = capsys.readouterr().out
    assert "kmodel V9" in out and "nothing on a K210" in out and "kpu.load" not in out


def test_json_envelope_carries_layout_warnings(work, capsys):
    code = main(["--json", "check-layout", "0", "maixpy.bin", "0x180000", "model.kmodel"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and any("can grow 79,452 B" in w for w in doc["warnings"])


def test_unwrap_says_a_wrong_aes_key_cannot_be_detected(work, capsys):
    key = ["--key-hex", "00112233445566778899aabbccddeeff"]
    assert main(["wrap", "fw15.bin", "-o", "enc.img", *key]) == 0
    assert main(["unwrap", "enc.img", "-o", "plain.bin", *key]) == 0
    out, err = capsys.readouterr()
    assert "wrong key cannot be detected" in err and "00112233" not in out + err


@pytest.mark.parametrize("option", ["--out-dir", "--layers"])
def test_run_unwritable_output_directory_is_an_input_error(work, capsys, option):
    v5 = KMODELS / "generated_v5"
    argv = ["run", str(v5 / "tiny1_k210.kmodel"), "-i", str(v5 / "tiny1_input_u8.npy")]
    _check_failure(capsys, [*argv, option, "fw15.bin/sub"], 2, f"{option} fw15.bin/sub")


@pytest.mark.parametrize(
    ("command", "needle"),
    [
        # a 128-bit AES key in hex is 32 bytes of text: not a raw 256-bit seal key
        ("model seal model.kmodel -o out.bin --key-file aes.key", "expected 64 hex digits"),
        # 16 hex digits are 16 bytes of text: not a raw 128-bit AES key
        ("wrap fw15.bin -o out.bin --key-file half.key", "got 16 hex digits"),
    ],
)
def test_hex_key_file_of_raw_key_length_is_not_taken_as_raw_bytes(work, capsys, command, needle):
    (work / "aes.key").write_text("00112233445566778899aabbccddeeff")
    (work / "half.key").write_text("0011223344556677")
    printed = _check_failure(capsys, command.split(), 2, needle)
    assert (work / "out.bin").read_bytes() == b"precious"
    assert "0011223344" not in printed  # the key is never echoed


def test_raw_binary_key_files_still_work(work, capsys):
    (work / "raw.key").write_bytes(bytes(range(16)))
    (work / "raw32.key").write_bytes(bytes(range(100, 132)))
    assert main(["wrap", "fw15.bin", "-o", "a.img", "--key-file", "raw.key"]) == 0
    assert main(["model", "seal", "model.kmodel", "-o", "m.sealed", "--key-file", "raw32.key"]) == 0


def test_forced_second_swap_is_reported_as_the_plain_form(work, capsys):
    assert main(["model", "prep-flash", "model.kmodel", "-o", "be.kmodel"]) == 0
    capsys.readouterr()
    assert main(["model", "prep-flash", "be.kmodel", "-o", "again.kmodel", "--force"]) == 0
    out, err = capsys.readouterr()
    assert (work / "again.kmodel").read_bytes() == (work / "model.kmodel").read_bytes()
    assert "plain kmodel V3" in out and "kpu.load_flash(" not in out
    assert "already word-swapped" in err


def test_check_layout_warns_about_a_truncated_kmodel_only(work, capsys):
    (work / "cut.kmodel").write_bytes(MNIST.read_bytes()[:1000])
    yolo = KMODELS / "v3" / "yolo_20classes_nncase-v0.1.0-rc5.kmodel"  # 4-byte short last body
    argv = ["--json", "check-layout", "0x300000", "cut.kmodel", "0x600000", str(yolo)]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    damaged = [f for f in doc["result"]["findings"] if f["code"] == "kmodel-damaged"]
    assert len(damaged) == 1 and damaged[0]["message"].startswith("cut.kmodel looks damaged: ")
    assert damaged[0]["hint"] and damaged[0]["severity"] == "warning"


def test_prep_flash_warns_about_an_unaligned_address(work, capsys):
    assert (
        main(["--json", "model", "prep-flash", "model.kmodel", "-o", "be.kmodel", "-a", "0x600001"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert any("0x600001 is not 4 KiB aligned" in w and "0x600000" in w for w in doc["warnings"])
