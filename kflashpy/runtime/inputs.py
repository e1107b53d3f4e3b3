"""Model inputs: images to the exact bytes the KPU reads, and raw tensors from files.

On MaixPy an image reaches the KPU through ``img.pix_to_ai()`` (docs/compare.md,
"What is compared"): the RGB565 frame buffer is expanded with the firmware tables ``rb528``/``g628``
into planar R, G, B u8 planes. A host RGB888 image therefore first loses its low bits
(RGB565 quantisation, rounding like ``COLOR_R8_G8_B8_TO_RGB565``) and is then expanded,
so the host feeds the model the very bytes the board would. ``mode="rgb888"`` skips the
565 round trip, as the SDK C examples (which DMA raw RGB888 planes) do.

Resizing is never silent: an image whose size differs from the model input is an error
unless the caller asks for ``resize=True``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import InputError

#: 5-bit and 6-bit channel expansion tables of MaixPy's rgb2rgb_tab.c (round half up)
RB528 = np.array([(i * 255 * 2 + 31) // 62 for i in range(32)], dtype=np.uint8)
G628 = np.array([(i * 255 * 2 + 63) // 126 for i in range(64)], dtype=np.uint8)


def quantize_rgb565(rgb: np.ndarray) -> np.ndarray:
    """RGB888 (H, W, 3) u8 -> the same image after a trip through RGB565 on MaixPy.

    Pack: r5 = round(r*31/255), g6 = round(g*63/255), b5 = round(b*31/255) (half up);
    expand: rb528[r5], g628[g6], rb528[b5].
    """
    rgb = rgb.astype(np.int32)
    r5 = (rgb[..., 0] * 31 * 2 + 255) // 510
    g6 = (rgb[..., 1] * 63 * 2 + 255) // 510
    b5 = (rgb[..., 2] * 31 * 2 + 255) // 510
    return np.stack([RB528[r5], G628[g6], RB528[b5]], axis=-1)


def rgb565_bytes_to_planes(data: bytes, width: int, height: int) -> np.ndarray:
    """Big-endian RGB565 frame bytes -> planar (3, H, W) u8, exactly as ``pix_to_ai``."""
    px = np.frombuffer(data, dtype=">u2", count=width * height).reshape(height, width)
    r5 = (px >> 11) & 0x1F
    g6 = (px >> 5) & 0x3F
    b5 = px & 0x1F
    return np.stack([RB528[r5], G628[g6], RB528[b5]])


def _chw(shape: Sequence[int], path: Path) -> tuple[int, int, int]:
    dims = [int(d) for d in shape]
    while len(dims) > 3 and dims[0] == 1:
        dims = dims[1:]
    if len(dims) != 3 or dims[0] not in (1, 3):
        raise InputError(
            f"{path}: an image cannot feed a model input of shape {tuple(shape)}",
            "images feed inputs shaped (1|3, H, W) or (1, 1|3, H, W); use a .npy or .bin tensor",
        )
    return dims[0], dims[1], dims[2]


def from_image(
    path: str | Path,
    shape: Sequence[int],
    *,
    mode: str = "maixpy",
    resize: bool = False,
) -> np.ndarray:
    """Load an image (BMP/PNG/JPEG...) as the u8 NCHW tensor the KPU reads.

    ``shape`` is the model input shape ((N,)C,H,W). ``mode="maixpy"`` applies the
    RGB565 path of MaixPy (default); ``"rgb888"`` keeps 8 bits per channel. 1-channel
    inputs use the 8-bit grayscale image (MaixPy copies grayscale bytes unchanged).
    Returns an array of ``shape``.
    """
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    c, h, w = _chw(shape, path)
    if mode not in ("maixpy", "rgb888"):
        raise InputError(f"unknown image input mode {mode!r}", "use 'maixpy' or 'rgb888'")
    try:
        with Image.open(path) as im:
            im = im.convert("L" if c == 1 else "RGB")
            if im.size != (w, h):
                if not resize:
                    raise InputError(
                        f"{path}: image is {im.size[0]}x{im.size[1]}, the model input is {w}x{h}",
                        "resize it yourself, or pass --resize to scale it (bilinear)",
                    )
                im = im.resize((w, h), Image.Resampling.BILINEAR)
            pixels = np.asarray(im, dtype=np.uint8)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file", "check the path") from None
    except (UnidentifiedImageError, OSError) as e:
        raise InputError(
            f"{path}: not a readable image ({e})", "use BMP, PNG or JPEG, or a .npy tensor"
        ) from None
    if c == 1:
        planes = pixels[None]
    else:
        if mode == "maixpy":
            pixels = quantize_rgb565(pixels)
        planes = np.ascontiguousarray(pixels.transpose(2, 0, 1))
    return planes.reshape(tuple(int(d) for d in shape))


def from_file(path: str | Path, shape: Sequence[int], dtype: np.dtype | str) -> np.ndarray:
    """Load a raw tensor: ``.npy`` (shape and dtype checked) or ``.bin`` (raw bytes)."""
    path = Path(path)
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    try:
        if path.suffix.lower() == ".npy":
            arr = np.load(path, allow_pickle=False)
        else:
            arr = np.fromfile(path, dtype=np.uint8)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file", "check the path") from None
    except (ValueError, OSError) as e:
        raise InputError(
            f"{path}: cannot read a tensor ({e})", "use a .npy or raw .bin file"
        ) from None
    if path.suffix.lower() != ".npy":
        need = int(np.prod(shape)) * dtype.itemsize
        if arr.size != need:
            raise InputError(
                f"{path}: {arr.size} bytes, the model input {shape} {dtype} needs {need}",
                "a .bin input must hold exactly the input tensor's bytes (little-endian)",
            )
        return arr.view(dtype.newbyteorder("<")).reshape(shape).astype(dtype)
    if arr.size != int(np.prod(shape)):
        raise InputError(
            f"{path}: array of shape {arr.shape}, the model input is {shape}",
            "save the tensor with the model's input shape",
        )
    if arr.dtype != dtype:
        if not np.can_cast(arr.dtype, dtype, casting="same_kind") and not (
            arr.dtype.kind in "iu" and dtype.kind in "iuf"
        ):
            raise InputError(
                f"{path}: array of dtype {arr.dtype}, the model input is {dtype}",
                "save the tensor with the model's input dtype",
            )
        arr = arr.astype(dtype)
    return arr.reshape(shape)


def parse_floats(text: str) -> np.ndarray | None:
    """Numbers separated by commas and/or whitespace (``"5.1,3.8,1.9,0.4"``) as a flat
    float32 array; None when ``text`` is not such a list (so that callers can say what
    else they expected: a file, a keyword...)."""
    try:
        vals = [float(v) for v in re.split(r"[,\s]+", text.strip()) if v]
    except ValueError:
        return None
    return np.array(vals, np.float32) if vals else None


def from_numbers(
    text: str, vals: np.ndarray, shape: Sequence[int], dtype: np.dtype | str
) -> np.ndarray:
    """A number list given on the command line as a tensor of ``shape`` and ``dtype``
    (integer inputs take integral values in their range only: nothing is rounded)."""
    dtype, shape = np.dtype(dtype), tuple(int(d) for d in shape)
    if vals.size != int(np.prod(shape)):
        raise InputError(
            f"input {text!r} has {vals.size} values, the model input {shape} needs "
            f"{int(np.prod(shape))}",
            "give one number per input element, separated by commas",
        )
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not (
            np.all(vals == np.round(vals)) and vals.min() >= info.min and vals.max() <= info.max
        ):
            raise InputError(
                f"input {text!r}: the model input is {dtype}, the values are not all "
                f"integers in {info.min}..{info.max}",
                "give the quantised values the model reads, or an image",
            )
    return vals.astype(dtype).reshape(shape)


def load_input(
    path: str | Path,
    shape: Sequence[int],
    dtype: np.dtype | str,
    *,
    mode: str = "maixpy",
    resize: bool = False,
) -> np.ndarray:
    """Pick the loader: a number list (``"5.1,3.8,1.9,0.4"``) when ``path`` is no
    existing file, else by extension: images for u8 inputs, tensors otherwise."""
    try:
        exists = Path(path).exists()
    except OSError:  # a long number list is "File name too long" as a path
        exists = False
    if not exists:
        vals = parse_floats(str(path))
        if vals is None:
            raise InputError(
                f"{path}: no such file (nor a list of numbers)",
                "give an image, a .npy/.bin tensor or numbers such as 5.1,3.8,1.9,0.4",
            )
        return from_numbers(str(path), vals, shape, dtype)
    suffix = Path(path).suffix.lower()
    if suffix in (".npy", ".bin", ".raw"):
        return from_file(path, shape, dtype)
    if np.dtype(dtype) != np.uint8:
        raise InputError(
            f"{path}: an image cannot feed a {np.dtype(dtype)} input",
            "give a .npy or .bin tensor for float inputs",
        )
    return from_image(path, shape, mode=mode, resize=resize)
