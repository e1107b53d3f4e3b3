"""kflashpy's flasher as shipped: metadata, headers, and the no-trap design check.

The rebuild-and-compare check itself (``python stub/build.py --check``) runs in CI before
pytest; here the shipped files are checked against their metadata, and the machine-code
check that enforces "no ecall, no wfi, no floating point" is shown to catch them.
"""

from __future__ import annotations

import hashlib
import json
import struct
import sys
from pathlib import Path

import pytest

from kflashpy.errors import FormatError
from kflashpy.stub import HEADER_MAGIC, PARAM_OFFSET, load
from kflashpy.target import k210

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "stub"))

import build  # noqa: E402


def test_shipped_binaries_match_their_metadata():
    meta = json.loads((REPO / "kflashpy/stub/flasher.json").read_text())
    fb = load()
    assert fb.protocol_version == meta["protocol_version"] == build.PROTOCOL_VERSION
    for prog in (fb.boot, fb.flasher):
        info = meta["programs"][prog.name]
        assert hashlib.sha256(prog.image).hexdigest() == info["sha256"]
        assert len(prog.image) == info["size"]
        assert prog.image[4:8] == HEADER_MAGIC
        assert prog.load_address == info["load_address"] == build.PROGRAMS[prog.name][1]
    # the bootstrap is small enough for two 1 KiB ROM frames; everything the flasher
    # occupies (image, .bss, stack, DMA buffers) sits below the ROM's data at
    # 0x805F8000, above all the bootstrap occupies (its LOAD buffer), and leaves SRAM
    # from 0x80000000 free for SRAM programs
    assert len(fb.boot.image) <= 2048
    assert fb.flasher.load_address >= 0x80500000
    boot, flasher = meta["programs"]["boot"], meta["programs"]["flasher"]
    assert flasher["load_address"] + flasher["size"] <= flasher["memory_end"] <= k210.ROM_DATA[0]
    assert boot["memory_end"] <= flasher["load_address"]


def test_memory_end_covers_every_allocated_section():
    # a minimal ELF64 with three section headers: null, a loaded one and a NOBITS .bss
    # (SHF_ALLOC = 2) that ends further up, and an unallocated one further still
    headers = [(0, 0, 0, 0, 0, 0), (0, 1, 2 | 4, 0x1000, 0, 0x200), (0, 8, 2, 0x1200, 0, 0x300),
               (0, 1, 0, 0x9000, 0, 0x10)]  # fmt: skip
    shoff = 64
    elf = bytearray(shoff + 64 * len(headers))
    struct.pack_into("<Q", elf, 0x28, shoff)
    struct.pack_into("<HHH", elf, 0x3A, 64, len(headers), 0)
    for i, h in enumerate(headers):
        struct.pack_into("<IIQQQQ", elf, shoff + 64 * i, *h)
    assert build.memory_end(bytes(elf)) == 0x1500


def test_bootstrap_parameter_is_patched_in_place():
    boot = load().boot
    patched = boot.with_param(3_000_000)
    assert len(patched) == len(boot.image)
    assert int.from_bytes(patched[PARAM_OFFSET : PARAM_OFFSET + 4], "little") == 3_000_000
    assert patched[:PARAM_OFFSET] == boot.image[:PARAM_OFFSET]


def test_shipped_code_takes_no_trap_and_is_integer_only():
    for prog in (load().boot, load().flasher):
        # the flat binary starts with .text; the check skips the 16-byte header
        assert build.forbidden_instructions(prog.image[:4096], prog.load_address) == []


@pytest.mark.parametrize(
    "code, what",
    [
        ((0x00000073).to_bytes(4, "little"), "ecall"),
        ((0x30200073).to_bytes(4, "little"), "mret"),
        ((0x30046073).to_bytes(4, "little"), "mstatus write"),  # csrsi mstatus, 8
        ((0x30029073).to_bytes(4, "little"), "mstatus write"),  # csrw mstatus, t0
        ((0x00053007).to_bytes(4, "little"), "floating-point"),  # fld
        ((0x2000).to_bytes(2, "little"), "compressed FP"),  # c.fld
    ],
)
def test_instruction_check_catches_forbidden_code(code, what):
    bad = build.forbidden_instructions(bytes(16) + code, 0x80000000)
    assert len(bad) == 1 and what in bad[0] and bad[0].startswith("0x80000010")


def test_instruction_check_allows_wfi_and_clearing_mstatus():
    wfi, csrci_mie, csrr = 0x10500073, 0x30047073, 0x300022F3  # csrci mstatus, 8; csrr t0
    code = b"".join(w.to_bytes(4, "little") for w in (wfi, csrci_mie, csrr))
    assert build.forbidden_instructions(bytes(16) + code, 0x80000000) == []


def test_damaged_package_file_is_a_format_error(tmp_path, monkeypatch):
    import kflashpy.stub as stub

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for name in ("flasher.json", "kflashpy_boot.bin", "kflashpy_flasher.bin"):
        (pkg / name).write_bytes((REPO / "kflashpy/stub" / name).read_bytes())
    flasher = pkg / "kflashpy_flasher.bin"
    flasher.write_bytes(flasher.read_bytes()[:-1] + b"\x00")
    monkeypatch.setattr(stub.resources, "files", lambda _name: pkg)
    stub.load.cache_clear()
    try:
        with pytest.raises(FormatError, match="kflashpy_flasher.bin"):
            stub.load()
    finally:
        stub.load.cache_clear()
