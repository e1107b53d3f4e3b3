"""``kflashpy run MODEL --input X``: run a kmodel on the host reference runtime."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..errors import InputError, UsageError
from ..model.stackvm import RELEASES
from .session import Session

if TYPE_CHECKING:  # NumPy is imported by the commands that run a model, not at start-up
    import numpy as np

#: an output with at most this many elements (after squeezing) is shown as a classifier
_CLASSIFIER_MAX = 1000


def _save_npy(path: Path, arr: np.ndarray) -> Path:
    import numpy as np

    from ..fileio import write_atomic

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return write_atomic(path, buf.getvalue())


def _mkdir(path: Path, option: str) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(
            f"{option} {path}: cannot create the directory: {e.strerror or e}",
            "give a directory you can write to",
        ) from None
    return path


def _class_names(spec: str | None, count: int) -> list[str]:
    """The ``count`` class names of the model's output; a list of another length is refused."""
    from ..runtime.yolo import VOC_CLASSES

    if spec is None and count != len(VOC_CLASSES):
        return [str(i) for i in range(count)]  # no names given: class numbers
    if spec is None or spec == "voc":
        names, origin = list(VOC_CLASSES), "the VOC class list"
    else:
        try:
            names = [ln.strip() for ln in Path(spec).read_text().splitlines() if ln.strip()]
        except OSError as e:
            raise InputError(
                f"{spec}: cannot read class names ({e.strerror})", "one name per line"
            ) from None
        origin = spec
    if len(names) != count:
        raise InputError(
            f"--yolo2: {origin} has {len(names)} class names, the model's output has "
            f"{count} classes (for the anchors given)",
            f"give --classes FILE with {count} names, one per line (or check --yolo2 ANCHORS)",
        )
    return names


def _summary(arr: np.ndarray, top: int) -> dict[str, Any]:
    import numpy as np

    flat = arr.reshape(-1)
    info: dict[str, Any] = {
        "shape": list(arr.shape),
        "dtype": str(arr.dtype),
        "min": float(flat.min()) if flat.size else None,
        "max": float(flat.max()) if flat.size else None,
        "mean": float(flat.astype(np.float64).mean()) if flat.size else None,
    }
    squeezed = np.squeeze(arr)
    if top and squeezed.ndim == 1 and 1 < squeezed.size <= _CLASSIFIER_MAX:
        order = np.argsort(-squeezed.astype(np.float64), kind="stable")[:top]
        info["top"] = [{"index": int(i), "value": float(squeezed[i])} for i in order]
    if flat.size <= 16:
        info["values"] = [float(v) for v in flat]
    return info


@click.command("run")
@click.argument("model_path", metavar="MODEL", type=click.Path(dir_okay=False))
@click.option(
    "-i",
    "--input",
    "inputs",
    metavar="FILE",
    multiple=True,
    required=True,
    help="Image (BMP/PNG/JPEG), tensor (.npy/.bin) or numbers ('5.1,3.8,1.9,0.4'), "
    "one per model input.",
)
@click.option(
    "-o",
    "--out-dir",
    type=click.Path(file_okay=False),
    default=".",
    show_default=True,
    help="Where MODEL.outputN.npy (and the boxes PNG) are written.",
)
@click.option("--no-save", is_flag=True, help="Do not write .npy files.")
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=5,
    show_default=True,
    help="Top-k shown for classifier outputs (0: none).",
)
@click.option(
    "--resize", is_flag=True, help="Scale images to the model input size (never implicit)."
)
@click.option(
    "--rgb888",
    is_flag=True,
    help="Feed images as 8-bit RGB planes instead of MaixPy's RGB565 path.",
)
@click.option(
    "--yolo2",
    "anchors",
    metavar="ANCHORS",
    help="Decode output 0 as a YOLO v2 region layer with these anchors (w,h,...; 'voc' "
    "for the 20-class example) and draw the boxes on the input image.",
)
@click.option(
    "--classes",
    metavar="voc|FILE",
    help="Class names for --yolo2, one per line (default: VOC's for 20 classes, else numbers).",
)
@click.option(
    "--threshold",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="--yolo2 score threshold (0..1).",
)
@click.option(
    "--nms",
    type=click.FloatRange(0, 1),
    default=0.2,
    show_default=True,
    help="--yolo2 NMS IoU threshold (0..1).",
)
@click.option(
    "--layers",
    "layers_dir",
    type=click.Path(file_okay=False),
    help="Dump every intermediate layer output as .npy into this directory.",
)
@click.option(
    "--segment",
    type=click.Choice([">", ">="]),
    default=">",
    show_default=True,
    help="KPU activation segment tie rule (docs/runtime.md).",
)
@click.option(
    "--rounding",
    type=click.Choice(["nncase", "sdk"]),
    default="nncase",
    show_default=True,
    help="KPU activation rounding rule (docs/runtime.md).",
)
@click.option(
    "--nncase-release",
    type=click.Choice(RELEASES),
    help="V5: the nncase 1.x release that wrote MODEL (default: told from its code).",
)
@click.pass_obj
def run_cmd(s: Session, model_path, inputs, out_dir, no_save, top, resize, rgb888, anchors, classes,
            threshold, nms, layers_dir, segment, rounding, nncase_release) -> None:  # fmt: skip
    """Run MODEL (kmodel V3/V4/V5) on the host, bit-exact with the KPU.

    Prints every output (top-k for classifiers), writes them as .npy; with --yolo2
    draws the detections on the input image; --layers dumps each layer's output.
    """
    from .. import runtime
    from ..runtime import inputs as rt_inputs
    from ..runtime import yolo

    model = runtime.load(model_path, nncase_release=nncase_release)
    if len(inputs) != len(model.inputs):
        raise UsageError(
            f"{model_path} has {len(model.inputs)} input(s), {len(inputs)} --input given",
            "give one --input per model input: "
            + ", ".join(f"{t.name} {t.shape}" for t in model.inputs),
        )
    arrays = [
        rt_inputs.load_input(
            path, spec.shape, spec.dtype, mode="rgb888" if rgb888 else "maixpy", resize=resize
        )
        for path, spec in zip(inputs, model.inputs, strict=True)
    ]
    opts = {"segment": segment, "rounding": rounding}
    if layers_dir:
        outs, layers = model.run_layers(arrays, **opts)
    else:
        outs, layers = model.run(arrays, **opts), []
    stem = Path(model_path).name.rsplit(".", 1)[0]
    out_path = Path(out_dir)
    result: dict[str, Any] = {"model": str(model_path), "version": model.version,
                              "notes": model.notes, "outputs": []}  # fmt: skip
    for spec, arr in zip(model.outputs, outs, strict=True):
        entry = {"name": spec.name, **_summary(arr, top)}
        if not no_save:
            _mkdir(out_path, "--out-dir")
            entry["file"] = str(_save_npy(out_path / f"{stem}.{spec.name}.npy", arr))
        result["outputs"].append(entry)
    if layers_dir:
        d = _mkdir(Path(layers_dir), "--layers")
        result["layers"] = [
            str(
                _save_npy(
                    d / f"{n:03d}_{lay.name.replace('.', '_').replace(' ', '_')}.npy", lay.array
                )
            )
            for n, lay in enumerate(layers)
        ]
    if anchors:
        anchor_vals = yolo.VOC_ANCHORS if anchors == "voc" else yolo.parse_anchors(anchors)
        boxes = yolo.decode_region(outs[0], anchor_vals, threshold=threshold, nms=nms)
        n_cls = outs[0].reshape(-1, *outs[0].shape[-2:]).shape[0] // (len(anchor_vals) // 2) - 5
        names = _class_names(classes, n_cls)
        result["detections"] = [
            {
                "class": names[b.cls],
                "score": round(b.score, 4),
                "x": b.x,
                "y": b.y,
                "w": b.w,
                "h": b.h,
            }
            for b in boxes
        ]
        image = Path(inputs[0])
        if image.suffix.lower() in (".npy", ".bin", ".raw"):
            s.warn("--yolo2: the input is a tensor, not an image; no boxes drawn")
        else:
            _mkdir(out_path, "--out-dir")
            png = yolo.draw_boxes(image, boxes, names, out_path / f"{image.stem}.boxes.png")
            result["boxes_image"] = str(png)
    s.result = result
    _render(s, result)


def _render(s: Session, r: dict[str, Any]) -> None:
    s.out(f"{r['model']}: kmodel V{r['version']}")
    for note in r["notes"]:
        s.out(f"  {note}")
    for o in r["outputs"]:
        s.out(f"{o['name']}: {'x'.join(map(str, o['shape']))} {o['dtype']}  "
              f"min {o['min']:.6g}  max {o['max']:.6g}  mean {o['mean']:.6g}")  # fmt: skip
        if "values" in o:
            s.out("  values: " + ", ".join(f"{v:.6g}" for v in o["values"]))
        if "top" in o:
            s.out("  top: " + ", ".join(f"#{t['index']} {t['value']:.6g}" for t in o["top"]))
        if "file" in o:
            s.out(f"  saved {o['file']}")
    if "layers" in r:
        s.out(f"{len(r['layers'])} layer outputs saved")
    if "detections" in r:
        s.out(f"detections: {len(r['detections'])}")
        s.table(
            ["  class", "score", "x", "y", "w", "h"],
            [[f"  {d['class']}", f"{d['score']:.3f}", f"{d['x']:.3f}", f"{d['y']:.3f}",
              f"{d['w']:.3f}", f"{d['h']:.3f}"] for d in r["detections"]],
        )  # fmt: skip
        if "boxes_image" in r:
            s.out(f"  boxes drawn on {r['boxes_image']}")


def register(group: click.Group) -> None:
    group.add_command(run_cmd)
