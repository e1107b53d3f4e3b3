"""Every vector of the V5 op-coverage corpus through the host runtime.

tests/fixtures/v5corpus/<release>/<case>-<float|uint8>.kmodel were compiled by that
nncase release's wheel and ``.npz`` holds the input and nncase's own simulator output
(see make_corpus.py there); ``asm-<function>`` vectors are hand-assembled files for
the tensor functions no importer emits (make_asm_corpus.py), run by the same simulator. Each vector is either bit-exact, or refused at load with
an "unsupported" error naming what is missing: a run that returns something else
fails. The per-release, per-op table is printed at the end of the session
(``pytest -rA -s tests/test_runtime_v5_corpus.py``) and kept in docs/runtime.md.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from kflashpy import runtime
from kflashpy.errors import NotImplementedOpError
from kflashpy.model.stackvm import HALIDE_CONV_RELEASES

CORPUS = Path(__file__).parent / "fixtures" / "v5corpus"
VECTORS = sorted(CORPUS.glob("*/*.kmodel"))
RESULTS: dict[str, dict[str, str]] = defaultdict(dict)
#: the wheel each corpus directory comes from (1.0's wheel is its beta1)
WHEEL = {"1.0": "1.0-beta1"}


def _ulps(a: np.ndarray, b: np.ndarray) -> int:
    """Largest distance in units of the last place between two float32 arrays."""
    ia = a.astype(np.float32).view(np.int32).astype(np.int64)
    ib = b.astype(np.float32).view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return int(np.abs(ia - ib).max(initial=0))


def _aliases_input(path: Path) -> bool:
    """Whether an entry output lies in the input pool (memory location 0)."""
    from kflashpy.model.v5 import parse_v5

    return any(mr.location == 0 for mr in parse_v5(path.read_bytes()).entry.outputs)


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("path", VECTORS, ids=_id)
def test_vector(path: Path) -> None:
    release, case = path.parent.name, path.stem
    data = np.load(path.with_suffix(".npz"))
    inputs = [data[k] for k in sorted(data.files) if k.startswith("input")]
    expected = [data[k] for k in sorted(data.files) if k.startswith("output")]
    try:
        wheel = WHEEL.get(release, release)
        # hand-assembled files (make_asm_corpus.py) may read the same under several
        # releases' numbering: they are run as the release whose simulator made them
        model = runtime.load(path, nncase_release=release if case.startswith("asm-") else None)
        guess = model.release
        if guess.conv_differs and wheel in HALIDE_CONV_RELEASES:
            # its bytes cannot tell the Halide releases (1.0-1.1) from the later one the
            # runtime assumes, whose conv2d adds in another order: a user names it
            model = runtime.load(path, nncase_release=wheel)
        elif guess.ambiguous and guess.release != release:
            # the runtime says so and asks for the release: a user names it, so does this
            assert release in guess.candidates and "name the release" in guess.describe()
            model = runtime.load(path, nncase_release=release)
        outs = model.run(inputs)
    except NotImplementedOpError as e:
        RESULTS[release][case] = "refused: " + e.message.split(": ", 1)[-1]
        assert "not support" in e.message and "nncase" in e.message
        return
    worst = max(
        (_ulps(o, e) if e.dtype.kind == "f" else int(np.abs(o.astype(np.int64) - e).max()))
        for o, e in zip(outs, expected, strict=True)
    )
    if _aliases_input(path):
        # the output is the input buffer itself (nncase <= 1.7.1 compile a pure reshape so):
        # their simulator hands back a fresh output tensor it never writes, so the
        # expected bytes are undefined; the model's meaning is the input, reshaped
        RESULTS[release][case] = "input (simulator output undefined)"
        for o, x in zip(outs, inputs, strict=False):
            np.testing.assert_array_equal(o.reshape(-1), x.reshape(-1))
        return
    named = " (release named)" if model.release.named and not case.startswith("asm-") else ""
    RESULTS[release][case] = ("bit-exact" if worst == 0 else f"WRONG ({worst} ulp)") + named
    for o, e in zip(outs, expected, strict=True):
        assert o.shape == tuple(e.shape) and o.dtype == e.dtype
        np.testing.assert_array_equal(o.view(np.uint8), e.view(np.uint8), err_msg=str(path))


def test_corpus_covers_the_issue_ops() -> None:
    """The ops that were silently wrong have vectors (float and uint8) for nncase 1.9."""
    names = {p.stem for p in VECTORS if p.parent.name == "1.9"}
    for op in ("Max", "Min", "Pow", "Sin", "Sign", "Sub", "Div", "Sigmoid"):
        assert {f"{op}-float", f"{op}-uint8"} <= names, op


def pytest_terminal_summary_table() -> str:
    """The per-release, per-op table of the vectors run in this session."""
    lines = []
    for release in sorted(RESULTS):
        for case, verdict in sorted(RESULTS[release].items()):
            lines.append(f"{release:5} {case:24} {verdict}")
    return "\n".join(lines)


@pytest.fixture(scope="module", autouse=True)
def _print_table():
    yield
    if RESULTS:
        print("\nV5 corpus (release, case, verdict):\n" + pytest_terminal_summary_table())


@pytest.mark.parametrize(
    "case", ["Conv-float", "DepthwiseConv-float", "Gemm-float", "Gemm-uint8", "MatMul-float"]
)
def test_nncase_1_1_float_convs_bit_exact_once_the_release_is_named(case: str) -> None:
    """The 1.1 wheel's conv2d vectors also read as later releases (1.2, or 1.1-1.5; the
    runtime assumes the newest, and the reference kernel): named as 1.1 they take the
    Halide kernel's fused order and match bit for bit, as assumed they do not."""
    path = CORPUS / "1.1" / f"{case}.kmodel"
    data = np.load(path.with_suffix(".npz"))
    want = data["output0"].view(np.uint32)
    (got,) = runtime.load(path, nncase_release="1.1").run([data["input0"]])
    np.testing.assert_array_equal(got.view(np.uint32), want)
    (other,) = runtime.load(path).run([data["input0"]])
    assert np.any(other.view(np.uint32) != want)
