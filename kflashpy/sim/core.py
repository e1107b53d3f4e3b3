"""The emulated K210 core: unicorn RV64 running whatever the host uploaded and booted.

One hart, machine mode. Virtual time advances with executed instructions at the CPU
clock SYSCTL programs (count-limited ``emu_start`` slices, one instruction per cycle),
plus the time peripherals stall the CPU (SPI transfers). Between slices the board
delivers UART bytes that have arrived and raises interrupts.

unicorn never performs RISC-V trap entry and cannot raise MEIP/MTIP (issues #2402,
#1854), so this module does it, as docs/simulator.md ("The core and the peripherals") describes:

* ``ecall`` (and other synchronous exceptions) -> mepc/mcause/mstatus updated, PC = mtvec;
* external (PLIC), timer (CLINT mtimecmp) and software (msip) interrupts are taken between
  slices when mstatus.MIE and the mie bit allow, and chained directly at ``mret`` when
  another one is already pending (so a burst of UART bytes costs one slice, not one each);
* ``csrr rd, mip`` instructions are performed by a hook that gives ``rd`` the virtual
  MEIP/MTIP/MSIP bits (these hooks, and the ``mret`` ones, are block hooks on the runs
  that lead to the instructions: :meth:`Core._add_site`).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # see Core.run
import ctypes
import functools
import math
import signal
import threading
from typing import Any

import numpy as np
from unicorn import (
    UC_ARCH_RISCV,
    UC_CTL_IO_WRITE,
    UC_CTL_TLB_FLUSH,
    UC_HOOK_BLOCK,
    UC_HOOK_CODE,
    UC_HOOK_INTR,
    UC_HOOK_MEM_WRITE,
    UC_HOOK_TLB_FILL,
    UC_MEM_FETCH,
    UC_MODE_RISCV64,
    UC_PROT_ALL,
    UC_PROT_EXEC,
    UC_PROT_READ,
    UC_PROT_WRITE,
    UC_TLB_VIRTUAL,
    Uc,
    UcError,
)
from unicorn import riscv_const as rv
from unicorn.unicorn_py3.unicorn import uclib

from ..target import k210
from .crypto import AesEngine, ShaEngine
from .dmac import Dmac
from .icount import InstructionCounter
from .memory import SRAM_ALIAS, SRAM_BASE, SRAM_SIZE, Sram
from .parts import BoardServices
from .periph import (
    LINK_RX_PIN,
    LINK_TX_PIN,
    UART_RX_FUNCS,
    UART_TX_FUNCS,
    Clint,
    Fpioa,
    Plic,
    RegisterFile,
    Sysctl,
)
from .sites import run_start, steps_to
from .spi3 import NoDevice, Spi3
from .uarts import DwUart, Uarths, UartRxDma

MSTATUS_MIE, MSTATUS_MPIE, MSTATUS_MPP = 0x8, 0x80, 0x1800
MIE_MSIE, MIE_MTIE, MIE_MEIE = 1 << 3, 1 << 7, 1 << 11
IRQ_BIT = 1 << 63
SIGINT = int(signal.SIGINT)
CAUSE_ECALL_M = 11
INSN_MRET, INSN_WFI = 0x3020_0073, 0x1050_0073
_WFI_BYTES = INSN_WFI.to_bytes(4, "little")
CSRR_MIP_MASK, CSRR_MIP = 0xFFFF_F07F, 0x3440_2073  # csrrs rd, mip, x0
MIN_SLICE = 200
MTIME_DIVIDER = k210.MTIME_DIVIDER  # a module global: _mtime runs on every mtime read
# Longest slice, in virtual seconds: interrupts are taken and bytes that nobody reads are
# delivered between slices. Inside a slice, time is exact where unicorn's instruction
# counter can be read (see icount.py); otherwise a slice a device or the idle detector
# stops early is counted as half a slice, and short slices keep that error small.
MAX_SLICE_S = 20e-6
# Longest slice of a polled program (Core._judge_polled) while mstatus.MIE is clear and no
# DMA channel is armed: no interrupt can be taken between its slices and no block brings
# items it could see in memory meanwhile (docs/simulator.md, "The DMAC": kflashpy's
# flasher watches its receive buffer fill), so their length changes nothing it observes
# but the last digits of the clock's sums, and each slice costs host time.
POLLED_SLICE_S = 1e-3
IDLE_TRACE = 64  # longest wait loop (instructions) the idle detector recognises
MAX_IDLE_HEADS = 16
POLLED_AFTER_SLICES = 1024  # slices after which a program that took no trap is polled
MAX_LOOP_PROBES = 4096  # slice-end PCs looked at for counting loops (then no more)
LEARN_BACKOFF = 2e-3  # virtual seconds between two loop tracings that found no idle loop
HEAD_PATIENCE = 256  # wait-loop visits per slice before a busy loop's hook is suspended
HEAD_SUSPEND = 0.01  # virtual seconds a wait-loop hook stays off after its loop was busy
_GPRS = tuple(range(rv.UC_RISCV_REG_X1, rv.UC_RISCV_REG_X1 + 31))
_STEP_STATE = (rv.UC_RISCV_REG_PC, *_GPRS)  # what a wait-loop trace compares, in one call
# registers every trap decision (and an mret) needs, read in one call
_TRAP_READ = (
    rv.UC_RISCV_REG_MSTATUS,
    rv.UC_RISCV_REG_MIE,
    rv.UC_RISCV_REG_MTVEC,
    rv.UC_RISCV_REG_PC,
    rv.UC_RISCV_REG_MEPC,
)
_TRAP_WRITE = (rv.UC_RISCV_REG_MSTATUS, rv.UC_RISCV_REG_MCAUSE, rv.UC_RISCV_REG_MEPC)
_NEVER = (1 << 64) - 1  # mtimecmp reset value
_MASK64 = (1 << 64) - 1
_UNTIL = 0xFFFF_FFFF_FFFF_FFFE  # never reached: slices end by instruction count


# The engine calls the core makes many times a second, bound so that the calling thread
# keeps the GIL. ctypes releases it around every foreign call, and then every Python hook
# the engine runs during a slice has to take it back (a lock hand-over per MMIO access,
# about 14 per byte the kflash stub receives). The hart only ever runs on the calling
# thread, and hooks run Python code, so other threads still get their turn.
_GIL_KEPT = ctypes.PyDLL(uclib._name, handle=uclib._handle)


def _gil_kept(name: str, prototype: bool = True) -> Any:
    """``uclib.<name>``, called without releasing the GIL. With ``prototype=False`` the
    arguments are passed unconverted, so they must be ctypes objects or ints that fit a
    C int: converting them through ``argtypes`` costs as much as the call itself (about
    120 ns of 260), and the register accessors run several times per interrupt."""
    fn = getattr(_GIL_KEPT, name)
    fn.restype = getattr(uclib, name).restype
    if prototype:
        fn.argtypes = getattr(uclib, name).argtypes
    return fn


_uc_emu_start = _gil_kept("uc_emu_start")
_uc_hook_add = _gil_kept("uc_hook_add")
_uc_hook_del = _gil_kept("uc_hook_del")
# (engine handle, int, ctypes pointer or array, int) only
_uc_emu_stop = _gil_kept("uc_emu_stop", prototype=False)
_uc_reg_read = _gil_kept("uc_reg_read", prototype=False)
_uc_reg_write = _gil_kept("uc_reg_write", prototype=False)
_uc_reg_read_batch = _gil_kept("uc_reg_read_batch", prototype=False)
_uc_reg_write_batch = _gil_kept("uc_reg_write_batch", prototype=False)

# Callback prototypes with fewer parameters than unicorn passes. Every hook also gets a
# trailing ``user_data`` pointer, a code hook the instruction's size, and the core uses
# neither: ctypes converts each declared parameter into a Python object on every call
# (the callbacks run a few million times per virtual second). Declaring fewer is safe
# with the C calling conventions of the platforms unicorn ships for (x86-64 System V and
# Windows x64, AArch64 AAPCS64): these arguments travel in registers (a seventh would go
# on the stack, which the caller owns and cleans up), and a callee that does not read
# one leaves it there. It would not be under a callee-cleans convention (32-bit stdcall),
# which unicorn's callbacks do not use.
_ENGINE = ctypes.c_void_p
_MMIO_READ = ctypes.CFUNCTYPE(ctypes.c_uint64, _ENGINE, ctypes.c_uint64, ctypes.c_uint)
_MMIO_WRITE = ctypes.CFUNCTYPE(None, _ENGINE, ctypes.c_uint64, ctypes.c_uint, ctypes.c_uint64)
_CODE_AT = ctypes.CFUNCTYPE(None, _ENGINE, ctypes.c_uint64)  # (engine, address)
_CODE = ctypes.CFUNCTYPE(None, _ENGINE)  # a code hook that knows its address
_BLOCK = ctypes.CFUNCTYPE(None, _ENGINE, ctypes.c_uint64, ctypes.c_uint32)  # (address, size)
_INTR = ctypes.CFUNCTYPE(None, _ENGINE, ctypes.c_uint32)
# (engine, page address, access type, where the entry goes) -> filled
_TLB_FILL = ctypes.CFUNCTYPE(ctypes.c_bool, _ENGINE, ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p)
# (engine, access type, address, size, value)
_STORE = ctypes.CFUNCTYPE(
    None, _ENGINE, ctypes.c_int, ctypes.c_uint64, ctypes.c_int, ctypes.c_int64
)


class _TlbEntry(ctypes.Structure):
    """unicorn's ``uc_tlb_entry``: what a TLB-fill hook returns."""

    _fields_ = (("paddr", ctypes.c_uint64), ("perms", ctypes.c_uint32))


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >> (bits - 1) & 1 else value


def counting_loops(words: np.ndarray) -> list[tuple[int, int, int]]:
    """Two-instruction loops that only count a register to zero, as a busy-wait delay
    compiles: ``addi rX, rX, +-1`` (or ``c.addi``) followed by ``bnez rX`` back to it
    (``c.bnez``, or ``bne rX, x0``). ``words[i]`` is the 32-bit word at halfword ``i``;
    returns (halfword index of the addi, register, step) for each. Such a loop reads and
    writes nothing else, so its iterations can be run in one step
    (``Core._counting_loop_skipper``).
    """
    half = words & 0xFFFF
    # c.addi rd, imm (funct3 000, op 01) with imm = +-1; addi rd, rd, +-1
    c_addi = ((half & 0xE003) == 0x0001) & (((half >> 7) & 0x1F) != 0)
    addi = ((words & 0x707F) == 0x0013) & (((words >> 7) & 0x1F) == ((words >> 15) & 0x1F))
    found = []
    for idx in np.flatnonzero(c_addi | addi):
        loop = _counting_loop_at(words, int(idx))
        if loop is not None:
            found.append((int(idx), *loop))
    return found


def _counting_loop_at(words: Any, idx: int) -> tuple[int, int] | None:
    """(register, step) of the counting loop whose ``addi`` is at halfword ``idx`` of
    ``words`` (as in :func:`counting_loops`, an array or a list), or None."""
    w = int(words[idx])
    if w & 3 == 3:
        if w & 0x707F != 0x0013 or w >> 7 & 0x1F != w >> 15 & 0x1F:
            return None
        reg, step, size = w >> 7 & 0x1F, _signed(w >> 20, 12), 2
    else:
        if w & 0xE003 != 0x0001:
            return None
        reg, size = w >> 7 & 0x1F, 1
        step = _signed((w >> 12 & 1) << 5 | (w >> 2 & 0x1F), 6)
    if step not in (1, -1) or reg == 0 or idx + size >= len(words):
        return None
    b = int(words[idx + size])
    if b & 0xE003 == 0xE001 and b & 3 != 3:  # c.bnez rs1', offset
        rs1 = 8 + (b >> 7 & 7)
        off = (b >> 12 & 1) << 8 | (b >> 5 & 3) << 6 | (b >> 2 & 1) << 5
        off |= (b >> 10 & 3) << 3 | (b >> 3 & 3) << 1
        off = _signed(off, 9)
    elif b & 0x01F0_707F == 0x0000_1063:  # bne rs1, x0, offset
        rs1 = b >> 15 & 0x1F
        off = (b >> 31 & 1) << 12 | (b >> 7 & 1) << 11 | (b >> 25 & 0x3F) << 5
        off = _signed(off | (b >> 8 & 0xF) << 1, 13)
    else:
        return None
    return (reg, step) if rs1 == reg and off == -2 * size else None


def _vector(tvec: int, cause: int) -> int:
    """Trap target for ``cause`` under ``mtvec`` (direct, or vectored for interrupts)."""
    return (tvec & ~3) + 4 * (cause & 0x3F) if tvec & 1 and cause & IRQ_BIT else tvec & ~3


def _reg_batch(regs: tuple[int, ...]) -> tuple[Any, Any, Any]:
    """(ids, values, pointers) arrays for ``uc_reg_read_batch``/``uc_reg_write_batch``:
    one ctypes call moves several registers (each call costs about a microsecond)."""
    ids = (ctypes.c_int * len(regs))(*regs)
    vals = (ctypes.c_uint64 * len(regs))()
    base = ctypes.addressof(vals)
    ptrs = (ctypes.c_void_p * len(regs))(*(base + 8 * i for i in range(len(regs))))
    return ids, vals, ptrs


class Core:
    """One hart running from ``entry`` on the board's SRAM and peripheral models."""

    def __init__(self, board: BoardServices, entry: int) -> None:
        self.board = board
        self.entry = entry
        self.instructions = 0
        self.slices = 0
        self.traps = 0
        self._stall = 0.0
        self._budget = 0  # instruction budget of the running slice
        self._accounted = 0  # of which already added to board.now (clock changes)
        self._in_slice = False
        self._skip: float | None = None
        self._reset_requested = False
        self._keep: list[object] = []  # ctypes callbacks must outlive the emulator
        self._error: BaseException | None = None
        self._last_cause = -1  # mcause as last written (guests rarely write it)
        self._halt_reason = ""
        self._mmio_count = 0  # MMIO accesses so far (idle detection)
        self._idle_hit = False
        self._head_state: tuple[int, int, bytes] | None = None
        self._heads: dict[int, Any] = {}  # wait-loop PC -> what removes its hook
        self._suspended: dict[int, float] = {}  # busy wait-loop PC -> re-arm time
        self._store_hook: int | None = None
        self._stores = 0
        self._head_visits = 0
        self._learn_after = 0.0
        self._armed = False  # stores are being watched for one wait-loop iteration
        self._alias_guard: int | None = None  # see _guard_alias
        self._stopping = False  # see _stop
        # hooked instructions (see _add_site): address -> the handlers, in hooking order
        self._sites: dict[int, list[Any]] = {}
        self._pause: tuple[int, int, list[Any]] | None = None  # see _site_block
        self._resume_at: int | None = None  # see _after_pause
        # block start and count of the last site at a block start that moved the pc: that
        # block does not run, so no pause is armed on it (see _site_block)
        self._moved_at = self._moved_count = -1
        self._shift = 0  # instructions of the running slice before its last resumption
        self._site_handles: dict[int, list[int]] = {}  # hooked instruction -> block hooks
        self._code_hooks = 0  # code hooks installed besides unicorn's counter
        self._retranslate = False  # see _count_code_hook
        self._regs_fresh = False  # see _run
        # (first, last address, callback, handles, kind) of alias hooks deferred by the guard
        self._alias_waiting: list[tuple[int, int, Any, list[int], int]] = []
        self.idle_skips = 0
        self.loop_skips = 0
        self._loops: set[int] = set()  # addresses of hooked counting loops
        self._loop_probes: set[int] = set()  # slice-end PCs already looked at
        self._interrupted = False  # Ctrl-C arrived while the engine ran (see run)
        self._asleep = False  # stopped in wfi, waiting for an interrupt (see _wfi_wake)
        uc = self.uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV64)
        # see _fill_sram_tlb (mypy reads unicorn's Python 2 module, which lacks the method)
        uc.ctl_set_tlb_mode(UC_TLB_VIRTUAL)  # type: ignore[attr-defined]
        self._polled_judged = False
        self._polled = False  # see _judge_polled
        self._long_slice = False  # the running slice may last POLLED_SLICE_S
        self._uch = uc._uch
        self._val = ctypes.c_uint64()
        self._pval = ctypes.byref(self._val)
        self._icount = InstructionCounter(uc)
        self._count_cell = self._icount.cell
        self._gpr_ids, self._gpr_vals, self._gpr_ptrs = _reg_batch(_GPRS)
        self._step_ids, self._step_vals, self._step_ptrs = _reg_batch(_STEP_STATE)
        self._trap_ids, self._trap_vals, self._trap_ptrs = _reg_batch(_TRAP_READ)
        self._tw_ids, self._tw_vals, self._tw_ptrs = _reg_batch(_TRAP_WRITE)
        # the store watcher's callback, made once: hooks come and go many times a second
        self._store_ptr = _STORE(self._store_watcher())
        self._keep.append(self._store_ptr)
        self.code_pages: set[int] = set()  # SRAM pages (offset // 4 KiB) code ran from
        fill = _TLB_FILL(self._fill_sram_tlb())
        self._keep.append(fill)
        self._sram_fills: list[int] = []  # the hooks of _fill_sram_tlb while installed
        for base in (SRAM_BASE, SRAM_ALIAS):
            uc.mem_map_ptr(base, SRAM_SIZE, UC_PROT_ALL, board.sram.host_address)
            end = base + SRAM_SIZE - 1
            self._sram_fills.append(self._add_hook(fill, base, end, UC_HOOK_TLB_FILL))

        self.sysctl = Sysctl(self._clock_changed, self._request_soft_reset)
        self.fpioa = Fpioa(self._route)
        self.clint = Clint(self._mtime)
        self.plic = Plic()
        self.dmac = Dmac(
            board.sram,
            self.sysctl.word,
            self._time,
            self._device_halt,
            self._end_slice,
        )
        self.sysctl.peri_reset_hooks[1] = self.dmac.reset
        for channel in self.dmac.channels:
            self.plic.sources[channel.irq] = channel.level
        self.uarths = Uarths(lambda: self.cpu_hz, self._transmit, board.rom.div)
        dw_uarts = {
            n: DwUart(n, lambda: self.apb0_hz, self._transmit) for n in ("uart1", "uart2", "uart3")
        }
        self.uarts: dict[str, Uarths | DwUart] = {"uarths": self.uarths, **dw_uarts}
        for bit, name in ((16, "uart1"), (17, "uart2"), (18, "uart3")):
            self.sysctl.peri_reset_hooks[bit] = dw_uarts[name].reset
        self.spi3_hz = self.sysctl.spi3_hz()
        self.spi3 = Spi3(
            board.flash, self._time, lambda: self.spi3_hz, self._add_stall, self._skip_until
        )
        self.sysctl.peri_reset_hooks[9] = self.spi3.reset
        self.dmac.endpoints.update(self.spi3.dma_ports())
        for name, uart in self.uarts.items():
            self.plic.sources[k210.UART_IRQ[name]] = uart.irq
            uart.pull = self._puller(uart)
        for name, dw in dw_uarts.items():
            self.dmac.endpoints[k210.DMA_REQUEST[f"{name}_rx"]] = UartRxDma(
                dw, board.to_board, functools.partial(self._is_link_uart, dw)
            )
        for uart in dw_uarts.values():
            uart.now = self._time
        self.sha = ShaEngine(self._time, lambda: self.apb0_hz)
        self.dmac.endpoints[k210.DMA_REQUEST["sha_rx"]] = self.sha
        self.aes = AesEngine()
        models: dict[str, Any] = {
            "dmac": self.dmac,
            "clint": self.clint,
            "plic": self.plic,
            "fpioa": self.fpioa,
            "sha256": self.sha,
            "sysctl": self.sysctl,
            "aes": self.aes,
            "spi3": self.spi3,
            **self.uarts,
            **{
                name: Spi3(
                    NoDevice(),
                    self._time,
                    lambda: self.spi3_hz,
                    self._add_stall,
                    self._skip_until,
                    name,
                )
                for name in ("spi0", "spi1")
            },
        }
        # the K210's peripheral map (target/k210.py); the blocks without a model of their
        # own are plain register files
        for name, (base, size) in k210.PERIPHERALS.items():
            self._mmio(base, models[name] if name in models else RegisterFile(name, size))

        self.cpu_hz = self.apb0_hz = 0.0
        self._mtime_base, self._mtime_t0 = 0, board.now
        self._clock_changed()
        self._route()
        self._hook_exceptions()
        self._guard_alias()
        self._install_code_hooks(board.rom.written_range(entry))
        self._rw(rv.UC_RISCV_REG_PC, entry)

    # ------------------------------------------------------------------ wiring
    def _mmio(self, base: int, dev: Any) -> None:
        """Map ``dev`` at ``base`` with raw ctypes callbacks (the binding's wrappers cost
        more than the models themselves on the hot UART/PLIC/SPI paths)."""
        read, write = dev.read, dev.write
        core = self

        def rd(_h: object, offset: int, size: int) -> int:
            try:
                core._mmio_count += 1
                return read(offset, size)  # type: ignore[no-any-return]
            except BaseException as exc:  # noqa: BLE001 - reported by run()
                core._fail(exc)
                return 0

        def wr(_h: object, offset: int, size: int, value: int) -> None:
            try:
                core._mmio_count += 1
                write(offset, size, value)
            except BaseException as exc:  # noqa: BLE001 - reported by run()
                core._fail(exc)

        rd_ptr, wr_ptr = _MMIO_READ(rd), _MMIO_WRITE(wr)
        self._keep.append((rd_ptr, wr_ptr))
        status = uclib.uc_mmio_map(self.uc._uch, base, dev.size, rd_ptr, None, wr_ptr, None)
        if status:
            raise UcError(status)

    # fast register access: the binding's reg_read/reg_write cost several microseconds
    def _rr(self, reg: int) -> int:
        _uc_reg_read(self._uch, reg, self._pval)
        return self._val.value

    def _rw(self, reg: int, value: int) -> None:
        self._val.value = value & 0xFFFF_FFFF_FFFF_FFFF
        _uc_reg_write(self._uch, reg, self._pval)
        self._regs_fresh = False

    def _gprs(self) -> bytes:
        """x1..x31 as one bytes object (cheap to compare)."""
        _uc_reg_read_batch(self._uch, self._gpr_ids, self._gpr_ptrs, len(_GPRS))
        return bytes(self._gpr_vals)

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self._stop()

    def _stop(self) -> None:
        """Stop the engine before the next instruction, remembering that a stop is due
        (unicorn's own flag is not readable): a block hook called while one is due must
        do nothing, as a code hook would not have been called (see :meth:`_site_block`)."""
        self._stopping = True
        _uc_emu_stop(self._uch)

    def _hook_exceptions(self) -> None:
        """Route unicorn's exceptions (``ecall`` and faults) to :meth:`_on_exception`
        through a raw ctypes hook, as every other hook: the binding's wrapper reports
        errors through ``Uc.emu_start``, which the core does not use."""
        core = self

        def intr(_h: object, intno: int) -> None:
            try:
                core._on_exception(intno)
            except BaseException as exc:  # noqa: BLE001 - reported by run()
                core._fail(exc)

        ptr = _INTR(intr)
        self._keep.append(ptr)
        self._add_hook(ptr, 1, 0, UC_HOOK_INTR)  # begin > end: everywhere

    def _emu(self, pc: int, count: int) -> int:
        """Run at most ``count`` instructions from ``pc``; the engine's status (0 = ok)."""
        self._regs_fresh = False
        self._stopping = False
        return _uc_emu_start(self._uch, pc, _UNTIL, 0, count)  # type: ignore[no-any-return]

    def _install_code_hooks(self, span: tuple[int, int]) -> None:
        """Hook every ``mret`` and ``csrr rd, mip`` found in the uploaded code."""
        lo, hi = span
        off = lo - SRAM_BASE
        raw = np.frombuffer(self.board.sram.data, dtype=np.uint16, count=(hi - lo) // 2, offset=off)
        if raw.size < 2:
            return
        words = raw[:-1].astype(np.uint32) | (raw[1:].astype(np.uint32) << 16)
        for idx in np.flatnonzero(words == INSN_MRET):
            self._add_site(lo + 2 * int(idx), self._mret_handler())
        for idx in np.flatnonzero((words & CSRR_MIP_MASK) == CSRR_MIP):
            rd = int(words[idx]) >> 7 & 0x1F
            self._add_site(lo + 2 * int(idx), self._csrr_mip_handler(rd))
        for at, reg, step in counting_loops(words):
            self._hook_counting_loop(lo + 2 * at, reg, step)

    def _hook_counting_loop(self, addr: int, reg: int, step: int) -> None:
        """Give the counting loop at ``addr`` its skipper, as a block hook in both SRAM
        views: unicorn calls a block hook only from blocks that start at its address (the
        loop's own block, which its branch jumps back to), where a code hook would cost
        every instruction everywhere (see :meth:`_count_code_hook`). Blocks already
        translated there (once the engine has run) are dropped, so that their next
        translation calls it."""
        if self._count_cell is not None and addr not in self._loops:  # needs the exact count
            self._loops.add(addr)
            ptr = _CODE(self._counting_loop_skipper(rv.UC_RISCV_REG_X0 + reg, step))
            self._keep.append(ptr)
            for at in (addr, addr - SRAM_BASE + SRAM_ALIAS):
                self._add_hook(ptr, at, at, UC_HOOK_BLOCK)
                if self.slices:
                    self.uc.ctl_remove_cache(at, at + 4)  # type: ignore[attr-defined]

    def _find_counting_loop(self, pc: int) -> None:
        """A slice ended at ``pc``: if that is inside a counting loop, hook the loop. Code
        the uploaded program loads itself (kflashpy's flasher, through its bootstrap) was
        not there to scan at the start; its busy-wait loops show up here, because slices
        that end by their budget end mostly where the time goes."""
        self._loop_probes.add(pc)
        off = Sram.offset(pc - 2, 8)
        if off is None:
            return
        # the words at the three halfwords from pc - 2 (numpy costs more than it saves)
        code = int.from_bytes(self.board.sram.data[off : off + 8], "little")
        words = [code >> (16 * i) & 0xFFFF_FFFF for i in range(3)]
        for idx in range(3):
            loop = _counting_loop_at(words, idx)
            if loop is not None:
                self._hook_counting_loop(pc - 2 + 2 * idx, *loop)

    def _add_site(self, addr: int, handler: Any) -> Any:
        """Call ``handler(address)`` whenever the instruction at ``addr`` is about to run
        (in either SRAM view), as a code hook would be: with the instruction counted,
        after everything before it. ``handler`` returns whether it moved the pc (the
        instruction is then skipped; the pc must not stay on it) and raises what it
        cannot handle; it may stop the engine. Returns what removes the hook.

        With unicorn's exact counter these are block hooks on the straight runs that
        lead to ``addr`` (:mod:`.sites`, :meth:`_site_block`): a code hook would make
        unicorn walk its hook list on every instruction everywhere (see
        :meth:`_count_code_hook`). Without the counter they are code hooks."""
        if self._count_cell is None:
            return self._add_code_site(addr, handler)
        handlers = self._sites.get(addr)
        if handlers is not None:  # a second handler at the same instruction: called after
            handlers.append(handler)
        else:
            handlers = self._sites[addr] = [handler]
            handles: list[int] = []
            alias = addr - SRAM_BASE + SRAM_ALIAS
            for view, base in ((addr, SRAM_BASE), (alias, SRAM_ALIAS)):
                lo = run_start(self._code_half, view, base)
                fn = self._site_block(view, handlers)
                ptr = _BLOCK(fn)
                self._keep.append(ptr)
                if view == alias and self._alias_guard is not None:
                    self._alias_waiting.append((lo, view, ptr, handles, UC_HOOK_BLOCK))
                    continue
                handles.append(self._add_hook(ptr, lo, view, UC_HOOK_BLOCK))
                if self.slices:  # blocks translated before the hook do not call it
                    self.uc.ctl_remove_cache(lo, view + 4)  # type: ignore[attr-defined]
            self._site_handles[addr] = handles

        def remove() -> None:
            handlers.remove(handler)
            if handlers:
                return
            del self._sites[addr]
            handles = self._site_handles.pop(addr)
            for handle in handles:
                _uc_hook_del(self._uch, handle)
            self._alias_waiting = [w for w in self._alias_waiting if w[3] is not handles]

        return remove

    def _add_code_site(self, addr: int, handler: Any) -> Any:
        """:meth:`_add_site` as code hooks (no exact instruction counter)."""
        core = self

        def code(_h: object, address: int) -> None:
            try:
                handler(address)
            except BaseException as exc:  # noqa: BLE001 - reported by run()
                core._fail(exc)

        handles = self._hook_raw(addr, code, _CODE_AT)

        def remove() -> None:
            for handle in handles:
                self._del_code_hook(handle)
            self._alias_waiting = [w for w in self._alias_waiting if w[3] is not handles]

        return remove

    def _code_half(self, address: int) -> int:
        """The halfword of code at ``address`` (0 outside SRAM)."""
        off = Sram.offset(address, 2)
        if off is None:
            return 0
        data = self.board.sram.data
        return data[off] | data[off + 1] << 8

    def _site_block(self, addr: int, handlers: list[Any]) -> Any:
        """The block hook of the instruction at ``addr`` (on the run leading to it).

        A block that starts at ``addr``: the handlers run now, before it, with the
        instruction counted (unicorn calls a block hook before its counter counts the
        block's first instruction), and it is uncounted again if they neither moved the
        pc nor stopped the engine. Nothing happens if a stop is due or the counter would
        stop the slice at ``addr``: unicorn's hook walk would not call a code hook then.
        If the pc moved, the block does not run: a pause armed on it (next paragraph) by
        a hook called before is taken back, and none is armed by one called after.

        A block that starts before ``addr`` and holds it: the slice's limit is lowered so
        that unicorn's counter stops the engine just before ``addr`` (counted, not run),
        and :meth:`_after_pause` runs the handlers and resumes the same slice. What runs
        in between is straight-line code that cannot leave the run (:mod:`.sites`), so
        the handlers see the same state and time as a code hook would."""
        core, cell, limit = self, self._count_cell, self._icount.limit
        assert cell is not None and limit is not None
        steps: dict[int, int | None] = {}
        read = self._code_half
        run_site = self._run_site

        def at_block(_h: object, start: int, size: int) -> None:
            try:
                if start == addr:
                    if core._resume_at == addr:  # resumed here after a pause: done
                        core._resume_at = None
                        return
                    n = cell.value
                    if core._stopping or n >= limit.value:
                        return
                    cell.value = n + 1
                    if len(handlers) == 1:  # the usual case, one call less
                        moved = handlers[0](addr) or core._stopping
                    else:
                        moved = run_site(addr, handlers)
                    if not moved:
                        cell.value = n
                    elif not core._stopping:  # the pc moved: this block does not run
                        core._moved_at, core._moved_count = start, n + 1
                        if core._pause is not None:  # armed on it by a hook before
                            core._pause = None
                            limit.value = core._budget
                    return
                if start + size <= addr:  # a block of the run that ends before addr
                    return
                if start in steps:
                    k = steps[start]
                else:
                    k = steps[start] = steps_to(read, start, addr)
                n = cell.value
                if k is None or start == core._moved_at and n == core._moved_count:  # see above
                    return
                mark = n + k  # counted when the counter reaches addr
                if mark < limit.value:  # (an earlier pause lowered the limit already)
                    core._pause = (addr, mark, handlers)
                    limit.value = mark
            except BaseException as exc:  # noqa: BLE001 - reported by run()
                core._fail(exc)

        return at_block

    def _run_site(self, address: int, handlers: list[Any]) -> bool:
        """Run a hooked instruction's handlers in order, as unicorn's hook walk would
        (the next one after a pc change too, none after a stop); True if the
        instruction is not to run (the pc moved, or the engine stops)."""
        moved = False
        try:
            for handler in handlers if len(handlers) == 1 else tuple(handlers):
                if handler(address):
                    moved = True
                if self._stopping:
                    return True
        except BaseException as exc:  # noqa: BLE001 - reported by run()
            self._fail(exc)
            return True
        return moved

    def _after_pause(self) -> int | None:
        """The engine stopped: if that was a pause (:meth:`_site_block`), run the site's
        handlers and resume the slice; the engine's status, or None if the slice ended.

        The slice goes on where a code hook would have let it go on: at the pc the
        handlers chose (the paused instruction counted), or at the instruction itself
        (uncounted: it runs now). unicorn's counter starts again from 0, so the slice's
        budget and accounted instructions are shifted by what already ran: every time
        computed inside the slice keeps the same integer numerator (bit-identical)."""
        pause = self._pause
        self._pause = None
        cell = self._count_cell
        if pause is None or cell is None or self._stopping:
            return None
        addr, mark, handlers = pause
        # paused: the counter stopped the engine at addr (a device that lowered the limit
        # to just before addr, see _end_slice, lowered the budget with it)
        if cell.value != mark + 1 or self._budget <= mark:
            return None
        moved = self._run_site(addr, handlers)
        if self._stopping or self._interrupted:
            return None
        used = mark + 1 if moved else mark
        budget = self._budget = self._budget - used
        self._accounted -= used
        self._shift += used
        if budget <= 0:  # that was the budget's last instruction: the slice is over
            return None
        if not moved:
            self._resume_at = addr
        uch = self._uch
        _uc_reg_read(uch, rv.UC_RISCV_REG_PC, self._pval)  # self._emu(self._rr(PC), ...)
        self._regs_fresh = False
        self._moved_at = -1  # the counter starts again from 0
        return _uc_emu_start(uch, self._val.value, _UNTIL, 0, budget)  # type: ignore[no-any-return]

    def _hook_raw(self, addr: int, code: Any, prototype: Any) -> list[int]:
        """Hook one instruction in both SRAM views (code may run from the alias) with a
        raw code-hook function of ``prototype`` that handles its own errors; return the
        hook handles (the alias one joins the list once code runs from the alias)."""
        ptr = prototype(code)
        self._keep.append(ptr)
        handles = [self._add_hook(ptr, addr, addr)]
        alias = addr - SRAM_BASE + SRAM_ALIAS
        if self._alias_guard is None:
            handles.append(self._add_hook(ptr, alias, alias))
        else:
            self._alias_waiting.append((alias, alias, ptr, handles, UC_HOOK_CODE))
        return handles

    def _add_hook(self, ptr: Any, begin: int, end: int, kind: int = UC_HOOK_CODE) -> int:
        """Install a raw ctypes hook of ``kind`` on ``begin..end``; return its handle."""
        if kind == UC_HOOK_CODE:
            self._count_code_hook(1)
        handle = ctypes.c_size_t()
        status = _uc_hook_add(
            self._uch,
            ctypes.byref(handle),
            kind,
            ptr,
            None,
            ctypes.c_uint64(begin),
            ctypes.c_uint64(end),
        )
        if status:
            raise UcError(status)
        return handle.value

    def _del_code_hook(self, handle: int) -> None:
        _uc_hook_del(self._uch, handle)
        self._count_code_hook(-1)

    def _count_code_hook(self, change: int) -> None:
        """Keep count of the installed code hooks; when the first comes or the last goes,
        translated code is dropped before the next slice (:meth:`_run`).

        ``count``-limited slices need unicorn's counter, itself a code hook. While it is
        the only one, unicorn translates each instruction with a direct call to it;
        with any other, with a call to ``helper_uc_tracecode``, which walks the whole
        code-hook list (about 2.5 ns per guest instruction against 8-10 ns with three
        or four hooks). The choice is made when a block is translated: a block
        translated with the counter alone never calls a code hook added later, and one
        translated with more keeps walking the list after they are gone."""
        before = self._code_hooks
        self._code_hooks += change
        if (before == 0) != (self._code_hooks == 0):
            self._retranslate = True

    def _guard_alias(self) -> None:
        """Defer the alias views' instruction hooks until code runs from the alias.

        Each code hook costs time on every instruction everywhere (see
        :meth:`_count_code_hook`), and programs rarely run from the alias. One block hook
        on the whole alias (which costs only blocks translated there) installs the
        deferred ones the first time it fires, before the block's first instruction, and
        removes itself. Deferred hooks always have their twin in the main view
        installed, so the block was translated with unicorn's hook walk, code hooks on
        every instruction and the block hooks at its start (the guard and a twin make two
        block hooks): the walk, which goes on after the guard, sees the hooks added."""
        core = self

        def first(_h: object) -> None:
            try:
                core._unguard_alias()
            except BaseException as exc:  # noqa: BLE001 - reported by run()
                core._fail(exc)

        ptr = _CODE(first)
        self._keep.append(ptr)
        end = SRAM_ALIAS + SRAM_SIZE - 1
        self._alias_guard = self._add_hook(ptr, SRAM_ALIAS, end, UC_HOOK_BLOCK)

    def _unguard_alias(self) -> None:
        if self._alias_guard is None:
            return
        _uc_hook_del(self._uch, self._alias_guard)
        self._alias_guard = None
        for begin, end, ptr, handles, kind in self._alias_waiting:
            handles.append(self._add_hook(ptr, begin, end, kind))
        self._alias_waiting.clear()

    def _route(self) -> None:
        """Follow the FPIOA: which UART listens on IO4 and which one drives IO5."""
        self.rx_uart = self.uarts.get(UART_RX_FUNCS.get(self.fpioa.function(LINK_RX_PIN), ""))
        self.tx_name = UART_TX_FUNCS.get(self.fpioa.function(LINK_TX_PIN))

    def _clock_changed(self) -> None:
        now = self._time() if self.cpu_hz else self.board.now
        done = self._icount.executed(self._budget) if self._in_slice else None
        if done is not None and self.cpu_hz:  # instructions so far ran at the old clock
            self.board.now += (done - self._accounted) / self.cpu_hz
            self._accounted = done
        if self.cpu_hz:
            self._mtime_base = self._mtime()
            self._mtime_t0 = now
        self.cpu_hz = self.sysctl.cpu_hz()
        self.apb0_hz = self.sysctl.apb0_hz()
        self.spi3_hz = self.sysctl.spi3_hz()

    # ------------------------------------------------------------------ callbacks
    def _time(self) -> float:
        """The core's virtual time, including what the running slice has done so far
        (the UARTs' :meth:`_puller` computes it inline: keep the two the same)."""
        t = self.board.now + self._stall
        cell = self._count_cell
        if self._in_slice and cell is not None:
            # InstructionCounter.executed() inlined: this runs on every read of a UART's
            # receive state, several times per received byte
            done = cell.value
            budget = self._budget
            t += ((done if done < budget else budget) - self._accounted) / self.cpu_hz
        return t

    def _puller(self, uart: Uarths | DwUart) -> Any:
        """RX delivery for ``uart`` when the guest reads its receive registers: the bytes
        that arrived by the core's current time, so a polled program that reads the
        UART between SPI transfers sees the line as hardware would."""
        core, board, wire = self, self.board, self.board.to_board

        def pull() -> None:
            if uart is core.rx_uart and core._in_slice:
                # _time() inlined (three receive-register reads per byte the kflash stub
                # takes): in a slice with the exact counter, or the slice's start
                cell = core._count_cell
                now = board.now + core._stall
                if cell is not None:
                    done, budget = cell.value, core._budget
                    now += ((done if done < budget else budget) - core._accounted) / core.cpu_hz
                if wire.next_at <= now:
                    if uart.dma is not None:  # an armed DMA channel takes bytes first
                        self.dmac.sync(now)
                    for at, chunk in wire.receive(now, uart.baud()):
                        uart.receive(chunk, at)

        return pull

    def _mtime(self) -> int:
        return self._mtime_base + int((self._time() - self._mtime_t0) * self.cpu_hz / MTIME_DIVIDER)

    def _add_stall(self, seconds: float) -> None:
        self._stall += seconds
        if self.dmac.armed:  # time went on inside the slice: so did the DMA transfers
            self.dmac.sync(self._time())

    def _skip_until(self, t: float) -> None:
        self._skip = t
        self._stop()

    def _device_halt(self, reason: str) -> None:
        """A device model met something it does not model: the board halts after the
        running slice, with ``reason``."""
        self._halt_reason = reason
        self._stop()

    def _is_link_uart(self, uart: DwUart) -> bool:
        return self.rx_uart is uart

    def _end_slice(self, due_known: bool) -> None:
        """End the running slice after the instruction being executed (a device armed
        something: a DMA block whose completion the next slice must end at, or whose
        end is not known yet, which only a long slice must not run past, see
        :data:`POLLED_SLICE_S`), by lowering the slice's limit to what it has executed:
        unicorn's counter then stops the engine before the next instruction. Stopping
        the engine inside the MMIO callback instead would make unicorn run the access
        again when the hart resumes, and a one-shot code hook would only fire in blocks
        translated after it (see :meth:`_count_code_hook`)."""
        cell, limit = self._count_cell, self._icount.limit
        if not due_known and not self._long_slice:
            return
        if self._in_slice and cell is not None and limit is not None:
            executed = cell.value  # counted before it runs: the current instruction too
            if executed < self._budget:
                limit.value = self._budget = executed

    def _request_soft_reset(self) -> None:
        self._reset_requested = True
        self._stop()

    def _transmit(self, name: str, byte: int) -> None:
        if name == self.tx_name:
            self.board.board_transmit(bytes((byte,)), self._time(), self.uarts[name].baud())

    def _trap_regs(self) -> Any:
        """mstatus, mie, mtvec, pc and mepc, read in one call."""
        _uc_reg_read_batch(self._uch, self._trap_ids, self._trap_ptrs, len(_TRAP_READ))
        return self._trap_vals

    def _take(self, mstatus: int, cause: int, tvec: int, epc: int | None) -> None:
        """Enter a trap: mstatus, mcause (and mepc unless ``epc`` is None: a chained
        interrupt keeps the first one's) in one call, then pc = the vector. The pc goes
        alone: unicorn 2.1.4's batch write does not redirect a running hart (inside a
        code hook the instruction is executed again)."""
        vals = self._tw_vals
        vals[0] = mstatus
        vals[1] = cause
        if epc is not None:
            vals[2] = epc
        _uc_reg_write_batch(self._uch, self._tw_ids, self._tw_ptrs, 2 if epc is None else 3)
        self._rw(rv.UC_RISCV_REG_PC, _vector(tvec, cause))
        self._last_cause = cause
        self.traps += 1

    def _pending_cause(self, mie: int) -> int:
        if mie & MIE_MEIE and self.plic.best():
            return IRQ_BIT | 11
        if mie & MIE_MTIE and self._mtime() >= self.clint.cmp:
            return IRQ_BIT | 7
        if mie & MIE_MSIE and self.clint.msip():
            return IRQ_BIT | 3
        return 0

    def _enter_trap(self, cause: int, epc: int) -> None:
        regs = self._trap_regs()
        mstatus, tvec = regs[0], regs[2]
        mpie = MSTATUS_MPIE if mstatus & MSTATUS_MIE else 0
        self._take((mstatus & ~(MSTATUS_MIE | MSTATUS_MPIE)) | mpie | MSTATUS_MPP, cause, tvec, epc)

    def _on_exception(self, intno: int) -> None:
        pc = self._rr(rv.UC_RISCV_REG_PC)
        if intno == 8:  # ecall: unicorn already stepped over it
            self._enter_trap(CAUSE_ECALL_M, pc - 4)
        else:
            self._halt_reason = f"exception {intno} at 0x{pc:08x}"
            self._stop()

    def _mret_handler(self) -> Any:
        """The handler of an ``mret`` (:meth:`_add_site`): chain the next pending
        interrupt, or perform the ``mret`` (:meth:`_mret`). State bound: it runs once
        per interrupt, tens of thousands of times per virtual second."""
        core = self
        uch, ids, ptrs, regs = self._uch, self._trap_ids, self._trap_ptrs, self._trap_vals
        val, pval = self._val, self._pval
        n_regs = len(_TRAP_READ)
        pending_cause = self._pending_cause

        def on_mret(_address: int) -> bool:
            _uc_reg_read_batch(uch, ids, ptrs, n_regs)  # core._trap_regs()
            mstatus = regs[0]
            cause = pending_cause(regs[1]) if mstatus & MSTATUS_MPIE else 0
            if not cause:
                return core._mret(mstatus, regs[4])
            # mret then immediate re-entry: MIE<-MPIE(1), then MPIE<-1, MIE<-0, MPP<-M
            chained = (mstatus & ~MSTATUS_MIE) | MSTATUS_MPP
            if chained != mstatus or cause != core._last_cause:
                core._take(chained, cause, regs[2], None)
            else:  # the usual case: only the pc changes (CSR writes cost more)
                val.value = _vector(regs[2], cause)
                _uc_reg_write(uch, rv.UC_RISCV_REG_PC, pval)
                core.traps += 1
            return True

        return on_mret

    def _mret(self, mstatus: int, mepc: int) -> bool:
        """Return from a machine-mode trap to machine mode in place of unicorn's ``mret``,
        leaving MPP = M where unicorn writes U. Every change of MPP makes unicorn flush
        its TLB (about 80 µs), and the next trap entry would change it back: that
        pair cost more than the rest of an interrupt. The hart stays in M either way;
        only mstatus.MPP read outside a trap handler shows the difference. An ``mret``
        to a lower mode (MPP != M) is left to unicorn (False)."""
        if mstatus & MSTATUS_MPP != MSTATUS_MPP:
            return False
        mie = MSTATUS_MIE if mstatus & MSTATUS_MPIE else 0
        self._rw(rv.UC_RISCV_REG_MSTATUS, (mstatus & ~MSTATUS_MIE) | mie | MSTATUS_MPIE)
        self._rw(rv.UC_RISCV_REG_PC, mepc)
        return True

    def _csrr_mip_handler(self, rd: int) -> Any:
        """The handler of a ``csrr rd, mip`` (:meth:`_add_site`): ``rd`` gets the virtual
        MEIP/MTIP/MSIP bits (unicorn's own never rise; the rest stays 0 on one hart) and
        the instruction is skipped (in the SRAM view it ran from). State bound (once per
        interrupt in the kflash stub)."""
        core, plic, clint = self, self.plic, self.clint
        uch, val, pval = self._uch, self._val, self._pval
        reg = rv.UC_RISCV_REG_X0 + rd

        def on_csrr_mip(address: int) -> bool:
            value = MIE_MEIE if plic.best() else 0
            if clint.cmp != _NEVER and core._mtime() >= clint.cmp:
                value |= MIE_MTIE
            if clint.msip():
                value |= MIE_MSIE
            if rd:
                val.value = value
                _uc_reg_write(uch, reg, pval)
            val.value = address + 4
            _uc_reg_write(uch, rv.UC_RISCV_REG_PC, pval)
            return True

        return on_csrr_mip

    def _counting_loop_skipper(self, reg: int, step: int) -> Any:
        """The block hook of a two-instruction counting loop (see :func:`counting_loops`;
        called as the loop's block starts, before its ``addi`` is counted): it runs the
        loop's iterations in one step. The register
        gets the value it would have after them and unicorn's instruction counter the
        instructions they take, but only up to the running slice's budget, so the slice
        still ends at the same instruction and everything after the loop sees the same
        virtual time as if it had run. (A raw hook with its state bound: it runs once per
        busy-wait call, hundreds of thousands of times per virtual second.)"""
        core = self
        cell = self._count_cell
        assert cell is not None
        val, pval, uch = self._val, self._pval, self._uch

        def skip_loop(_h: object) -> None:
            try:
                if not core._in_slice:
                    return  # single-stepping (idle-loop tracing): no budget to fill
                # whole iterations that fit, with the addi this block starts with
                room = (core._budget - cell.value - 1) // 2
                if room < 1:
                    return
                _uc_reg_read(uch, reg, pval)
                value = val.value
                # iterations, this one included, until the register reaches 0
                left = (-value if step > 0 else value) & _MASK64
                skip = left - 1 if left - 1 < room else room  # no min(): see _next_event
                if skip < 1:
                    return
                val.value = (value + skip * step) & _MASK64
                _uc_reg_write(uch, reg, pval)
                cell.value += 2 * skip
                core.loop_skips += 1
            except BaseException as exc:  # noqa: BLE001 - reported by run()
                core._fail(exc)

        return skip_loop

    # ------------------------------------------------------------------ running
    def link_baud(self) -> float | None:
        return self.rx_uart.baud() if self.rx_uart is not None else None

    def _sync_rx(self) -> None:
        board = self.board
        if self.dmac.armed:
            self.dmac.sync(board.now)
        wire = board.to_board
        if wire.next_at > board.now:  # nothing has arrived (most slices)
            return
        uart = self.rx_uart
        if uart is None:
            wire.receive(board.now, board.host_baud)
            return
        for at, chunk in wire.receive(board.now, uart.baud()):
            uart.receive(chunk, at)

    def _next_event(self, t_end: float, mie: int) -> float:
        """When the next slice must end: the RX FIFO would fill, mtimecmp is due
        (``mie`` as the guest has it now), or a DMA block completes. Once per slice:
        comparisons, not ``min``/``max`` calls (docs/simulator.md, "Cheaper device
        accesses")."""
        t = t_end
        uart = self.rx_uart
        if uart is not None:
            wire = self.board.to_board
            pending = wire.pending()
            if pending:
                room = uart.room()
                if room < 1:
                    room = 1
                arrival = wire.arrival_of(room if room < pending else pending)
                if arrival is not None and arrival < t:
                    t = arrival
        if mie & MIE_MTIE:
            due = self._mtimecmp_time()
            if self.board.now < due < t:
                t = due
        if self.dmac.armed:  # a DMA block completes (its done interrupt may rise)
            due = self.dmac.due()
            if due < t:  # due already (not yet delivered): nothing to skip past
                now = self.board.now
                t = due if due > now else now
        return t

    def run(self, t_end: float) -> None:
        """Execute until virtual time ``t_end`` (or until the board leaves the core).

        Ctrl-C raises ``KeyboardInterrupt`` here, after the slice it arrived in. Python's
        own handler would raise it inside whichever engine callback runs next, where
        ctypes prints and drops it, and the operation would go on to the end. So while
        the engine runs on the main thread, SIGINT only records itself and stops the
        engine (see :meth:`_on_sigint`). The handler is swapped through ``_signal``, the
        C half of :mod:`signal`: the public functions convert handlers to and from enums
        (about 15 us a call, against 1 us), and a burn calls this thousands of times."""
        previous = None
        if (
            threading.current_thread() is threading.main_thread()
            and _signal.getsignal(SIGINT) is signal.default_int_handler
        ):
            previous = _signal.signal(SIGINT, self._on_sigint)
        try:
            self._run(t_end)
        finally:
            if previous is not None:
                _signal.signal(SIGINT, previous)
        if self._interrupted:
            self._interrupted = False
            raise KeyboardInterrupt

    def _on_sigint(self, _signum: int, _frame: object) -> None:
        """SIGINT while :meth:`run` runs (Python calls it between two bytecodes, often
        inside an engine callback, where it must not raise)."""
        self._interrupted = True
        self._stop()

    def _run(self, t_end: float) -> None:
        """The slice loop. Host cost per slice matters (tens of thousands per virtual
        second): the engine call and the instruction counter are used inline, and the
        registers read after a slice (mstatus, mie, mtvec, pc, mepc in one call) serve
        the next slice's start unless something ran or wrote a register in between
        (``_regs_fresh``, cleared by :meth:`_rw` and :meth:`_emu`)."""
        board = self.board
        self._halt_reason = ""
        self._regs_fresh = False
        uch, regs, cell = self._uch, self._trap_vals, self._count_cell
        ids, ptrs, n_regs = self._trap_ids, self._trap_ptrs, len(_TRAP_READ)
        while board.now < t_end and board.core is self and not self._interrupted:
            if self._asleep:  # in wfi: nothing runs until an interrupt is pending
                wake = self._wfi_wake(t_end)
                target = t_end if wake is None else wake
                if target > board.now:
                    board.now = target
                if wake is None:
                    continue
                self._asleep = False
            self._sync_rx()
            if not self._regs_fresh:
                _uc_reg_read_batch(uch, ids, ptrs, n_regs)  # self._trap_regs()
            mie, pc = regs[1], regs[3]
            if regs[0] & MSTATUS_MIE:
                cause = self._pending_cause(mie)
                if cause:
                    self._enter_trap(cause, pc)
                    pc = self._rr(rv.UC_RISCV_REG_PC)
            t_stop = self._next_event(t_end, mie)
            if self._retranslate:  # see _count_code_hook
                self._retranslate = False
                self.uc.ctl_flush_tb()  # type: ignore[attr-defined]
            long = self._polled and not regs[0] & MSTATUS_MIE and not self.dmac.armed
            self._long_slice = long
            cap = POLLED_SLICE_S if long else MAX_SLICE_S
            span = t_stop - board.now  # comparisons, not min()/max(): see _next_event
            if span > cap:
                span = cap
            count = int(span * self.cpu_hz)
            if count < MIN_SLICE:
                count = MIN_SLICE
            self._stall = 0.0
            self._budget, self._accounted = count, 0
            self._skip = None
            self._idle_hit = False
            self._head_visits = 0
            mmio, traps = self._mmio_count, self.traps
            self._shift = 0
            self._stopping = False
            self._moved_at = -1
            self._in_slice = True
            try:
                status = _uc_emu_start(uch, pc, _UNTIL, 0, count)  # self._emu(pc, count)
                while self._pause is not None and not status:  # see _site_block
                    resumed = self._after_pause()
                    if resumed is None:
                        break
                    status = resumed
            finally:
                self._in_slice = False
                self._pause = self._resume_at = None
            _uc_reg_read_batch(uch, ids, ptrs, n_regs)
            self._regs_fresh = True
            pc = regs[3]
            if status:
                board.halt(f"{UcError(status)} at 0x{pc:08x}")
                return
            self.slices += 1
            if cell is not None:  # InstructionCounter.executed() inlined
                done = cell.value
                if done > self._budget:  # the budget, or less if _end_slice lowered it
                    done = self._budget
            else:  # estimate: a slice stopped early ran half its budget
                early = self._skip is not None or self._idle_hit or self._reset_requested
                done = count // 2 if early else count
            # (_accounted and _budget are shifted by what ran before a resumption)
            board.now += (done - self._accounted) / self.cpu_hz + self._stall
            done += self._shift
            self.instructions += done
            self._stall = 0.0
            if self._store_hook is not None:
                self._watch_stores(False)
            probes = self._loop_probes
            if done == count and len(probes) < MAX_LOOP_PROBES and pc not in probes:
                self._find_counting_loop(pc)
            if self._suspended:
                self._resume_heads()
            if not self._polled_judged and self.slices >= POLLED_AFTER_SLICES:
                self._judge_polled()
            if self._error is not None:
                raise self._error
            if self._interrupted:
                return
            if self._halt_reason:
                board.halt(self._halt_reason)
                return
            if self._reset_requested:
                board.soft_reset()
                return
            if self._skip is not None:
                target = self._skip
            elif self._at_wfi(pc):
                self._asleep = True
                self.idle_skips += 1
                continue
            elif self._idle_hit or (
                mmio == self._mmio_count and traps == self.traps and self._learn_idle_loop(pc)
            ):
                target = t_end
                self.idle_skips += 1
            else:
                continue
            if not self._regs_fresh:  # the idle-loop tracing ran instructions
                _uc_reg_read_batch(uch, ids, ptrs, n_regs)
                self._regs_fresh = True
            board.now = max(board.now, min(target, self._next_event(t_end, regs[1])))

    def _wfi_wake(self, t_end: float) -> float | None:
        """When a hart in ``wfi`` resumes (None: not before ``t_end``; it sleeps on in
        the next :meth:`run`): as soon as an interrupt is pending and enabled in ``mie``,
        whether or not mstatus.MIE lets it be taken (the privileged spec's wfi). The
        clock jumps straight there: the RX FIFO reaching its trigger level or timing out
        (for the link UART, when the PLIC would pass it on), ``mtimecmp``."""
        self._sync_rx()
        now = self.board.now
        mie = self._rr(rv.UC_RISCV_REG_MIE)
        if self._pending_cause(mie):
            return now
        wake = math.inf  # the earliest, by comparisons (see _next_event)
        if mie & MIE_MTIE:
            wake = self._mtimecmp_time()
        uart = self.rx_uart
        if mie & MIE_MEIE and uart is not None and self.plic.passes(k210.UART_IRQ[uart.name]):
            at = uart.irq_at(self.board.to_board)
            if at is not None and at < wake:
                wake = at
        if mie & MIE_MEIE and self.dmac.armed:
            at = self.dmac.due(self.plic.passes)
            if at < wake:
                wake = at
        if wake >= t_end:
            return None
        return wake if wake > now else now

    def _mtimecmp_time(self) -> float:
        """The first virtual time at which ``mtime`` reads ``mtimecmp`` or more."""
        cmp = self.clint.cmp
        if cmp == _NEVER or not self.cpu_hz:
            return math.inf
        hz, base, t0 = self.cpu_hz, self._mtime_base, self._mtime_t0
        due = t0 + (cmp - base) * MTIME_DIVIDER / hz
        while base + int((due - t0) * hz / MTIME_DIVIDER) < cmp:  # float rounding: a few ulps on
            due = math.nextafter(due, math.inf)
        return due

    def _judge_polled(self) -> None:
        """A program that has taken no trap in its first :data:`POLLED_AFTER_SLICES`
        slices is polled: from then on it runs in slices of up to
        :data:`POLLED_SLICE_S` while mstatus.MIE is clear and no DMA channel is armed
        (only where the instruction counter is exact: the fallback counts a slice
        stopped early as half its budget). One that has taken traps loses
        :meth:`_fill_sram_tlb` (host time only, see there)."""
        self._polled_judged = True
        if not self.traps:
            self._polled = self._count_cell is not None
            return
        for handle in self._sram_fills:
            _uc_hook_del(self._uch, handle)
        self._sram_fills.clear()
        self._flush_tlb()  # no entry on the fast path is left (see _watch_stores)

    def _flush_tlb(self) -> None:
        self.uc.ctl(UC_CTL_TLB_FLUSH, UC_CTL_IO_WRITE)

    def _fill_sram_tlb(self) -> Any:
        """The TLB-fill hook of both SRAM views: identity-mapped, readable and writable,
        executable only on pages code has been fetched from (:attr:`code_pages`).

        Why: unicorn 2.1.4 (``notdirty_write``) sends every store to a page through its
        slow path (a lookup of the memory region, a check for translated code to drop)
        for as long as the page's TLB entry also allows execution, and its CPU TLB gives
        every page read, write and execute in M mode. Its virtual TLB without a hook
        gives an entry only the access that missed, so a load after a store refills it.
        With this hook a data page gets one read/write entry whose stores take the fast
        path after the first (the flasher's buffers, an interrupt handler's stack).

        Exactness (self-modifying code): a block is only translated from a page after an
        instruction fetch has filled its entry, which makes it a code page for good, and
        unicorn drops any other entry of that page address, victim copies included. So
        every store to a page with translated code still goes through the slow path
        and drops the code it overwrites. (A store through the other view never did:
        the views are two mappings, and unicorn keys translated code by mapping.)
        While a memory hook is installed unicorn keeps refilled entries off the fast
        path, but an entry already on it would pass the hook by: the store watcher
        (:meth:`_watch_stores`) empties the TLB when it starts. The hart runs in M mode
        without translation or PMP: the guest sees the same memory with or without the
        hook; only host time changes.

        Only polled programs keep it (:meth:`_judge_polled`). One that takes interrupts
        and waits for them in a loop starts the store watcher often (the kflash stub:
        once per 16 bytes received), and emptying the TLB each time (a large memset,
        then refills) cost more than its faster stores saved. Without the hook,
        unicorn's virtual TLB gives an entry only the access that missed, so a
        load-modify-store of a cell always refills the entry and its first store is
        seen by the watcher, and that is all the watcher needs. State bound: it runs
        once per refill of an SRAM page (a few hundred times per burn)."""
        pages = self.code_pages
        entry = _TlbEntry()
        src, size, memmove = ctypes.addressof(entry), ctypes.sizeof(entry), ctypes.memmove
        data, code = UC_PROT_READ | UC_PROT_WRITE, UC_PROT_READ | UC_PROT_WRITE | UC_PROT_EXEC

        def fill(_h: object, page: int, access: int, out: int) -> bool:
            index = (page & (SRAM_SIZE - 1)) >> 12
            if access == UC_MEM_FETCH:
                pages.add(index)
            entry.paddr = page
            entry.perms = code if index in pages else data
            memmove(out, src, size)
            return True

        return fill

    def _watch_stores(self, on: bool) -> None:
        """Count guest stores to memory while ``on`` (a memory hook slows every store, so
        it is only installed while a wait loop is being confirmed)."""
        if on and self._store_hook is None:
            self._store_hook = self._add_hook(self._store_ptr, 1, 0, UC_HOOK_MEM_WRITE)
            if self._sram_fills:
                # a store through a TLB entry already on the fast path would pass the
                # hook by (see _fill_sram_tlb); refilled ones stay off it meanwhile
                self._flush_tlb()
        elif not on and self._store_hook is not None:
            _uc_hook_del(self._uch, self._store_hook)
            self._store_hook = None

    def _store_watcher(self) -> Any:
        """The store watcher's hook function: count stores that change memory. Rewriting
        the value a cell already holds (a flag cleared again, a small memset) leaves the
        loop's state as it was. The first changing store answers a wait-loop
        confirmation: stop watching then (the hook is costly); while learning a loop
        every store is counted. (State bound: it sees every store of the wait loop's
        iteration and of any interrupt handler meanwhile.)"""
        core, cells, offset = self, self.board.sram.data, Sram.offset

        def on_store(_h: object, _access: int, address: int, size: int, value: int) -> None:
            try:
                off = offset(address, size)
                if off is not None:
                    new = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
                    if cells[off : off + size] == new:
                        return
                core._stores += 1
                if core._armed:  # confirming a wait loop: one changing store is enough
                    core._watch_stores(False)
            except BaseException as exc:  # noqa: BLE001 - reported by run()
                core._fail(exc)

        return on_store

    def _learn_idle_loop(self, start: int) -> bool:
        """After a slice without MMIO or traps, stopped at ``start``: is the hart spinning
        in a wait loop?

        Single-step until a (PC, registers) state repeats with no store that changed
        memory in between. Then the loop can only be left through memory that an interrupt or a
        device changes: it is idle. Its PC gets a hook (:meth:`_on_idle_head`) that
        recognises the spin cheaply the next times. Loops that count in registers or in
        memory (delays, computations) are not idle and keep running instruction by
        instruction.
        """
        if self.board.now < self._learn_after or start in self._heads or start in self._suspended:
            return False  # tracing is costly: not again so soon, nor where a hook watches
        self._learn_after = self.board.now + LEARN_BACKOFF
        seen: dict[bytes, int] = {}
        uch, ids, ptrs, vals = self._uch, self._step_ids, self._step_ptrs, self._step_vals
        self._watch_stores(True)
        try:
            for _ in range(IDLE_TRACE):
                # pc and x1..x31 in one call (a trace steps up to IDLE_TRACE times)
                _uc_reg_read_batch(uch, ids, ptrs, len(_STEP_STATE))
                key, pc = bytes(vals), vals[0]
                if key in seen:
                    if seen[key] != self._stores:
                        return False
                    if pc not in self._heads and len(self._heads) < MAX_IDLE_HEADS:
                        self._heads[pc] = self._add_site(pc, self._on_idle_head)
                    self._learn_after = 0.0
                    return True
                seen[key] = self._stores
                if self._emu(pc, 1):
                    return False
            return False
        finally:
            self._watch_stores(False)

    def _on_idle_head(self, address: int) -> bool:
        """At a known wait-loop PC (a handler of :meth:`_add_site`: it never moves the
        pc). Two visits with the same registers and no MMIO or trap between them make a
        candidate; stores are then watched for one more iteration: none -> idle, the
        slice ends; some -> the loop is busy (e.g. a delay counting in memory), and its
        hook is suspended for a while so it runs at full speed."""
        self._head_visits += 1
        if self._head_visits > HEAD_PATIENCE:  # a loop that keeps working: let it run
            self._suspend_head(address)
            return False
        regs = self._gprs()
        state = (address, self._mmio_count + (self.traps << 40), regs)
        if state != self._head_state:
            self._head_state = state
            self._armed = False
            self._watch_stores(False)
            return False
        if not self._armed:
            self._armed = True
            self._stores = 0
            self._watch_stores(True)
            return False
        self._watch_stores(False)
        self._head_state = None
        self._armed = False
        if self._stores == 0:
            self._idle_hit = True
            self._stop()
            return False
        self._suspend_head(address)
        return False

    def _suspend_head(self, address: int) -> None:
        self._watch_stores(False)
        self._head_state = None
        self._armed = False
        remove = self._heads.pop(address, None)
        if remove is not None:
            remove()
        self._suspended[address] = self.board.now + HEAD_SUSPEND

    def _resume_heads(self) -> None:
        """Re-arm suspended wait-loop hooks whose suspension time is over."""
        for pc, until in list(self._suspended.items()):
            if self.board.now >= until:
                del self._suspended[pc]
                self._heads[pc] = self._add_site(pc, self._on_idle_head)

    def _at_wfi(self, pc: int) -> bool:
        """Did the slice stop (at ``pc``) after a ``wfi``? (Asked after most slices: the
        word is read from the SRAM buffer when it lies there, without a round trip
        through unicorn.)"""
        off = pc - 4 - SRAM_BASE
        if not 0 <= off <= SRAM_SIZE - 4:
            off = pc - 4 - SRAM_ALIAS
        if 0 <= off <= SRAM_SIZE - 4:
            return self.board.sram.data[off : off + 4] == _WFI_BYTES
        try:
            insn = self.uc.mem_read(pc - 4, 4)
        except UcError:
            return False
        return int.from_bytes(insn, "little") == INSN_WFI

    def status(self) -> dict[str, Any]:
        return {
            "pc": self._rr(rv.UC_RISCV_REG_PC),
            "cpu_hz": self.cpu_hz,
            "instructions": self.instructions,
            "slices": self.slices,
            "traps": self.traps,
            "idle_skips": self.idle_skips,
            "loop_skips": self.loop_skips,
            "plic_claims": self.plic.claims,
            "spi3_transactions": self.spi3.transactions,
            "rx_uart": self.rx_uart.name if self.rx_uart is not None else None,
            "tx_uart": self.tx_name,
        }

    def close(self) -> None:
        """Forget the emulator instance (the SRAM cells stay with the board)."""
        self.uc = None  # type: ignore[assignment]
