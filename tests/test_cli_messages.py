"""Messages and output: -q keeps results, 80 columns, quiet SDK quirks, labelled virtual times."""

from __future__ import annotations

import io
import json
import os
import sys
import zipfile
from pathlib import Path

import pytest
from support.paths import KMODELS

from kflashpy.cli import main
from kflashpy.cli.session import Session, short_label

FIXTURES = "tests/fixtures/kmodels"
MODEL = f"{FIXTURES}/v3/mnist_maixpy-scripts.kmodel"
SIM = "sim://?board=maix-bit"


def test_quiet_hides_logs_but_never_the_result(tmp_path, capsys):
    assert main(["-q", "image-info", MODEL]) == 0
    assert "kmodel V3" in capsys.readouterr().out
    data = tmp_path / "d.bin"
    data.write_bytes(os.urandom(2000))
    assert main(["-q", "-p", SIM, "burn", "0x100000", str(data)]) == 0
    out, err = capsys.readouterr()
    assert "verified: on-board SHA-256" in out and err == ""


def test_json_progress_goes_to_stderr_on_a_terminal_only(monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert Session(json=True).progress() is not None
    assert Session(json=True, quiet=True).progress() is None
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert Session(json=True).progress() is None


def test_progress_labels_are_file_names():
    assert short_label("/home/me/build/out/maixpy.bin") == "maixpy.bin"
    assert short_label("dist/app.kfpkg:model.kmodel") == "app.kfpkg:model.kmodel"
    assert short_label("sim://?board=maix-bit") == "sim://?board=maix-bit"


def test_tables_fit_80_columns(tmp_path, capsys):
    for args in (["boards"], ["boards", "--firmwares"]):
        assert main(args) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines and max(map(len, lines)) <= 80, args
    fw = tmp_path / "fw.bin"
    fw.write_bytes(b"\x21\xa8\xef\xbe\xad\xde" + bytes(1000))
    model = tmp_path / "yolo_v2_face.kmodel"
    model.write_bytes(Path(MODEL).read_bytes())
    args = ["check-layout", "0", str(fw), "0x300000", str(model), "--layout", "maixpy"]
    assert main(args) == 0
    table = capsys.readouterr().out.split("\ninfo:")[0].splitlines()
    assert len(table) >= 4 and max(map(len, table)) <= 80
    assert "fw.bin" in table[1] and "boot image" in " ".join(table[1:4])  # wrapped, not cut


@pytest.mark.parametrize("model", sorted(KMODELS.glob("*/*.kmodel")), ids=lambda p: p.name)
def test_model_info_fits_80_columns_and_v_shows_every_column(model, capsys):
    assert main(["model", "info", str(model)]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 80
    assert main(["-v", "model", "info", str(model)]) == 0
    verbose = capsys.readouterr().out
    assert "layers:" in verbose and " act " in verbose and " body " in verbose


def test_times_from_the_virtual_board_are_labelled(tmp_path, capsys):
    data = tmp_path / "d.bin"
    data.write_bytes(os.urandom(2000))
    assert main(["-p", SIM, "--no-progress", "burn", "0x100000", str(data)]) == 0
    assert "(virtual time)" in capsys.readouterr().out
    out = tmp_path / "r.bin"
    assert main(["-p", SIM, "read", "--addr", "0", "--size", "4k", "-o", str(out)]) == 0
    assert "(virtual time)" in capsys.readouterr().out


def test_a_model_in_maixpy_spiffs_is_a_warning(capsys):
    assert main(["--json", "check-layout", "0xD00000", MODEL, "--layout", "maixpy"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("file system" in w for w in doc["warnings"])


def test_sdk_hex_address_lists_are_noted_only_with_v(tmp_path, capsys):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(
            "flash-list.json",
            '{"version": "0.1.0", "files": [{"address": 0x300000, "bin": "d.bin", '
            '"sha256Prefix": false}]}',
        )
        zf.writestr("d.bin", b"\x01" * 100)
    pkg = tmp_path / "sdk.kfpkg"
    pkg.write_bytes(buf.getvalue())
    assert main(["info", str(pkg)]) == 0
    assert "hex address" not in capsys.readouterr().err
    assert main(["info", str(pkg), "-v"]) == 0
    assert "hex address literals" in capsys.readouterr().err


def test_run_accepts_a_long_number_list(capsys):
    numbers = ",".join(["1.5"] * 400)  # longer than any file name may be
    assert main(["run", f"{FIXTURES}/v3/iris_nncase-v0.1.0-rc5.kmodel", "-i", numbers]) == 2
    assert "has 400 values, the model input (1, 4) needs 4" in capsys.readouterr().err


def test_yolo2_class_list_of_the_wrong_length_is_named(tmp_path, capsys):
    classes = tmp_path / "classes.txt"
    classes.write_text("cat\ndog\nbird\n")
    args = ["run", f"{FIXTURES}/v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel", "--no-save",
            "-i", f"{FIXTURES}/inputs/dog_320x240.bmp", "--resize", "--yolo2", "voc",
            "--classes", str(classes)]  # fmt: skip
    assert main(args) == 2
    assert "has 3 class names, the model's output has 20 classes" in capsys.readouterr().err
