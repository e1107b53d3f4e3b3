"""Guest instructions per output byte of the flasher's DEFLATE decoder, on RV64 (unicorn).

The simulator's host cost grows with every guest instruction (~12 ns each), and on the
board each is a cycle. This builds ``stub/inflate.c`` as the flasher does (the pinned
ziglang, the flasher's flags, -O2 for this file), runs its ``inflate_raw`` on 64 KiB
frames packed the way the host packs them (zlib level 9, raw, each frame with the 32 KiB
before it as a preset dictionary: docs/flasher-protocol.md, "Compression") and counts
the instructions it executes, checking every frame's output. Payloads: the YOLO kmodel
(mostly literals) and the firmware-like bytes (more copies). To compare with another
version of the decoder::

    python benchmarks/bench_inflate.py
    git show OLD:stub/inflate.c > /tmp/inflate_old.c
    python benchmarks/bench_inflate.py --source /tmp/inflate_old.c
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import zlib
from pathlib import Path

from unicorn import UC_ARCH_RISCV, UC_HOOK_BLOCK, UC_MODE_RISCV64, Uc
from unicorn.riscv_const import (
    UC_RISCV_REG_A0,
    UC_RISCV_REG_A1,
    UC_RISCV_REG_A2,
    UC_RISCV_REG_A3,
    UC_RISCV_REG_A4,
    UC_RISCV_REG_A5,
    UC_RISCV_REG_RA,
    UC_RISCV_REG_SP,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_flashers import YOLO  # noqa: E402
from simbench import firmware_like_payload  # noqa: E402

# stub/build.py (the flasher's compiler flags), under a name of its own: a plain
# `import build` would meet PyPA's `build` package where it is installed
_spec = importlib.util.spec_from_file_location("stub_build", ROOT / "stub" / "build.py")
assert _spec is not None and _spec.loader is not None
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

FRAME, DICT = 65536, 32768
BASE, SRC, OUT, STACK, RET = 0x8000_0000, 0x8010_0000, 0x8020_0000, 0x803F_0000, 0x803F_F000
LINK = "SECTIONS { . = 0x80000000; .text : { *(.text*) } .rodata : { *(.rodata*) *(.srodata*) }"
LINK += " .data : { *(.data*) *(.sdata*) } .bss : { *(.bss*) *(.sbss*) } }\n"


def compile_decoder(source: Path, tmp: Path) -> tuple[bytes, int]:
    """The decoder with a receive hook that returns at once: (flat image, inflate_raw)."""
    (tmp / "poll.c").write_text("void uart_poll(void) {}\n")
    (tmp / "link.ld").write_text(LINK)
    opt = build.PROGRAMS["flasher"][3].split()
    objs = []
    for src, flags in ((source, build.FAST["inflate.c"]), (tmp / "poll.c", "")):
        obj = tmp / f"{src.stem}.o"
        cmd = ["cc", *build.CFLAGS, *opt, *flags.split(), f"-I{ROOT / 'stub'}"]
        build.zig(*cmd, "-c", str(src.resolve()), "-o", str(obj))
        objs.append(str(obj))
    elf = tmp / "inflate.elf"
    build.zig("ld.lld", "-T", str(tmp / "link.ld"), "-e", "inflate_raw", *objs, "-o", str(elf))
    build.zig("objcopy", "-O", "binary", str(elf), str(tmp / "inflate.bin"))
    entry = int.from_bytes(elf.read_bytes()[0x18:0x20], "little")  # e_entry: inflate_raw
    return (tmp / "inflate.bin").read_bytes(), entry


def frames(data: bytes) -> list[tuple[bytes, bytes, bytes]]:
    """(dictionary, stream, raw) per 64 KiB frame, packed as the host packs them."""
    out = []
    for at in range(0, len(data), FRAME):
        chunk, zdict = data[at : at + FRAME], data[max(0, at - DICT) : at]
        c = (
            zlib.compressobj(9, zlib.DEFLATED, -15, zdict=zdict)
            if zdict
            else zlib.compressobj(9, zlib.DEFLATED, -15)
        )
        out.append((zdict, c.compress(chunk) + c.flush(), chunk))
    return out


def count(image: bytes, entry: int, data: bytes) -> int:
    """Guest instructions inflate_raw executes to decode ``data``'s frames (each
    output checked against the frame)."""
    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV64)
    uc.mem_map(BASE, 0x40_0000)
    uc.mem_write(BASE, image)
    uc.mem_write(RET, (0x00100073).to_bytes(4, "little"))  # ebreak: never reached
    total = [0]
    sizes: dict[tuple[int, int], int] = {}

    def block(uc: Uc, addr: int, size: int, _data: object) -> None:
        n = sizes.get((addr, size))
        if n is None:  # instructions in the block: 16-bit ones have low bits != 11
            code, pos, n = uc.mem_read(addr, size), 0, 0
            while pos < size:
                pos += 2 if code[pos] & 3 != 3 else 4
                n += 1
            sizes[(addr, size)] = n
        total[0] += n

    uc.hook_add(UC_HOOK_BLOCK, block)
    for zdict, stream, raw in frames(data):
        uc.mem_write(SRC, stream)
        uc.mem_write(OUT - len(zdict), zdict)
        args = (SRC, len(stream), OUT, len(zdict), FRAME, STACK + 8)
        for reg, value in zip(
            (UC_RISCV_REG_A0, UC_RISCV_REG_A1, UC_RISCV_REG_A2)
            + (UC_RISCV_REG_A3, UC_RISCV_REG_A4, UC_RISCV_REG_A5),
            args,
            strict=True,
        ):
            uc.reg_write(reg, value)
        uc.reg_write(UC_RISCV_REG_SP, STACK)
        uc.reg_write(UC_RISCV_REG_RA, RET)
        uc.emu_start(entry, RET)
        n = int.from_bytes(uc.mem_read(STACK + 8, 4), "little")
        if uc.reg_read(UC_RISCV_REG_A0) != 0 or bytes(uc.mem_read(OUT, n)) != raw:
            raise SystemExit("the decoder's output differs from the frame")
    return total[0]


def measure(source: Path, size: int) -> dict[str, tuple[int, int]]:
    """(instructions, output bytes) per payload, the first ``size`` bytes of each."""
    payloads = {"kmodel": YOLO.read_bytes()[:size], "firmware": firmware_like_payload(size)}
    with tempfile.TemporaryDirectory() as tmp:
        image, entry = compile_decoder(source, Path(tmp))
    return {name: (count(image, entry, data), len(data)) for name, data in payloads.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=ROOT / "stub" / "inflate.c")
    ap.add_argument("--size", type=int, default=256 * 1024, help="bytes per payload")
    args = ap.parse_args()
    print(f"{'payload':10} {'bytes':>8} {'instructions':>13} {'per byte':>9}")
    for name, (instructions, n) in measure(args.source, args.size).items():
        print(f"{name:10} {n:8} {instructions:13} {instructions / n:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
