"""``kflashpy demo``: the whole workflow on the virtual K210, with nothing to download.

A new user (and CI) can see every stage work end to end before touching a board:
check a flash plan, pack it as a kfpkg, burn it through the ISP path onto the virtual
board (our flasher, verified by on-board SHA-256), reflash it unchanged (skipped), run
the model on the host reference runtime, then boot the burned firmware and compare the
board's outputs with the host's over the MaixPy REPL.

The demo model is built here, with weights of our own: a V4 kmodel holding one float
matmul (a 4 -> 3 linear classifier). The firmware is a deterministic firmware-like
payload; the virtual board's MaixPy personality answers once the ROM has checked it.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .progress import Progress, ProgressFn, report

MODEL_ADDRESS = 0x300000
FIRMWARE_SIZE = 256 * 1024
DEMO_INPUT = "5.1,3.8,1.9,0.4"

_WEIGHTS = np.array(
    [[0.9, -0.4, 0.1], [0.5, 0.3, -0.7], [-1.2, 0.8, 0.6], [-0.6, 0.2, 1.1]], np.float32
)
_BIAS = np.array([0.2, -0.1, 0.05], np.float32)


def _range(memory: int, start: int, size: int) -> bytes:
    """A V4 memory_range of float32 data (memory 0 = constants, 1 = main)."""
    return struct.pack("<4I", memory, 0, start, size)


def demo_model() -> bytes:
    """A V4 kmodel (K210 target) computing ``x @ W + b`` for a 1x4 float input."""
    consts = _WEIGHTS.tobytes()
    body = _range(1, 0, 16) + _range(0, 0, len(consts)) + _range(1, 16, 12)
    body += struct.pack("<3I", 1, 4, 3)  # a_rows, a_cols, b_cols
    body += struct.pack("<2f", -np.inf, np.inf) + _BIAS.tobytes()  # no fused clamp
    body += bytes(-len(body) % 8)
    header = struct.pack("<10I", 0x4B4D444C, 4, 0, 1, len(consts), 32, 1, 1, 1, 0)
    header += _range(1, 0, 16) + struct.pack("<4i", 1, 1, 1, 4) + _range(1, 16, 12)
    return header + consts + struct.pack("<2I", 0x04, len(body)) + body


def demo_firmware(size: int = FIRMWARE_SIZE) -> bytes:
    """Deterministic firmware-like bytes: compresses like real MaixPy (zlib ~0.6)."""
    rng = np.random.default_rng(210)
    words = rng.integers(0, 1 << 16, size // 4, dtype=np.uint32)
    words[rng.random(words.size) < 0.55] &= 0x0000FFFF  # many small constants, like code
    return words.astype("<u4").tobytes()


@dataclass
class DemoStep:
    name: str
    ok: bool
    seconds: float
    summary: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class DemoResult:
    workdir: str
    port: str
    steps: list[DemoStep]

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "workdir": self.workdir,
            "port": self.port,
            "ok": self.ok,
            "steps": [vars(s) for s in self.steps],
        }


def run_demo(
    workdir: str | Path,
    *,
    baud: int = 1_500_000,
    progress: ProgressFn | None = None,
) -> DemoResult:
    """Run the demo in ``workdir`` (files stay there); returns one step per stage.

    Errors of a stage propagate as :class:`~kflashpy.errors.KflashError` (the CLI
    shows them); a comparison that finds differences is a failed step, not an error.
    """
    from . import runtime
    from .image.api import check_layout, pack
    from .isp.api import burn
    from .isp.connect import ConnectOptions
    from .maixpy.compare import LoadSpec, compare
    from .maixpy.repl import open_repl

    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    fw, model = work / "firmware.bin", work / "demo.kmodel"
    fw.write_bytes(demo_firmware())
    model.write_bytes(demo_model())
    pkg, flash_img = work / "demo.kfpkg", work / "board.img"
    flash_img.unlink(missing_ok=True)  # a fresh, erased virtual board every run
    port = f"sim://?board=maix-bit&flash={flash_img}"
    pairs = [(0, str(fw)), (MODEL_ADDRESS, str(model))]
    steps: list[DemoStep] = []

    def step(name: str, fn: Callable[[], tuple[bool, str, dict[str, Any]]]) -> None:
        report(progress, Progress("demo", label=name, message=f"demo: {name}"))
        start = time.perf_counter()
        ok, summary, details = fn()
        steps.append(DemoStep(name, ok, round(time.perf_counter() - start, 3), summary, details))

    def do_check():
        plan = check_layout(pairs, board="maix-bit", layout="maixpy")
        return (
            not plan.errors,
            f"{len(plan.regions)} regions, {len(plan.errors)} errors, "
            f"{len(plan.warnings)} warnings",
            plan.to_dict(),
        )

    def do_pack():
        pack(pkg, pairs, board="maix-bit", layout="maixpy")
        ratio = len(zlib.compress(fw.read_bytes(), 9)) / fw.stat().st_size
        return True, f"{pkg.name}: {pkg.stat().st_size:,} B (firmware zlib ratio {ratio:.2f})", {}

    def do_burn(label: str):
        def run():
            bit = ConnectOptions(port, board="maix-bit", baud=baud)
            res = burn(kfpkg=str(pkg), connection=bit, progress=progress)
            states = ", ".join(r.status for r in res.regions)
            return (
                all(r.status in ("written", "skipped") for r in res.regions),
                f"{label}: regions {states}; flasher {res.flasher}, verified by "
                f"{res.verification}, {res.seconds:.2f} s on the board's clock",
                res.to_dict(),
            )

        return run

    def do_host():
        (y,) = runtime.load(model.read_bytes()).run(
            [np.array([float(v) for v in DEMO_INPUT.split(",")], np.float32).reshape(1, 1, 1, 4)]
        )
        values = [round(float(v), 6) for v in y.reshape(-1)]
        return True, f"host output for [{DEMO_INPUT}]: {values}", {"output": values}

    def do_compare():
        with open_repl(port) as repl:
            rep = compare(repl, model.read_bytes(), LoadSpec(addr=MODEL_ADDRESS), DEMO_INPUT)
        worst = max((o.max_abs or 0.0 for o in rep.outputs), default=0.0)
        verdict = "board matches host" if rep.passed else "board differs from host"
        return rep.passed, f"{verdict} (max |diff| {worst:g})", rep.to_dict()

    step("check-layout", do_check)
    step("pack", do_pack)
    step("burn", do_burn("first burn"))
    step("reflash", do_burn("unchanged reflash"))
    step("host-run", do_host)
    step("compare", do_compare)
    return DemoResult(str(work), port, steps)
