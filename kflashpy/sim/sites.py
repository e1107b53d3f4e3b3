"""Where unicorn's translation blocks can start, for hooking single instructions with
block hooks (docs/simulator.md, "Speed (sim-core)", session 10).

A code hook on any instruction makes unicorn call ``helper_uc_tracecode`` on every
instruction of every block, walking its whole code-hook list (the instruction counter
alone is called directly). A block hook costs only the blocks that start inside its
range. So the core hooks an instruction at ``addr`` (an ``mret``, a ``csrr rd, mip``, a
wait-loop head) with a block hook on the straight run that leads to it: every
translation block that executes ``addr`` starts inside that run, and the hook learns
from the block's start and size whether ``addr`` is in it and how many instructions
come before it.

A block is straight-line code: it ends at a branch or jump, at a CSR instruction,
``mret`` or ``wfi`` (unicorn 2.1.4's RISC-V translator ends the block after the first
three; ``wfi`` leaves it by an exception in every mode), at a page boundary, or
earlier; it never runs past an instruction that ends it. Any other instruction (when
in doubt, an instruction is counted as one that does not end a block: that only
widens the run) may be followed in the same block by the next. The run found here is
where a block holding ``addr`` may start under every decoding of the halfwords before
it (compressed code has no marked instruction boundaries).
"""

from __future__ import annotations

from collections.abc import Callable

PAGE = 0x1000  # unicorn's RISC-V target page: no translation block crosses one
_SYSTEM_ENDERS = (0x3020_0073, 0x1050_0073)  # mret, wfi


def ends_block(read_half: Callable[[int], int], pc: int) -> bool:
    """Does the instruction at ``pc`` surely end a translation block (no instruction
    after it runs in the same block)?"""
    half = read_half(pc)
    if half & 3 != 3:  # compressed
        # c.j, c.beqz, c.bnez; c.jr, c.jalr (and c.ebreak, c.jr x0: exceptions)
        return half & 0xE003 in (0xA001, 0xC001, 0xE001) or half & 0xE07F == 0x8002
    word = half | read_half(pc + 2) << 16
    op = word & 0x7F
    if op in (0x63, 0x6F, 0x67):  # branches, jal, jalr
        return True
    return op == 0x73 and (word >> 12 & 7 != 0 or word in _SYSTEM_ENDERS)


def run_start(read_half: Callable[[int], int], addr: int, floor: int) -> int:
    """The lowest address (even, >= ``floor`` and >= the page of ``addr``) from which a
    straight decoding reaches ``addr`` without an instruction that ends a block: no
    block that executes the instruction at ``addr`` starts below it."""
    low = max(floor, addr & ~(PAGE - 1))
    reaches = {addr}
    start = addr
    for pc in range(addr - 2, low - 1, -2):
        size = 2 if read_half(pc) & 3 != 3 else 4
        nxt = pc + size
        if nxt in reaches and not ends_block(read_half, pc):
            reaches.add(pc)
            start = pc
    return start


def steps_to(read_half: Callable[[int], int], start: int, addr: int) -> int | None:
    """How many instructions a straight run from ``start`` executes before the one at
    ``addr``; None if ``addr`` is not an instruction boundary of that run."""
    pc, steps = start, 0
    while pc < addr:
        pc += 2 if read_half(pc) & 3 != 3 else 4
        steps += 1
    return steps if pc == addr else None
