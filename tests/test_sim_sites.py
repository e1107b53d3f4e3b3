"""Hooked instructions (``mret``, ``csrr rd, mip``, wait-loop heads) as block hooks on the
runs that lead to them (kflashpy/sim/sites.py, Core._add_site): the same counts and
virtual times as code hooks, without unicorn's per-instruction hook walk."""

from __future__ import annotations

import struct

import pytest
from support.simwire import reply
from test_sim_core import (
    A0,
    MRET,
    MSTATUS,
    MTVEC,
    T0,
    T1,
    T2,
    T3,
    T4,
    T5,
    T6,
    WFI,
    _record_transmits,
    addi,
    auipc,
    csrrs,
    csrrsi,
    csrrw,
    frame,
    jal,
    lui,
    lw,
    open_isp,
    program,
    read_for,
    sw,
    upload_and_boot,
)

from kflashpy.isp.frames import legacy_short_request
from kflashpy.isp.slip import encode
from kflashpy.isp.stubs import kflash_package_stub
from kflashpy.sim import sites
from kflashpy.sim.core import Core
from kflashpy.sim.memory import SRAM_ALIAS, SRAM_BASE

MIE, MIP, S1 = 0x304, 0x344, 9


def _halves(code: bytes, base: int = 0):
    def read(pc: int) -> int:
        off = pc - base
        return int.from_bytes(code[off : off + 2], "little") if 0 <= off < len(code) - 1 else 0

    return read


def test_blocks_end_at_jumps_branches_csr_mret_and_wfi() -> None:
    read = _halves(
        program(jal(0, 8), MRET, WFI, csrrs(T3, MIP, 0), addi(T0, T0, 1), lw(T1, T0, 0))
        + bytes.fromhex("82807d15fdda01a0")  # ret; c.addi a0,-1; c.beqz; c.j
    )
    ends = [sites.ends_block(read, pc) for pc in (0, 4, 8, 12, 16, 20, 24, 26, 28, 30)]
    assert ends == [True, True, True, True, False, False, True, False, True, True]


def test_a_run_starts_where_every_decoding_of_the_code_before_reaches_it() -> None:
    # the kflash stub's wait for MSIP: "wfi; csrr a5, mip", where the upper half of the
    # wfi (0x1050) also decodes as a compressed instruction that does not end a block:
    # a block starting at +6 would run into the csrr, so the run starts there
    code = program(addi(T0, T0, 1), csrrsi(MIE, 8), WFI, csrrs(15, MIP, 0))
    read = _halves(code)
    assert sites.run_start(read, 12, 0) == 10
    assert sites.steps_to(read, 10, 12) == 1 and sites.steps_to(read, 12, 12) == 0
    # after a jump whose upper half cannot be a compressed instruction: blocks holding
    # it start there; after one whose upper half can (0x0400), one may start there too
    code = program(addi(T0, T0, 1), jal(1, 0x30000), csrrs(15, MIP, 0))
    assert sites.run_start(_halves(code), 8, 0) == 8
    code = program(addi(T0, T0, 1), jal(1, 64), csrrs(15, MIP, 0))
    assert sites.run_start(_halves(code), 8, 0) == 6
    # a run of plain instructions after a CSR instruction, whose upper half (0x3052)
    # decodes as c.fldsp
    code = program(csrrw(0, MTVEC, T0), addi(T0, T0, 1), lw(T1, T0, 0), MRET)
    read = _halves(code)
    assert sites.run_start(read, 12, 0) == 2
    assert sites.steps_to(read, 2, 12) == 3 and sites.steps_to(read, 4, 12) == 2
    assert sites.steps_to(read, 0, 14) is None  # not an instruction boundary from 0
    # never below the page: no block crosses one
    code = program(*[addi(T0, T0, 1)] * 8)
    assert sites.run_start(_halves(code, 0x1000 - 16), 0x1000 + 8, 0) == 0x1000


def i_add(rd: int, rs1: int, rs2: int) -> int:
    return rs2 << 20 | rs1 << 15 | rd << 7 | 0x33


def srli(rd: int, rs1: int, shamt: int) -> int:
    return shamt << 20 | rs1 << 15 | 5 << 12 | rd << 7 | 0x13


def echo_program(handler_in_alias: bool) -> bytes:
    """UARTHS echo by interrupt, each byte sent back plus MEIP as ``csrr mip`` saw it
    (so "a" comes back as "b"). The handler's ``csrr mip`` and ``mret`` sit inside
    straight runs (the core pauses the slice at them); the main loop counts for ever,
    so slices end anywhere, at the hooked instructions too."""
    alias = ((SRAM_ALIAS - SRAM_BASE) >> 12) if handler_in_alias else 0
    return program(
        auipc(T0),  # 0x00
        addi(T0, T0, 0x58),  # the handler
        lui(T1, alias),
        i_add(T0, T0, T1),  # in the alias view or not
        csrrw(0, MTVEC, T0),  # 0x10
        lui(T1, 0x0C000),
        addi(T2, 0, 1),
        sw(T2, T1, 4 * 33),  # priority[33] (UARTHS) = 1
        lui(T3, 0x0C002),  # 0x20
        addi(T2, 0, 2),
        sw(T2, T3, 4),  # enable bit 33
        lui(T4, 0x0C200),
        sw(0, T4, 0),  # 0x30: threshold 0
        lui(A0, 0x38000),
        addi(T2, 0, 2),
        sw(T2, A0, 0x10),  # UARTHS ie.rxwm
        addi(T2, 0, 0x7FF),  # 0x40
        addi(T2, T2, 1),  # 0x800 = MEIE
        csrrs(0, MIE, T2),
        csrrsi(MSTATUS, 8),  # 0x4C: busy for ever (s1 changes: never idle)
        addi(S1, S1, 1),  # 0x50
        jal(0, -8),
        addi(T6, 0, 0),  # 0x58: the handler
        addi(T6, T6, 0),
        csrrs(T3, MIP, 0),  # 0x60: inside the run from 0x58
        lw(T5, T4, 4),  # claim
        lw(T6, A0, 4),  # rxdata
        srli(T3, T3, 11),
        i_add(T6, T6, T3),  # 0x70
        sw(T6, A0, 0),  # echo
        sw(T5, T4, 4),  # complete
        addi(T6, 0, 0),
        MRET,  # 0x80: inside the run from 0x64
    )


def _counts(board) -> tuple[int, ...]:
    core = board.status()["core"]
    return tuple(core[k] for k in ("instructions", "slices", "traps", "idle_skips"))


def _echo(monkeypatch, handler_in_alias: bool, code_hooks: bool):
    with monkeypatch.context() as patch:
        if code_hooks:  # the general path: one code hook per hooked instruction
            patch.setattr(Core, "_add_site", Core._add_code_site)
        pauses = []
        after_pause = Core._after_pause

        def counted(self: Core) -> int | None:
            pauses.append(self._pause is not None)
            return after_pause(self)

        patch.setattr(Core, "_after_pause", counted)
        port = open_isp()
        board = port.sim_board
        sent = _record_transmits(patch, board)
        upload_and_boot(port, echo_program(handler_in_alias))
        read_for(port, 0.01)
        got = b""
        for burst in (b"hello, K210", bytes(range(0x41, 0x7B)), b"x" * 200):
            port.write(burst)
            got += read_for(port, 0.03)
        assert got == bytes(b + 1 for b in b"hello, K210" + bytes(range(0x41, 0x7B)) + b"x" * 200)
        return sent, _counts(board), board.core._code_hooks, sum(pauses)


@pytest.mark.parametrize("handler_in_alias", [False, True])
def test_hooked_instructions_inside_runs_keep_times_and_counts(monkeypatch, handler_in_alias):
    """Against one code hook per instruction (the general path): every byte echoed at
    the same virtual time, the same instruction, slice, trap and idle counts; no code
    hook left besides unicorn's counter, and the slices paused at the hooked
    instructions (from the alias view too, whose hooks wait for code to run there)."""
    reference = _echo(monkeypatch, handler_in_alias, code_hooks=True)
    fast = _echo(monkeypatch, handler_in_alias, code_hooks=False)
    assert fast[:2] == reference[:2]
    assert reference[2] > 0 and fast[2] == 0
    assert fast[3] > 269  # 269 bytes: pauses at csrr mip and at mret (or in place)


def _stub_burn(monkeypatch, code_hooks: bool):
    with monkeypatch.context() as patch:
        if code_hooks:
            patch.setattr(Core, "_add_site", Core._add_code_site)
        port = open_isp()
        board = port.sim_board
        upload_and_boot(port, kflash_package_stub())
        read_for(port, 0.2)
        times = []
        port.write(encode(legacy_short_request(0xD2)))
        assert reply(port) == b"\xd2\xe0"
        port.write(frame(0xD6, 0, struct.pack("<I", 1_500_000)))
        read_for(port, 0.05)
        port.baudrate = 1_500_000
        port.write(encode(legacy_short_request(0xD2)))
        assert reply(port) == b"\xd2\xe0"
        port.write(frame(0xD7, 1, data_len=0))
        assert reply(port, 3) == b"\xd7\xe0"
        times.append(board.now)
        data = bytes((i * 7 + 3) & 0xFF for i in range(6000))
        port.write(frame(0xD4, 0x1000, data))
        assert reply(port, 30) == b"\xd4\xe0"
        times.append(board.now)
        assert board.flash.read(0x1000, len(data)) == data
        return times, _counts(board), board.core._code_hooks


def test_kflash_stub_keeps_its_times_and_counts_with_hooks_on_blocks(monkeypatch) -> None:
    """kflash.py's stub (a ``csrr mip`` at a block start, one in a ``wfi`` loop, an
    ``mret`` after a run of restores, a wait-loop head after a call) against code hooks:
    the same virtual times and counts, and unicorn's counter the only code hook."""
    reference = _stub_burn(monkeypatch, code_hooks=True)
    fast = _stub_burn(monkeypatch, code_hooks=False)
    assert fast[:2] == reference[:2]
    assert reference[2] >= 5 and fast[2] == 0


def _busy_loop(patch, code_hooks: bool):
    """A board running a four-instruction busy loop at SRAM_BASE (hooked instructions
    added later go through code hooks if ``code_hooks``): its port, board and core."""
    if code_hooks:
        patch.setattr(Core, "_add_site", Core._add_code_site)
    port = open_isp()
    board = port.sim_board
    upload_and_boot(port, program(addi(S1, S1, 1), addi(T1, T1, 3), addi(T2, T2, 5), jal(0, -12)))
    read_for(port, 0.02)
    core = board.core
    assert core is not None
    return port, board, core


def _visits(monkeypatch, code_hooks: bool):
    """A busy loop with two hooked instructions whose handlers only record the time
    (they never move the pc): one at the loop's head (a block start), one inside."""
    with monkeypatch.context() as patch:
        port, board, core = _busy_loop(patch, code_hooks)
        seen: list[tuple[str, float]] = []
        for name, addr in (("head", SRAM_BASE), ("inside", SRAM_BASE + 8)):
            core._add_site(addr, lambda _a, name=name: seen.append((name, core._time())) and False)
        read_for(port, 0.002)
        return seen, _counts(board)


def test_handlers_that_leave_the_pc_see_the_times_a_code_hook_sees(monkeypatch) -> None:
    """Hooked instructions added while the program runs, whose handlers do not move the
    pc (the instruction then runs, counted once): the same calls at the same virtual
    times as code hooks, the same counts."""
    reference = _visits(monkeypatch, code_hooks=True)
    fast = _visits(monkeypatch, code_hooks=False)
    assert len(reference[0]) > 1000 and {n for n, _ in reference[0]} == {"head", "inside"}
    assert fast == reference


def _jumps(monkeypatch, code_hooks: bool, inside_first: bool):
    """Two hooked instructions in one run: the first, at the block start, jumps past
    the second every third time; the second records the time."""
    from unicorn import riscv_const as rv

    with monkeypatch.context() as patch:
        port, board, core = _busy_loop(patch, code_hooks)
        seen: list[tuple[str, float]] = []

        def jump(address: int) -> bool:
            seen.append(("head", core._time()))
            if len(seen) % 3:
                return False
            core._rw(rv.UC_RISCV_REG_PC, address + 12)
            return True

        def inside(_address: int) -> bool:
            seen.append(("inside", core._time()))
            return False

        sites_ = [(SRAM_BASE, jump), (SRAM_BASE + 8, inside)]
        for addr, handler in reversed(sites_) if inside_first else sites_:
            core._add_site(addr, handler)
        read_for(port, 0.002)
        return seen, _counts(board)


@pytest.mark.parametrize("inside_first", [False, True])
def test_a_jump_at_a_block_start_passes_the_hooked_instruction_after_it(
    monkeypatch, inside_first
) -> None:
    """A handler at a block start moves the pc past a hooked instruction later in the
    same block (whichever was hooked first): that one is not called, as with code
    hooks; the same calls at the same times, the same counts."""
    reference = _jumps(monkeypatch, True, inside_first)
    fast = _jumps(monkeypatch, False, inside_first)
    assert len(reference[0]) > 1000
    assert fast == reference
