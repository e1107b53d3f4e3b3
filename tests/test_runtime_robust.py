"""Damaged kmodels: the runtime answers with a located FormatError, never a crash or a hang.

The regression cases are QA's reproducers (scratch/qa/runtime_crashes), rebuilt here from
the fixtures with the same byte substitutions; each raised ValueError, IndexError,
KeyError, TypeError or AxisError (``kflashpy run`` exit 4) before. The fuzz test mutates
the small fixtures (truncation, byte flips in headers and bodies, random 32-bit counts)
and accepts only KflashError from load + run.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kflashpy import runtime
from kflashpy.cli import main
from kflashpy.errors import FormatError, InputError, KflashError
from kflashpy.runtime import inputs

FIX = Path(__file__).resolve().parent / "fixtures" / "kmodels"
V5_IRIS, V5_TINY1 = "generated_v5/iris_k210.kmodel", "generated_v5/tiny1_k210.kmodel"
V4_IRIS, V3_IRIS = "v4/iris_nncase-v0.2.0-beta4.kmodel", "v3/iris_nncase-v0.1.0-rc5.kmodel"

#: reproducer -> (fixture, {file offset: new byte}, fragments the message must contain)
REPRODUCERS = {
    "crash_01": (V5_IRIS, {429: 48, 798: 221, 999: 14, 1334: 194},
                 ["instruction tensor.conv2d", "at byte 0x395", "negative entry"]),
    "crash_02": (V5_IRIS, {133: 20, 1090: 120, 1407: 248},
                 ["entry function at byte 0x60", "input0", "does not fit its 16-byte input pool"]),
    "crash_03": (V5_IRIS, {478: 248, 1254: 45},
                 ["at byte 0x4e4", "inconsistent with every nncase 1.x release",
                  "stshape takes a number from the stack"]),
    "crash_04": (V5_TINY1, {166: 46, 1045: 51},
                 ["entry function at byte 0x60", "output0", "does not fit"]),
    "crash_05": ("generated_v5/tiny2_k210.kmodel", {498: 106, 688: 182, 2010: 215, 2336: 196},
                 ["at byte 0x1f0", "inconsistent with every nncase 1.x release",
                  "tensor function 0x6a0b does not exist in nncase 1.9"]),
    "crash_06": (V5_IRIS, {553: 91, 1297: 203}, ["instruction tensor.conv2d", "at byte 0x506"]),
    "crash_07": (V4_IRIS, {176: 247, 227: 132, 265: 168, 624: 125},
                 ["node 2 (transpose)", "at byte 0x240", "field perm (125, 1, 3, 2)"]),
    "crash_08": (V5_IRIS, {1461: 136},
                 ["at byte 0x5b1", "tensor.copy reads shape register 136, never set"]),
    "crash_09": (V4_IRIS, {99: 209, 353: 64, 588: 33},
                 ["node 2 (transpose)", "at byte 0x240", "field in_shape (1, 1, 3, 10)"]),
    "crash_11": (V5_IRIS, {360: 92, 494: 173, 1095: 76, 1188: 230},
                 ["at byte 0x445", "stpaddings takes a number from the stack"]),
    "crash_12": (V4_IRIS, {513: 213, 547: 229, 567: 85},
                 ["node 1 (matmul)", "at byte 0x1d0", "field a_rows x a_cols (54529, 4)"]),
    "crash_13": (V5_TINY1, {89: 148, 362: 153, 855: 237},
                 ["instruction tensor.call", "at byte 0x188", "shape register 10027010"]),
    "crash_14": (V3_IRIS, {33: 184, 305: 142, 407: 76},
                 ["output 0 at byte 0x1c", "main_mem_usage"]),
    "crash_15": (V5_TINY1, {402: 127, 474: 91, 822: 170, 993: 251},
                 ["at byte 0x188", "tensor.call pops an empty stack"]),
    "crash_16": (V5_TINY1, {397: 189, 1063: 12},
                 ["instruction tensor.call", "function_id 12386304"]),
    "crash_17": (V5_IRIS, {416: 153, 734: 82},
                 ["at byte 0x2d7", "tensor.pad reads paddings register 82, never set"]),
}  # fmt: skip


def _mutated(fixture: str, subs: dict[int, int]) -> bytes:
    data = bytearray((FIX / fixture).read_bytes())
    for off, value in subs.items():
        assert data[off] != value  # the substitution really changes the fixture
        data[off] = value
    return bytes(data)


def _load_and_run(source) -> None:
    model = runtime.load(source)
    model.run([np.zeros(s.shape, s.dtype) for s in model.inputs])
    model.outputs  # noqa: B018 - V4 settles output shapes with a dry run


@pytest.mark.parametrize("case", sorted(REPRODUCERS))
def test_reproducer_gives_located_format_error(case, tmp_path) -> None:
    fixture, subs, fragments = REPRODUCERS[case]
    path = tmp_path / f"{case}.kmodel"
    path.write_bytes(_mutated(fixture, subs))
    with pytest.raises(FormatError) as info:
        _load_and_run(path)
    msg = info.value.message
    assert msg.startswith(f"{path}: ")
    for fragment in fragments:
        assert fragment in msg
    assert "re-export" in info.value.hint


def test_cli_exits_2_with_message_not_traceback(tmp_path, capsys) -> None:
    fixture, subs, _ = REPRODUCERS["crash_07"]
    model = tmp_path / "bad.kmodel"
    model.write_bytes(_mutated(fixture, subs))
    assert main(["run", str(model), "-i", "5.1,3.8,1.9,0.4", "--no-save"]) == 2
    err = capsys.readouterr().err
    assert "node 2 (transpose)" in err and "Traceback" not in err


def test_a_runtime_bug_still_surfaces(monkeypatch) -> None:
    """The op boundary converts only what damaged fields cause; a TypeError stays a bug."""
    from kflashpy.runtime import v4

    def broken(m, node, mem, rules):
        raise TypeError("a bug")

    monkeypatch.setitem(v4._HANDLERS, 0x0C, broken)  # transpose, node 2 of the V4 iris
    with pytest.raises(TypeError, match="a bug"):
        _load_and_run(FIX / V4_IRIS)


def test_stackvm_function_without_text_section_runs_empty() -> None:
    """No .text and a 0-byte function: the model reads it as no code (an empty run),
    the runtime used to crash on the missing section (AttributeError)."""
    # iris: stackvm function 0's text_size (bytes 124-127) 888 -> 0, ".text" -> ".Text"
    model = runtime.load(_mutated(V5_IRIS, {124: 0, 125: 0, 545: ord("T")}))
    outs = model.run([np.zeros(s.shape, s.dtype) for s in model.inputs])
    assert [o.shape for o in outs] == [s.shape for s in model.outputs]


def test_kpu_download_batch_count_does_not_hang() -> None:
    """16776961 batches of an empty map used to loop for minutes."""
    model = runtime.load(FIX / V5_TINY1)
    download = model.parsed.modules[1].functions[0].ops[3]
    assert download.name == "kpu_download"
    download.params["in_shape"] = (16776961, 0, 8, 8)
    with pytest.raises(FormatError, match=r"op 3 \(kpu_download\).*batches"):
        model.run([np.zeros(s.shape, s.dtype) for s in model.inputs])


def test_huge_memory_pool_is_refused_before_allocation() -> None:
    data = bytearray((FIX / V3_IRIS).read_bytes())
    data[20:24] = struct.pack("<I", 0xFFFFFFF0)  # header main_mem_usage
    with pytest.raises(FormatError, match="main_mem_usage needs 4294967280 bytes"):
        runtime.load(bytes(data))


# --- fuzzing -----------------------------------------------------------------------------

FUZZ_FIXTURES = [V3_IRIS, V4_IRIS, V5_IRIS, V5_TINY1, "generated_v5/tiny2_k210.kmodel"]
_DATA = {name: (FIX / name).read_bytes() for name in FUZZ_FIXTURES if (FIX / name).is_file()}
_COUNTS = [0, 1, 2, 3, 4, 255, 0x100, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]


@st.composite
def damaged_models(draw) -> bytes:
    data = bytearray(_DATA[draw(st.sampled_from(sorted(_DATA)))])
    kind = draw(st.sampled_from(["truncate", "header", "body", "count"]))
    if kind == "truncate":
        return bytes(data[: draw(st.integers(0, len(data) - 1))])
    for _ in range(draw(st.integers(1, 4))):
        hi = min(len(data), 256) if kind == "header" else len(data)
        off = draw(st.integers(0, hi - 4))
        if kind == "count":  # a 32-bit field (count, size, offset) takes an extreme value
            value = draw(st.sampled_from(_COUNTS) | st.integers(0, 2**32 - 1))
            data[off : off + 4] = struct.pack("<I", value)
        else:
            data[off] ^= draw(st.integers(1, 255))
    return bytes(data)


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(damaged_models())
def test_fuzzed_models_raise_only_kflash_errors(data) -> None:
    try:
        with np.errstate(all="ignore"):
            _load_and_run(data)
    except KflashError:
        pass


# --- number-list inputs --------------------------------------------------------------------


def test_parse_floats() -> None:
    np.testing.assert_array_equal(inputs.parse_floats(" 5.1, 3.8 1.9,0.4 "),
                                  np.array([5.1, 3.8, 1.9, 0.4], np.float32))  # fmt: skip
    assert inputs.parse_floats("dog.bmp") is None
    assert inputs.parse_floats(" , ") is None


def test_run_accepts_a_number_list(tmp_path, capsys) -> None:
    model = FIX / V3_IRIS
    assert main(["run", str(model), "-i", "5.1,3.8,1.9,0.4", "-o", str(tmp_path)]) == 0
    assert "top: #0 16.0778, #1 5.60766" in capsys.readouterr().out
    y = np.load(tmp_path / "iris_nncase-v0.1.0-rc5.output0.npy")
    np.testing.assert_allclose(y.reshape(-1), [16.077795, 5.607656, -2.071745], rtol=1e-5)


def test_run_number_list_with_wrong_count(capsys) -> None:
    assert main(["run", str(FIX / V4_IRIS), "-i", "5.1,3.8", "--no-save"]) == 2
    assert "has 2 values, the model input (1, 1, 1, 4) needs 4" in capsys.readouterr().err


def test_missing_input_says_no_such_file(tmp_path, capsys) -> None:
    missing = tmp_path / "nothere.png"
    assert main(["run", str(FIX / V3_IRIS), "-i", str(missing), "--no-save"]) == 2
    err = capsys.readouterr().err
    assert f"{missing}: no such file" in err and "cannot feed" not in err


def test_number_list_for_u8_input_must_be_integral() -> None:
    np.testing.assert_array_equal(
        inputs.load_input("0,255,7,1", (1, 4), np.uint8), [[0, 255, 7, 1]]
    )
    with pytest.raises(InputError, match="not all integers in 0..255"):
        inputs.load_input("0.5,1,2,3", (1, 4), np.uint8)
