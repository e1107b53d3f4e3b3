"""The K210's on-chip SRAM: one buffer seen at 0x8000_0000 (cached) and 0x4000_0000.

The buffer is a ``bytearray`` so Python code (the mask ROM, tests) and the emulated core
(which maps the same host memory with ``mem_map_ptr``) share the same cells.
"""

from __future__ import annotations

import ctypes

from ..target.k210 import GENERAL_SRAM_END, MASK_ROM, ROM_DATA, SRAM_BASE, SRAM_SIZE
from ..target.k210 import SRAM_UNCACHED as SRAM_ALIAS

__all__ = [
    "GENERAL_SRAM_END",
    "MASK_ROM",
    "ROM_DATA",
    "SRAM_ALIAS",
    "SRAM_BASE",
    "SRAM_SIZE",
    "Sram",
]


class Sram:
    """8 MiB of SRAM with both address views."""

    def __init__(self) -> None:
        self.data = bytearray(SRAM_SIZE)
        self._c_view = (ctypes.c_ubyte * SRAM_SIZE).from_buffer(self.data)

    @property
    def host_address(self) -> int:
        """Host address of the cells (for ``Uc.mem_map_ptr``)."""
        return ctypes.addressof(self._c_view)

    @staticmethod
    def offset(address: int, size: int = 1) -> int | None:
        """Offset of ``address..address+size`` in the buffer, None if not all SRAM."""
        address &= 0xFFFF_FFFF  # the upper 32 address bits are ignored by the bus
        for base in (SRAM_BASE, SRAM_ALIAS):
            if base <= address and address + size <= base + SRAM_SIZE:
                return address - base
        return None

    def write(self, address: int, data: bytes) -> None:
        off = self.offset(address, len(data))
        if off is None:
            raise ValueError(f"0x{address:08X}+{len(data)} is not SRAM")
        self.data[off : off + len(data)] = data

    def read(self, address: int, size: int) -> bytes:
        off = self.offset(address, size)
        if off is None:
            raise ValueError(f"0x{address:08X}+{size} is not SRAM")
        return bytes(self.data[off : off + size])

    def clear(self) -> None:
        self.data[:] = bytes(SRAM_SIZE)
