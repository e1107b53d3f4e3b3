"""``kflashpy compare`` against the virtual board: virtual (board) time and host wall time.

Usage::

    python benchmarks/bench_maixpy_compare.py

For each fixture model, builds a flash image (a boot image at 0, the model at
0x300000), opens ``sim://`` and runs a full comparison: connect, model hash check,
load, input upload through the raw REPL, run, outputs read back. Virtual seconds
approximate a real board at 115200 baud (the line rate dominates); wall seconds are
what the test suite pays. Prints a plain table; nothing is asserted.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from kflashpy.image.bootimage import wrap_boot_image
from kflashpy.isp.ports import open_port
from kflashpy.maixpy.compare import LoadSpec, compare
from kflashpy.maixpy.repl import MaixPyRepl

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "kmodels"
CASES = [
    ("v3/mnist_maixpy-scripts.kmodel", "random:1"),
    ("v4/iris_nncase-v0.2.0-beta4.kmodel", "5.1,3.8,1.9,0.4"),
    ("v4/slim-320_nncase-v0.2.0-beta4.kmodel", "random:1"),
    ("v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel", str(FIXTURES / "inputs" / "dog_320x240.bmp")),
]


def main() -> None:
    print(f"{'model':44} {'input':>7} {'virtual s':>10} {'wall s':>8} {'passed':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, inp in CASES:
            model = (FIXTURES / name).read_bytes()
            flash = bytearray(b"\xff" * (16 << 20))
            boot = wrap_boot_image(bytes(4096))
            flash[: len(boot)] = boot
            flash[0x300000 : 0x300000 + len(model)] = model
            path = Path(tmp) / "flash.img"
            path.write_bytes(flash)
            t0 = time.perf_counter()
            port = open_port(f"sim://?flash={path}")
            repl = MaixPyRepl(port, timeout=30)
            repl.connect()
            v0 = port.sim_board.now
            rep = compare(repl, model, LoadSpec(addr=0x300000), inp)
            virtual = port.sim_board.now - v0
            wall = time.perf_counter() - t0
            port.close()
            print(
                f"{Path(name).name:44} {rep.input_kind:>7} {virtual:10.2f} {wall:8.2f} "
                f"{str(rep.passed):>7}"
            )


if __name__ == "__main__":
    main()
