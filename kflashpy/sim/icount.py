"""How many instructions a running ``emu_start(count=N)`` slice has executed so far.

unicorn implements ``count`` with an internal per-instruction hook that increments a
64-bit counter in its engine structure (``uc_struct.emu_counter``, followed by the limit
``emu_count``), but no API returns it. Virtual time inside a slice needs it: without it a
device that the guest touches mid-slice sees the time of the slice start, and a slice a
device stops early has run an unknown number of instructions.

The counter's offset is not part of unicorn's ABI, so it is found by calibration rather
than assumed: a throwaway engine runs a known number of instructions before an MMIO read
stops it, twice with different lengths, and the offset must hold the right values both
times. If calibration fails (another unicorn build), :func:`counter_offset` returns None
and the core falls back to estimating.
"""

from __future__ import annotations

import ctypes
import struct
from functools import cache

from unicorn import UC_ARCH_RISCV, UC_MODE_RISCV64, Uc, UcError

_CODE = 0x8000_0000
_MMIO = 0x1000_0000
_LIMIT = 0x1234_5677  # an unlikely value to look for: the slice's instruction budget
_SCAN = 4096  # qwords of the engine structure searched (the field sits near 0x560)
_NOP = struct.pack("<I", 0x0000_0013)  # addi x0, x0, 0
_STOP = struct.pack("<II", 0x1000_0537, 0x0005_2583)  # lui a0, 0x10000; lw a1, 0(a0)


def _run(nops: int) -> tuple[int, list[int]] | None:
    """Run ``nops`` nops and a stopping MMIO load; return (engine address, qwords)."""
    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV64)
    uc.mem_map(_CODE, 0x10000)
    uc.mem_write(_CODE, _NOP * nops + _STOP + _NOP * 16)

    def stop(engine: Uc, _offset: int, _size: int, _ud: object) -> int:
        engine.emu_stop()
        return 0

    uc.mmio_map(_MMIO, 0x1000, stop, None, None, None)
    uc.emu_start(_CODE, _CODE + 0x10000, count=_LIMIT)
    base = ctypes.cast(uc._uch, ctypes.c_void_p).value
    if not base:
        return None
    return base, list((ctypes.c_uint64 * _SCAN).from_address(base))


@cache
def counter_offset() -> int | None:
    """Byte offset of unicorn's running instruction counter in its engine structure."""
    try:
        found: set[int] | None = None
        for nops in (333, 1021):
            run = _run(nops)
            if run is None:
                return None
            _, words = run
            # the load that stops the run is counted too (nops + lui + lw)
            hits = {
                8 * (i - 1)
                for i in range(1, len(words))
                if words[i] == _LIMIT and words[i - 1] == nops + 2
            }
            found = hits if found is None else found & hits
        return min(found) if found else None
    except (UcError, ValueError, OSError):
        return None


class InstructionCounter:
    """Reads the running slice's executed-instruction count of one engine (one load)."""

    def __init__(self, uc: Uc) -> None:
        offset = counter_offset()
        self.exact = offset is not None
        base = ctypes.cast(uc._uch, ctypes.c_void_p).value or 0
        # the counter itself (None if not found): the core reads it inline on hot paths
        self.cell = ctypes.c_uint64.from_address(base + offset) if offset is not None else None
        # the running slice's limit, right after it (calibration found it there): lowering
        # it ends the slice before the next instruction
        self.limit = ctypes.c_uint64.from_address(base + offset + 8) if offset is not None else None

    def executed(self, budget: int) -> int | None:
        """Instructions executed in the current (or last) slice of ``budget``; None if
        unknown. The counter passes the budget by one when the budget stops the slice."""
        if self.cell is None:
            return None
        return min(self.cell.value, budget)
