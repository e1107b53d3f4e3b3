"""Stackvm tensor functions that few models hold (and nncase's ONNX importer emits only
some of: compress, random_normal, random_uniform, roi_align, gru).

nncase's runtime executes them all (``src/runtime/stackvm/ops/``), so a file that holds
one must run here too: batch_to_space, space_to_batch, gather_nd, compress,
random_normal, random_uniform, roi_align, gru, tflite_detection_postprocess. The
handlers follow :mod:`.stackvm_tensor`'s conventions (operands popped in nncase's
order, fields by their ``op_reader.h`` names); their tests run hand-assembled files
through nncase's simulator (tests/fixtures/v5corpus/make_asm_corpus.py).
"""

from __future__ import annotations

import numpy as np

from ..model.stackvm import isa
from .model import limit
from .ops import nncase_random, nncase_rnn, nncase_roi, nncase_tflite_nms
from .stackvm import F32, LOC_RDATA, StackVM, strided
from .stackvm_tensor import _dense, _dense_strides, _write_dense

I32 = np.dtype("<i4")
F32D = np.dtype("<f4")


def _space_args(vm: StackVM, f: dict, what: str):
    """The input, block shape and per-spatial-axis paddings/crops both ops share."""
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    block = tuple(int(b) for b in vm.shape(f["rshape_block"]))
    pads = vm.padding(f["rpad_crops"])
    if len(pads) < len(block) or not 0 < len(block) < x.ndim or 0 in block:
        raise ValueError(f"{what}: block {block} and {len(pads)} crops for a {x.ndim}-d input")
    if any(p[2] for p in pads[: len(block)]):
        raise vm.fail(f"tensor.{what} with interior padding")
    return output, x, block, [(b, a) for b, a, _ in pads[: len(block)]]


def _batch_to_space(vm: StackVM, f: dict):
    """nncase batch_to_space: batch b = (i_0, .., i_{M-1}, n) over (block..., N/prod);
    spatial index h*block_i + i_i, then the crops cut (the last M axes are spatial)."""
    output, x, block, crops = _space_args(vm, f, "batch_to_space")
    m, n_block = len(block), int(np.prod(block))
    if x.shape[0] % n_block:
        raise ValueError(f"batch_to_space: batch {x.shape[0]} is not a multiple of {n_block}")
    s = x.ndim - m
    y = x.reshape(*block, x.shape[0] // n_block, *x.shape[1:])
    perm = [m, *range(m + 1, m + s)]
    for i in range(m):
        perm += [m + s + i, i]
    y = y.transpose(perm).reshape(
        x.shape[0] // n_block, *x.shape[1:s], *(x.shape[s + i] * block[i] for i in range(m))
    )
    cut = tuple(slice(b, y.shape[s + i] - a) for i, (b, a) in enumerate(crops))
    y = y[(slice(None),) * s + cut]
    return "batch_to_space", vm.out(output, y, f["datatype"], f["rstride_dest"])


def _space_to_batch(vm: StackVM, f: dict):
    """nncase space_to_batch: zero-pad the last M axes, split each into (H/b, b), move
    the block axes to the front; nncase writes the result densely (it ignores the
    output strides)."""
    output, x, block, pads = _space_args(vm, f, "space_to_batch")
    m, s = len(block), x.ndim - len(block)
    padded = np.pad(x, [(0, 0)] * s + pads)
    limit(padded.shape, "padded input")
    if any(padded.shape[s + i] % block[i] for i in range(m)):
        raise ValueError(
            f"space_to_batch: padded shape {padded.shape} is not a multiple of {block}"
        )
    split = [d for i in range(m) for d in (padded.shape[s + i] // block[i], block[i])]
    y = padded.reshape(*padded.shape[:s], *split)
    perm = [s + 2 * i + 1 for i in range(m)] + list(range(s)) + [s + 2 * i for i in range(m)]
    y = np.ascontiguousarray(y.transpose(perm))
    y = y.reshape(int(np.prod(block)) * x.shape[0], *y.shape[m + 1 :])
    return "space_to_batch", _write_dense(output, y)


def _gather_nd(vm: StackVM, f: dict):
    """nncase gather_nd (ONNX GatherND with batch_dims): int32 indices, read densely;
    each index row picks a block of the input. nncase does not wrap negative indices
    (it reads outside the tensor), so they are refused as damage."""
    indices, output, inp = vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, f["datatype"], f["rshape_src"], f["rstride_src"])
    idx = _dense(vm, indices, I32, f["rshape_indices"]).astype(np.int64)
    b = f["batch_dims"]
    k = idx.shape[-1] if idx.ndim else 0
    if idx.ndim < 1 or b >= idx.ndim or b + k > x.ndim or x.shape[:b] != idx.shape[:b]:
        raise ValueError(f"gather_nd of {x.shape} by indices {idx.shape}, batch_dims {b}")
    bounds = np.array(x.shape[b : b + k], np.int64)
    if idx.size and ((idx < 0).any() or (idx >= bounds).any()):
        raise ValueError(f"gather_nd: an index is outside the input's {tuple(bounds)}")
    batch = int(np.prod(x.shape[:b], dtype=np.int64))
    xb = x.reshape(batch, *x.shape[b:])
    rows = idx.reshape(batch, -1, k)
    where = (np.arange(batch)[:, None], *(rows[..., j] for j in range(k)))
    picked = xb[where]
    shape = vm.shape(f["rshape_dest"])
    limit(shape, "output")
    if int(np.prod(shape, dtype=np.int64)) != picked.size:
        raise ValueError(f"gather_nd: output shape {shape} holds {picked.size} values")
    y = picked.reshape(shape)
    return "gather_nd", vm.out(output, y, f["datatype"], f["rstride_dest"])


def _compress(vm: StackVM, f: dict):
    """nncase compress (float32): keep the slices along ``axis`` whose uint8 condition
    is non-zero (positions past the condition's end are dropped); axis == rank means
    the flattened input. The kept values are written one after another."""
    output, condition, inp = vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    x = _dense(vm, inp, F32D, f["input_shape_src"])
    cshape = vm.shape(f["condition_shape_src"])
    if not cshape:
        raise ValueError("compress: the condition has no shape")
    cond = strided(condition, np.dtype("u1"), (cshape[0],), (1,)) != 0
    axis = int(f["axis"])  # a float field, converted to int by the kernel's signature
    if axis == x.ndim:
        flat = x.reshape(-1)
        y = flat[: cond.size][cond[: flat.size]]
    elif 0 <= axis < x.ndim:
        keep = np.zeros(x.shape[axis], bool)
        keep[: min(cond.size, keep.size)] = cond[: keep.size]
        y = np.compress(keep, x, axis=axis).reshape(-1)
    else:
        raise ValueError(f"compress axis {f['axis']} for a {x.ndim}-d input")
    return "compress", _write_dense(output, y)


def _random(vm: StackVM, f: dict, what: str, draw):
    output = vm.pop_addr()
    if f["datatype_dest"] != 9:
        raise vm.fail(f"tensor.{what} of datatype {f['datatype_dest']} (nncase draws float32)")
    why = nncase_random.check_seed(f["seed"])
    if why:
        raise vm.fail(f"tensor.{what} with {why}")
    shape = vm.shape(f["rshape_dest"])
    limit(shape, "output")
    y = draw(int(np.prod(shape, dtype=np.int64))).reshape(shape)
    return what, _write_dense(output, y)


def _random_normal(vm: StackVM, f: dict):
    return _random(vm, f, "random_normal",
                   lambda n: nncase_random.normal(n, f["mean"], f["std"], f["seed"]))  # fmt: skip


def _random_uniform(vm: StackVM, f: dict):
    return _random(vm, f, "random_uniform",
                   lambda n: nncase_random.uniform(n, f["low"], f["high"], f["seed"]))  # fmt: skip


def _roi_align(vm: StackVM, f: dict):
    """nncase roi_align (float32, dense): rois (R, 4) as x1, y1, x2, y2, int64 batch
    indices; the output shape (R, C, PH, PW) comes from its shape register."""
    output, batch_indices, rois, inp = (vm.pop_addr() for _ in range(4))
    if f["datatype"] != 9:
        raise vm.fail(f"tensor.roi_align of datatype {f['datatype']} (nncase runs float32)")
    x = _dense(vm, inp, F32D, f["rshape_src"])
    shape = vm.shape(f["rshape_dest"])
    if x.ndim != 4 or len(shape) != 4 or shape[1] != x.shape[1]:
        raise ValueError(f"roi_align of {x.shape} into {shape}")
    limit(shape, "output")
    n = shape[0]
    boxes = strided(rois, F32D, (n, 4), (4, 1))
    batch = strided(batch_indices, np.dtype("<i8"), (n,), (1,))
    if n and (batch.min() < 0 or batch.max() >= x.shape[0]):
        raise ValueError(f"roi_align: a batch index is outside the input's {x.shape[0]}")
    mode = isa(vm.release).name_of("roi_align_mode", f["mode"])
    y = nncase_roi.roi_align(x, boxes, batch, shape, mode == "avg", f["spatial_scale"],
                             f["sampling_ratio"])  # fmt: skip
    return f"roi_align.{mode}", _write_dense(output, y)


def _gru(vm: StackVM, f: dict):
    """nncase gru (float32, dense): input (seq, batch, in), W (dirs, 3H, in), R (dirs,
    3H, H), B (dirs, 6H), initial h (dirs, batch, H), which nncase updates in place
    (left alone here when it is the read-only .rdata); outputs Y (seq, dirs, batch, H)
    and Y_h (dirs, batch, H)."""
    out_h, out, init_h, b, r, w, inp = (vm.pop_addr() for _ in range(7))
    x = _dense(vm, inp, F32D, f["input_shape_src"])
    wt = _dense(vm, w, F32D, f["w_shape_src"])
    if x.ndim != 3 or wt.ndim != 3 or wt.shape[1] % 3 or wt.shape[2] != x.shape[2]:
        raise ValueError(f"gru of input {x.shape} and weights {wt.shape}")
    dirs, hidden, batch = wt.shape[0], wt.shape[1] // 3, x.shape[1]
    limit((x.shape[0], dirs, batch, hidden), "output")
    rt = strided(r, F32D, (dirs, 3 * hidden, hidden), _dense_strides((dirs, 3 * hidden, hidden)))
    bt = strided(b, F32D, (dirs, 6 * hidden), (6 * hidden, 1))
    h_view = strided(init_h, F32D, (dirs, batch, hidden), _dense_strides((dirs, batch, hidden)))
    h = h_view.copy()
    direction = isa(vm.release).name_of("lstm_direction", f["direction"])
    y = nncase_rnn.gru(x, wt, rt, bt, h, direction == "Reverse",
                       bool(f.get("linear_before_reset", False)))  # 1.8 has no such field  # fmt: skip
    if init_h.buf is not vm.buffers.get(LOC_RDATA):
        h_view[...] = h
    _write_dense(out_h, h)
    return "gru", _write_dense(out, y)


def _tflite_detection_postprocess(vm: StackVM, f: dict):
    """nncase tflite_detection_postprocess (float32, dense): boxes (1, N, 4), scores
    (1, N, classes + background), anchors (N, 4) -> corners, classes, scores, count."""
    n_out, out_scores, out_classes, out_boxes, anchors, scores, boxes = (
        vm.pop_addr() for _ in range(7)
    )
    bshape, sshape = vm.shape(f["box_shape_src"]), vm.shape(f["score_shape_src"])
    n = vm.shape(f["anchor_shape_src"])[0]
    num_classes, max_det = f["num_classes"], f["max_detections"]
    if len(bshape) != 3 or len(sshape) != 3 or bshape[2] != 4 or min(bshape[1], sshape[1]) < n:
        raise ValueError(f"detection postprocess of boxes {bshape}, scores {sshape}, {n} anchors")
    if not 0 < num_classes <= sshape[2] or max_det < 0 or f["max_classes_per_detection"] < 1:
        raise ValueError(f"detection postprocess: {num_classes} classes of {sshape[2]}, "
                         f"{max_det} detections")  # fmt: skip
    box = strided(boxes, F32D, (n, 4), (4, 1))
    anchor = strided(anchors, F32D, (n, 4), (4, 1))
    score = strided(scores, F32D, (n, sshape[2]), (sshape[2], 1))
    scale = (f["y_scale"], f["x_scale"], f["h_scale"], f["w_scale"])
    corners = nncase_tflite_nms.decode(box, anchor, scale)
    thr = (f["nms_score_threshold"], f["nms_iou_threshold"])
    if f["use_regular_non_max_suppression"]:
        picks = nncase_tflite_nms.regular(corners, score, num_classes, max_det,
                                          f["detections_per_class"], *thr)  # fmt: skip
        locs = np.zeros((max_det, 4), F32)
        classes, values = np.zeros(max_det, F32), np.zeros(max_det, F32)
        for k, (anchor_index, cls, value) in enumerate(picks):
            locs[k], classes[k], values[k] = corners[anchor_index], cls, value
        strided(out_boxes, F32D, (max_det, 4), (4, 1))[...] = locs
        strided(out_classes, F32D, (max_det,), (1,))[...] = classes
        strided(out_scores, F32D, (max_det,), (1,))[...] = values
    else:
        try:
            picks = nncase_tflite_nms.fast(corners, score, num_classes, max_det,
                                           f["max_classes_per_detection"], *thr)  # fmt: skip
        except NotImplementedError as e:
            raise vm.fail(f"tensor.tflite_detection_postprocess with {e}") from None
        per = f["max_classes_per_detection"]
        rows = per * len(picks)
        locs = strided(out_boxes, F32D, (rows, 4), (4, 1))
        classes = strided(out_classes, F32D, (rows,), (1,))
        values = strided(out_scores, F32D, (rows,), (1,))
        for k, (anchor_index, cls, value) in enumerate(picks):
            at = slice(per * k, per * k + cls.size)
            locs[at], classes[at], values[at] = corners[anchor_index], cls, value
    count = len(picks)
    strided(n_out, F32D, (), ())[...] = F32(count)
    return "tflite_detection_postprocess", strided(out_boxes, F32D, (count, 4), (4, 1)).copy()


#: tensor function name -> handler (merged with stackvm_tensor.TENSOR by the V5 runtime)
RARE = {
    "batch_to_space": _batch_to_space, "space_to_batch": _space_to_batch,
    "gather_nd": _gather_nd, "compress": _compress, "random_normal": _random_normal,
    "random_uniform": _random_uniform, "roi_align": _roi_align, "gru": _gru,
    "tflite_detection_postprocess": _tflite_detection_postprocess,
}  # fmt: skip
