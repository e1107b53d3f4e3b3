import json
import zipfile

import pytest
from support.paths import KMODELS

from kflashpy.cli import main
from kflashpy.image.bootimage import unwrap_boot_image, wrap_boot_image

V4 = KMODELS / "v4" / "iris_nncase-v0.2.0-beta4.kmodel"
KEY_HEX = "00112233445566778899aabbccddeeff"


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "maixpy.bin").write_bytes(b"\x21\xa8\xef\xbe\xad\xde" + bytes(1536 * 1024 - 6))
    (tmp_path / "small.bin").write_bytes(b"\x21\xa8\xef\xbe\xad\xde" + bytes(1000))
    (tmp_path / "model.kmodel").write_bytes(V4.read_bytes())
    return tmp_path


def run_json(capsys, *args):
    code = main(["--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_done_criterion_collision_names_both_files(files, capsys):
    code = main(["check-layout", "0", "maixpy.bin", "0x180000", "model.kmodel"])
    out, err = capsys.readouterr()
    assert code == 2
    assert "maixpy.bin" in out and "model.kmodel" in out and "overlap" in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors[0].startswith("error: maixpy.bin (0x00000000-0x00180024) and model.kmodel")
    assert len(errors) == len(set(errors)) and "Traceback" not in err  # each printed once


def test_check_layout_json_and_address_spellings(files, capsys):
    for spelling in ("0x300000", "3145728", "3M"):
        code, doc = run_json(
            capsys,
            "check-layout",
            "--layout",
            "maixpy",
            "0",
            "maixpy.bin",
            spelling,
            "model.kmodel",
        )
        assert code == 0 and doc["status"] == 0
        regions = doc["result"]["regions"]
        assert [r["address"] for r in regions] == [0, 0x300000]
        assert regions[0]["write_size"] == 1536 * 1024 + 37 and regions[0]["sha256Prefix"]
        assert regions[1]["content"]["kmodel"]["version"] == 4
    code, doc = run_json(capsys, "check-layout", "64k", "model.kmodel")
    assert code == 0 and doc["result"]["regions"][0]["address"] == 65536


def test_check_layout_declared_loader_and_firmware_file(files, capsys):
    code = main(
        [
            "check-layout",
            "0x300000",
            "model.kmodel",
            "--load-flash",
            "0x300000",
            "--layout",
            "maixpy",
        ]
    )
    assert code == 2 and "word-swapped" in capsys.readouterr().err
    code = main(["check-layout", "0x180000", "model.kmodel", "--firmware", "maixpy.bin"])
    assert code == 2 and "overlap" in capsys.readouterr().err
    code = main(["check-layout", "0x180000", "model.kmodel", "--firmware", "maixpy.bin", "--force"])
    assert code == 0


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["check-layout", "0x300000"], "no file after it"),
        (["check-layout", "nonsense.bin"], "neither an address"),
        (["check-layout", "0", "missing.bin"], "missing.bin: cannot read"),
        (["check-layout", "--layout", "nope", "0", "small.bin"], "unknown firmware layout"),
        (["info", "small.bin"], "not a readable zip"),
        (["unwrap", "small.bin", "-o", "x"], "flag byte"),
        (["wrap", "small.bin", "-o", "x", "--key-hex", "1234"], "32 hex digits"),
    ],
)
def test_malformed_input_is_exit_2_with_one_line_reason(files, capsys, args, fragment):
    assert main(args) == 2
    err = capsys.readouterr().err
    first = err.splitlines()[0]
    assert first.startswith("error: ") and fragment in first and "Traceback" not in err


def test_image_info_kinds(files, capsys):
    (files / "erased.bin").write_bytes(b"\xff" * 8192)
    (files / "image.bin").write_bytes(wrap_boot_image(b"\x21\xa8" + bytes(100)))
    code, doc = run_json(
        capsys, "image-info", "small.bin", "model.kmodel", "erased.bin", "image.bin"
    )
    kinds = [f["kind"] for f in doc["result"]["files"]]
    assert code == 0 and kinds == ["firmware", "kmodel", "erased", "boot-image"]
    small = doc["result"]["files"][0]
    assert small["footprint"] == 4096
    assert doc["result"]["files"][3]["boot_image"] == {
        "flag": 2,
        "aes": False,
        "dio": True,
        "payload_size": 102,
        "sha_valid": True,
        "trailing": 0,
    }
    assert main(["image-info", "model.kmodel"]) == 0
    assert "kpu.load" in capsys.readouterr().out


def test_wrap_unwrap_with_key_never_echoes_it(files, capsys, monkeypatch):
    monkeypatch.setenv("KFLASHPY_AES_KEY", KEY_HEX)
    assert main(["wrap", "small.bin", "-o", "enc.img", "--key-env", "KFLASHPY_AES_KEY"]) == 0
    out, err = capsys.readouterr()
    assert KEY_HEX not in out + err and "OTP" in err
    img = (files / "enc.img").read_bytes()
    assert img[0] == 3
    assert (
        unwrap_boot_image(img, key=bytes.fromhex(KEY_HEX))[:1006]
        == (files / "small.bin").read_bytes()
    )
    (files / "key.txt").write_text(KEY_HEX)
    assert main(["unwrap", "enc.img", "-o", "dec.bin", "--key-file", "key.txt"]) == 0
    assert (files / "dec.bin").read_bytes()[:1006] == (files / "small.bin").read_bytes()
    assert main(["wrap", "enc.img", "-o", "again.img"]) == 2  # already a boot image
    assert main(["wrap", "small.bin", "-o", "q.img", "--io-mode", "qio"]) == 0
    assert (files / "q.img").read_bytes()[0] == 0


def test_pack_info_unpack(files, capsys):
    code = main(["pack", "-o", "app.kfpkg", "0", "small.bin", "0x300000", "model.kmodel"])
    assert code == 0 and "wrote app.kfpkg" in capsys.readouterr().out
    with zipfile.ZipFile(files / "app.kfpkg") as zf:
        assert sorted(zf.namelist()) == ["flash-list.json", "model.kmodel", "small.bin"]
        manifest = json.loads(zf.read("flash-list.json"))
    assert manifest["files"][0] == {"address": 0, "bin": "small.bin", "sha256Prefix": True}
    assert manifest["files"][1]["sha256Prefix"] is False
    code, doc = run_json(capsys, "info", "app.kfpkg")
    assert code == 0 and [f["address"] for f in doc["result"]["files"]] == [0, 0x300000]
    assert main(["unpack", "app.kfpkg", "-d", "out"]) == 0
    assert (files / "out" / "model.kmodel").read_bytes() == V4.read_bytes()
    assert main(["unpack", "app.kfpkg", "-d", "out"]) == 2
    # a package is accepted by check-layout and by pack (repacking)
    assert main(["check-layout", "app.kfpkg", "0x400000", "model.kmodel"]) == 0
    assert main(["pack", "-o", "re.kfpkg", "app.kfpkg", "--raw-at", "0"]) == 2  # raw fw at 0
    capsys.readouterr()


def test_pack_refuses_a_bad_layout_and_writes_nothing(files, capsys):
    assert main(["pack", "-o", "bad.kfpkg", "0", "maixpy.bin", "0x180000", "model.kmodel"]) == 2
    assert not (files / "bad.kfpkg").exists()
    assert (
        main(
            ["pack", "-o", "forced.kfpkg", "0", "maixpy.bin", "0x180000", "model.kmodel", "--force"]
        )
        == 0
    )
    assert (files / "forced.kfpkg").exists()


def test_boards_listing(capsys):
    code, doc = run_json(capsys, "boards")
    assert code == 0 and doc["result"]["boards"]["maix-go"]["wiring"]["name"] == "go-openec"
    code, doc = run_json(capsys, "boards", "--firmwares")
    assert doc["result"]["firmwares"]["maixpy-minimum"]["kmodel_versions"] == [3]
    assert main(["boards"]) == 0 and "maixduino" in capsys.readouterr().out
