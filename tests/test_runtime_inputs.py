"""Images and tensors to the exact bytes the KPU reads (MaixPy RGB565 path)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from kflashpy.errors import InputError
from kflashpy.runtime import inputs


def test_expansion_tables_are_round_half_up() -> None:
    assert inputs.RB528[0] == 0 and inputs.RB528[31] == 255 and inputs.G628[63] == 255
    for i in range(32):
        assert inputs.RB528[i] == int(i * 255 / 31 + 0.5)
    for i in range(64):
        assert inputs.G628[i] == int(i * 255 / 63 + 0.5)


def test_rgb565_quantisation_matches_maixpy_packing() -> None:
    rgb = np.array([[[255, 255, 255], [0, 0, 0], [4, 2, 4], [128, 64, 200]]], np.uint8)
    got = inputs.quantize_rgb565(rgb)
    # pack like COLOR_R8_G8_B8_TO_RGB565 (round(x*31/255), round(x*63/255)), expand
    for px, out in zip(rgb[0].astype(int), got[0], strict=True):
        r5, g6, b5 = (round(px[0] * 31 / 255), round(px[1] * 63 / 255), round(px[2] * 31 / 255))
        assert tuple(out) == (inputs.RB528[r5], inputs.G628[g6], inputs.RB528[b5])
    # big-endian RGB565 frame bytes go through the same tables
    word = (r5 << 11) | (g6 << 5) | b5
    planes = inputs.rgb565_bytes_to_planes(word.to_bytes(2, "big"), 1, 1)
    assert tuple(planes[:, 0, 0]) == tuple(got[0, -1])


def test_from_image_is_planar_nchw_and_never_resizes_silently(tmp_path) -> None:
    rgb = np.random.default_rng(3).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    path = tmp_path / "x.png"
    Image.fromarray(rgb).save(path)
    x = inputs.from_image(path, (1, 3, 6, 8))
    assert x.shape == (1, 3, 6, 8) and x.dtype == np.uint8
    np.testing.assert_array_equal(x[0].transpose(1, 2, 0), inputs.quantize_rgb565(rgb))
    raw = inputs.from_image(path, (3, 6, 8), mode="rgb888")
    np.testing.assert_array_equal(raw.transpose(1, 2, 0), rgb)
    with pytest.raises(InputError, match="8x6, the model input is 4x3"):
        inputs.from_image(path, (1, 3, 3, 4))
    assert inputs.from_image(path, (1, 3, 3, 4), resize=True).shape == (1, 3, 3, 4)
    gray = inputs.from_image(path, (1, 1, 6, 8))
    np.testing.assert_array_equal(gray[0, 0], np.asarray(Image.open(path).convert("L")))


def test_tensor_files(tmp_path) -> None:
    a = np.arange(4, dtype=np.float32).reshape(1, 4)
    np.save(tmp_path / "a.npy", a)
    np.testing.assert_array_equal(inputs.load_input(tmp_path / "a.npy", (1, 4), np.float32), a)
    (tmp_path / "a.bin").write_bytes(a.tobytes())
    np.testing.assert_array_equal(inputs.load_input(tmp_path / "a.bin", (1, 4), np.float32), a)
    with pytest.raises(InputError, match="needs 20"):
        inputs.load_input(tmp_path / "a.bin", (1, 5), np.float32)
    with pytest.raises(InputError, match="no such file"):
        inputs.load_input(tmp_path / "nope.png", (1, 3, 2, 2), np.uint8)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(InputError, match="not a readable image"):
        inputs.load_input(tmp_path / "bad.png", (1, 3, 2, 2), np.uint8)
