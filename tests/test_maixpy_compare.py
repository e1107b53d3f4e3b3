"""``kflashpy compare`` end to end against the virtual board's MaixPy personality."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.maixpy import connect, make_flash, sim_url
from support.paths import KMODELS as FIXTURES

from kflashpy.cli import main
from kflashpy.errors import InputError, UsageError, VerifyError
from kflashpy.maixpy import fs
from kflashpy.maixpy.compare import LoadSpec, compare, diff_output, prepare_input, rgb_to_rgb565
from kflashpy.maixpy.errors import KpuError
from kflashpy.model import swap_words

MNIST = FIXTURES / "v3" / "mnist_maixpy-scripts.kmodel"
IRIS3 = FIXTURES / "v3" / "iris_nncase-v0.1.0-rc5.kmodel"
IRIS4 = FIXTURES / "v4" / "iris_nncase-v0.2.0-beta4.kmodel"
SLIM = FIXTURES / "v4" / "slim-320_nncase-v0.2.0-beta4.kmodel"
A_MNIST, A_SWAPPED, A_IRIS4, A_IRIS3, A_SLIM = 0x300000, 0x340000, 0x380000, 0x390000, 0x3A0000
IRIS_IN = "5.1,3.8,1.9,0.4"


@pytest.fixture(scope="module")
def flash(tmp_path_factory):
    return make_flash(
        tmp_path_factory.mktemp("maixpy"),
        {
            A_MNIST: MNIST.read_bytes(),
            A_SWAPPED: swap_words(MNIST.read_bytes()),
            A_IRIS4: IRIS4.read_bytes(),
            A_IRIS3: IRIS3.read_bytes(),
            A_SLIM: SLIM.read_bytes(),
        },
    )


def run(flash, model: Path, spec: LoadSpec, inp: str, **kw):
    url_opts = kw.pop("url", {})
    repl = connect(sim_url(flash, **url_opts))
    return compare(repl, model.read_bytes(), spec, inp, **kw)


# --- passing comparisons ------------------------------------------------------------------


def test_v3_image_model_via_kpu_load_passes(flash):
    rep = run(flash, MNIST, LoadSpec(addr=A_MNIST), "random:7")
    assert rep.passed and rep.version == 3 and rep.input_kind == "gray"
    (out,) = rep.outputs
    assert out.shape == (1, 10) and out.mismatches == 0 and out.max_abs == 0.0


def test_v3_load_flash_reads_the_swapped_model(flash):
    rep = run(flash, MNIST, LoadSpec(addr=A_SWAPPED, load_flash=True), "random:1")
    assert rep.passed and rep.load.startswith("kpu.load_flash(0x340000,")


def test_v4_float_model_passes_and_needs_set_outputs(flash):
    rep = run(flash, IRIS4, LoadSpec(addr=A_IRIS4), IRIS_IN)
    assert rep.passed and rep.version == 4 and rep.input_kind == "floats"
    # without set_outputs MaixPy refuses to run a V4 model: 2013 with its cause
    repl = connect(sim_url(flash))
    with pytest.raises(KpuError) as info:
        repl.exec_raw(f"import KPU as kpu\nt=kpu.load({A_IRIS4})\nkpu.forward(t,[1.0]*4)")
    assert info.value.code == 2013 and "set_outputs" in info.value.hint


def test_v4_rgb565_model_with_two_outputs(flash):
    rep = run(flash, SLIM, LoadSpec(addr=A_SLIM), "random:2")
    assert rep.passed and rep.input_kind == "rgb565"
    assert [o.shape for o in rep.outputs] == [(1, 1, 4420, 2), (17680,)]


def test_model_from_a_file_on_the_board(flash):
    repl = connect(sim_url(flash, maixpy_sd="8M"))
    fs.write_file(repl, "/sd/iris.kmodel", IRIS3.read_bytes())
    rep = compare(repl, IRIS3.read_bytes(), LoadSpec(path="/sd/iris.kmodel"), IRIS_IN)
    assert rep.passed and rep.load == "kpu.load('/sd/iris.kmodel')"


def test_survives_a_looping_boot_py(flash):
    rep = run(flash, MNIST, LoadSpec(addr=A_MNIST), "random:3", url={"maixpy_boot": "loop"})
    assert rep.passed


# --- injected deviations ---------------------------------------------------------------------


def test_flipped_byte_is_reported_at_its_position(flash):
    rep = run(flash, IRIS4, LoadSpec(addr=A_IRIS4), IRIS_IN, url={"maixpy_dev": "flip:0:6"})
    assert not rep.passed
    (out,) = rep.outputs
    assert out.mismatches == 1
    (m,) = out.first
    assert m.index == 1 and m.position == (0, 1) and m.byte_offset == 6


def test_flipped_byte_in_a_u8_output_fails_exactly(flash):
    board = np.arange(10, dtype=np.uint8)
    raw = bytearray(board.tobytes())
    raw[4] ^= 0x01
    d = diff_output(0, bytes(raw), board)
    assert not d.passed and d.atol == 0 and d.mismatches == 1 and d.max_abs == 1.0
    assert d.first[0].byte_offset == 4


def test_other_rounding_rule_gives_many_small_differences(flash):
    rep = run(flash, MNIST, LoadSpec(addr=A_MNIST), "random:7", url={"maixpy_dev": "round:0"})
    (out,) = rep.outputs
    assert not rep.passed and out.mismatches > 1 and out.max_abs < 0.01


@pytest.mark.parametrize(
    ("code", "cause"),
    [(2002, "nothing"), (2006, "heap"), (2013, "set_outputs"), (2015, "V5")],
)
def test_maixpy_error_codes_have_causes(flash, code, cause):
    with pytest.raises(KpuError) as info:
        run(flash, MNIST, LoadSpec(addr=A_MNIST), "random", url={"maixpy_dev": f"err:{code}"})
    assert info.value.code == code and cause in info.value.hint


def test_v4_model_on_a_v3_only_firmware_is_2002(flash):
    with pytest.raises(KpuError) as info:
        run(flash, IRIS4, LoadSpec(addr=A_IRIS4), IRIS_IN, url={"maixpy_v4": "0"})
    assert info.value.code == 2002 and "V3-only" in info.value.hint


def bisect_mnist(flash, deviation: str):
    return run(
        flash, MNIST, LoadSpec(addr=A_MNIST), "random:5", bisect=True, url={"maixpy_dev": deviation}
    ).bisect


def test_bisect_points_at_the_first_differing_layer(flash):
    found = bisect_mnist(flash, "layer:4:3")
    assert found is not None and found.layer == 4 and found.name == "FULLY_CONNECTED"
    assert found.steps <= 5


def test_bisect_when_every_layer_agrees(flash):
    found = bisect_mnist(flash, "flip:0:3")  # only the output copy differs
    assert found is not None and found.all_agree and found.layer is None


def test_wrong_model_at_the_address_is_caught_before_running(flash):
    with pytest.raises(VerifyError, match="does not hold"):
        run(flash, MNIST, LoadSpec(addr=A_IRIS4), "random")
    with pytest.raises(VerifyError, match="word-swapped"):
        run(flash, MNIST, LoadSpec(addr=A_MNIST, load_flash=True), "random")


# --- inputs and options ---------------------------------------------------------------------


def test_image_input_goes_through_rgb565(tmp_path):
    from PIL import Image

    from kflashpy.runtime.inputs import quantize_rgb565

    rgb = np.random.default_rng(0).integers(0, 256, (4, 6, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "x.png")
    inp = prepare_input(str(tmp_path / "x.png"), (1, 3, 4, 6), np.uint8)
    assert inp.kind == "rgb565" and len(inp.payload) == 4 * 6 * 2
    assert np.array_equal(inp.host[0], np.moveaxis(quantize_rgb565(rgb), -1, 0))
    with pytest.raises(InputError, match="6x4"):
        prepare_input(str(tmp_path / "x.png"), (1, 3, 8, 8), np.uint8)


def test_inputs_take_what_run_takes(tmp_path):
    """--resize, --rgb888, number lists and .bin tensors, as `kflashpy run` reads them."""
    from PIL import Image

    from kflashpy.runtime.inputs import load_input

    rgb = np.random.default_rng(1).integers(0, 256, (8, 12, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "big.png")
    shape = (1, 3, 4, 6)
    with pytest.raises(InputError, match="12x8") as info:
        prepare_input(str(tmp_path / "big.png"), shape, np.uint8)
    assert "--resize" in info.value.hint
    inp = prepare_input(str(tmp_path / "big.png"), shape, np.uint8, resize=True)
    want = load_input(tmp_path / "big.png", shape, np.uint8, resize=True)
    assert np.array_equal(inp.host, want) and not inp.notes  # run's bytes, exactly
    exact = prepare_input(str(tmp_path / "big.png"), shape, np.uint8, resize=True, mode="rgb888")
    want888 = load_input(tmp_path / "big.png", shape, np.uint8, mode="rgb888", resize=True)
    assert np.array_equal(exact.host, want888)
    assert exact.payload == inp.payload  # the board still gets the RGB565 frame
    assert "--rgb888" in exact.notes[0]
    # a number list for a u8 image model, and the same bytes as a .bin tensor
    vals = ",".join(str(v) for v in range(48))
    listed = prepare_input(vals, (1, 1, 6, 8), np.uint8)
    assert listed.kind == "gray" and listed.payload == bytes(range(48))
    (tmp_path / "in.bin").write_bytes(bytes(range(48)))
    assert prepare_input(str(tmp_path / "in.bin"), (1, 1, 6, 8), np.uint8).payload == bytes(
        range(48)
    )
    a, b = prepare_input("random:3", shape, np.uint8), prepare_input("random:4", shape, np.uint8)
    assert (
        a.payload != b.payload and a.payload == prepare_input("random:3", shape, np.uint8).payload
    )


def test_rgb565_packing_is_big_endian():
    px = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255]]], np.uint8)
    assert rgb_to_rgb565(px) == bytes.fromhex("f800 07e0 001f".replace(" ", ""))


def test_float_input_count_and_bad_specs():
    with pytest.raises(InputError, match="3 values"):
        prepare_input("1,2,3", (1, 4), np.float32)
    with pytest.raises(InputError, match="no such file"):
        prepare_input("nope.txt", (1, 4), np.float32)
    with pytest.raises(InputError, match="seed"):
        prepare_input("random:x", (1, 4), np.float32)
    with pytest.raises(UsageError):
        LoadSpec(addr=1, path="/sd/m.kmodel")
    with pytest.raises(UsageError):
        LoadSpec(path="/sd/m.kmodel", load_flash=True)


def test_diff_output_size_mismatch_and_nan():
    host = np.array([1.0, np.nan, 3.0], np.float32)
    assert diff_output(0, host.tobytes(), host).passed
    assert not diff_output(0, host.tobytes()[:8], host).passed
    board = np.array([1.0, 2.0, 3.0], np.float32)
    d = diff_output(0, board.tobytes(), host)
    assert not d.passed and d.first[0].index == 1


# --- the command line -------------------------------------------------------------------------


def test_cli_compare_json_pass_and_fail(flash, capsys):
    base = ["compare", str(IRIS4), "--addr", hex(A_IRIS4), "--input", IRIS_IN]
    assert main(["--json", "-p", sim_url(flash), *base]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"]["passed"] and doc["result"]["outputs"][0]["shape"] == [1, 3]
    bad = sim_url(flash, maixpy_dev="flip:0:9")
    assert main(["--json", "-p", bad, *base]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert doc["error"]["kind"] == "compare"
    assert doc["result"]["outputs"][0]["first"][0]["byte_offset"] == 9


def test_cli_human_output_and_board_commands(flash, capsys):
    assert main(["-p", sim_url(flash, maixpy_dev="flip:0:6"), "compare", str(IRIS4),
                 "--addr", hex(A_IRIS4), "--input", IRIS_IN]) == 3  # fmt: skip
    out = capsys.readouterr()
    assert "DIFFERS" in out.out and "(element 1, byte 6)" in out.out and "--bisect" in out.err
    assert main(["-p", sim_url(flash), "board-info"]) == 0
    assert "kmodel V4" in capsys.readouterr().out
    assert main(["-p", sim_url(flash), "repl-verify", hex(A_MNIST), str(MNIST)]) == 0
    assert main(["-p", sim_url(flash), "repl-verify", hex(A_SWAPPED), str(MNIST)]) == 3
    capsys.readouterr()
    assert (
        main(["--json", "-p", sim_url(flash), "verify", "--via-repl", hex(A_MNIST), str(MNIST)])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"]["method"] == "repl" and doc["result"]["regions"][0]["match"]
    assert main(["-p", sim_url(flash, maixpy_dev="err:2006"), "compare", str(MNIST),
                 "--addr", hex(A_MNIST), "--input", "random"]) == 1  # fmt: skip
    assert "ERR_NO_MEM" in capsys.readouterr().err


# --- the REPL's hard reset plays the board's wiring from the data ------------------------------


@pytest.mark.parametrize("board", ["maix-nano", "maix-bit"])
def test_compare_reset_pulses_the_line_the_board_data_names(flash, board, capsys):
    """A trapped boot.py is only escaped by a real reset: the wrong line never resets."""
    from kflashpy.isp import reset
    from kflashpy.target.boards import get_board

    wiring = get_board(board).wiring
    assert reset.run_sequence(board) == reset.from_layout(wiring.run)
    url = sim_url(flash, board=board, maixpy_boot="trap")
    base = ["compare", str(IRIS4), "--addr", hex(A_IRIS4), "--input", IRIS_IN, "--timeout", "2"]
    assert main(["-B", board, "-p", url, *base, "--reset"]) == 0
    assert "board and host agree" in capsys.readouterr().out
    # the other line (BOOT on this wiring) pulsed instead: no reset, no boot line
    other = "D" if wiring.reset_line == "rts" else "R"
    wrong = f"D0 R0 {other}1 W0.1 {other}0"
    assert main(["-B", board, "-p", url, *base, "--reset", "--reset-seq", wrong]) != 0
    assert "init end" in capsys.readouterr().err


def test_cli_bisect_says_when_every_layer_agrees(flash, capsys):
    args = ["compare", str(MNIST), "--addr", hex(A_MNIST), "-i", "random:5", "--bisect"]
    assert main(["-p", sim_url(flash, maixpy_dev="flip:0:3"), *args]) == 3
    out = capsys.readouterr()
    assert "all 11 layers agree" in out.out and "output transfer" in out.out
    assert "rerun with --bisect" not in out.err and "get_output" in out.err
    assert main(["-p", sim_url(flash, maixpy_dev="layer:4:3"), *args]) == 3
    out = capsys.readouterr()
    assert "first differing layer 4 (FULLY_CONNECTED)" in out.out and "layer 4" in out.err


def test_cli_board_without_firmware(tmp_path, capsys):
    blank = tmp_path / "blank.img"
    blank.write_bytes(b"\xff" * (4 << 20))
    u = f"sim://?flash={blank}&flash_size=4M"
    assert main(["-p", u, "board-info", "--timeout", "0.5"]) == 1
    err = capsys.readouterr().err
    assert "no firmware" in err and "boot failed" in err and "burn MaixPy" in err
    assert main(["-p", u, "compare", str(IRIS4), "--addr", "0x300000", "-i", IRIS_IN,
                 "--timeout", "0.5"]) == 1  # fmt: skip
    assert "no firmware" in capsys.readouterr().err


def test_cli_compare_input_options_and_a_model_on_sd(tmp_path, capsys):
    """fs put the model to /sd, then compare --path with run's input options."""
    from PIL import Image
    from support.maixpy import flash16

    card = tmp_path / "card"
    card.mkdir()
    u = f"sim://?flash={flash16(tmp_path)}&maixpy_sd={card}"
    assert main(["-p", u, "fs", "put", str(MNIST), "/sd/mnist.kmodel"]) == 0
    img = tmp_path / "digit.png"
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (56, 56), np.uint8)).save(img)
    base = ["compare", str(MNIST), "--path", "/sd/mnist.kmodel", "-i", str(img)]
    assert main(["-p", u, *base]) == 2
    assert "--resize" in capsys.readouterr().err
    assert main(["--json", "-p", u, *base, "--resize"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"]["passed"] and doc["result"]["load"] == "kpu.load('/sd/mnist.kmodel')"
    vals = ",".join(["0"] * 783 + ["255"])
    assert main(["-p", u, "compare", str(MNIST), "--path", "/sd/mnist.kmodel", "-i", vals]) == 0
    assert "board and host agree" in capsys.readouterr().out
