"""Which nncase release wrote a V5 file: detection, the option to name it, the errors."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from kflashpy import runtime
from kflashpy.cli import main
from kflashpy.errors import FormatError, NotImplementedOpError, UsageError
from kflashpy.model import stackvm as S
from kflashpy.model.info import model_info
from kflashpy.model.v5 import parse_v5, stackvm_codes

CORPUS = Path(__file__).parent / "fixtures" / "v5corpus"
GENERATED = Path(__file__).parent / "fixtures" / "kmodels" / "generated_v5"


def _guess(path: Path, named: str | None = None) -> S.ReleaseGuess:
    model = parse_v5(path.read_bytes())
    return S.guess_release([c for _, _, c in stackvm_codes(model)], named)


def test_each_release_is_among_the_candidates_of_its_own_files() -> None:
    """Every corpus file is read by the release that wrote it (no false rejection)."""
    for path in sorted(CORPUS.glob("*/*.kmodel")):
        guess = _guess(path)
        assert path.parent.name in guess.candidates, (path, guess.reasons)


def test_unary_of_nncase_1_0_is_told_apart_from_1_9_sigmoid() -> None:
    """1.0's unary (function 29, op abs) also decodes as 1.9's sigmoid plus a nop; the
    stack check rejects the nop reading, so a 1.0 file is not run as a sigmoid."""
    guess = _guess(CORPUS / "1.0" / "Abs-float.kmodel")
    assert guess.candidates == ("1.0",)
    assert "nop" in guess.reasons["1.9"].message
    assert guess.describe() == "nncase 1.0 (the only release whose numbering reads this code)"


def test_a_file_several_releases_read_the_same_way_is_not_ambiguous() -> None:
    guess = _guess(CORPUS / "1.9" / "Max-float.kmodel")
    assert not guess.ambiguous and guess.release == "1.9"
    assert guess.describe() == "nncase 1.4-1.9 (the code reads the same under each)"


def test_a_float_conv_readable_by_halide_and_reference_releases_is_ambiguous() -> None:
    """The 1.1 and 1.3 wheels write this float Conv byte for byte alike, and their
    simulators disagree (Halide kernel vs reference): the guess says so; a file only
    Halide releases read, or one without a conv2d, is not ambiguous."""
    one_one = CORPUS / "1.1" / "Conv-float.kmodel"
    assert one_one.read_bytes() == (CORPUS / "1.3" / "Conv-float.kmodel").read_bytes()
    guess = _guess(one_one)
    assert guess.ambiguous and guess.conv_differs and guess.release == "1.5"
    assert guess.describe() == (
        "ambiguous: nncase 1.1-1.5 read this code the same way, but compute its float "
        "conv2d in different orders (Halide kernels up to 1.1); assumed 1.5 (name the "
        "release to override)"
    )
    assert not _guess(CORPUS / "1.0" / "Conv-float.kmodel").ambiguous
    assert not _guess(CORPUS / "1.1" / "Add-float.kmodel").conv_differs


def test_an_ambiguous_file_says_what_was_assumed() -> None:
    """Tensor function 12 after three addresses: gather_nd from commit 42e77dc to 1.2,
    gather from 1.3, both with seven one-byte fields; nothing in the bytes tells them
    apart (1.0's pre-releases number logistic there, which has no instruction)."""
    shape = bytes([0x02]) + struct.pack("<i", 1) + bytes([0x31, 0, 1])  # stshape r0 = (1,)
    address = bytes([0x17, 0, 0]) + struct.pack("<I", 0)  # lea.buffer input+0
    code = shape + address * 3 + bytes([0x5E]) + struct.pack("<H", 12) + bytes(7)
    guess = S.guess_release([code])
    assert guess.candidates == S.RELEASES[3:] and guess.ambiguous and guess.release == "1.9"
    assert {S.isa(r).function(12) for r in guess.candidates} == {"gather", "gather_nd"}
    assert guess.describe() == (
        "ambiguous: nncase 1.0-42e77dc to 1.9 can all read this code, differently; assumed 1.9 "
        "(name the release to override)"
    )
    assert S.guess_release([code], "1.0").describe() == "nncase 1.0 (named by the caller)"


def test_naming_the_release() -> None:
    path = CORPUS / "1.0" / "Abs-float.kmodel"
    data = np.load(path.with_suffix(".npz"))
    model = runtime.load(path, nncase_release="1.0")
    assert model.notes[0] == "written by nncase 1.0 (named by the caller)"
    np.testing.assert_array_equal(model.run([data["input0"]])[0], data["output0"])
    with pytest.raises(FormatError, match="does not fit the numbering of nncase 1.9: .*nop"):
        runtime.load(path, nncase_release="1.9")
    with pytest.raises(UsageError, match="'2.0' is not a 1.x release"):
        runtime.load(path, nncase_release="2.0")


def test_unsupported_function_names_release_and_function(monkeypatch) -> None:
    """A function without a handler is refused at load, naming it and the release."""
    from kflashpy.runtime import v5

    monkeypatch.delitem(v5.TENSOR, "unary")
    with pytest.raises(NotImplementedOpError) as info:
        runtime.load(CORPUS / "1.9" / "Sin-float.kmodel")
    assert "written by nncase 1.3-1.9" in info.value.message
    assert "does not support tensor.unary (function 0x26)" in info.value.message


def test_damaged_only_when_no_release_reads_it() -> None:
    data = bytearray((CORPUS / "1.9" / "Sin-float.kmodel").read_bytes())
    model = parse_v5(bytes(data))
    mod, fn, code = stackvm_codes(model)[0]
    at = mod.section(".text").body.offset + fn.entrypoint
    data[at] = 0x7F  # no 1.x opcode
    with pytest.raises(FormatError) as info:
        runtime.load(bytes(data))
    msg = info.value.message
    assert f"at byte {at:#x}" in msg and "inconsistent with every nncase 1.x release" in msg
    assert "opcode 0x7f does not exist in nncase 1.9" in msg


def test_info_and_run_agree_on_a_cpu_only_model(capsys, tmp_path) -> None:
    path = CORPUS / "1.9" / "Sin-float.kmodel"
    info = model_info(path.read_bytes(), str(path))
    assert info["format"]["modules"] == ["stackvm"]
    assert info["format"]["nncase_release"] == "nncase 1.3-1.9 (the code reads the same under each)"
    note = "no K210 module: the model runs entirely on the CPU (stackvm), not the KPU"
    assert note in info["notes"]
    x = tmp_path / "x.npy"
    np.save(x, np.load(path.with_suffix(".npz"))["input0"])
    assert main(["run", str(path), "-i", str(x), "--no-save"]) == 0
    out = capsys.readouterr().out
    assert note in out and "written by nncase 1.3-1.9" in out
    assert main(["model", "info", str(path), "--nncase-release", "1.8"]) == 0
    out = capsys.readouterr().out
    assert "nncase release: nncase 1.8 (named by the caller)" in out and note in out


def test_a_model_with_a_k210_module_has_no_cpu_only_note() -> None:
    path = GENERATED / "tiny1_k210.kmodel"
    info = model_info(path.read_bytes(), str(path))
    assert not any("entirely on the CPU" in n for n in info["notes"])
    assert runtime.load(path).notes == [
        "written by nncase 1.6-1.9 (the code reads the same under each)"
    ]
