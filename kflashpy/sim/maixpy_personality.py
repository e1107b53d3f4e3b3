"""A MaixPy personality for the virtual K210: what the UART says after MaixPy boots.

The virtual board hands its UART to this object after a normal boot of a valid
firmware image (a :class:`kflashpy.sim.firmware.Personality`: ``on_host_bytes(data, now)``,
``poll(now) -> bytes``). It answers like MaixPy's MicroPython v1.11 REPL (docs/compare.md): the boot
log with ``[MaixPy] init end`` and the 200 ms Ctrl-C window, the friendly and raw REPL
(no raw-paste), MaixPy's soft reboot that re-runs ``boot.py``, a ``boot.py`` that loops
or traps Ctrl-C, a 2 KiB receive ring that drops what overflows, and a
receive side that needs time per byte. Code received through the REPL runs in the host's Python against fakes of
the MaixPy modules kflashpy's driver uses (``KPU``, ``image``, ``Maix.utils``,
``uhashlib``, ``ubinascii``, ``ustruct``, ``gc``, ``sys``, ``os``), backed by the
board's flash and by the host runtime (:mod:`kflashpy.runtime`); ``open()`` and ``os``
see ``/flash`` and ``/sd`` (:mod:`kflashpy.sim.maixpy_vfs`).

This checks the transport and the comparison, not the runtime's fidelity: the "board"
outputs ARE the host runtime's outputs, so a comparison passes by construction unless
a deviation is switched on. Deviations (URL ``maixpy_dev=...``, comma separated):

``flip:OUT:BYTE[:MASK]``   xor byte BYTE of output OUT with MASK (default 0xff)
``round:OUT``              many small differences, as another rounding rule gives
``layer:K:BYTE``           per-layer dumps from layer K on differ (for --bisect), and
                           so does byte BYTE of every output
``err:CODE``               kpu.load/load_flash (2001-2007, 2009, 2015) or kpu.forward
                           (other codes) raises MaixPy's ValueError with that code

Other options: ``maixpy_boot=none|loop|trap`` (a boot.py that prints forever;
``trap`` also swallows Ctrl-C), ``maixpy_rx_us=20`` (µs the REPL needs per received
byte), ``maixpy_v4=0`` (a V3-only firmware), ``maixpy_sd=SIZE|DIR`` and
``maixpy_sd_size=SIZE`` (an SD card), ``maixpy_stat=0`` (a build without ``os.stat``). The code runs in CPython: connect only
trusted tools to a virtual board's UART.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import struct
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kflashpy.errors import InputError
from kflashpy.units import parse_int

from .maixpy_vfs import DEFAULT_SD_SIZE, VFile, make_vfs

#: MaixPy's UART receive ring (MAIX_UART_BUF)
RX_RING = 2048
BANNER = (
    b"MicroPython v0.6.2-sim on 2026-01-01; Sipeed_M1 with kendryte-k210\r\n"
    b'Type "help()" for more information.\r\n'
)
RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n>"
BOOT_LOG = (
    b"[MAIXPY] Pll0:freq:806000000\r\n[MAIXPY] Pll1:freq:398666666\r\n"
    b"[MAIXPY] Pll2:freq:45066666\r\n[MAIXPY] cpu:freq:403000000\r\n"
    b"[MAIXPY] kpu:freq:398666666\r\n[MAIXPY] Flash:0xef:0x17\r\n"
    b"[MaixPy] gc heap=0x80215000-0x80295000(524288)\r\n"
)
INIT_END = b"[MaixPy] init end\r\n"
#: virtual seconds from power-on / soft reboot to "init end", and the Ctrl-C window
BOOT_TIME = 0.35
WINDOW = 0.2
LOAD_ERRORS = frozenset({2001, 2002, 2003, 2004, 2005, 2006, 2007, 2009, 2015})
KPU_MESSAGES = {
    2001: "ERR_PARAM, please check param, load address or kmodel file name",
    2002: "ERR_KMODEL_VERSION, only support kmodel V3/V4 now",
    2003: "ERR_KMODEL_FORMAT, layer_header.body_size <=0",
    2004: "ERR_DECRYPT, check smodel match with your board",
    2005: "ERR_READ_FILE",
    2006: "ERR_NO_MEM",
    2007: "ERR_GET_CONV_LAYER, first layer should be conv layer",
    2008: "ERR_RUN_MODEL, maybe model dirty",
    2009: "ERR_MODELS_FULL, we only support load 5 models in the same time",
    2012: "SIZE_NOTMATCH",
    2013: "ERR_OUTPUTS_SET, need kpu.set_outputs() to set shape",
    2015: "ERR_UNKNOWN",
}
BOOT_SCRIPTS = {
    "none": b"# boot.py (virtual board)\n",
    "loop": b"import time\nwhile True:\n    print('app: running')\n    time.sleep_ms(100)\n",
    "trap": b"import time\nwhile True:\n    try:\n        print('app: running')\n"
    b"        time.sleep_ms(100)\n    except:\n        pass\n",
}


class PersonalityOptionError(InputError):
    """A ``maixpy_*`` option the personality does not understand."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "see docs/compare.md for the MaixPy personality options")


@dataclass(frozen=True)
class Deviation:
    """One injected difference between the virtual board and the host runtime."""

    kind: str  # flip | round | layer | err
    a: int = 0
    b: int = 0
    mask: int = 0xFF


@dataclass
class Options:
    deviations: list[Deviation] = field(default_factory=list)
    boot: str = "none"
    rx_cost: float = 20e-6
    v4: bool = True
    boot_given: bool = False
    sd_size: int = 0
    sd_dir: Path | None = None
    stat: bool = True

    def error_code(self) -> int | None:
        return next((d.a for d in self.deviations if d.kind == "err"), None)


def parse_options(raw: dict[str, str] | None) -> Options:
    """``maixpy_*`` URL options -> :class:`Options` (unknown keys or values raise)."""
    opts = Options()
    for key, value in (raw or {}).items():
        name = key.removeprefix("maixpy_")
        if name == "dev":
            opts.deviations += [_parse_deviation(s) for s in value.split(",") if s]
        elif name == "boot":
            if value not in BOOT_SCRIPTS:
                raise PersonalityOptionError(f"maixpy_boot must be one of {sorted(BOOT_SCRIPTS)}")
            opts.boot, opts.boot_given = value, True
        elif name == "rx_us":
            try:
                opts.rx_cost = float(value) * 1e-6
            except ValueError:
                opts.rx_cost = 0.0
            if not opts.rx_cost > 0:
                raise PersonalityOptionError(f"maixpy_rx_us must be a number > 0, not {value!r}")
        elif name == "v4":
            opts.v4 = value not in ("0", "false", "no")
        elif name == "stat":
            opts.stat = value not in ("0", "false", "no")
        elif name == "sd":
            _parse_sd(opts, value)
        elif name == "sd_size":
            opts.sd_size = _size_option(key, value)
        else:
            raise PersonalityOptionError(
                f"unknown MaixPy personality option {key!r} (maixpy_dev, maixpy_boot, "
                "maixpy_rx_us, maixpy_v4, maixpy_sd, maixpy_sd_size, maixpy_stat)"
            )
    if opts.sd_dir is not None and not opts.sd_size:
        opts.sd_size = DEFAULT_SD_SIZE
    return opts


def _size_option(key: str, value: str) -> int:
    try:
        size = parse_int(value, key)
    except InputError:
        size = 0
    if size <= 0:
        raise PersonalityOptionError(f"{key} must be a size such as 64M, not {value!r}")
    return size


def _parse_sd(opts: Options, value: str) -> None:
    """``maixpy_sd=SIZE`` (a RAM card) or ``maixpy_sd=DIR`` (a host directory is the card)."""
    if value[:1].isdigit():
        opts.sd_size = _size_option("maixpy_sd", value)
        return
    path = Path(value)
    if not path.is_dir():
        raise PersonalityOptionError(
            f"maixpy_sd={value!r}: no such directory (give a size like 64M or a directory)"
        )
    opts.sd_dir = path


def _parse_deviation(text: str) -> Deviation:
    parts = text.split(":")
    kind, nums = parts[0], parts[1:]
    try:
        vals = [int(n, 0) for n in nums]
    except ValueError as e:
        raise PersonalityOptionError(f"bad maixpy_dev entry {text!r}: {e}") from e
    arity = {"flip": (2, 3), "round": (1, 1), "layer": (2, 2), "err": (1, 1)}
    if kind not in arity or not arity[kind][0] <= len(vals) <= arity[kind][1]:
        raise PersonalityOptionError(
            f"bad maixpy_dev entry {text!r}: use flip:OUT:BYTE[:MASK], round:OUT, "
            "layer:K:BYTE or err:CODE"
        )
    return Deviation(kind, *vals)


def _board_options(board) -> dict[str, str]:
    config = getattr(board, "config", None)
    return dict(getattr(config, "personality_options", None) or {})


# --- the fake MaixPy modules ---------------------------------------------------------------


class _Namespace:
    def __init__(self, **kw) -> None:
        self.__dict__.update(kw)


def _kpu_error(code: int, what: str = "load") -> ValueError:
    return ValueError(f"[MAIXPY]kpu: {what} error:{code}, {KPU_MESSAGES.get(code, 'ERR_UNKNOWN')}")


class _Image:
    """``image.Image``: RGB565 (big-endian byte stream) or grayscale, plus ``pix_ai``."""

    def __init__(self, size=(320, 240), **_kw) -> None:
        self.w, self.h = int(size[0]), int(size[1])
        self.gray = False
        self.buf = bytearray(self.w * self.h * 2)
        self.pix_ai: np.ndarray | None = None

    def width(self) -> int:
        return self.w

    def height(self) -> int:
        return self.h

    def to_grayscale(self, copy=False):
        self.gray, self.buf = True, bytearray(self.w * self.h)
        return self

    def to_bytes(self) -> bytearray:
        return self.buf  # aliases the pixels, as MaixPy's to_bytes() does

    def pix_to_ai(self) -> None:
        if self.gray:
            self.pix_ai = np.frombuffer(bytes(self.buf), np.uint8).reshape(1, self.h, self.w)
        else:
            from kflashpy.runtime.inputs import rgb565_bytes_to_planes

            self.pix_ai = rgb565_bytes_to_planes(bytes(self.buf), self.w, self.h)


class _Fmap:
    """``kpu_fmap``: an output buffer; ``bytes(fmap)`` gives the raw bytes."""

    def __init__(self, data: bytes, index: int, typecode: str, shape: tuple[int, ...]) -> None:
        self.data, self.index, self.typecode = data, index, typecode
        dims = [1, 1, 1, *shape][-3:]
        self.ch, self.h, self.w = dims
        self.size = len(data)

    def __bytes__(self) -> bytes:
        return self.data

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, item):
        fmt = "f" if self.typecode == "f" else "B"
        vals = struct.unpack(f"<{self.size // struct.calcsize(fmt)}{fmt}", self.data)
        return tuple(vals[item]) if isinstance(item, slice) else vals[item]


class _Task:
    def __init__(self, model, version: int, size: int) -> None:
        self.model, self.version, self.model_size = model, version, size
        self.outputs_set: dict[int, tuple[int, int, int]] = {}
        self.layers: int | None = None
        self.last: list[_Fmap] = []


class _Kpu:
    """The ``KPU`` module, running models with the host runtime."""

    def __init__(self, personality: MaixPyPersonality) -> None:
        self.p = personality

    # loading
    def load(self, where):
        if isinstance(where, str):
            try:
                data = VFile(self.p.vfs, where, "rb").read()
            except OSError:
                raise _kpu_error(2005) from None
            return self._make_task(data, "load")
        if not isinstance(where, int) or where <= 0:
            raise ValueError("[MAIXPY]kpu: model_addr must > 0 ")
        return self._make_task(self.p.flash_model(where), "load")

    def load_flash(self, addr, is_dual_buf, batch_size, spi_speed):
        if not all(isinstance(v, int) for v in (addr, is_dual_buf, batch_size, spi_speed)):
            raise ValueError(
                "[MAIXPY]kpu: load_flash arg format error: "
                "task=kpu.load_flash(flash_addr, is_dual_buf, batch_size, spi_speed)"
            )
        if addr <= 0:
            raise ValueError("[MAIXPY]kpu: model_addr must > 0 ")
        from kflashpy.model.detect import swap_words

        return self._make_task(swap_words(self.p.flash_model(addr)), "load_flash")

    def _make_task(self, data: bytes, how: str) -> _Task:
        code = self.p.options.error_code()
        if code in LOAD_ERRORS:
            raise _kpu_error(code, how)
        head = data[:8]
        if head[:4] == b"\x03\x00\x00\x00":
            version = 3
        elif head[:4] == b"LDMK" and head[4:8] == b"\x04\x00\x00\x00" and self.p.options.v4:
            version = 4
        elif head[:4] == b"LDMK" and head[4:8] == b"\x05\x00\x00\x00" and how == "load":
            raise _kpu_error(2015, how)
        else:
            raise _kpu_error(2002, how)
        from kflashpy import runtime

        try:
            model = runtime.load(data)
        except Exception as e:  # the host runtime refuses: MaixPy would say "format"
            raise _kpu_error(2003, how) from e
        return _Task(model, version, len(data))

    # running
    def set_outputs(self, task: _Task, idx: int, w: int, h: int, ch: int) -> bool:
        outs = task.model.outputs
        if not 0 <= idx < len(outs):
            raise _kpu_error(2011, "set_outputs")
        want = int(np.prod(outs[idx].shape)) * 4
        if w * h * ch * 4 != want:
            self.p.print(f"set_outputs: size mismatch {w * h * ch * 4} vs {want}")
            return False
        task.outputs_set[idx] = (w, h, ch)
        return True

    def set_layers(self, task: _Task, n: int) -> None:
        task.layers = int(n)

    def forward(self, task: _Task, data, out_index: int = 0, dma: int = -1) -> _Fmap:
        code = self.p.options.error_code()
        if code is not None and code not in LOAD_ERRORS:
            raise _kpu_error(code, "run")
        if task.version == 4 and len(task.outputs_set) < len(task.model.outputs):
            raise _kpu_error(2013, "run")
        x = self._input(task, data)
        if task.layers is not None and task.version == 3:
            _, steps = task.model.run_layers([x])
            dumps = [np.asarray(step.array) for step in steps]
            n = min(max(task.layers, 1), len(dumps))
            raw = self.p.deviate_layer(n - 1, _raw(dumps[n - 1]))
            task.last = [_Fmap(raw, 0, _typecode(dumps[n - 1]), dumps[n - 1].shape)]
            return task.last[0]
        outs = [np.asarray(a) for a in task.model.run([x])]
        task.last = [
            _Fmap(self.p.deviate_output(i, _raw(a), a.dtype), i, _typecode(a), a.shape)
            for i, a in enumerate(outs)
        ]
        self.p.busy(0.005 + 1e-9 * sum(a.nbytes for a in outs))
        return self.get_output(task, out_index)

    def get_output(self, task: _Task, idx: int) -> _Fmap:
        if not 0 <= idx < len(task.last):
            raise _kpu_error(2011, "get_output")
        return task.last[idx]

    def _input(self, task: _Task, data) -> np.ndarray:
        spec = task.model.inputs[0]
        if isinstance(data, _Image):
            if data.pix_ai is None:
                raise ValueError("[MAIXPY]kpu: pix_ai is NULL! call img.pix_to_ai()")
            want = tuple(int(d) for d in spec.shape)
            if data.pix_ai.size != int(np.prod(want)):
                raise ValueError(
                    f"[MAIXPY]kpu: check img format err! img w={data.w},h={data.h}, "
                    f"model input {want}"
                )
            return data.pix_ai.reshape(want).astype(spec.dtype)
        vals = np.asarray(list(data), dtype=np.float32)
        count = int(np.prod(spec.shape))
        if vals.size != count:  # MaixPy does not check: it would read past the buffer
            raise ValueError(f"[MAIXPY]kpu: input list has {vals.size} values, model {count}")
        return vals.reshape(tuple(int(d) for d in spec.shape)).astype(spec.dtype)

    def deinit(self, task) -> None:
        pass

    def memtest(self) -> None:
        self.p.print(f"###free gc heap memory : {self.p.gc_free // 1024} KB")
        self.p.print(f"###free sys heap memory: {self.p.sys_free // 1024} KB")


def _raw(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def _typecode(a: np.ndarray) -> str:
    return "f" if a.dtype.kind == "f" else "B"


class _Hash:
    def __init__(self, data: bytes = b"") -> None:
        self._h = hashlib.sha256(data)

    def update(self, data) -> None:
        self._h.update(bytes(data))

    def digest(self) -> bytes:
        return self._h.digest()


# --- the personality -----------------------------------------------------------------------


class MaixPyPersonality:
    """MaixPy's REPL on the virtual board's UART (a :class:`~kflashpy.sim.firmware.Personality`)."""

    def __init__(self, board, options: dict[str, str] | None = None) -> None:
        self.board = board
        self.options = parse_options(_board_options(board) if options is None else options)
        # SPIFFS/SD contents survive resets of the board, like a real filesystem
        # /flash and /sd survive resets of the board, like a real filesystem
        self.vfs = make_vfs(board, self.options)
        flash = self.vfs.volumes["/flash"]
        if self.options.boot_given or "/boot.py" not in flash.files:
            flash.write("/boot.py", BOOT_SCRIPTS[self.options.boot])
        now = float(getattr(board, "now", 0.0))
        self.t = now
        self.rx = bytearray()
        self.rx_dropped = 0
        self._tx = bytearray()
        self._timers: list[tuple[float, Callable[[], None]]] = []
        self._busy_until = now
        self.phase = "booting"
        self.line = bytearray()
        self.block: list[str] = []  # lines of a compound statement typed at the >>> prompt
        self.globals: dict = {}
        self.gc_free, self.sys_free = 400_000, 2_000_000
        self._stdout: list[str] = []
        self._module_table: dict | None = None
        self._boot(now, after="friendly", soft=False)

    # --- the Personality protocol ------------------------------------------------------------------------

    def on_host_bytes(self, data: bytes, now: float) -> None:
        """Bytes from the host: into the 2 KiB ring (ignored before the REPL UART is up)."""
        self._advance(now)
        if self.phase == "booting":
            return
        room = max(0, RX_RING - len(self.rx))
        self.rx += data[:room]
        self.rx_dropped += max(0, len(data) - room)
        self._advance(now)

    def poll(self, now: float) -> bytes:
        """Bytes the board has sent by ``now`` (the board's wire paces them at 115200)."""
        self._advance(now)
        out = bytes(self._tx)
        self._tx.clear()
        return out

    def status(self) -> dict:
        return {"personality": "maixpy", "phase": self.phase, "rx_dropped": self.rx_dropped}

    # --- time ------------------------------------------------------------------------------

    def _emit(self, data: bytes) -> None:
        self._tx += data

    def _at(self, when: float, fn: Callable[[], None]) -> None:
        self._timers.append((when, fn))
        self._timers.sort(key=lambda e: e[0])

    def busy(self, seconds: float) -> None:
        """The board is computing: received bytes wait in the ring meanwhile."""
        self._busy_until = max(self._busy_until, self.t) + seconds

    def _advance(self, now: float) -> None:
        while True:
            t_timer = self._timers[0][0] if self._timers else math.inf
            consuming = self.rx and self.phase != "booting"
            t_byte = max(self.t, self._busy_until) + self.options.rx_cost if consuming else math.inf
            if min(t_timer, t_byte) > now:
                break
            if t_timer <= t_byte:
                self.t = max(self.t, t_timer)
                self._timers.pop(0)[1]()
                continue
            self.t = t_byte
            if self.phase == "raw":
                self._raw_bulk(now)
            else:
                b = self.rx.pop(0)
                self._on_byte(b)
        self.t = max(self.t, now)

    def _raw_bulk(self, now: float) -> None:
        """Consume a run of ordinary raw-REPL bytes at once (fast path for code upload)."""
        limit = 1 + int((now - self.t) / self.options.rx_cost)
        n = 0
        while n < min(limit, len(self.rx)) and self.rx[n] > 4:
            n += 1
        if n == 0:
            b = self.rx.pop(0)
            self._on_byte(b)
            return
        self.line += self.rx[:n]
        del self.rx[:n]
        self.t += (n - 1) * self.options.rx_cost

    # --- boot ----------------------------------------------------------------------------

    def _boot(self, start: float, after: str, soft: bool) -> None:
        self.phase = "booting"
        self.rx.clear()
        self.globals = {}
        self._timers.clear()
        if not soft:
            self._emit(BOOT_LOG)
        self._at(start + (0.05 if soft else BOOT_TIME), lambda: self._init_end(after))

    def _init_end(self, after: str) -> None:
        self._emit(INIT_END)
        self.phase = "window"
        self._after = after
        self._at(self.t + WINDOW, self._run_boot_py)

    def _run_boot_py(self) -> None:
        self._emit(b"[sim] MaixPy personality of the virtual K210\r\n")
        script = self.vfs.volumes["/flash"].files.get("/boot.py", b"")
        mode = next((m for m, s in BOOT_SCRIPTS.items() if s == script and m != "none"), None)
        if mode is None:
            self._enter_repl()
            return
        self.phase = "bootpy"
        self._boot_mode = mode
        self._tick()

    def _tick(self) -> None:
        self._emit(b"app: running\r\n")
        self._at(self.t + 0.1, self._tick)

    def _enter_repl(self) -> None:
        self.line.clear()
        self.block.clear()
        if self._after == "raw":
            self.phase = "raw"
            self._emit(RAW_BANNER)
        else:
            self.phase = "friendly"
            self._emit(BANNER + b">>> ")

    def _keyboard_interrupt(self, where: str) -> None:
        self._timers.clear()
        self._emit(
            b"Traceback (most recent call last):\r\n"
            + f'  File "{where}", line 3, in <module>\r\n'.encode()
            + b"KeyboardInterrupt: \r\n"
        )
        self._enter_repl()

    # --- bytes ---------------------------------------------------------------------------

    def _on_byte(self, b: int) -> None:
        if self.phase == "window":
            if b == 3:
                self._keyboard_interrupt("_boot.py")
        elif self.phase == "bootpy":
            if b == 3 and self._boot_mode == "loop":
                self._keyboard_interrupt("boot.py")
        elif self.phase == "friendly":
            self._friendly_byte(b)
        elif self.phase == "raw":
            self._raw_byte(b)

    def _friendly_byte(self, b: int) -> None:
        if b == 1:
            self.phase = "raw"
            self.line.clear()
            self._emit(b"\r\n" + RAW_BANNER)
        elif b == 2:
            self._emit(b"\r\n" + BANNER + b">>> ")
        elif b == 3:
            self.line.clear()
            self.block.clear()
            self._emit(b"\r\n>>> ")
        elif b == 4:
            if not self.line and not self.block:
                self._emit(b"\r\n[MaixPy]: soft reboot\r\n")
                self._boot(self.t, after="friendly", soft=True)
        elif b == 13:
            src = self.line.decode("utf-8", "replace")
            self.line.clear()
            self._emit(b"\r\n")
            if (self.block and src.strip()) or (not self.block and src.rstrip().endswith(":")):
                self.block.append(src)  # a compound statement goes on until an empty line
                self._emit(b"... ")
                return
            if self.block:
                src = "\n".join(self.block) + "\n"
                self.block.clear()
            if src.strip():
                out, err = self._run(src, interactive=True)
                self._emit(out + err)
            self._emit(b">>> ")
        elif b == 8 or b == 127:
            if self.line:
                self.line.pop()
                self._emit(b"\x08 \x08")
        elif b >= 32 or b == 9:
            self.line.append(b)
            self._emit(bytes([b]))

    def _raw_byte(self, b: int) -> None:
        if b == 1:
            self.line.clear()
            self._emit(b"\r\n" + RAW_BANNER)
        elif b == 2:
            self.phase = "friendly"
            self._emit(b"\r\n" + BANNER + b">>> ")
        elif b == 3:
            self.line.clear()
        elif b == 4:
            self._emit(b"OK")
            if not self.line:
                self._emit(b"\r\n[MaixPy]: soft reboot\r\n")
                self._boot(self.t, after="raw", soft=True)
                return
            src = bytes(self.line).decode("utf-8", "replace")
            self.line.clear()
            self.busy(0.001 + 2e-6 * len(src))
            out, err = self._run(src, interactive=False)
            self._at(self._busy_until, lambda: self._emit(out + b"\x04" + err + b"\x04>"))
        else:
            self.line.append(b)

    # --- running code ------------------------------------------------------------------

    def print(self, *args, sep: str = " ", end: str = "\n", **_kw) -> None:
        self._stdout.append(sep.join(str(a) for a in args) + end)

    def _run(self, src: str, interactive: bool) -> tuple[bytes, bytes]:
        """Run code like MicroPython's pyexec: stdout, then a traceback (or nothing)."""
        self._stdout = []
        g = self.globals
        g.setdefault("__name__", "__main__")
        g["__builtins__"] = self._builtins()
        err = ""
        shown = sys.displayhook
        try:
            # the friendly REPL echoes expression values, as MicroPython's single-input mode
            code = compile(src, "<stdin>", "single" if interactive else "exec")
            sys.displayhook = lambda v: None if v is None else self.print(repr(v))
            exec(code, g)  # noqa: S102 - the virtual board's interpreter
        except SyntaxError as e:
            err = (
                f'Traceback (most recent call last):\n  File "<stdin>", line {e.lineno}\n'
                f"SyntaxError: invalid syntax\n"
            )
        except BaseException as e:  # noqa: BLE001 - every error goes to the REPL
            err = _format_exception(e)
        finally:
            sys.displayhook = shown
        out = "".join(self._stdout)
        return _cooked(out), _cooked(err)

    def _builtins(self) -> dict:
        import builtins

        b = {k: getattr(builtins, k) for k in _SAFE_BUILTINS}
        b["print"] = self.print
        b["open"] = lambda path, mode="r": VFile(self.vfs, path, mode)
        b["__import__"] = self._import
        return b

    def _import(self, name, globals=None, locals=None, fromlist=(), level=0):
        modules = self._modules()
        top = name.split(".")[0]
        if top not in modules:
            raise ImportError(f"no module named '{name}'")
        return modules[top]

    def _modules(self) -> dict:
        if self._module_table is None:
            self._module_table = self._make_modules()
        return self._module_table

    def _make_modules(self) -> dict:
        kpu = _Kpu(self)
        stdout = _Namespace(write=lambda s: self._stdout.append(str(s)))
        utils = _Namespace(
            flash_read=self._flash_read,
            heap_free=lambda: self.sys_free,
            gc_heap_size=lambda *a: 524288,
        )
        binmod = _Namespace(
            a2b_base64=lambda s: base64.b64decode(s),
            b2a_base64=lambda b: base64.b64encode(bytes(b)) + b"\n",
            hexlify=lambda b, *a: binascii.hexlify(bytes(b), *a),
            unhexlify=binascii.unhexlify,
            crc32=binascii.crc32,
        )
        kpu_mod = _Namespace(
            **{
                n: getattr(kpu, n)
                for n in (
                    "load",
                    "load_flash",
                    "forward",
                    "get_output",
                    "set_layers",
                    "deinit",
                    "memtest",
                )
            }
        )
        if self.options.v4:
            kpu_mod.set_outputs = kpu.set_outputs  # type: ignore[attr-defined]
        hash_mod = _Namespace(sha256=_Hash)
        vfs = self.vfs
        os_mod: Any = _Namespace(  # an attribute bag: os.stat is added below
            listdir=vfs.listdir,
            remove=lambda p: vfs.call("remove", p),
            mkdir=lambda p: vfs.call("mkdir", p),
            rmdir=lambda p: vfs.call("rmdir", p),
            rename=vfs.rename,
            statvfs=vfs.statvfs,
            getcwd=lambda: vfs.cwd,
            chdir=vfs.chdir,
            sync=lambda: None,
            uname=lambda: ("MaixPy", "MaixPy", "0.6.2-sim", "v0.6.2-sim", "Sipeed_M1"),
        )
        if vfs.has_stat:  # some MaixPy builds have no os.stat (docs/files.md)
            os_mod.stat = vfs.stat
        sys_mod = _Namespace(
            platform="MaixPy",
            implementation=_Namespace(name="micropython", version=(0, 6, 2)),
            version="3.4.0",
            stdout=stdout,
        )
        return {
            "KPU": kpu_mod,
            "image": _Namespace(Image=_Image),
            "Maix": _Namespace(utils=utils),
            "uhashlib": hash_mod,
            "hashlib": hash_mod,
            "ubinascii": binmod,
            "binascii": binmod,
            "ustruct": struct,
            "struct": struct,
            "gc": _Namespace(mem_free=lambda: self.gc_free, collect=lambda: None),
            "sys": sys_mod,
            "uos": os_mod,
            "os": os_mod,
            "time": _Namespace(sleep_ms=lambda ms: self.busy(ms / 1000)),
            "utime": _Namespace(sleep_ms=lambda ms: self.busy(ms / 1000)),
            "machine": _Namespace(unique_id=lambda: bytes(32)),
        }

    # --- flash and deviations ------------------------------------------------------------

    def _flash_read(self, addr: int, n: int) -> bytes:
        size = len(self.board.flash.data) if hasattr(self.board.flash, "data") else 16 << 20
        if addr < 0 or n < 0 or addr + n > size:
            raise ValueError(f"flash_read: 0x{addr:x}+{n} is outside the flash")
        self.busy(n / 20e6)
        return bytes(self.board.flash.read(addr, n))

    def flash_model(self, addr: int) -> bytes:
        """The bytes a model loader reads from ``addr`` (to the end of flash, at most 8 MiB)."""
        size = len(self.board.flash.data) if hasattr(self.board.flash, "data") else 16 << 20
        if addr >= size:
            raise _kpu_error(2001)
        return bytes(self.board.flash.read(addr, min(size - addr, 8 << 20)))

    def deviate_output(self, index: int, raw: bytes, dtype: np.dtype) -> bytes:
        out = bytearray(raw)
        for d in self.options.deviations:
            if d.kind == "flip" and d.a == index and d.b < len(out):
                out[d.b] ^= d.mask
            elif d.kind == "layer" and d.b < len(out):
                out[d.b] ^= 0xFF
            elif d.kind == "round" and d.a == index:
                out = bytearray(_other_rounding(bytes(out), dtype))
        return bytes(out)

    def deviate_layer(self, layer: int, raw: bytes) -> bytes:
        out = bytearray(raw)
        for d in self.options.deviations:
            if d.kind == "layer" and layer >= d.a and out:
                out[d.b % len(out)] ^= 0xFF
        return bytes(out)


def _other_rounding(raw: bytes, dtype: np.dtype) -> bytes:
    """What another rounding rule does to an output: many off-by-one-ish differences."""
    if np.dtype(dtype).kind == "f":
        bits = np.frombuffer(raw, "<u4").copy()
        bits = (bits + 0x1000) & 0xFFFFE000  # keep 10 mantissa bits, round half up
        return bits.tobytes()
    vals = np.frombuffer(raw, np.uint8).copy()
    odd = (vals % 2 == 1) & (vals < 255)
    vals[odd] += 1  # ties going the other way
    return vals.tobytes()


def _format_exception(e: BaseException) -> str:
    line = 1
    for frame in traceback.extract_tb(e.__traceback__):
        if frame.filename == "<stdin>":
            line = frame.lineno or 1
    name = "OSError" if isinstance(e, OSError) else type(e).__name__  # no subclasses there
    if isinstance(e, OSError) and e.errno is not None:
        msg = f"[Errno {e.errno}] {e.strerror}"
    else:
        msg = str(e)
    return (
        f'Traceback (most recent call last):\n  File "<stdin>", line {line}, in <module>\n'
        f"{name}: {msg}\n"
    )


def _cooked(text: str) -> bytes:
    return text.replace("\r\n", "\n").replace("\n", "\r\n").encode("utf-8", "replace")


_SAFE_BUILTINS = [
    "abs",
    "all",
    "any",
    "bool",
    "bytearray",
    "bytes",
    "callable",
    "chr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "Exception",
    "BaseException",
    "float",
    "getattr",
    "hasattr",
    "hex",
    "int",
    "isinstance",
    "iter",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "object",
    "ord",
    "pow",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "str",
    "sum",
    "tuple",
    "type",
    "zip",
    "ValueError",
    "TypeError",
    "KeyError",
    "IndexError",
    "OSError",
    "ImportError",
    "RuntimeError",
    "NotImplementedError",
    "MemoryError",
    "StopIteration",
    "KeyboardInterrupt",
    "NameError",
    "AttributeError",
    "ZeroDivisionError",
    "memoryview",
    "True",
    "False",
    "None",
]
