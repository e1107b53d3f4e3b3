"""nncase 1.x's tflite_detection_postprocess kernel
(``src/kernels/cpu/reference/tflite_detection_postprocess.cpp``), bit for bit.

TFLite's SSD post-processing as nncase writes it:

- boxes are decoded from (y, x, h, w) encodings against (y, x, h, w) anchors in double
  (``exp`` from the C library), then rounded to float corners;
- per-class NMS: scores >= the threshold, sorted by decreasing score (stable), greedily
  kept while IoU (float32, nncase's order of operations) with a kept box is not above
  the threshold, at most ``max_detections`` each. The regular mode runs it for the first
  ``num_classes - 1`` classes (nncase's loop stops one short) and merges each class's
  picks into the running list (new picks before older ones of equal score); the fast
  mode runs it once on each anchor's best class score;
- outputs: corners (ymin, xmin, ymax, xmax), class, score per detection, and the
  count. The regular mode zero-fills the unused detections; the fast mode leaves them
  as they were, as nncase does.

The fast mode with several classes per anchor orders them with ``std::partial_sort``,
whose order among equal scores libstdc++ does not define; such ties are refused.
"""

from __future__ import annotations

import ctypes

import numpy as np

from .nncase_math import _libm

F32 = np.float32


def _c_exp(values: np.ndarray) -> np.ndarray:
    fn = _libm().exp
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
    return np.array([fn(float(v)) for v in values.reshape(-1)], np.float64).reshape(values.shape)


def decode(boxes: np.ndarray, anchors: np.ndarray, scale) -> np.ndarray:
    """(N, 4) (y, x, h, w) encodings and anchors -> (N, 4) float corners."""
    b, a = boxes.astype(np.float64), anchors.astype(np.float64)
    sy, sx, sh, sw = (float(F32(s)) for s in scale)
    yc = (b[:, 0] / sy * a[:, 2] + a[:, 0]).astype(F32)
    xc = (b[:, 1] / sx * a[:, 3] + a[:, 1]).astype(F32)
    hh = (0.5 * _c_exp(b[:, 2] / sh) * a[:, 2]).astype(F32)
    hw = (0.5 * _c_exp(b[:, 3] / sw) * a[:, 3]).astype(F32)
    return np.stack([yc - hh, xc - hw, yc + hh, xc + hw], axis=1).astype(F32)


def _iou(corners: np.ndarray, i: int, js: np.ndarray) -> np.ndarray:
    """compute_iou(i, j) for every j in ``js`` (float32, nncase's operation order)."""
    bi, bj = corners[i], corners[js]
    area_i = (bi[2] - bi[0]) * (bi[3] - bi[1])
    area_j = (bj[:, 2] - bj[:, 0]) * (bj[:, 3] - bj[:, 1])
    ymin = np.where(bi[0] < bj[:, 0], bj[:, 0], bi[0])  # std::max(i, j)
    xmin = np.where(bi[1] < bj[:, 1], bj[:, 1], bi[1])
    ymax = np.where(bj[:, 2] < bi[2], bj[:, 2], bi[2])  # std::min(i, j)
    xmax = np.where(bj[:, 3] < bi[3], bj[:, 3], bi[3])
    dy, dx = (ymax - ymin).astype(F32), (xmax - xmin).astype(F32)
    inter = (np.where(dy < 0, F32(0), dy) * np.where(dx < 0, F32(0), dx)).astype(F32)
    with np.errstate(all="ignore"):
        iou = (inter / ((area_i + area_j).astype(F32) - inter)).astype(F32)
    return np.where((area_i <= 0) | (area_j <= 0), F32(0), iou)


def nms(corners: np.ndarray, scores: np.ndarray, score_thr, iou_thr, limit: int) -> list[int]:
    """nncase's NMS SingleClass: the kept box indices, best first."""
    keep = np.flatnonzero(scores >= F32(score_thr))
    order = keep[np.argsort(-scores[keep], kind="stable")]
    n, out_size = order.size, min(order.size, limit)
    active = np.ones(n, bool)
    selected: list[int] = []
    for i in range(n):
        if not active[i:].any() or len(selected) >= out_size:
            break
        if not active[i]:
            continue
        selected.append(int(order[i]))
        active[i] = False
        rest = np.flatnonzero(active[i + 1 :]) + i + 1
        if rest.size:
            active[rest[_iou(corners, int(order[i]), order[rest]) > F32(iou_thr)]] = False
    return selected


def regular(corners, scores, num_classes: int, max_det: int, per_class: int, score_thr, iou_thr):
    """Regular NMS: (detections as (anchor, class, score), count)."""
    ncwb = scores.shape[1]
    offset = ncwb - num_classes
    room = max_det + min(per_class, max_det)
    picks: list[tuple[float, int]] = []  # (score, anchor * ncwb + column)
    for col in range(num_classes - 1):
        cs = scores[:, col + offset]
        sel = nms(corners, cs, score_thr, iou_thr, max_det)
        if not sel:
            continue
        if len(picks) + len(sel) > room:
            raise ValueError(f"{len(picks) + len(sel)} detections overflow nncase's {room}")
        new = [(cs[s], s * ncwb + col + offset) for s in sel]
        merged = new + picks  # a stable sort: equal scores keep new picks first
        order = sorted(range(len(merged)), key=lambda k: -merged[k][0])
        picks = [merged[k] for k in order][:max_det]
    return [(idx // ncwb, idx % ncwb - offset, score) for score, idx in picks]


def fast(corners, scores, num_classes: int, max_det: int, per_anchor: int, score_thr, iou_thr):
    """Fast NMS on each anchor's best classes: (anchor, [classes], [scores]) per pick."""
    offset = scores.shape[1] - num_classes
    cls_scores = scores[:, offset : offset + num_classes]
    k = min(per_anchor, num_classes)
    if k == 1:
        top = np.argmax(cls_scores, axis=1)[:, None]  # the first maximum, like nncase's loop
    else:
        ranked = np.argsort(-cls_scores, axis=1, kind="stable")
        ranked_scores = np.take_along_axis(cls_scores, ranked, axis=1)
        if (np.diff(ranked_scores[:, : k + 1], axis=1) == 0).any():  # sorted: ties adjoin
            raise NotImplementedError("equal class scores, ordered by std::partial_sort")
        top = ranked[:, :k]
    best = np.take_along_axis(cls_scores, top[:, :1], axis=1)[:, 0]
    sel = nms(corners, best, score_thr, iou_thr, max_det)
    return [(s, top[s], np.take(cls_scores[s], top[s])) for s in sel]
