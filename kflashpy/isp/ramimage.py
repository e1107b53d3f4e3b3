"""Programs to run from SRAM (``load-ram``): raw binaries and ELF files.

K210 general SRAM is 6 MiB, seen cached and uncached (:mod:`kflashpy.target.k210`). ELF files from Rust
toolchains link at the sign-extended 0xFFFFFFFF80000000; only the low 32 bits reach the
bus, so addresses are masked to 32 bits. Segments with no file bytes (.bss) are not
sent: the program clears them itself.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import FormatError
from ..target import k210

DEFAULT_LOAD = k210.SRAM_BASE

_PT_LOAD = 1
_EM_RISCV = 243


@dataclass(frozen=True)
class RamImage:
    """What to write where, and where to jump."""

    segments: tuple[tuple[int, bytes], ...]  # (SRAM address, bytes)
    entry: int

    @property
    def size(self) -> int:
        return sum(len(d) for _, d in self.segments)


def _check_sram(name: str, address: int, size: int) -> None:
    if k210.in_sram(address, size):
        return
    raise FormatError(
        f"{name}: 0x{address:08X}..0x{address + size:08X} is outside the K210's 6 MiB SRAM",
        f"link the program for 0x{k210.SRAM_BASE:08X}..0x{k210.GENERAL_SRAM_END:08X}",
    )


def parse_elf(name: str, data: bytes) -> RamImage:
    """Loadable segments of a little-endian RISC-V ELF (32- or 64-bit)."""
    if len(data) < 52 or data[:4] != b"\x7fELF":
        raise FormatError(f"{name}: not an ELF file")
    cls, endian = data[4], data[5]
    if endian != 1 or cls not in (1, 2):
        raise FormatError(f"{name}: only little-endian ELF32/ELF64 files can be loaded")
    is64 = cls == 2
    try:
        if is64:
            machine, entry, phoff = struct.unpack_from("<H4xQQ", data, 18)
            phentsize, phnum = struct.unpack_from("<HH", data, 54)
        else:
            machine, entry, phoff = struct.unpack_from("<H4xII", data, 18)
            phentsize, phnum = struct.unpack_from("<HH", data, 42)
        if machine != _EM_RISCV:
            raise FormatError(f"{name}: ELF machine {machine} is not RISC-V (243)")
        segments = []
        for i in range(phnum):
            off = phoff + i * phentsize
            if is64:
                p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, off)
            else:
                p_type, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIIII", data, off)
            if p_type != _PT_LOAD or p_filesz == 0:
                continue
            if p_offset + p_filesz > len(data):
                raise FormatError(f"{name}: segment {i} runs past the end of the file")
            address = p_vaddr & 0xFFFFFFFF  # Rust ELFs sign-extend it; the bus sees 32 bits
            body = data[p_offset : p_offset + p_filesz]
            _check_sram(f"{name} segment {i}", address, len(body))
            segments.append((address, body))
    except struct.error as e:
        raise FormatError(f"{name}: truncated ELF header or program headers") from e
    if not segments:
        raise FormatError(f"{name}: the ELF has no loadable segments")
    return RamImage(tuple(segments), entry & 0xFFFFFFFF)


def load_ram_image(path: str | Path, address: int = DEFAULT_LOAD) -> RamImage:
    """Read a program for SRAM: ELF by magic, otherwise a raw binary at ``address``."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise FormatError(f"{p}: cannot read: {e.strerror}") from e
    if data[:4] == b"\x7fELF":
        return parse_elf(str(p), data)
    if not data:
        raise FormatError(f"{p}: the file is empty")
    _check_sram(str(p), address, len(data))
    return RamImage(((address, data),), address)
