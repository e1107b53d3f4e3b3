"""YOLO v2 region-layer decoding and box drawing, for looking at detections.

The region output is (anchors*(5+classes), H, W): per anchor the channels tx, ty, tw,
th, objectness, then one score per class (the layout of the Kendryte 20-class example
and of MaixPy's ``kpu.init_yolo2``). Decoding: x = (col + sigmoid(tx))/W, y = (row +
sigmoid(ty))/H, w = exp(tw)*anchor_w/W, h = exp(th)*anchor_h/H, score = sigmoid(obj) *
softmax(classes); boxes over ``threshold`` then greedy per-class NMS on IoU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..fileio import write_atomic

#: Pascal VOC class names (the 20-class example model)
VOC_CLASSES = (
    "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor",
)  # fmt: skip
#: anchors of the Kendryte 20-class example (main.c)
VOC_ANCHORS = (1.08, 1.19, 3.42, 4.41, 6.63, 11.38, 9.42, 5.11, 16.62, 10.52)


@dataclass(frozen=True)
class Box:
    """A detection in relative coordinates (centre x, y, width, height in 0..1)."""

    x: float
    y: float
    w: float
    h: float
    cls: int
    score: float

    def corners(self, width: int, height: int) -> tuple[int, int, int, int]:
        """(left, top, right, bottom) in pixels of an image of that size, clipped."""
        x0 = max(0, int((self.x - self.w / 2) * width))
        y0 = max(0, int((self.y - self.h / 2) * height))
        x1 = min(width - 1, int((self.x + self.w / 2) * width))
        y1 = min(height - 1, int((self.y + self.h / 2) * height))
        return x0, y0, x1, y1


def parse_anchors(text: str) -> tuple[float, ...]:
    """ "1.08,1.19,3.42,4.41,..." -> floats (pairs of width, height in grid cells)."""
    try:
        vals = tuple(float(v) for v in text.replace(" ", ",").split(",") if v)
    except ValueError:
        raise InputError(
            f"anchors {text!r} are not numbers", "give w,h pairs: 1.08,1.19,..."
        ) from None
    if not vals or len(vals) % 2:
        raise InputError(
            f"anchors {text!r}: need an even count (w,h pairs)", "e.g. 1.08,1.19,3.42,4.41"
        )
    return vals


def _iou(a: Box, b: Box) -> float:
    ix = max(0.0, min(a.x + a.w / 2, b.x + b.w / 2) - max(a.x - a.w / 2, b.x - b.w / 2))
    iy = max(0.0, min(a.y + a.h / 2, b.y + b.h / 2) - max(a.y - a.h / 2, b.y - b.h / 2))
    inter = ix * iy
    union = a.w * a.h + b.w * b.h - inter
    return inter / union if union > 0 else 0.0


def decode_region(
    output: np.ndarray,
    anchors: Sequence[float],
    *,
    threshold: float = 0.5,
    nms: float = 0.2,
) -> list[Box]:
    """Decode a region output of shape ([1,] anchors*(5+classes), H, W) into boxes."""
    out = np.asarray(output, dtype=np.float64)
    if out.ndim == 4:
        out = out[0]
    n_anchor = len(anchors) // 2
    if out.ndim != 3 or n_anchor == 0 or out.shape[0] % n_anchor or out.shape[0] // n_anchor < 6:
        raise InputError(
            f"output of shape {tuple(output.shape)} is not a YOLO v2 region map for "
            f"{n_anchor} anchors",
            "the channel count must be anchors*(5+classes)",
        )
    ch, gh, gw = out.shape
    n_cls = ch // n_anchor - 5
    t = out.reshape(n_anchor, 5 + n_cls, gh, gw)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    rows, cols = np.mgrid[0:gh, 0:gw]
    aw = np.array(anchors[0::2])[:, None, None]
    ah = np.array(anchors[1::2])[:, None, None]
    bx = (cols + sig(t[:, 0])) / gw
    by = (rows + sig(t[:, 1])) / gh
    bw = np.exp(t[:, 2]) * aw / gw
    bh = np.exp(t[:, 3]) * ah / gh
    cls = t[:, 5:]
    e = np.exp(cls - cls.max(axis=1, keepdims=True))
    prob = sig(t[:, 4])[:, None] * e / e.sum(axis=1, keepdims=True)
    boxes = []
    for a, k, r, c in zip(*np.nonzero(prob > threshold), strict=True):
        geo = (float(bx[a, r, c]), float(by[a, r, c]), float(bw[a, r, c]), float(bh[a, r, c]))
        boxes.append(Box(*geo, int(k), float(prob[a, k, r, c])))
    boxes.sort(key=lambda b: -b.score)
    kept: list[Box] = []
    for b in boxes:
        if all(k.cls != b.cls or _iou(k, b) <= nms for k in kept):
            kept.append(b)
    return kept


def draw_boxes(
    image: str | Path | np.ndarray, boxes: Sequence[Box], names: Sequence[str], out: str | Path
) -> Path:
    """Draw labelled boxes on the image and write a PNG (atomically)."""
    from PIL import Image, ImageDraw

    im = (
        Image.open(image).convert("RGB")
        if not isinstance(image, np.ndarray)
        else Image.fromarray(image)
    )
    draw = ImageDraw.Draw(im)
    palette = [
        (255, 64, 64),
        (64, 200, 64),
        (64, 128, 255),
        (255, 200, 0),
        (200, 64, 255),
        (0, 200, 200),
    ]
    for b in boxes:
        color = palette[b.cls % len(palette)]
        x0, y0, x1, y1 = b.corners(*im.size)
        draw.rectangle((x0, y0, x1, y1), outline=color, width=2)
        label = f"{names[b.cls] if b.cls < len(names) else b.cls} {b.score:.2f}"
        tw = draw.textlength(label)
        draw.rectangle((x0, max(0, y0 - 12), x0 + tw + 4, max(0, y0 - 12) + 12), fill=color)
        draw.text((x0 + 2, max(0, y0 - 12)), label, fill=(0, 0, 0))
    return write_atomic(out, lambda f: im.save(f, format="PNG"))
