"""Board vs host: run one input through a model on MaixPy and on the host runtime.

The board loads the model the way the user's script will (``kpu.load(addr)``,
``kpu.load_flash(addr, ...)`` or ``kpu.load(path)``), receives the identical input
(RGB565 bytes written into ``image.Image.to_bytes()`` followed by ``pix_to_ai()``, or
a float32 list for float-input models; docs/compare.md, "What is compared") and sends
every output back as raw bytes (printed floats lose digits). The host runtime runs the
same input; each output is then compared element by element (NCHW, as both store it).
For V3 models a mismatch can be bisected to the first differing layer with
``kpu.set_layers``.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, ProtocolError, UsageError, VerifyError
from ..progress import Progress, ProgressFn, report
from ..units import fmt_addr
from . import board as onboard
from . import fs
from .repl import MaixPyRepl, chunks, py_bytes, py_str

#: raw input bytes per exec when filling the board's image buffer
INPUT_BLOCK = 1536
#: how many mismatching positions a report lists
FIRST_N = 5
#: load_flash arguments used by the official demo (docs/compare.md, "What is compared")
LOAD_FLASH_ARGS = "1,0xC000,60000000"
#: seconds a model run may take on the board before the driver gives up
RUN_TIMEOUT = 60.0


# --- inputs ----------------------------------------------------------------------------


@dataclass
class BoardInput:
    """One input as the host runtime sees it and as it travels to the board.

    ``kind`` is ``"rgb565"`` (big-endian RGB565 frame bytes), ``"gray"`` (one byte per
    pixel) or ``"floats"`` (float32 little-endian); ``host`` is the array fed to the
    runtime, bit-identical to what the KPU reads on the board.
    """

    kind: str
    payload: bytes
    host: np.ndarray
    width: int = 0
    height: int = 0
    source: str = ""
    notes: list[str] = field(default_factory=list)


def rgb_to_rgb565(rgb: np.ndarray) -> bytes:
    """RGB888 (H, W, 3) -> big-endian RGB565 bytes, rounding like MaixPy's set_pixel."""
    v = rgb.astype(np.int32)
    r5 = (v[..., 0] * 62 + 255) // 510
    g6 = (v[..., 1] * 126 + 255) // 510
    b5 = (v[..., 2] * 62 + 255) // 510
    return ((r5 << 11) | (g6 << 5) | b5).astype(">u2").tobytes()


def _image_dims(shape: tuple[int, ...]) -> tuple[int, int, int] | None:
    dims = list(shape)
    while len(dims) > 3 and dims[0] == 1:
        dims = dims[1:]
    if len(dims) == 3 and dims[0] in (1, 3):
        return dims[0], dims[1], dims[2]
    return None


def prepare_input(
    spec: str,
    shape: tuple[int, ...],
    dtype: np.dtype,
    *,
    mode: str = "maixpy",
    resize: bool = False,
) -> BoardInput:
    """Turn ``--input`` into the exact bytes for the board and the array for the host.

    ``spec`` is what ``kflashpy run`` takes (an image, a ``.npy``/``.bin`` tensor, a
    number list) or ``random[:SEED]``; ``resize`` scales an image to the model input
    (never implicit). Image models reach the KPU through MaixPy's RGB565 image path:
    with ``mode="maixpy"`` (default) the host is fed the planes ``pix_to_ai`` makes of
    those RGB565 bytes, so both sides read identical bytes; with ``mode="rgb888"`` the
    host keeps the 8-bit planes (as ``run --rgb888``) and a note says how many input
    values the board sees differently.
    """
    if mode not in ("maixpy", "rgb888"):
        raise UsageError(f"unknown input mode {mode!r}", "use maixpy (RGB565) or rgb888")
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    seed = _random_seed(spec)
    if dtype.kind == "f":
        if seed is not None:
            vals = np.random.default_rng(seed).random(count, dtype=np.float32)
        elif spec.endswith(".npy") and _is_file(spec):
            vals = _load_npy(spec).astype(np.float32).ravel()
        else:
            vals = _load(spec, shape, dtype, mode, resize).astype(np.float32).ravel()
        if vals.size != count:
            raise InputError(
                f"input {spec!r} has {vals.size} values, the model input {shape} needs {count}",
                "give one value per input element",
            )
        host = vals.astype(np.float32).reshape(shape)
        return BoardInput("floats", host.astype("<f4").tobytes(), host, source=spec)
    dims = _image_dims(shape)
    if dtype != np.uint8 or dims is None:
        raise InputError(
            f"the model input {shape} {dtype} cannot be fed through MaixPy's image path",
            "compare supports u8 image inputs (1 or 3 channels) and float inputs",
        )
    c, h, w = dims
    if seed is not None:
        pixels = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
        planes = np.ascontiguousarray(np.moveaxis(pixels, -1, 0)[:c])
        tensor = False
    else:
        tensor = not _is_image(spec)
        if tensor and spec.endswith(".npy") and _is_file(spec):
            arr = _load_npy(spec)
            if arr.size != count or arr.dtype != np.uint8:
                raise InputError(
                    f"{spec}: {arr.dtype} {arr.shape} does not match the model input {shape} uint8",
                    "save the input as u8 CHW planes of the model's size",
                )
        else:
            arr = _load(spec, shape, dtype, mode, resize)
        planes = np.ascontiguousarray(arr.reshape(c, h, w))
    inp = _from_planes(planes, spec)
    changed = int(np.count_nonzero(inp.host != planes))
    if changed and mode == "rgb888":
        inp.host = planes
        inp.notes.append(
            f"--rgb888: the host reads the 8-bit planes, the board the RGB565 frame "
            f"(MaixPy's only image path); {changed} input values differ, so outputs may too"
        )
    elif changed and tensor:
        inp.notes.append(
            f"{changed} input values changed by the RGB565 round trip (the board's "
            "image path carries only 5/6/5 bits)"
        )
    return _with_shape(inp, shape)


def _random_seed(spec: str) -> int | None:
    """``random`` -> 0, ``random:N`` -> N, anything else -> None."""
    if spec != "random" and not spec.startswith("random:"):
        return None
    try:
        return int(spec.split(":", 1)[1]) if ":" in spec else 0
    except ValueError:
        raise InputError(
            f"--input {spec!r}: the seed must be an integer", "e.g. random:7"
        ) from None


def _is_file(spec: str) -> bool:
    try:
        return Path(spec).is_file()
    except OSError:  # a long number list is no file name
        return False


def _is_image(spec: str) -> bool:
    return _is_file(spec) and Path(spec).suffix.lower() not in (".npy", ".bin", ".raw")


def _load(spec: str, shape: tuple[int, ...], dtype: np.dtype, mode: str, resize: bool):
    """What ``kflashpy run`` reads for ``spec``: a number list, a tensor or an image."""
    from ..runtime.inputs import from_numbers, load_input, parse_floats

    if not _is_file(spec):
        vals = parse_floats(spec)
        if vals is None:
            raise InputError(
                f"{spec[:80]}: no such file (nor a list of numbers, nor random[:SEED])",
                "give an image, a .npy/.bin tensor, numbers such as 5.1,3.8,1.9,0.4 or random",
            )
        return from_numbers(spec[:80], vals, shape, dtype)
    return load_input(spec, shape, dtype, mode=mode, resize=resize)


def _from_planes(planes: np.ndarray, source: str) -> BoardInput:
    """(C, H, W) u8 planes -> what travels to the board and what the KPU reads from it."""
    from ..runtime.inputs import rgb565_bytes_to_planes

    c, h, w = planes.shape
    if c == 1:
        return BoardInput("gray", planes.tobytes(), planes.copy(), w, h, source)
    payload = rgb_to_rgb565(np.moveaxis(planes, 0, -1))
    return BoardInput("rgb565", payload, rgb565_bytes_to_planes(payload, w, h), w, h, source)


def _with_shape(inp: BoardInput, shape: tuple[int, ...]) -> BoardInput:
    inp.host = np.ascontiguousarray(inp.host.reshape(shape))
    return inp


def _load_npy(spec: str) -> np.ndarray:
    try:
        return np.load(spec, allow_pickle=False)
    except FileNotFoundError:
        raise InputError(f"{spec}: no such file", "check the path") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{spec}: not a .npy array ({e})", "save it with numpy.save") from None


# --- comparing ---------------------------------------------------------------------------


@dataclass
class Mismatch:
    """One differing element: NCHW position, flat index, first differing byte, both values."""

    position: tuple[int, ...]
    index: int
    byte_offset: int
    board: float
    host: float


@dataclass
class OutputDiff:
    """The comparison of one output."""

    index: int
    shape: tuple[int, ...]
    dtype: str
    elements: int
    mismatches: int
    max_abs: float | None  # None when the bytes cannot be compared (see ``problem``)
    mean_abs: float | None
    atol: float
    rtol: float
    first: list[Mismatch]
    passed: bool
    problem: str = ""  # set when the board's bytes cannot be compared at all

    def to_dict(self) -> dict:
        return asdict(self)


def diff_output(
    index: int, board_raw: bytes, host: np.ndarray, atol: float = 1e-5, rtol: float = 1e-5
) -> OutputDiff:
    """Compare the board's raw bytes of one output with the host array.

    Integer outputs (raw KPU u8) must match exactly; float outputs within
    ``atol + rtol * |host|``. NaN equals NaN; NaN against a number is a mismatch.
    """
    host = np.asarray(host)
    exact = host.dtype.kind in "iub"
    atol, rtol = (0.0, 0.0) if exact else (atol, rtol)
    shape = tuple(int(d) for d in host.shape)
    base: dict[str, Any] = dict(
        index=index, shape=shape, dtype=str(host.dtype), elements=int(host.size)
    )
    if len(board_raw) != host.nbytes:
        return OutputDiff(
            **base,
            mismatches=int(host.size),
            max_abs=None,
            mean_abs=None,
            atol=atol,
            rtol=rtol,
            first=[],
            passed=False,
            problem=f"the board sent {len(board_raw)} bytes, the host output has {host.nbytes}",
        )
    board = np.frombuffer(board_raw, host.dtype.newbyteorder("<")).reshape(host.shape)
    b64, h64 = board.astype(np.float64), host.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(b64 - h64)
    both_nan = np.isnan(b64) & np.isnan(h64)
    diff = np.where(both_nan, 0.0, np.where(np.isnan(diff), np.inf, diff))
    bad = diff > atol + rtol * np.abs(np.nan_to_num(h64))
    flat = np.flatnonzero(bad.ravel())
    host_raw = host.astype(host.dtype.newbyteorder("<")).tobytes()
    first = [
        Mismatch(
            tuple(int(v) for v in np.unravel_index(int(i), host.shape)),
            int(i),
            _first_byte(board_raw, host_raw, int(i) * host.itemsize, host.itemsize),
            float(board.ravel()[i]),
            float(host.ravel()[i]),
        )
        for i in flat[:FIRST_N]
    ]
    finite = diff[np.isfinite(diff)]
    return OutputDiff(
        **base,
        mismatches=int(flat.size),
        max_abs=float(diff.max()) if diff.size else 0.0,
        mean_abs=float(finite.mean()) if finite.size else 0.0,
        atol=atol,
        rtol=rtol,
        first=first,
        passed=flat.size == 0,
    )


def _first_byte(a: bytes, b: bytes, start: int, size: int) -> int:
    """Offset of the first byte that differs inside one element (its start if none)."""
    return next((start + k for k in range(size) if a[start + k] != b[start + k]), start)


@dataclass
class BisectResult:
    """The first layer whose board output differs from the host's (V3 ``set_layers``)."""

    layer: int | None  # 0-based index of the first differing layer; None: all agree
    name: str
    layers: int
    diff: OutputDiff
    steps: int

    @property
    def all_agree(self) -> bool:
        """Every layer's output agrees: the difference is in reading the outputs back."""
        return self.layer is None

    def to_dict(self) -> dict:
        return {**asdict(self), "all_agree": self.all_agree}


@dataclass
class CompareReport:
    """Everything ``kflashpy compare`` found."""

    model: str
    version: int
    load: str
    input: str
    input_kind: str
    outputs: list[OutputDiff]
    passed: bool
    notes: list[str] = field(default_factory=list)
    bisect: BisectResult | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "bisect": self.bisect.to_dict() if self.bisect else None}


@dataclass(frozen=True)
class LoadSpec:
    """How the user's script loads the model: one of ``addr`` or ``path``."""

    addr: int | None = None
    path: str | None = None
    load_flash: bool = False

    def __post_init__(self) -> None:
        if (self.addr is None) == (self.path is None):
            raise UsageError("give exactly one of --addr or --path", "see kflashpy compare --help")
        if self.load_flash and self.addr is None:
            raise UsageError("--load-flash needs --addr", "load_flash reads raw flash only")

    def code(self) -> str:
        if self.path is not None:
            return f"kpu.load({py_str(self.path)})"
        if self.load_flash:
            return f"kpu.load_flash({self.addr:#x},{LOAD_FLASH_ARGS})"
        return f"kpu.load({self.addr:#x})"


def _expected_on_board(model_bytes: bytes, spec: LoadSpec) -> bytes:
    """The bytes that must be at the load location (plain, or word-swapped for load_flash)."""
    from ..model import detect, swap_words

    sig = detect(model_bytes)
    plain = swap_words(model_bytes) if sig is not None and sig.swapped else model_bytes
    return swap_words(plain) if spec.load_flash else plain


def check_model_on_board(repl: MaixPyRepl, model_bytes: bytes, spec: LoadSpec) -> None:
    """Fail early, by hash, when the board holds something else than MODEL where it loads."""
    want = _expected_on_board(model_bytes, spec)
    if spec.path is not None:
        have = fs.sha256(repl, spec.path)
        where = spec.path
    else:
        have = onboard.flash_sha256(repl, spec.addr or 0, len(want))
        where = f"flash {fmt_addr(spec.addr or 0)}"
    if have != hashlib.sha256(want).digest():
        form = "word-swapped (load_flash) " if spec.load_flash else ""
        raise VerifyError(
            f"{where} does not hold the {form}model given on the command line "
            f"(sha256 on the board {have.hex()[:16]}..., expected "
            f"{hashlib.sha256(want).hexdigest()[:16]}...)",
            "burn the model there first (`kflashpy burn`; for --load-flash burn the "
            "word-swapped file), or pass --no-check-model to compare anyway",
        )


class BoardSession:
    """The model loaded on the board, fed with one input; reads outputs as raw bytes."""

    def __init__(self, repl: MaixPyRepl, spec: LoadSpec, inp: BoardInput) -> None:
        self.repl, self.spec, self.inp = repl, spec, inp

    def load(self, output_shapes: list[tuple[int, ...]], version: int) -> None:
        code = (
            "import KPU as kpu,gc\n"
            "try:\n kpu.deinit(_kfp_t)\nexcept Exception:\n pass\n"
            f"gc.collect()\n_kfp_t={self.spec.code()}"
        )
        self.repl.exec_raw(code, doing=f"loading the model ({self.spec.code()})")
        if version == 4:  # MaixPy refuses to run a V4 model without every output's shape
            lines = []
            for i, shape in enumerate(output_shapes):
                w, h, ch = _whc(shape)
                lines.append(
                    f"if not kpu.set_outputs(_kfp_t,{i},{w},{h},{ch}):\n raise ValueError('set_outputs {i}')"
                )
            self.repl.exec_raw("\n".join(lines), doing="setting the V4 output shapes")

    def send_input(self, progress: ProgressFn | None = None) -> None:
        inp = self.inp
        if inp.kind == "floats":
            self.repl.exec_raw("import ubinascii,ustruct\n_kfp_x=bytearray()", doing="input")
            target = "_kfp_x+={data}"
        else:
            gray = ".to_grayscale()" if inp.kind == "gray" else ""
            self.repl.exec_raw(
                f"import image,ubinascii\n_kfp_i=image.Image(size=({inp.width},{inp.height})){gray}\n"
                "_kfp_b=_kfp_i.to_bytes()",
                doing="creating the input image",
            )
            target = "_kfp_b[{start}:{end}]={data}"
        done = 0
        for block in chunks(inp.payload, INPUT_BLOCK):
            code = target.format(start=done, end=done + len(block), data=py_bytes(block))
            self.repl.exec_raw(code, doing="sending the input")
            done += len(block)
            report(progress, Progress("input", done, len(inp.payload), "input to the board"))
        if inp.kind == "floats":
            self.repl.exec_raw(
                "_kfp_in=list(ustruct.unpack('<%df'%(len(_kfp_x)//4),_kfp_x))", doing="input"
            )
        else:
            self.repl.exec_raw(
                f"if len(_kfp_b)!={len(inp.payload)}:\n raise ValueError('image buffer size')\n"
                "_kfp_i.pix_to_ai()\n_kfp_in=_kfp_i",
                doing="converting the input image (pix_to_ai)",
            )

    def run(self, layers: int | None = None) -> None:
        pre = f"kpu.set_layers(_kfp_t,{layers})\n" if layers is not None else ""
        self.repl.exec_raw(
            pre + "_kfp_f=kpu.forward(_kfp_t,_kfp_in)",
            timeout=RUN_TIMEOUT,
            doing="running the model",
        )

    def read(self, source: str) -> bytes:
        code = (
            f"import ubinascii\n_kfp_o=bytes({source})\n"
            "for _kfp_k in range(0,len(_kfp_o),768):\n"
            " print(ubinascii.b2a_base64(_kfp_o[_kfp_k:_kfp_k+768]).decode().strip())\n"
            "print('=' + str(len(_kfp_o)))"
        )
        out = self.repl.exec_raw(code, doing=f"reading {source}")
        lines = out.decode("ascii", "replace").split()
        data = b"".join(base64.b64decode(ln) for ln in lines if not ln.startswith("="))
        size = next((int(ln[1:]) for ln in lines if ln.startswith("=")), -1)
        if size != len(data):
            raise ProtocolError(
                f"{source}: the board sent {len(data)} of {size} bytes",
                "bytes were lost on the serial line: retry",
            )
        return data

    def output(self, i: int) -> bytes:
        return self.read(f"kpu.get_output(_kfp_t,{i})")

    def unload(self) -> None:
        self.repl.exec_raw("kpu.deinit(_kfp_t)\ndel _kfp_t", doing="unloading the model")


def _whc(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """An NCHW shape as set_outputs' (w, h, ch): extra leading dims fold into ch."""
    dims = [int(d) for d in shape] or [1]
    w = dims[-1]
    h = dims[-2] if len(dims) >= 2 else 1
    ch = int(np.prod(dims[:-2])) if len(dims) >= 3 else 1
    return w, h, ch


def compare(
    repl: MaixPyRepl,
    model_bytes: bytes,
    spec: LoadSpec,
    input_spec: str,
    *,
    model_name: str = "model",
    atol: float = 1e-5,
    rtol: float = 1e-5,
    bisect: bool = False,
    check_model: bool = True,
    host_options: dict[str, str] | None = None,
    input_mode: str = "maixpy",
    resize: bool = False,
    progress: ProgressFn | None = None,
) -> CompareReport:
    """Run ``input_spec`` through the model on the board and on the host; compare outputs.

    Raises :class:`~kflashpy.maixpy.errors.KpuError` when MaixPy refuses the model
    (with the likely cause), :class:`VerifyError` when the board holds another model.
    A report with ``passed=False`` is returned for differing outputs: the caller
    decides whether that is an error.
    """
    from .. import runtime

    model = runtime.load(model_bytes)
    version = int(getattr(model, "version", 0) or _version(model_bytes))
    if bisect and version != 3:
        raise UsageError("--bisect needs a V3 model (MaixPy's kpu.set_layers is V3 only)")
    in_spec = model.inputs[0]
    if len(model.inputs) != 1:
        raise InputError(f"{model_name}: {len(model.inputs)} inputs; MaixPy feeds exactly one")
    inp = prepare_input(
        input_spec, tuple(in_spec.shape), in_spec.dtype, mode=input_mode, resize=resize
    )
    opts = dict(host_options or {})
    host_outs = [np.asarray(o) for o in model.run([inp.host], **opts)]
    if check_model:
        check_model_on_board(repl, model_bytes, spec)
    session = BoardSession(repl, spec, inp)
    session.load([tuple(o.shape) for o in model.outputs], version)
    session.send_input(progress)
    session.run()
    diffs = [
        diff_output(i, session.output(i), host, atol, rtol) for i, host in enumerate(host_outs)
    ]
    report_ = CompareReport(
        model=model_name,
        version=version,
        load=spec.code(),
        input=inp.source,
        input_kind=inp.kind,
        outputs=diffs,
        passed=all(d.passed for d in diffs),
        notes=list(inp.notes),
    )
    if bisect and not report_.passed:
        report_.bisect = bisect_layers(session, model, inp, atol, rtol, opts)
    session.unload()
    return report_


def _version(data: bytes) -> int:
    from ..model import detect

    sig = detect(data)
    return sig.version if sig else 0


def bisect_layers(
    session: BoardSession,
    model,
    inp: BoardInput,
    atol: float,
    rtol: float,
    host_options: dict[str, str],
    on_step: Callable[[int, bool], None] | None = None,
) -> BisectResult:
    """Binary search for the first layer whose output differs (V3, ``kpu.set_layers``).

    Assumes a difference persists once it appears (later layers consume it); each step
    runs the first n layers on the board and compares with the host's layer n dump.
    """
    _, steps = model.run_layers([inp.host], **host_options)
    dumps = [np.asarray(s.array) for s in steps]

    def differs(n: int) -> OutputDiff:
        session.run(layers=n)
        return diff_output(n - 1, session.read("_kfp_f"), dumps[n - 1], atol, rtol)

    lo, hi = 1, len(dumps)
    found = differs(hi)
    count = 1
    if found.passed:  # every layer agrees: the difference is in how outputs are read
        return BisectResult(None, "", len(dumps), found, count)
    while lo < hi:
        mid = (lo + hi) // 2
        d = differs(mid)
        count += 1
        if on_step:
            on_step(mid, d.passed)
        if d.passed:
            lo = mid + 1
        else:
            hi, found = mid, d
    return BisectResult(hi - 1, steps[hi - 1].name, len(dumps), found, count)
