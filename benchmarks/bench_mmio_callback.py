"""Host cost of one guest device access: the floor under the simulator's per-byte cost.

The kflash stub takes an interrupt per received byte, and each costs about 13 entries
into Python (docs/simulator.md, "Speed (sim-core)"); at 1.5 Mbaud a byte lasts 6.67 µs
of board time. This measures, on a bare unicorn engine, the host microseconds per
guest load from:

- ``ram``: plain memory (no callback: the engine's own cost per loop iteration);
- ``callback``: an MMIO page whose raw ctypes read callback returns a constant (the
  floor of any device register modelled in Python: unicorn's dispatch, ctypes and one
  Python call);
- ``plic``: the same callback, calling the PLIC model's threshold read as the core's
  wrapper does (``Core._mmio``: the access count, the try block, the model's method).

Each loop iteration is a load, an ``addi`` and a branch::

    python benchmarks/bench_mmio_callback.py [--loads N]
"""

from __future__ import annotations

import argparse
import ctypes
import struct
import sys
import time

from unicorn import UC_ARCH_RISCV, UC_MODE_RISCV64, Uc
from unicorn import riscv_const as rv
from unicorn.unicorn_py3.unicorn import uclib

from kflashpy.sim.periph import Plic

CODE, DEVICE = 0x1000, 0x1000_0000
_READ = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint)
_WRITE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint, ctypes.c_uint64)


def _i_type(op: int, rd: int, f3: int, rs1: int, imm: int) -> int:
    return (imm & 0xFFF) << 20 | rs1 << 15 | f3 << 12 | rd << 7 | op


# lw t1, 0(t0); addi t2, t2, -1; bnez t2, -8
LOOP = struct.pack("<III", _i_type(0x03, 6, 2, 5, 0), _i_type(0x13, 7, 0, 7, -1), 0xFE03_9CE3)


def per_load(kind: str, loads: int) -> float:
    """Host CPU microseconds per guest load of ``kind`` (see the module docstring)."""
    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV64)
    uc.mem_map(CODE, 0x1000)
    uc.mem_write(CODE, LOOP)
    uc.reg_write(rv.UC_RISCV_REG_T0, DEVICE)
    uc.reg_write(rv.UC_RISCV_REG_T2, loads)
    keep: list[object] = []
    count = [0]  # device reads
    if kind == "ram":
        uc.mem_map(DEVICE, 0x1000)
    else:
        plic = Plic()

        def constant(_h: object, offset: int, size: int) -> int:
            count[0] += 1
            return 5

        def threshold(_h: object, offset: int, size: int) -> int:
            try:
                count[0] += 1
                return plic.read(0x20_0000, size)
            except BaseException:  # noqa: BLE001 - as Core._mmio
                return 0

        read = _READ(constant if kind == "callback" else threshold)
        write = _WRITE(lambda *_args: None)
        keep += [read, write]
        if uclib.uc_mmio_map(uc._uch, DEVICE, 0x1000, read, None, write, None):
            raise RuntimeError("uc_mmio_map failed")
    cpu = time.process_time()
    uc.emu_start(CODE, CODE + len(LOOP))
    cpu = time.process_time() - cpu
    if uc.reg_read(rv.UC_RISCV_REG_T2) or count[0] != (0 if kind == "ram" else loads):
        raise RuntimeError(f"{kind}: the loop did not run its {loads} loads")
    return cpu / loads * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=int, default=200_000, help="loads per kind")
    args = ap.parse_args()
    for kind in ("ram", "callback", "plic"):
        print(f"{kind:10} {per_load(kind, args.loads):7.3f} µs per load")
    return 0


if __name__ == "__main__":
    sys.exit(main())
