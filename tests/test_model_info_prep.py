"""`model info` and `model prep-flash` (library and CLI)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from support.paths import KMODELS as FIXTURES

from kflashpy.cli import main
from kflashpy.errors import FormatError, UsageError
from kflashpy.model import detect, swap_words
from kflashpy.model.info import model_info, ram_estimates
from kflashpy.model.prep import prep_flash, recommended_batch

ALL = sorted(FIXTURES.glob("*/*.kmodel"))
V3_YOLO = FIXTURES / "v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel"
V3_IRIS = FIXTURES / "v3/iris_nncase-v0.1.0-rc5.kmodel"
V4_SLIM = FIXTURES / "v4/slim-320_nncase-v0.2.0-beta4.kmodel"
V4_IRIS = FIXTURES / "v4/iris_nncase-v0.2.0-beta4.kmodel"
V5_TINY1 = FIXTURES / "generated_v5/tiny1_k210.kmodel"


def _json(capsys, argv):
    code = main(["--json", *argv])
    doc = json.loads(capsys.readouterr().out)
    return code, doc


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_info_every_fixture_text_and_json(path, capsys):
    assert main(["model", "info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "layers:" in out and "firmwares:" in out and "RAM kpu.load" in out
    code, doc = _json(capsys, ["model", "info", str(path)])
    assert code == 0 and doc["status"] == 0
    r = doc["result"]
    assert r["format"]["version"] in (3, 4, 5) and r["layers"] and r["inputs"] and r["outputs"]
    assert {v["firmware"] for v in r["firmwares"]} >= {"maixpy", "maixpy-minimum"}


def test_info_facts_yolo():
    r = model_info(V3_YOLO.read_bytes(), "yolo.kmodel")
    mem = r["memory"]
    assert mem["model_size"] == 1352592 and mem["largest_body"] == 532992
    assert mem["main_mem"] == 43752
    assert mem["kpu_load"] == 1352592 + 43752
    assert mem["load_flash_single"] == 43752 + 532992 + 256 + 4352 + 192
    assert mem["kpu_ram_peak"] <= 2 * 1024 * 1024
    rows = r["layers"]
    assert rows[1]["kernel"] == "3x3 dw" and rows[0]["pool"] == "max_2_s2"
    assert rows[-1]["op"] == "CHANNELWISE_DEQUANTIZE" and rows[-1]["device"] == "CPU"
    verdict = {v["firmware"]: v for v in r["firmwares"]}
    # 1.36 MB model on a 1 MiB-heap build: only load_flash fits; on minimum (3 MiB) kpu.load
    assert verdict["maixpy"]["loads"] == "load_flash"
    assert verdict["maixpy-minimum"]["loads"] == "yes"


def test_info_verdicts_v4_and_v5():
    v4 = {v["firmware"]: v for v in model_info(V4_SLIM.read_bytes(), "slim")["firmwares"]}
    assert v4["maixpy-minimum"]["loads"] == "no" and "V3 only" in v4["maixpy-minimum"]["why"]
    assert v4["maixpy"]["loads"] == "yes"
    v5 = {v["firmware"]: v for v in model_info(V5_TINY1.read_bytes(), "t")["firmwares"]}
    assert v5["maixpy"]["loads"] == "no" and "no nncase 1.x runtime" in v5["maixpy"]["why"]


def test_info_swapped_and_opaque(tmp_path, capsys):
    swapped = swap_words(V4_IRIS.read_bytes())
    r = model_info(swapped, "iris_be.kmodel")
    assert r["format"]["swapped"] and any("word-swapped" in n for n in r["notes"])
    p = tmp_path / "face.smodel"
    p.write_bytes(bytes(range(200)))
    code, doc = _json(capsys, ["model", "info", str(p)])
    assert code == 0 and doc["result"]["format"]["opaque"]
    assert {v["loads"] for v in doc["result"]["firmwares"]} <= {"unknown", "no"}
    bad = tmp_path / "x.kmodel"
    bad.write_bytes(b"hello")
    assert main(["model", "info", str(bad)]) == 2
    assert "not a kmodel" in capsys.readouterr().err


def test_ram_estimates_formula():
    assert ram_estimates(100, 1000, 50) == {
        "kpu_load": 1100,
        "load_flash_single": 100 + 306 + 4544,
        "load_flash_dual": 100 + 612 + 4544,
    }
    assert recommended_batch(100) == 0x400 and recommended_batch(10**6) == 0x10000
    assert recommended_batch(0x8000) == 0x8000


# --- prep-flash ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [p for p in ALL if "generated_v5" not in str(p)], ids=lambda p: p.name
)
def test_prep_flash_roundtrip(path, tmp_path, capsys):
    data = path.read_bytes()
    out = tmp_path / "m_be.kmodel"
    assert main(["model", "prep-flash", str(path), "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "kpu.load_flash(0x600000, " in text
    swapped = out.read_bytes()
    assert detect(swapped).swapped and swapped[:4] in (b"\0\0\0\x03", b"KMDL")
    # what the MaixPy loader checks, on the bytes as they arrive in RAM (swapped back)
    ram = swap_words(swapped)
    assert ram[: len(data)] == data
    magic, second, _flags, target = struct.unpack_from("<4I", ram)
    if magic == 3:  # V3 path: arch (third word) must be 0
        assert struct.unpack_from("<I", ram, 8)[0] == 0
    else:  # V4 path: 'KMDL', version 4, target 0/1
        assert (magic, second) == (0x4B4D444C, 4) and target <= 1
    # second pass refused; --unswap gives the input back; --force swaps again
    assert main(["model", "prep-flash", str(out), "-o", str(tmp_path / "x")]) == 2
    assert "already" in capsys.readouterr().err
    back = tmp_path / "plain.kmodel"
    assert main(["model", "prep-flash", "--unswap", str(out), "-o", str(back)]) == 0
    assert back.read_bytes() == data
    again = tmp_path / "again.kmodel"
    assert main(["model", "prep-flash", "--force", str(out), "-o", str(again)]) == 0
    assert again.read_bytes() == data


def test_prep_flash_json_and_buffer_choice(tmp_path, capsys):
    out = tmp_path / "y.kmodel"
    code, doc = _json(capsys, ["model", "prep-flash", str(V3_YOLO), "-o", str(out),
                               "-a", "0x300000", "--firmware", "maixpy"])  # fmt: skip
    r = doc["result"]
    assert code == 0 and r["dual_buffer"] is False  # dual (1.1 MB) > 1 MiB typical heap
    assert r["call"] == "kpu.load_flash(0x300000, 0, 0x0, 60000000)"
    code, doc = _json(capsys, ["model", "prep-flash", str(V3_YOLO), "-o", str(out),
                               "--firmware", "maixpy-minimum"])  # fmt: skip
    assert doc["result"]["call"] == "kpu.load_flash(0x600000, 1, 0x10000, 60000000)"


def test_prep_flash_refusals(tmp_path):
    with pytest.raises(FormatError, match="V5"):
        prep_flash(V5_TINY1.read_bytes(), "tiny1")
    with pytest.raises(FormatError, match="opaque"):
        prep_flash(V3_IRIS.read_bytes(), "iris.smodel")
    with pytest.raises(UsageError, match="plain"):
        prep_flash(V3_IRIS.read_bytes(), "iris", unswap_input=True)
    # a header longer than the 4096 bytes the loader reads
    big = bytearray(V4_IRIS.read_bytes())
    n_const = struct.unpack_from("<I", big, 16)[0]
    const_end = 40 + 16 * 3 + n_const
    big[const_end:const_end] = bytes(4096)
    struct.pack_into("<I", big, 16, n_const + 4096)
    with pytest.raises(FormatError, match="4096"):
        prep_flash(bytes(big), "big")
    # a body at an offset that is not a multiple of 4
    odd = bytearray(V4_IRIS.read_bytes())
    odd[const_end:const_end] = bytes(2)
    struct.pack_into("<I", odd, 16, n_const + 2)
    with pytest.raises(FormatError, match="multiple of 4"):
        prep_flash(bytes(odd), "odd")


def test_prep_flash_pads_ragged_length():
    data = V3_IRIS.read_bytes() + b"\x01\x02"  # trailing bytes, length % 4 == 2
    prep = prep_flash(data, "iris")
    assert prep.pad_bytes == 2 and len(prep.data) == len(data) + 2
    assert swap_words(prep.data)[: len(data)] == data


def test_prep_flash_cli_errors(tmp_path, capsys):
    out = str(tmp_path / "o")
    assert main(["model", "prep-flash", str(V5_TINY1), "-o", out]) == 2
    assert "V5" in capsys.readouterr().err and not Path(out).exists()
    assert main(["model", "prep-flash", str(V3_IRIS), "-o", out, "--spi-speed", "90000000"]) == 2
    assert main(["model", "prep-flash", str(tmp_path / "missing"), "-o", out]) == 2


def test_info_v1_recognised_not_parsed(tmp_path, capsys):
    p = tmp_path / "old.kmodel"
    p.write_bytes(struct.pack("<5I", 1, 1, 2, 0, 76) + bytes(200))
    code, doc = _json(capsys, ["model", "info", str(p)])
    r = doc["result"]
    assert code == 0 and r["format"]["version"] == 1 and "layers" not in r
    assert {v["firmware"]: v["loads"] for v in r["firmwares"]}["maixpy"] == "no"
    assert main(["model", "info", str(p)]) == 0
    assert "V1 model; this firmware loads" in capsys.readouterr().out
