"""Error paths of the rarely emitted stackvm functions and base instructions.

Their results are checked bit for bit by the hand-assembled vectors of the V5 corpus
(tests/test_runtime_v5_corpus.py, ``asm-*``); here small files written with
tests/support/v5asm.py check that what nncase leaves undefined, or what no kernel here
reproduces, is refused by name instead of answered.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.v5asm import LOC_INPUT, LOC_OUTPUT, Program, Tensor, kmodel, place, strides

from kflashpy import runtime
from kflashpy.errors import FormatError, NotImplementedOpError
from kflashpy.runtime.ops import nncase_random

F32 = np.dtype("<f4")


def _run(p: Program, inputs: list[np.ndarray], outs) -> list[np.ndarray]:
    model = kmodel(p, place((x.dtype, x.shape) for x in inputs), place(outs), data_size=64)
    return runtime.load(model, nncase_release=p.release).run(inputs)


def test_lea_gp_is_refused_naming_release_and_register() -> None:
    p = Program("1.9").op("lea.gp", gpid=3, offset=0).addr(LOC_OUTPUT).op("pop").op("pop")
    with pytest.raises(NotImplementedOpError, match=r"lea.gp \(general register 3.*nncase 1.9"):
        _run(p, [], [(F32, (1,))])


def _random(seed: float, datatype: int = 9) -> Program:
    p = Program("1.9").shape(0, (2, 3)).addr(LOC_OUTPUT)
    return p.tensor("random_normal", datatype_dest=datatype, rshape_dest=0, mean=0.0, std=1.0,
                    seed=seed)  # fmt: skip


@pytest.mark.parametrize("seed", [-1.0, float("nan"), float("inf")])
def test_random_with_an_undefined_seed_is_refused(seed: float) -> None:
    with pytest.raises(NotImplementedOpError, match="tensor.random_normal with seed"):
        _run(_random(seed), [], [(F32, (2, 3))])


def test_random_of_another_datatype_is_refused() -> None:
    with pytest.raises(NotImplementedOpError, match="random_normal of datatype 8"):
        _run(_random(1.0, datatype=8), [], [(F32, (2, 3))])


def test_random_sequences_do_not_depend_on_the_count() -> None:
    """More values only extend the sequence (the polar method redraws pairs)."""
    long = nncase_random.normal(5000, 0.0, 1.0, 42.0)
    assert np.array_equal(nncase_random.normal(7, 0.0, 1.0, 42.0), long[:7])
    assert abs(float(long.mean())) < 0.1 and 0.9 < float(long.std()) < 1.1
    u = nncase_random.uniform(1000, -1.0, 3.0, 0.0)  # seed 0 runs as 1
    assert np.array_equal(u, nncase_random.uniform(1000, -1.0, 3.0, 2147483647.0))
    assert u.min() >= -1.0 and u.max() < 3.0


@pytest.mark.parametrize("function", ["batch_to_space", "space_to_batch"])
def test_interior_crops_are_refused(function: str) -> None:
    shape = (4, 1, 2, 2)
    p = Program("1.9").shape(0, shape).shape(1, strides(shape)).shape(2, (2, 2))
    p.paddings(0, [(0, 0, 1), (0, 0, 0)]).addr(LOC_INPUT).addr(LOC_OUTPUT)
    p.tensor(function, datatype=9, rshape_src=0, rstride_src=1, rstride_dest=1, rshape_block=2,
             rpad_crops=0)  # fmt: skip
    with pytest.raises(NotImplementedOpError, match=f"tensor.{function} with interior padding"):
        _run(p, [np.zeros(shape, F32)], [(F32, shape)])


def _roi(mode: int, datatype: int = 9) -> Program:
    p = Program("1.9").shape(0, (1, 1, 4, 4)).shape(1, (1, 1, 2, 2))
    p.addr(LOC_INPUT, 0).addr(LOC_INPUT, 64).addr(LOC_INPUT, 80).addr(LOC_OUTPUT)
    return p.tensor("roi_align", datatype=datatype, rshape_src=0, rshape_dest=1, mode=mode,
                    spatial_scale=1.0, sampling_ratio=1)  # fmt: skip


ROI_INPUTS = [np.ones((1, 1, 4, 4), F32), np.array([[0, 0, 2, 2]], F32), np.zeros(1, "<i8")]


def test_roi_align_of_another_datatype_is_refused() -> None:
    with pytest.raises(NotImplementedOpError, match="roi_align of datatype 8"):
        _run(_roi(0, datatype=8), ROI_INPUTS, [(F32, (1, 1, 2, 2))])


def test_roi_align_runs_and_an_unknown_mode_is_named() -> None:
    (y,) = _run(_roi(1), ROI_INPUTS, [(F32, (1, 1, 2, 2))])
    assert np.all(y == 0.25)  # max of the four bilinear products of a constant map
    with pytest.raises(FormatError, match="roi_align_mode op 2 does not exist in nncase 1.9"):
        _run(_roi(2), ROI_INPUTS, [(F32, (1, 1, 2, 2))])


def test_gather_nd_index_outside_the_input_is_damage() -> None:
    x, idx = np.zeros((2, 3), F32), np.array([[1, 3]], "<i4")
    p = Program("1.9").shape(0, x.shape).shape(1, strides(x.shape)).shape(2, (1,))
    p.shape(3, (1,)).shape(4, idx.shape).addr(LOC_INPUT).addr(LOC_OUTPUT).addr(LOC_INPUT, 24)
    p.tensor("gather_nd", datatype=9, rshape_src=0, rshape_dest=2, rstride_src=1,
             rstride_dest=3, rshape_indices=4, batch_dims=0)  # fmt: skip
    with pytest.raises(FormatError, match="gather_nd: an index is outside"):
        _run(p, [x, idx], [(F32, (1,))])


def test_tied_class_scores_in_fast_nms_are_refused() -> None:
    boxes, anchors = np.zeros((1, 2, 4), F32), np.full((2, 4), 0.5, F32)
    scores = np.array([[[0.0, 0.9, 0.9, 0.1], [0.0, 0.5, 0.2, 0.1]]], F32)
    p = Program("1.9").shape(0, boxes.shape).shape(1, scores.shape).shape(2, anchors.shape)
    for t in place((a.dtype, a.shape) for a in (boxes, scores, anchors)):
        p.addr(LOC_INPUT, t.start)
    outs = place([(F32, (1, 4, 4)), (F32, (1, 4)), (F32, (1, 4)), (F32, (1,))])
    for t in outs:
        p.addr(LOC_OUTPUT, t.start)
    p.tensor("tflite_detection_postprocess", box_shape_src=0, score_shape_src=1,
             anchor_shape_src=2, max_detections=2, max_classes_per_detection=2,
             detections_per_class=2, use_regular_non_max_suppression=False,
             nms_score_threshold=0.0, nms_iou_threshold=0.5, num_classes=3, y_scale=1.0,
             x_scale=1.0, h_scale=1.0, w_scale=1.0)  # fmt: skip
    with pytest.raises(NotImplementedOpError, match="equal class scores"):
        _run(p, [boxes, scores, anchors], [(t.dtype, t.shape) for t in outs])


def test_a_real_stored_as_a_64_bit_integer_is_refused() -> None:
    p = Program("1.9").addr(LOC_OUTPUT).r4(1.5).op("stind.i")
    with pytest.raises(NotImplementedOpError, match="stind.i of a real value"):
        _run(p, [], [(np.dtype("<i8"), (1,))])


def test_an_integer_stored_as_a_float_keeps_its_bits() -> None:
    """nncase's stack entry is a union: stind.r4 of an integer stores its low 32 bits."""
    p = Program("1.9").addr(LOC_OUTPUT).i4(0x3FC00000).op("stind.r4")
    model = kmodel(p, [], [Tensor(F32, (1,), 0)])
    (y,) = runtime.load(model, nncase_release="1.9").run([])
    assert y[0] == 1.5


def test_every_function_a_release_can_read_has_a_handler() -> None:
    """No tensor function with an instruction in any 1.x release is refused by name."""
    from kflashpy.model.stackvm import RELEASES, isa
    from kflashpy.runtime.v5 import TENSOR

    for release in RELEASES:
        table = isa(release)
        readable = {f for f in table.functions if table.layout(f) is not None}
        assert readable <= set(TENSOR), (release, sorted(readable - set(TENSOR)))
