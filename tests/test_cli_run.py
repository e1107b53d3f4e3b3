"""``kflashpy run``: outputs, .npy files, YOLO boxes, per-layer dumps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image
from support.paths import KMODELS as FIX

from kflashpy.cli import main


def test_run_iris_prints_top_and_saves_npy(tmp_path, capsys) -> None:
    x = tmp_path / "x.npy"
    np.save(x, np.array([[5.1, 3.8, 1.9, 0.4]], np.float32))
    model = FIX / "v4/iris_nncase-v0.2.0-beta4.kmodel"
    assert main(["run", str(model), "-i", str(x), "-o", str(tmp_path), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "top: #0 16.0778, #1 5.60766" in out
    y = np.load(tmp_path / "iris_nncase-v0.2.0-beta4.output0.npy")
    np.testing.assert_allclose(y.reshape(-1), [16.077795, 5.607656, -2.071745], rtol=1e-5)


def test_run_yolo_draws_boxes_and_dumps_layers(tmp_path, capsys) -> None:
    model = FIX / "v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel"
    image = FIX / "inputs/dog_320x240.bmp"
    args = ["--json", "run", str(model), "-i", str(image), "--yolo2", "voc", "-o", str(tmp_path),
            "--layers", str(tmp_path / "layers")]  # fmt: skip
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    result = doc["result"]
    assert sorted(d["class"] for d in result["detections"]) == ["bicycle", "car", "dog"]
    png = Path(result["boxes_image"])
    with Image.open(png) as im:
        assert im.size == (320, 240)
        drawn = np.asarray(im.convert("RGB")).astype(int)
    with Image.open(image) as im:
        original = np.asarray(im.convert("RGB")).astype(int)
    assert (np.abs(drawn - original).sum(axis=2) > 0).mean() > 0.01  # boxes were drawn
    assert len(result["layers"]) == 17
    assert np.load(result["layers"][0]).shape == (16, 120, 160)


def test_run_errors_are_input_errors(tmp_path, capsys) -> None:
    model = FIX / "v3/mnist_maixpy-scripts.kmodel"
    image = FIX / "inputs/dog_320x240.bmp"
    assert main(["run", str(model), "-i", str(image)]) == 2
    assert "--resize" in capsys.readouterr().err
    assert main(["run", str(model), "-i", str(image), "-i", str(image)]) == 2
    assert main(["run", str(tmp_path / "missing.kmodel"), "-i", str(image)]) == 2
