"""The emulated core: programs uploaded through the ROM run on unicorn with trap entry,
PLIC interrupts and the UART/SPI3 models; the PyPI kflash stub burns flash (sim-core)."""

from __future__ import annotations

import struct

import pytest
import serial
from support.simwire import enter_isp, reply

from kflashpy.isp.frames import build_request, legacy_short_request
from kflashpy.isp.slip import encode
from kflashpy.isp.stubs import kflash_package_stub
from kflashpy.sim.memory import SRAM_BASE

if "kflashpy.sim" not in serial.protocol_handler_packages:
    serial.protocol_handler_packages.append("kflashpy.sim")

T0, T1, T2, T3, T4, T5, T6, A0 = 5, 6, 7, 28, 29, 30, 31, 10
MTVEC, MIE, MSTATUS, MCAUSE, MEPC = 0x305, 0x304, 0x300, 0x342, 0x341


# --------------------------------------------------------------------------- a tiny assembler
def i_type(op: int, rd: int, f3: int, rs1: int, imm: int) -> int:
    return (imm & 0xFFF) << 20 | rs1 << 15 | f3 << 12 | rd << 7 | op


def addi(rd: int, rs1: int, imm: int) -> int:
    return i_type(0x13, rd, 0, rs1, imm)


def lw(rd: int, rs1: int, imm: int) -> int:
    return i_type(0x03, rd, 2, rs1, imm)


def sw(rs2: int, rs1: int, imm: int) -> int:
    return (imm >> 5 & 0x7F) << 25 | rs2 << 20 | rs1 << 15 | 2 << 12 | (imm & 0x1F) << 7 | 0x23


def ld(rd: int, rs1: int, imm: int) -> int:
    return i_type(0x03, rd, 3, rs1, imm)


def sd(rs2: int, rs1: int, imm: int) -> int:
    return sw(rs2, rs1, imm) | 1 << 12


def li(rd: int, value: int) -> tuple[int, int]:
    """lui + addi loading a 32-bit constant."""
    lo = value & 0xFFF
    lo -= 0x1000 if lo & 0x800 else 0
    return lui(rd, (value - lo) >> 12), addi(rd, rd, lo)


def lui(rd: int, imm20: int) -> int:
    return (imm20 & 0xFFFFF) << 12 | rd << 7 | 0x37


def add(rd: int, rs1: int, rs2: int) -> int:
    return rs2 << 20 | rs1 << 15 | rd << 7 | 0x33


def jalr(rd: int, rs1: int, imm: int) -> int:
    return i_type(0x67, rd, 0, rs1, imm)


def auipc(rd: int) -> int:
    return rd << 7 | 0x17


def csrrw(rd: int, csr: int, rs1: int) -> int:
    return i_type(0x73, rd, 1, rs1, csr)


def csrrs(rd: int, csr: int, rs1: int) -> int:
    return i_type(0x73, rd, 2, rs1, csr)


def csrrc(rd: int, csr: int, rs1: int) -> int:
    return i_type(0x73, rd, 3, rs1, csr)


def csrrsi(csr: int, uimm: int) -> int:
    return i_type(0x73, 0, 6, uimm, csr)


def jal(rd: int, offset: int) -> int:
    o = offset & 0x1FFFFF
    return (
        (o >> 20 & 1) << 31
        | (o >> 1 & 0x3FF) << 21
        | (o >> 11 & 1) << 20
        | (o >> 12 & 0xFF) << 12
        | rd << 7
        | 0x6F
    )


ECALL, MRET, WFI = 0x73, 0x3020_0073, 0x1050_0073


def program(*words: int) -> bytes:
    return b"".join(struct.pack("<I", w & 0xFFFF_FFFF) for w in words)


# --------------------------------------------------------------------------- host helpers
def open_isp() -> serial.SerialBase:
    port = serial.serial_for_url("sim://?board=maix-bit&timing=instant", baudrate=115200)
    enter_isp(port)
    assert port.sim_board.stage == "isp"
    return port


def upload_and_boot(port: serial.SerialBase, image: bytes, entry: int = SRAM_BASE) -> None:
    for off in range(0, len(image), 1024):
        port.write(encode(build_request(0xC3, entry + off, image[off : off + 1024])))
        assert reply(port) == b"\xc3\xe0"
    port.write(encode(build_request(0xC5, entry)))


def read_for(port: serial.SerialBase, seconds: float) -> bytes:
    port.timeout = seconds
    return port.read(4096)


# --------------------------------------------------------------------------- own programs
def test_polled_uarths_output() -> None:
    port = open_isp()
    code = program(
        lui(T0, 0x38000),
        addi(T1, 0, ord("O")),
        sw(T1, T0, 0),
        addi(T1, 0, ord("K")),
        sw(T1, T0, 0),
        jal(0, 0),
    )
    upload_and_boot(port, code)
    assert read_for(port, 0.01) == b"OK"
    status = port.sim_board.status()
    assert status["stage"] == "core" and status["core"]["tx_uart"] == "uarths"
    assert status["core"]["idle_skips"] > 0  # "j ." is recognised as idle
    read_for(port, 0.5)  # half a virtual second of "j ." is skipped, not emulated
    assert port.sim_board.status()["core"]["instructions"] < 1_000_000  # not 195 M


def test_ecall_trap_entry() -> None:
    port = open_isp()
    code = program(
        auipc(T0),  # 0x00
        addi(T0, T0, 0x14),  # 0x04: handler at 0x14
        csrrw(0, MTVEC, T0),  # 0x08
        ECALL,  # 0x0C
        jal(0, 0),  # 0x10
        lui(T0, 0x38000),  # 0x14 handler
        addi(T1, 0, ord("T")),
        sw(T1, T0, 0),
        jal(0, 0),
    )
    upload_and_boot(port, code)
    assert read_for(port, 0.01) == b"T"
    core = port.sim_board.core
    from unicorn import riscv_const as rv

    assert core.uc.reg_read(rv.UC_RISCV_REG_MCAUSE) == 11
    assert core.uc.reg_read(rv.UC_RISCV_REG_MEPC) == SRAM_BASE + 0x0C
    assert core.uc.reg_read(rv.UC_RISCV_REG_MSTATUS) & 0x1800 == 0x1800  # MPP = M


def test_interrupt_driven_echo_through_plic() -> None:
    port = open_isp()
    code = program(
        auipc(T0),  # 0x00
        addi(T0, T0, 0x50),  # handler at 0x50
        csrrw(0, MTVEC, T0),
        lui(T1, 0x0C000),  # PLIC priorities
        addi(T2, 0, 1),
        sw(T2, T1, 4 * 33),  # priority[33] (UARTHS) = 1
        lui(T3, 0x0C002),
        addi(T2, 0, 2),
        sw(T2, T3, 4),  # enable bit 33
        lui(T4, 0x0C200),
        sw(0, T4, 0),  # threshold 0
        lui(A0, 0x38000),
        addi(T2, 0, 2),
        sw(T2, A0, 0x10),  # UARTHS ie.rxwm
        addi(T2, 0, 0x7FF),
        addi(T2, T2, 1),  # 0x800 = MEIE
        csrrs(0, MIE, T2),
        csrrsi(MSTATUS, 8),  # MIE
        WFI,  # 0x48
        jal(0, -4),  # 0x4C
        lw(T5, T4, 4),  # 0x50 handler: claim
        lw(T6, A0, 4),  # rxdata
        sw(T6, A0, 0),  # echo
        sw(T5, T4, 4),  # complete
        MRET,
    )
    upload_and_boot(port, code)
    read_for(port, 0.01)
    port.write(b"hello, K210")
    assert read_for(port, 0.01) == b"hello, K210"
    core = port.sim_board.core
    assert core.plic.claims == 11 and core.traps == 11


def test_csrr_mip_in_the_alias_view_stays_there() -> None:
    """The ``csrr rd, mip`` hook skips the instruction in the view it ran from: code that
    jumped to the uncached alias (0x4000_0000) goes on there."""
    port = open_isp()
    sub = 0x20 << 25 | T2 << 20 | T1 << 15 | T1 << 7 | 0x33  # sub t1, t1, t2
    code = program(
        lui(T0, 0x38000),  # 0x00: UARTHS
        auipc(T1),  # 0x04: t1 = 0x8000_0004
        lui(T2, 0x40000),
        sub,  # t1 = 0x4000_0004
        addi(T1, T1, 0x14),  # t1 = 0x4000_0018: the csrr below, in the alias
        i_type(0x67, 0, 0, T1, 0),  # 0x14: jalr t1
        csrrs(T3, 0x344, 0),  # 0x18: csrr t3, mip
        auipc(T4),  # 0x1C: t4 = 0x4000_001C in the alias, 0x8000_001C in the cached view
        i_type(0x13, T4, 5, T4, 28),  # srli t4, t4, 28
        addi(T4, T4, ord("0")),
        sw(T4, T0, 0),
        jal(0, 0),
    )
    upload_and_boot(port, code)
    assert read_for(port, 0.01) == b"4"


def test_a_count_in_memory_is_not_taken_for_a_wait_loop() -> None:
    """The idle detector's store watcher must see a loop's stores also on a page whose
    TLB entry took stores before it started (Core._watch_stores empties the TLB: a
    store through an entry already on unicorn's fast path passes a memory hook by).
    The program waits for a flag (a wait loop, learned as one), a timer interrupt sets
    it and a count in the same page, and the loop then counts that down, back at its
    head with the same registers each time: taken for a wait loop again, the count
    would be skipped and "D" never printed."""

    def beq_x0(rs1: int, offset: int) -> int:
        return bne_x0(rs1, offset) & ~(1 << 12)

    code = program(
        auipc(T0),
        lui(T1, 1),
        add(T0, T0, T1),  # 0x08: t0 = the flag, the count at t0 + 8, on the next page
        auipc(T4),
        addi(T4, T4, 0x58),  # 0x10: the handler at 0x64
        csrrw(0, MTVEC, T4),
        lui(T5, 0x2004),  # 0x18: mtimecmp
        *li(T6, 20_000),
        sd(T6, T5, 0),  # 0x24: the timer fires in some milliseconds
        addi(T6, 0, 0x80),
        csrrw(0, MIE, T6),  # 0x2C: MTIE
        csrrsi(MSTATUS, 8),
        lui(T3, 0x38000),
        addi(A0, 0, ord("D")),
        lw(T1, T0, 0),  # 0x3C: the loop's head
        beq_x0(T1, -4),  # wait while the flag is 0
        lw(T2, T0, 8),
        addi(T2, T2, -1),
        sw(T2, T0, 8),  # 0x4C: count down
        beq_x0(T2, 12),
        addi(T2, 0, 0),  # 0x54: the head's registers as the last time
        jal(0, -0x1C),
        sw(A0, T3, 0),  # 0x5C: print "D" when the count reaches 0
        jal(0, 0),
        *li(T6, 50_000),  # 0x64: the handler
        sw(T6, T0, 8),  # the count (the page's TLB entry takes a store here)
        addi(T6, 0, 1),
        sw(T6, T0, 0),  # the flag
        addi(T6, 0, -1),
        sd(T6, T5, 0),  # no more timer interrupts
        MRET,
    )
    port = open_isp()
    upload_and_boot(port, code)
    assert read_for(port, 0.05) == b"D"
    assert port.sim_board.core.traps == 1


def test_polled_programs_run_long_slices_while_interrupts_are_off() -> None:
    """Core._judge_polled: a program that has taken no trap in its first 1024 slices runs in
    slices of up to POLLED_SLICE_S while mstatus.MIE is clear and no DMA channel is
    armed, of MAX_SLICE_S again while one is (the program may watch the items it brings
    in memory) or while MIE is set (interrupts are taken between slices)."""
    from unicorn import riscv_const as rv

    from kflashpy.sim.core import MAX_SLICE_S, MSTATUS_MIE, POLLED_SLICE_S

    busy = program(
        auipc(T0),
        addi(T0, T0, 0x100),
        lw(T1, T0, 0),  # 0x08: count in memory for ever (never idle, never a trap)
        addi(T1, T1, 1),
        sw(T1, T0, 0),
        jal(0, -12),
    )
    port = open_isp()
    upload_and_boot(port, busy)
    board = port.sim_board
    read_for(port, 1100 * MAX_SLICE_S)  # past the first 1024 slices
    core = board.core
    assert core._polled and core.traps == 0
    slices, t = core.slices, board.now
    read_for(port, 10 * POLLED_SLICE_S)
    assert core.slices - slices <= (board.now - t) / POLLED_SLICE_S + 1
    core.dmac.armed.append(core.dmac.channels[0])  # as if armed (no endpoint: moves nothing)
    slices, t = core.slices, board.now
    read_for(port, 100 * MAX_SLICE_S)
    assert core.slices - slices >= (board.now - t) / MAX_SLICE_S - 1
    core.dmac.armed.clear()
    core._rw(rv.UC_RISCV_REG_MSTATUS, MSTATUS_MIE)  # as if the program enabled them
    slices, t = core.slices, board.now
    read_for(port, 100 * MAX_SLICE_S)
    assert core.slices - slices >= (board.now - t) / MAX_SLICE_S - 1
    assert core.traps == 0  # (no interrupt enabled in mie: none taken)


def test_sram_tlb_fill_kept_by_polled_programs_only() -> None:
    """Host speed only (Core._judge_polled): a program that has taken no trap after its
    first 1024 slices keeps the SRAM TLB-fill hook (its stores are cheaper with it);
    one that traps loses it (its store watcher would empty the TLB too often)."""
    nop = addi(0, 0, 0)
    busy = program(
        auipc(T0),
        addi(T0, T0, 0x100),
        lw(T1, T0, 0),  # 0x08: count in memory for ever (never idle)
        addi(T1, T1, 1),
        sw(T1, T0, 0),
        jal(0, -12),
    )
    trapping = program(
        auipc(T0),
        addi(T0, T0, 0x40),
        csrrw(0, MTVEC, T0),
        ECALL,  # 0x0C: trap for ever
        jal(0, -4),
        *[nop] * 11,
        csrrs(T2, MEPC, 0),  # 0x40: step over the ecall
        addi(T2, T2, 4),
        csrrw(0, MEPC, T2),
        MRET,
    )
    for code in (busy, trapping):
        port = open_isp()
        upload_and_boot(port, code)
        read_for(port, 0.03)  # 1500 slices of 20 µs
        core = port.sim_board.core
        assert core.slices > 1024 and bool(core.traps) == (code is trapping)
        assert len(core._sram_fills) == (2 if code is busy else 0)  # one per SRAM view


def test_code_written_at_run_time_runs_as_written() -> None:
    """Core._fill_sram_tlb gives pages only stored to a TLB entry whose stores skip
    unicorn's check for translated code (all but the first through the entry). A
    routine copied into such a page must still run as copied, and rewritten after it
    ran, run as rewritten, also through a new TLB entry that has already taken a store
    (a stale translation would print "AA"); the pages code ran from are known as code,
    the one only written to is not."""
    ret, fence_i = jalr(0, 1, 0), 0x0000_100F
    code = program(
        auipc(T0),  # 0x00: the program's page
        lui(T1, 2),
        add(T0, T0, T1),  # 0x08: t0 = the page after the next (never run from yet)
        *li(T2, addi(A0, 0, ord("A"))),
        sw(T2, T0, 0),  # 0x14: copy "li a0, 'A'; ret" there
        *li(T2, ret),
        sw(T2, T0, 4),
        fence_i,  # 0x24
        jalr(1, T0, 0),  # 0x28: call it
        lui(T3, 0x38000),
        sw(A0, T3, 0),  # 0x30: print a0
        *li(T5, 0x1800),
        csrrs(0, MSTATUS, T5),  # 0x3C: MPP = M, then U: unicorn empties its TLB,
        csrrc(0, MSTATUS, T5),  # so the stores below refill the page's entry
        sw(0, T0, 0x100),  # 0x44: the first store through it (always checked)
        *li(T2, addi(A0, 0, ord("B"))),
        sw(T2, T0, 0),  # 0x50: rewrite the routine's first instruction
        fence_i,
        jalr(1, T0, 0),  # 0x58: call it again
        sw(A0, T3, 0),
        lui(T4, 1),
        add(T4, T0, T4),
        sw(A0, T4, 0),  # 0x68: a store to the page after it (data only)
        jal(0, 0),
    )
    port = open_isp()
    upload_and_boot(port, code)
    assert read_for(port, 0.01) == b"AB"
    assert port.sim_board.core.code_pages == {0, 2}


# --------------------------------------------------------------------------- the PyPI kflash stub
def frame(op: int, address: int = 0, data: bytes = b"", data_len: int | None = None) -> bytes:
    return encode(build_request(op, address, data, data_len))


def test_kflash_stub_greets_inits_writes_and_changes_baud() -> None:
    port = open_isp()
    board = port.sim_board
    upload_and_boot(port, kflash_package_stub())
    read_for(port, 0.2)  # the stub starts (and prints nothing on UART3 before the greeting)
    port.write(encode(legacy_short_request(0xD2)))
    assert reply(port) == b"\xd2\xe0"
    assert board.status()["core"]["rx_uart"] == "uart3"
    port.write(frame(0xD7, 1, data_len=0))
    assert reply(port, 3) == b"\xd7\xe0"
    data = bytes((i * 7 + 3) & 0xFF for i in range(4096))
    port.write(frame(0xD4, 0x1000, data))
    assert reply(port, 30) == b"\xd4\xe0"
    assert board.flash.read(0x1000, 4096) == data
    assert board.flash.read(0, 0x1000) == b"\xff" * 0x1000  # the rest of the block kept
    # 0xD6: the stub reprograms UART3; a host staying at 115200 gets garbage or nothing
    port.write(frame(0xD6, 0, struct.pack("<I", 1_500_000)))
    read_for(port, 0.05)
    port.write(encode(legacy_short_request(0xD2)))
    assert reply(port, 0.2) is None
    port.baudrate = 1_500_000
    port.write(encode(legacy_short_request(0xD2)))
    assert reply(port) == b"\xd2\xe0"
    assert board.board_baud() == pytest.approx(1_500_000, rel=0.02)


def test_kflash_stub_reboot_is_a_soft_reset() -> None:
    port = open_isp()
    board = port.sim_board
    upload_and_boot(port, kflash_package_stub())
    read_for(port, 0.2)
    port.write(encode(legacy_short_request(0xD2)))
    assert reply(port) == b"\xd2\xe0"
    # 0xD5: the stub counts down a delay loop in memory (1.3 M iterations), then
    # soft-resets the SoC; IO16 is low (DTR asserted) -> back in the ROM
    port.write(encode(legacy_short_request(0xD5)))
    assert reply(port) == b"\xd5\xe0"
    assert board.stage == "core"
    read_for(port, 0.5)
    assert board.stage == "isp" and board.resets >= 2


def test_instruction_counter_is_found_and_counts_a_stopped_slice():
    """The in-slice clock depends on reading unicorn's instruction counter; on the pinned
    unicorn the calibration must find it, and it must count a slice an MMIO access
    stopped early (where ``count`` alone would not tell)."""
    import struct

    from unicorn import UC_ARCH_RISCV, UC_MODE_RISCV64, Uc

    from kflashpy.sim.icount import InstructionCounter, counter_offset

    assert counter_offset() is not None
    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV64)
    uc.mem_map(0x8000_0000, 0x10000)
    nop, load = struct.pack("<I", 0x13), struct.pack("<II", 0x1000_0537, 0x0005_2583)
    uc.mem_write(0x8000_0000, nop * 500 + load + nop * 100)
    uc.mmio_map(0x1000_0000, 0x1000, lambda e, o, s, d: e.emu_stop() or 0, None, None, None)
    counter = InstructionCounter(uc)
    uc.emu_start(0x8000_0000, 0x8001_0000, count=100_000)
    assert counter.exact and counter.executed(100_000) == 502
    uc.emu_start(0x8000_0000, 0x8001_0000, count=50)
    assert counter.executed(50) == 50  # a slice that ran to its budget


# --------------------------------------------------------------------------- wfi, MIE = 0
UART3_BAUD = 195_000_000 / 1693  # APB0 as the ROM leaves it, divisor 1693 (115200)


def sleeping_uart3_program() -> bytes:
    """UART3 on IO4/IO5 at 115200, RX FIFO trigger level 8 (FCR RT = half), IER.ERBFI,
    routed through the PLIC (priority 1, enabled for hart 0 M, threshold 0) with mie.MEIE
    set and mstatus.MIE left 0: no trap is ever taken. Loop: wfi; send IIR and RFL; read
    RFL bytes from RBR."""
    return program(
        lui(T1, 0x502B0),  # FPIOA
        *li(T2, 68 | 1 << 20 | 1 << 23),
        sw(T2, T1, 16),  # IO4 = UART3 RX
        *li(T2, 69 | 0xF << 8 | 1 << 12),
        sw(T2, T1, 20),  # IO5 = UART3 TX
        lui(T0, 0x50230),  # UART3
        addi(T2, 0, 0x80),
        sw(T2, T0, 0x0C),  # LCR.DLAB
        addi(T2, 0, 1693 >> 4),
        sw(T2, T0, 0x00),  # DLL
        sw(0, T0, 0x04),  # DLH
        addi(T2, 0, 3),
        sw(T2, T0, 0x0C),  # 8N1
        addi(T2, 0, 1693 & 15),
        sw(T2, T0, 0xC0),  # DLF
        addi(T2, 0, 0x87),
        sw(T2, T0, 0x08),  # FCR: FIFOs on and cleared, RX trigger half full
        addi(T2, 0, 0x81),
        sw(T2, T0, 0x04),  # IER: PTIME | ERBFI
        lui(T3, 0x0C000),
        addi(T2, 0, 1),
        sw(T2, T3, 4 * 13),  # PLIC priority[13] (UART3) = 1
        lui(T3, 0x0C002),
        lui(T2, 2),
        sw(T2, T3, 0),  # enable bit 13, hart 0 M
        lui(T3, 0x0C200),
        sw(0, T3, 0),  # threshold 0
        *li(T2, 0x800),
        csrrs(0, MIE, T2),  # MEIE; mstatus.MIE stays 0
        WFI,  # loop:
        lw(T4, T0, 0x08),  # IIR
        sw(T4, T0, 0x00),
        lw(T5, T0, 0x84),  # RFL
        sw(T5, T0, 0x00),
        lw(T6, T0, 0x00),  # RBR, RFL times
        addi(T5, T5, -1),
        bne_x0(T5, -8),
        jal(0, -32),  # back to wfi
    )


def _record_transmits(monkeypatch, board) -> list[tuple[float, bytes]]:
    sent: list[tuple[float, bytes]] = []
    transmit = board.board_transmit

    def record(data: bytes, t: float, baud: float) -> None:
        if board.stage == "core":  # the guest's bytes, not the ROM's replies
            sent.append((t, data))
        transmit(data, t, baud)

    monkeypatch.setattr(board, "board_transmit", record)
    return sent


def test_wfi_with_mie_clear_wakes_on_uart_trigger_level_and_char_timeout(monkeypatch) -> None:
    """A hart in wfi with mstatus.MIE = 0 resumes when the UART's receive interrupt is
    pending at the PLIC: the FIFO reaching its trigger level or the character timeout
    (4 character times without a byte in or out). The clock jumps straight there: the
    wake times are those of the events, and the waiting costs no instructions."""
    port = open_isp()
    board = port.sim_board
    sent = _record_transmits(monkeypatch, board)
    upload_and_boot(port, sleeping_uart3_program())
    assert read_for(port, 0.01) == b""  # asleep: nothing arrived
    instructions = board.status()["core"]["instructions"]
    timeout = 4 * 10 / UART3_BAUD
    port.write(b"abc")  # below the trigger level: the character timeout wakes it
    t_abc = board.to_board.arrival_of(3)
    assert read_for(port, 0.01) == b"\xcc\x03"
    port.write(bytes(10))  # 8 wake it at once, the last 2 by timeout
    t_8, t_10 = board.to_board.arrival_of(8), board.to_board.arrival_of(10)
    assert read_for(port, 0.01) == b"\xc4\x08\xcc\x02"
    wakes = [t for t, _ in sent[::2]]
    # the IIR byte goes out two instructions after the wake (5 ns at 390 MHz)
    for got, want in zip(wakes, (t_abc + timeout, t_8, t_10 + timeout), strict=True):
        assert want <= got < want + 10e-9
    core = board.status()["core"]
    assert core["traps"] == 0 and core["instructions"] - instructions < 200
    assert core["idle_skips"] >= 3


def test_wfi_with_mie_clear_wakes_at_mtimecmp(monkeypatch) -> None:
    """mie.MTIE alone, mstatus.MIE = 0: wfi resumes in the CLINT tick where mtime reaches
    mtimecmp (here 1000 ticks = 128 us ahead), not before and not a slice later."""
    port = open_isp()
    board = port.sim_board
    sent = _record_transmits(monkeypatch, board)
    code = program(
        lui(T0, 0x0200C),
        ld(T1, T0, -8),  # mtime (0x0200BFF8)
        addi(T1, T1, 1000),
        lui(T2, 0x02004),
        sd(T1, T2, 0),  # mtimecmp
        addi(T3, 0, 0x80),
        csrrs(0, MIE, T3),  # MTIE; mstatus.MIE stays 0
        lui(T4, 0x38000),
        addi(T5, 0, ord("W")),
        WFI,
        sw(T5, T4, 0),  # UARTHS
        jal(0, 0),
    )
    upload_and_boot(port, code)
    assert read_for(port, 0.01) == b"W"
    core = board.core
    ((t, _),) = sent
    mtime = core._mtime_base + int((t - core._mtime_t0) * core.cpu_hz / 50)
    assert mtime == core.clint.cmp  # woke in the very tick
    assert t < core._mtimecmp_time() + 10e-9
    assert board.status()["core"]["traps"] == 0


def bne_x0(rs1: int, offset: int) -> int:
    o = offset & 0x1FFF
    return (
        (o >> 12 & 1) << 31 | (o >> 5 & 0x3F) << 25 | rs1 << 15 | 1 << 12
        | (o >> 1 & 0xF) << 8 | (o >> 11 & 1) << 7 | 0x63
    )  # fmt: skip


# a0 = 100000 (lui + addi); c.addi a0, -1; c.bnez a0, -2: a count-down as compilers emit it
C_DELAY = program(lui(A0, 24), addi(A0, A0, 1696)) + bytes.fromhex("7d157dfd")


def _run_counting_program(monkeypatch, mode: str) -> tuple[list, int, int, int]:
    """Run a program with two count-downs; (its bytes with their virtual times, the
    instructions executed, the loop skips, the code hooks besides unicorn's counter)."""
    from kflashpy.sim import core, rom

    with monkeypatch.context() as patch:
        if mode == "executed":
            patch.setattr(core, "_counting_loop_at", lambda words, idx: None)
        if mode == "probed":
            patch.setattr(rom.MaskRom, "written_range", lambda self, entry: (entry, entry))
        port = open_isp()
        board = port.sim_board
        sent: list[tuple[float, bytes]] = []
        transmit = board.board_transmit

        def record(data: bytes, t: float, baud: float) -> None:
            sent.append((t, data))
            transmit(data, t, baud)

        patch.setattr(board, "board_transmit", record)
        code = (
            program(lui(T0, 0x38000), addi(T1, 0, ord("O")))
            + C_DELAY
            + program(sw(T1, T0, 0), lui(T2, 61), addi(T1, 0, ord("K")))  # t2 = 249856
            # then asleep for good (a wait loop would get a code hook of its own)
            + program(addi(T2, T2, -1), bne_x0(T2, -4), sw(T1, T0, 0), WFI, jal(0, -4))
        )
        upload_and_boot(port, code)
        assert read_for(port, 0.05) == b"OK"
        status = board.status()["core"]
        return sent, status["instructions"], status["loop_skips"], board.core._code_hooks


def test_counting_loops_are_skipped_exactly(monkeypatch) -> None:
    """A busy-wait count-down (32-bit and compressed forms) skipped in one step leaves the
    instruction count and the virtual time of everything after it exactly as executing
    it does: found in the uploaded code ("scanned"), or in code the ROM did not load,
    where slices end ("probed"); "executed" is the reference, nothing skipped."""
    sent, instructions, skips, _ = _run_counting_program(monkeypatch, "executed")
    assert skips == 0 and len(sent) >= 3
    for mode in ("scanned", "probed"):
        got = _run_counting_program(monkeypatch, mode)
        assert got[:2] == (sent, instructions), mode  # bit-identical times and counts
        assert got[2] > 0, mode
        # the skippers are block hooks: unicorn's counter stays the only code hook, which
        # it calls directly instead of walking a hook list on every instruction
        assert got[3] == 0, mode
