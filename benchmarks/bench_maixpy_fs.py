"""``kflashpy fs put/get`` against the virtual board: throughput in virtual (board) time.

Usage::

    python benchmarks/bench_maixpy_fs.py [SIZE_KIB ...]     # default: 64 256 1024

Writes and reads back random files of each size on the virtual MaixPy's ``/sd`` (a
RAM card) at 115200 baud, every transfer hash-checked on the board, and prints KiB/s
in virtual seconds (what a real board at 115200 would give, the line rate dominating)
and the host's wall seconds. The line itself carries at most 11.25 KiB/s of base64,
8.4 KiB/s of data. Prints a plain table; nothing is asserted.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from kflashpy.image.bootimage import wrap_boot_image
from kflashpy.isp.ports import open_port
from kflashpy.maixpy import fs
from kflashpy.maixpy.repl import MaixPyRepl


def main(sizes: list[int]) -> None:
    print(f"{'size KiB':>8} {'put KiB/s':>10} {'get KiB/s':>10} {'wall s':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        flash = bytearray(b"\xff" * (16 << 20))
        boot = wrap_boot_image(bytes(4096))
        flash[: len(boot)] = boot
        path = Path(tmp) / "flash.img"
        path.write_bytes(flash)
        port = open_port(f"sim://?flash={path}&maixpy_sd=64M")
        repl = MaixPyRepl(port, timeout=30)
        repl.connect()
        for kib in sizes:
            data = os.urandom(kib * 1024)
            t0, v0 = time.perf_counter(), port.sim_board.now
            fs.write_file(repl, "/sd/bench.bin", data)
            v1 = port.sim_board.now
            assert fs.read_file(repl, "/sd/bench.bin") == data
            v2 = port.sim_board.now
            print(
                f"{kib:8} {kib / (v1 - v0):10.2f} {kib / (v2 - v1):10.2f} "
                f"{time.perf_counter() - t0:7.2f}"
            )
        port.close()


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [64, 256, 1024])
