"""The stackvm tables of kflashpy.model.stackvm against each nncase release's headers.

tests/fixtures/nncase_isa/v1.X.0.json are transcriptions of the public headers of
each kendryte/nncase release tag (see the README there); every number and field the
runtime uses must match the release it claims to come from.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kflashpy.model import stackvm as S

FACTS = Path(__file__).parent / "fixtures" / "nncase_isa"


def facts(release: str) -> dict:
    """The transcription of the tag: "1.9" -> v1.9.0, "1.7.1" -> v1.7.1, "1.0-rc1" ->
    v1.0.0-rc1."""
    number, _, pre = release.partition("-")
    patch = "" if number.count(".") == 2 else ".0"
    return json.loads((FACTS / f"v{number}{patch}{'-' + pre if pre else ''}.json").read_text())


def _norm(name: str) -> str:
    """Header spelling -> ours: "REDUCEARG"/"REDUCE_ARG" -> "reducearg", "LDC_I4" -> "ldci4"."""
    return name.lower().replace("_", "").replace(".", "")


@pytest.mark.parametrize("release", S.RELEASES)
def test_tensor_function_numbers(release: str) -> None:
    header = facts(release)["tensor_function_t"]
    ours = S.TENSOR_FUNCTIONS[release]
    assert {_norm(k): v for k, v in header.items()} == {_norm(n): i for i, n in enumerate(ours)}, (
        f"tensor_function_t of nncase {release}"
    )


@pytest.mark.parametrize("release", S.RELEASES)
def test_opcodes(release: str) -> None:
    header = facts(release)["opcode_t"]
    assert {_norm(k): v for k, v in header.items()} == {
        _norm(name): op for op, (name, _) in S.OPCODES.items()
    }


@pytest.mark.parametrize("release", S.RELEASES)
def test_base_instruction_fields(release: str) -> None:
    layouts = facts(release)["layouts"]
    for op, (name, spec) in S.OPCODES.items():
        if op == S.TENSOR_OPCODE:  # its function field heads every tensor_* layout
            continue
        header = layouts[name.replace(".", "_")]
        assert header[0] == ["opcode", "B"]
        assert [f.split(":") for f in spec.split()] == header[1:], name


@pytest.mark.parametrize("release", S.RELEASES)
def test_tensor_instruction_fields(release: str) -> None:
    """Every tensor function's fields in this release, or none where the release's
    runtime has no reader for it."""
    layouts = facts(release)["layouts"]
    table = S.isa(release)
    for name in table.functions:
        header = layouts.get(f"tensor_{name}")
        ours = table.layout(name)
        if header is None:
            assert ours is None, f"{name} has no reader in nncase {release}"
            continue
        assert header[:2] == [["opcode", "B"], ["funct", "H"]]
        assert ours is not None, f"{name} has a reader in nncase {release}"
        fmt = "".join(t for _, t in header[2:])
        assert list(ours.names) == [n for n, _ in header[2:]], name
        assert ours.struct.format == "<" + fmt, name


ENUMS = {
    "binary_op_t": ("binary", "binary_"),
    "unary_op_t": ("unary", "unary_"),
    "reduce_op_t": ("reduce", "reduce_"),
    "reduce_arg_op_t": ("reduce_arg", "reduce_"),
    "compare_op_t": ("compare", "compare_"),
    "pad_mode_t": ("pad_mode", "pad_"),
    "image_resize_mode_t": ("resize_mode", "image_resize_"),
    "onehot_mode_t": ("onehot_mode", "onehot_"),
    "roi_align_mode_t": ("roi_align_mode", "roi_align_"),
    "lstm_direction": ("lstm_direction", "k"),
}


@pytest.mark.parametrize("release", S.RELEASES)
@pytest.mark.parametrize("enum", sorted(ENUMS))
def test_op_enums(release: str, enum: str) -> None:
    table, prefix = ENUMS[enum]
    header = facts(release)["enums"].get(enum, {})
    isa = S.isa(release)
    for name, number in header.items():
        assert prefix + isa.name_of(table, number) == name, f"{enum} {number} in {release}"
    with pytest.raises(S.UnknownNumber, match=f"nncase {release}"):
        isa.name_of(table, len(header))


def test_the_silent_mappings_are_gone() -> None:
    """The numbers that ran as other ops before (issue 15): 1.9 and 1.0 differ."""
    isa = S.isa("1.9")
    assert [isa.name_of("binary", n) for n in (4, 5, 6)] == ["min", "max", "pow"]
    assert [isa.name_of("unary", n) for n in (11, 12, 16, 17, 18)] == [
        "sign", "sin", "bitwise_not", "logical_not", "erf",
    ]  # fmt: skip
    assert S.isa("1.0").name_of("unary", 11) == "sin"  # no sign yet in 1.0
    with pytest.raises(S.UnknownNumber, match="unary op 18 does not exist in nncase 1.7"):
        S.isa("1.7").name_of("unary", 18)


def test_datatypes_are_the_same_in_every_release() -> None:
    for release in S.RELEASES:
        assert len(facts(release)["datatypes"]) == S.DATATYPE_COUNT


@pytest.mark.parametrize("release", S.RELEASES)
def test_stack_operands(release: str) -> None:
    """What each tensor handler pops, and how many values a padding takes."""
    f = facts(release)
    assert S.isa(release).padding_values == f["padding_values"]
    for name, pops in f["pops"].items():
        assert S.POPS[name] == pops, name
