#!/usr/bin/env python3
"""Build the kflashpy flasher and its bootstrap with the pinned ziglang toolchain.

    python stub/build.py            # rebuild kflashpy/stub/*.bin and flasher.json
    python stub/build.py --check    # rebuild in a temp dir; exit 1 if it differs

The build is bit-reproducible: fixed flags, no debug info, source paths mapped to
``stub/``, and flat binaries have no timestamps. CI runs ``--check`` so the
committed binaries always match the committed source.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ZIG_VERSION = "0.17.1"
HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "kflashpy" / "stub"
sys.path.insert(0, str(HERE.parent))
from kflashpy.target.k210 import ROM_DATA  # noqa: E402  (the boot ROM's own SRAM)

PROTOCOL_VERSION = 3
CAPABILITIES = [
    "read",
    "hash",
    "hash-list",
    "compressed-write",
    "erase",
    "chip-erase",
    "sram",
    "baud",
    "reboot",
    "pipelined-write",
    "identify",
    "write-digest",
    "write-dictionary",
]
CFLAGS = [
    "-target",
    "riscv64-freestanding-none",
    # no F/D: the flasher never touches floating point; linker relaxation shortens calls
    "-mcpu=generic_rv64+m+a+c+relax",
    "-mcmodel=medany",
    "-ffreestanding",
    "-nostdlib",
    "-fno-builtin",
    "-fno-pic",
    "-fno-stack-protector",
    "-ffunction-sections",
    "-fdata-sections",
    "-g0",
    "-Wall",
    "-Wextra",
    "-Werror",
    f"-ffile-prefix-map={HERE}=stub",
]
# name: (sources, link base, stack, flags). The flasher is built for size (it crosses
# the wire at every connection: 1 KiB costs 3.4 ms at 3 Mbaud) except the SHA-256 rounds,
# which verification runs over every byte.
PROGRAMS = {
    "boot": (["start.S", "hwcommon.c", "boot.c"], 0x80000000, 0x1000, "-Oz -DKFPY_BOOTSTRAP"),
    "flasher": (
        ["start.S", "hwcommon.c", "flasher.c", "sha256.c", "inflate.c"],
        0x80570000,
        0x4000,
        "-Os",
    ),
}
FAST = {"sha256.c": "-O2", "inflate.c": "-O2"}
FILES = {"boot": "kflashpy_boot.bin", "flasher": "kflashpy_flasher.bin"}


def zig(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "ziglang", *args], check=True, cwd=HERE)


def check_zig() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ziglang", "version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if out != ZIG_VERSION:
        raise SystemExit(f"ziglang {out} found, the build is pinned to {ZIG_VERSION}")


FP_OPCODES = {0x07, 0x27, 0x43, 0x47, 0x4B, 0x4F, 0x53}  # LOAD-FP ... OP-FP
ECALL, EBREAK, MRET = 0x00000073, 0x00100073, 0x30200073
CSR_MSTATUS = 0x300
HEADER_SIZE = 16


def _sections(elf: bytes) -> list[tuple[int, int, int, int, int, int]]:
    """The ELF64 section headers: (name offset, type, flags, address, offset, size)."""
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, _ = struct.unpack_from("<HHH", elf, 0x3A)
    return [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]


def memory_end(elf: bytes) -> int:
    """The first address past everything the program occupies in SRAM (its image, .bss,
    stack and DMA buffers: every section with SHF_ALLOC)."""
    return max(addr + size for _n, _t, flags, addr, _o, size in _sections(elf) if flags & 2)


def text_section(elf: bytes) -> tuple[int, bytes]:
    """(address, bytes) of the ELF64 .text section."""
    sections = _sections(elf)
    (shstrndx,) = struct.unpack_from("<H", elf, 0x3E)
    strtab = sections[shstrndx]
    for name, _type, _flags, addr, off, size in sections:
        end = elf.index(b"\0", strtab[4] + name)
        if elf[strtab[4] + name : end] == b".text":
            return addr, elf[off : off + size]
    raise SystemExit("no .text section")


def mstatus_may_set(word: int) -> bool:
    """Does this CSR instruction (on mstatus) possibly set a bit? csrrw/csrrwi write,
    csrrs/csrrsi set unless their source is x0/0 (a read); csrrc/csrrci only clear."""
    funct3, rs1 = word >> 12 & 7, word >> 15 & 0x1F
    return funct3 in (1, 5) or (funct3 in (2, 6) and rs1 != 0)


def forbidden_instructions(code: bytes, base: int) -> list[str]:
    """The design's rule, checked on the machine code: no trap is ever taken and no FP.

    No ecall/ebreak, no mret (there is no trap handler to return from), and mstatus is
    only ever cleared (csrrc/csrrci): mstatus.MIE stays 0, so the flasher's wfi resumes
    on an interrupt enabled in mie without taking it. A linear sweep is exact here:
    RISC-V code has no literal pools (tables live in .rodata).
    """
    bad, pos = [], HEADER_SIZE  # the header (start.S) is a jump and three data words
    while pos + 2 <= len(code):
        half = int.from_bytes(code[pos : pos + 2], "little")
        if half & 3 != 3:  # 16-bit: C.FLD/C.FSD (quadrant 0) and C.FLDSP/C.FSDSP (quadrant 2)
            if half & 3 in (0, 2) and half >> 13 in (1, 5):
                bad.append(f"0x{base + pos:08X}: compressed FP load/store")
            pos += 2
            continue
        word = int.from_bytes(code[pos : pos + 4], "little")
        if word in (ECALL, EBREAK, MRET):
            what = {ECALL: "ecall", EBREAK: "ebreak", MRET: "mret"}[word]
            bad.append(f"0x{base + pos:08X}: {what}")
        elif word & 0x7F == 0x73 and word >> 20 == CSR_MSTATUS and mstatus_may_set(word):
            bad.append(f"0x{base + pos:08X}: mstatus write that may set MIE")
        elif word & 0x7F in FP_OPCODES:
            bad.append(f"0x{base + pos:08X}: floating-point instruction")
        pos += 4
    return bad


def build_program(name: str, tmp: Path) -> tuple[bytes, int]:
    """Compile and link one program: its flat image and where its SRAM use ends."""
    sources, base, stack, opt = PROGRAMS[name]
    objs = []
    for src in sources:
        obj = tmp / f"{name}-{src}.o"
        flags = opt.split() + FAST.get(src, "").split()
        zig("cc", *CFLAGS, *flags, f"-DLINK_BASE=0x{base:08X}u", "-c", src, "-o", str(obj))
        objs.append(str(obj))
    elf, binf = tmp / f"{name}.elf", tmp / f"{name}.bin"
    zig(
        "ld.lld",
        f"--defsym=LINK_BASE=0x{base:08X}",
        f"--defsym=STACK_SIZE=0x{stack:X}",
        "--gc-sections",
        "--build-id=none",
        "-T",
        "link.ld",
        *objs,
        "-o",
        str(elf),
    )
    zig("objcopy", "-O", "binary", str(elf), str(binf))
    elf_bytes = elf.read_bytes()
    bad = forbidden_instructions(*reversed(text_section(elf_bytes)))
    if bad:
        raise SystemExit(f"{name}: takes traps or uses floating point: " + "; ".join(bad[:5]))
    end = memory_end(elf_bytes)
    if end > ROM_DATA[0]:
        raise SystemExit(
            f"{name}: occupies SRAM up to 0x{end:08X}, into the boot ROM's data at"
            f" 0x{ROM_DATA[0]:08X}: lower its link address or shrink its buffers"
        )
    return binf.read_bytes(), end


def build(out: Path) -> None:
    check_zig()
    meta: dict = {
        "protocol_version": PROTOCOL_VERSION,
        "capabilities": CAPABILITIES,
        "toolchain": f"ziglang {ZIG_VERSION}",
        "programs": {},
    }
    with tempfile.TemporaryDirectory() as t:
        for name in PROGRAMS:
            data, end = build_program(name, Path(t))
            base = PROGRAMS[name][1]
            (out / FILES[name]).write_bytes(data)
            meta["programs"][name] = {
                "file": FILES[name],
                "load_address": base,
                "entry": base,
                "size": len(data),
                "memory_end": end,
                "sha256": hashlib.sha256(data).hexdigest(),
            }
    (out / "flasher.json").write_text(json.dumps(meta, indent=2) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare a fresh build with the tree")
    args = ap.parse_args()
    if not args.check:
        build(OUT)
        print(f"built {', '.join(FILES.values())} and flasher.json in {OUT}")
        return 0
    with tempfile.TemporaryDirectory() as t:
        build(Path(t))
        bad = [
            f
            for f in [*FILES.values(), "flasher.json"]
            if not (OUT / f).exists() or (OUT / f).read_bytes() != (Path(t) / f).read_bytes()
        ]
    if bad:
        print(f"stub build differs from the committed files: {', '.join(bad)}", file=sys.stderr)
        print("run `python stub/build.py` and commit the result", file=sys.stderr)
        return 1
    print("stub build reproduces the committed binaries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
