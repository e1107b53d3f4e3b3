"""The K210 DMA controller (Synopsys DW_axi_dmac at 0x5000_0000), six channels.

docs/simulator.md ("The DMAC") describes the model; the register facts it relies on
(from the Kendryte SDK's dmac.h, dmac.c and sysctl.h) are kept here, in one place.

Registers are 64 bits wide; the guest reaches them with 32-bit (or 64-bit) accesses.
Common block: 0x00 ID, 0x08 COMPVER, 0x10 CFG (bit 0 DMAC_EN, bit 1 INT_EN), 0x18 CHEN
(bits 0-5 CH_EN, 8-13 CH_EN_WE: a write changes CH_EN[n] only where CH_EN_WE[n] is 1;
16-21 CH_SUSP, 24-29 CH_SUSP_WE), 0x30 INTSTATUS (bit n: channel n has an interrupt),
0x38 COM_INTCLEAR, 0x40 COM_INTSTATUS_EN, 0x48 COM_INTSIGNAL_EN, 0x50 COM_INTSTATUS,
0x58 RESET (bit 0 DMAC_RST, self-clearing).
Channel n (0-5) at 0x100 + n * 0x100: 0x00 SAR, 0x08 DAR, 0x10 BLOCK_TS (items - 1, 22
bits), 0x18 CTL, 0x20 CFG, 0x28 LLP, 0x30 STATUS (bits 0-21 CMPLTD_BLK_TFR_SIZE), 0x38
SWHSSRC, 0x40 SWHSDST, 0x48 BLK_TFR_RESUMEREQ, 0x50 AXI_ID, 0x58 AXI_QOS, 0x80
INTSTATUS_EN, 0x88 INTSTATUS, 0x90 INTSIGNAL_EN, 0x98 INTCLEAR (write 1s to clear).
Channel interrupt bits: bit 0 BLOCK_TFR_DONE, bit 1 DMA_TFR_DONE (the SDK waits for bit 1).
CTL: bit 4 SINC and bit 6 DINC (0 increment, 1 fixed), bits 8-10 SRC_TR_WIDTH and 11-13
DST_TR_WIDTH (item of 1 << value bytes), 14-17 SRC_MSIZE, 18-21 DST_MSIZE (burst
lengths, 1 << (value + 1) items above 0), 62 SHADOWREG_OR_LLI_LAST, 63
SHADOWREG_OR_LLI_VALID. CFG: bits 0-1 SRC_MULTBLK_TYPE, 2-3 DST_MULTBLK_TYPE (0
contiguous: single block), 32-34 TT_FC (0 mem->mem, 1 mem->periph, 2 periph->mem, 3
periph->periph, DMAC flow control; 4-7 peripheral flow control), 35 HS_SEL_SRC, 36
HS_SEL_DST (0 hardware handshake, 1 software), 39-42 SRC_PER, 44-47 DST_PER (the
handshake interface). The SDK's single-block use: disable the channel, clear its
interrupts, write CTL/CFG/SAR/DAR/BLOCK_TS, SRC_PER/DST_PER = the channel number, CFG =
DMAC_EN | INT_EN, then CHEN = (1 << n) | (1 << (n + 8)); done when INTSTATUS bit 1 is set.
Handshake interface i is wired to the peripheral request SYSCTL dma_sel selects for it
(dma_sel0 at SYSCTL 0x64: 6 bits per interface, 0 in bits 0-5 ... 4 in bits 24-29;
dma_sel1 at 0x68: interface 5 in bits 0-5); the request numbers are
``kflashpy.target.k210.DMA_REQUEST``. Channel n's done interrupt is PLIC source
``k210.DMA_IRQ[n]`` (27 + n).

What is modelled: single-block transfers, memory to memory and between memory and a
peripheral with hardware handshake under DMAC flow control. A transfer is computed, not
stepped: the memory side is read or written in bulk in the board's SRAM, the peripheral
side through the endpoint the peripheral registered for its request number. Anything
else a program asks for (linked lists, multi-block, software handshake, suspension,
peripheral to peripheral, a request no endpoint serves, memory outside SRAM) halts the
board with a message naming the channel, the register and its value: never a silent
wrong transfer.

The endpoint interface (what a peripheral implements to take part, registered with
``Dmac.endpoints[request] = endpoint``):

* ``dma_arm(channel) -> str | None``: a channel routed to the request was enabled (it
  is armed already: the endpoint may move items at once). The endpoint checks what it
  supports (``channel.to_memory`` gives the direction;
  ``channel.prf_address``, ``channel.prf_fixed``, ``channel.width`` the peripheral
  side, ``channel.reg(CTL)`` the burst sizes; ``channel.dmac.now()`` is the time of
  the enable) and returns why not (the board halts with it), or keeps the channel and returns
  None. While armed it moves items with ``channel.put(values, at)`` (peripheral ->
  memory: the values, oldest first, the last one complete at virtual time ``at``) or
  ``values = channel.take(count, at)`` (memory -> peripheral); both take at most
  ``channel.remaining`` items and complete the block when it is full. ``put_raw`` and
  ``take_raw`` do the same with the items as memory holds them (``width``
  little-endian bytes each), for endpoints that deal in bytes.
* ``dma_sync(now)``: move everything that has moved by virtual time ``now`` (the DMAC
  calls it before the guest sees DMAC state, the core at every slice boundary).
* ``dma_due() -> float``: when the armed block completes if the guest does nothing
  (``math.inf`` if not by itself); the core ends slices and wakes ``wfi`` there.
* ``dma_disarm(channel)``: the channel completed or the guest disabled it.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from ..target import k210
from .memory import Sram
from .periph import merge

CHANNELS = 6
# common registers
CFG, CHEN, INTSTATUS, COM_INTCLEAR, RESET = 0x10, 0x18, 0x30, 0x38, 0x58
CFG_DMAC_EN, CFG_INT_EN = 1, 2
# channel registers (offsets inside a channel's 0x100 bytes)
CH_BASE = 0x100
SAR, DAR, BLOCK_TS, CTL, CH_CFG, LLP, STATUS = 0x00, 0x08, 0x10, 0x18, 0x20, 0x28, 0x30
SWHSSRC, SWHSDST = 0x38, 0x40
CH_INTSTATUS_EN, CH_INTSTATUS, CH_INTSIGNAL_EN, CH_INTCLEAR = 0x80, 0x88, 0x90, 0x98
BLOCK_TFR_DONE, DMA_TFR_DONE = 1, 2
TT_MEM2MEM, TT_MEM2PRF, TT_PRF2MEM = 0, 1, 2
BLOCK_TS_MASK = (1 << 22) - 1
SYSCTL_DMA_SEL0, SYSCTL_DMA_SEL1 = 0x64, 0x68
_MASK64 = (1 << 64) - 1
_ITEM = {1: "B", 2: "H", 4: "I", 8: "Q"}  # struct codes of the item widths


class Endpoint(Protocol):
    """A peripheral's side of a handshake request (see the module docstring)."""

    def dma_arm(self, channel: Channel) -> str | None: ...

    def dma_sync(self, now: float) -> None: ...

    def dma_due(self) -> float: ...

    def dma_disarm(self, channel: Channel) -> None: ...


class Channel:
    """One DMA channel: its registers and, while enabled, the block in progress."""

    def __init__(self, dmac: Dmac, n: int) -> None:
        self.dmac = dmac
        self.n = n
        self.irq = k210.DMA_IRQ[n]
        self.reset()

    def reset(self) -> None:
        self.regs = [0] * 0x20  # 64-bit registers, by offset / 8
        self.enabled = False
        self.endpoint: Endpoint | None = None
        self.to_memory = False  # direction of a peripheral transfer
        self.width = 4  # bytes per item
        self.items = 0  # items in the block
        self.moved = 0
        self.prf_address = 0  # the peripheral side's bus address
        self.prf_fixed = True
        self._mem = 0  # SRAM offset of the memory side's first item
        self._mem_fixed = False
        self.done_at = 0.0  # when the last block completed

    def reg(self, offset: int) -> int:
        return self.regs[offset >> 3]

    @property
    def remaining(self) -> int:
        """Items the armed block still moves (0 when idle)."""
        return self.items - self.moved if self.enabled else 0

    def level(self) -> bool:
        """The done interrupt's line to the PLIC (asked at every claim and wfi wake:
        comparisons, no bool() call)."""
        regs = self.regs
        return (
            regs[CH_INTSTATUS >> 3] & regs[CH_INTSIGNAL_EN >> 3] != 0
            and self.dmac.cfg & CFG_INT_EN != 0
        )

    def raises_irq(self) -> bool:
        """Would completing the armed block raise the done interrupt?"""
        bits = self.regs[CH_INTSTATUS_EN >> 3] & self.regs[CH_INTSIGNAL_EN >> 3]
        return bool(bits & (BLOCK_TFR_DONE | DMA_TFR_DONE) and self.dmac.cfg & CFG_INT_EN)

    # ------------------------------------------------------------- endpoint side
    def put(self, values: Sequence[int] | bytes | np.ndarray, at: float) -> int:
        """Peripheral -> memory: store up to :attr:`remaining` of ``values`` (the last
        one received at ``at``); return how many were taken. Bytes are items whose upper
        bits are 0 (a UART's received bytes)."""
        # :attr:`remaining` inlined and no min() call (docs/simulator.md, "Cheaper device
        # accesses"): a UART's DMA puts a few bytes at every sync
        count = self.items - self.moved if self.enabled else 0
        if len(values) < count:
            count = len(values)
        if count:
            width = self.width
            if isinstance(values, (bytes, bytearray)):  # the hot path: a few bytes
                raw = bytearray(count * width)
                raw[::width] = values[:count]
            else:
                # each item's low ``width`` bytes (an unsigned cast keeps them)
                items = np.asarray(values[:count], dtype=np.uint64)
                raw = bytearray(items.astype(f"<u{width}").tobytes())
            self._stored(raw, count, at)
        return count

    def put_raw(self, raw: bytes, at: float) -> int:
        """:meth:`put` of items already as memory holds them (``width`` little-endian
        bytes each: an SPI3 read's frames, converted once per transaction instead of
        once per burst); return how many items were taken."""
        width = self.width
        count = self.items - self.moved if self.enabled else 0  # no min(): see put
        if len(raw) // width < count:
            count = len(raw) // width
        if count:
            self._stored(raw[: count * width], count, at)
        return count

    def _stored(self, raw: bytes | bytearray, count: int, at: float) -> None:
        """Write ``count`` items (``width`` little-endian bytes each, in ``raw``) at the
        next memory position, the last one arrived at ``at``."""
        sram, width = self.dmac.sram.data, self.width
        if self._mem_fixed:  # every item to the same cell: the last one stays
            sram[self._mem : self._mem + width] = raw[-width:]
        else:
            off = self._mem + self.moved * width
            sram[off : off + len(raw)] = raw
        self.moved += count
        if self.moved == self.items:
            self._complete(at)

    def take(self, count: int, at: float) -> list[int]:
        """Memory -> peripheral: the next ``count`` items (at most :attr:`remaining`),
        the last one taken at ``at``."""
        raw = self.take_raw(count, at)
        return list(struct.unpack(f"<{len(raw) // self.width}{_ITEM[self.width]}", raw))

    def take_raw(self, count: int, at: float) -> bytes:
        """:meth:`take` as memory holds the items (``width`` little-endian bytes each)."""
        if count > self.remaining:  # no min(): see put
            count = self.remaining
        if not count:
            return b""
        raw = self._load(self.moved, count)
        self.moved += count
        if self.moved == self.items:
            self._complete(at)
        return raw

    # ------------------------------------------------------------- memory side
    def _load(self, first: int, count: int) -> bytes:
        """Items ``first .. first + count`` of the memory side, as raw bytes."""
        sram, width = self.dmac.sram.data, self.width
        if self._mem_fixed:
            return bytes(sram[self._mem : self._mem + width]) * count
        off = self._mem + first * width
        return bytes(sram[off : off + count * width])

    # ------------------------------------------------------------- life cycle
    def start(self, now: float) -> None:
        """CH_EN rose: check the programmed block and start it (or halt the board).

        Runs once per block (kflashpy's flasher arms one or two per flash page): the
        registers are read from the list directly, and a refusal's message is built
        only when the board halts (:meth:`_halt`)."""
        regs, dmac = self.regs, self.dmac
        ctl, cfg = regs[CTL >> 3], regs[CH_CFG >> 3]
        halt = self._halt
        if not dmac.cfg & CFG_DMAC_EN:
            return halt(f" enabled while CFG.DMAC_EN is 0 (CFG=0x{dmac.cfg:x})")
        if cfg & 0xF:
            return halt(f": CFG=0x{cfg:016x} asks for multi-block transfers (not modelled)")
        llp = regs[LLP >> 3]
        if ctl >> 63 & 1 or llp:
            return halt(f": CTL=0x{ctl:016x} LLP=0x{llp:x}: linked lists")
        src_w, dst_w = ctl >> 8 & 7, ctl >> 11 & 7
        if src_w != dst_w or src_w > 3:
            return halt(
                f": CTL=0x{ctl:016x}: SRC_TR_WIDTH {src_w} / DST_TR_WIDTH {dst_w}"
                " (only equal widths up to 64 bits are modelled)"
            )
        self.width = 1 << src_w
        self.items = (regs[BLOCK_TS >> 3] & BLOCK_TS_MASK) + 1
        self.moved = 0
        tt = cfg >> 32 & 7
        sar, dar = regs[SAR >> 3] & 0xFFFF_FFFF, regs[DAR >> 3] & 0xFFFF_FFFF
        sinc_fixed, dinc_fixed = bool(ctl >> 4 & 1), bool(ctl >> 6 & 1)
        if tt == TT_MEM2MEM:
            src = self._memory(sar, sinc_fixed, "SAR")
            dst = self._memory(dar, dinc_fixed, "DAR")
            if src is None or dst is None:
                return None
            self._mem, self._mem_fixed = src, sinc_fixed
            raw = self._load(0, self.items)
            self._mem, self._mem_fixed = dst, dinc_fixed
            self.enabled = True
            self._stored(raw, self.items, now)
            return None
        if tt not in (TT_MEM2PRF, TT_PRF2MEM):
            return halt(f": CFG=0x{cfg:016x}: TT_FC {tt} (not modelled)")
        to_memory = self.to_memory = tt == TT_PRF2MEM
        hs_sw = cfg >> (35 if to_memory else 36) & 1
        if hs_sw:
            return halt(f": CFG=0x{cfg:016x}: software handshake (not modelled)")
        iface = cfg >> (39 if to_memory else 44) & 0xF
        field = "SRC_PER" if to_memory else "DST_PER"
        if iface >= CHANNELS:
            return halt(f": CFG=0x{cfg:016x}: {field} {iface} has no SYSCTL dma_sel")
        request = dmac.request_of(iface)
        endpoint = dmac.endpoints.get(request)
        if endpoint is None:
            return halt(
                f": {field} {iface} is routed to request {request} by SYSCTL dma_sel,"
                " which no modelled peripheral serves"
            )
        mem, fixed, reg_name = (dar, dinc_fixed, "DAR") if to_memory else (sar, sinc_fixed, "SAR")
        off = self._memory(mem, fixed, reg_name)
        if off is None:
            return None
        self._mem, self._mem_fixed = off, fixed
        self.prf_address = sar if to_memory else dar
        self.prf_fixed = sinc_fixed if to_memory else dinc_fixed
        # armed before the endpoint is asked: it may move items (and complete) at once
        self.endpoint = endpoint
        self.enabled = True
        dmac.armed.append(self)
        refused = endpoint.dma_arm(self)
        if refused:
            self.enabled = False
            self.endpoint = None
            dmac.armed.remove(self)
            return halt(f" (request {request}): {refused}")
        if self.enabled:
            # whether the block's end is known (an SPI3 block learns it only when the
            # guest selects the chip): see Dmac.end_slice
            dmac.end_slice(endpoint.dma_due() != math.inf)
        return None

    def _halt(self, what: str) -> None:
        """Halt the board: "DMAC channel n" followed by ``what``."""
        self.dmac.refuse(f"DMAC channel {self.n}{what}")

    def _memory(self, address: int, fixed: bool, reg_name: str) -> int | None:
        """The SRAM offset of the block's memory side, or None (the board halts)."""
        size = self.width if fixed else self.items * self.width
        off = Sram.offset(address, size)
        if off is None:
            self.dmac.refuse(
                f"DMAC channel {self.n}: {reg_name}=0x{address:08x} + {size} bytes is not SRAM"
            )
        return off

    def _complete(self, at: float) -> None:
        self.regs[STATUS >> 3] = self.moved
        self.regs[CH_INTSTATUS >> 3] |= self.regs[CH_INTSTATUS_EN >> 3] & (
            BLOCK_TFR_DONE | DMA_TFR_DONE
        )
        self.done_at = at
        self.stop()

    def stop(self) -> None:
        """CH_EN falls (the block completed, or the guest disabled the channel)."""
        self.enabled = False
        endpoint, self.endpoint = self.endpoint, None
        if endpoint is not None:
            self.dmac.armed.remove(self)
            endpoint.dma_disarm(self)

    # ------------------------------------------------------------- registers
    def read(self, offset: int) -> int:
        return self.regs[offset >> 3] if offset < 0x100 else 0

    def write(self, offset: int, value: int) -> None:
        if offset == CH_INTCLEAR:
            self.regs[CH_INTSTATUS >> 3] &= ~value & _MASK64
        elif offset in (SWHSSRC, SWHSDST) and value:
            self.dmac.refuse(
                f"DMAC channel {self.n}: SWHS{'SRC' if offset == SWHSSRC else 'DST'}"
                f"=0x{value:x}: software handshake (not modelled)"
            )
        elif offset not in (STATUS, CH_INTSTATUS) and offset < 0x100:
            self.regs[offset >> 3] = value


class Dmac:
    """The controller: common registers, the channels, SYSCTL's request routing."""

    size = 0x1000
    name = "dmac"

    def __init__(
        self,
        sram: Sram,
        sysctl_word: Callable[[int], int],
        now: Callable[[], float],
        halt: Callable[[str], None],
        end_slice: Callable[[bool], None] = lambda _known: None,
    ) -> None:
        self.sram = sram
        self._sysctl_word = sysctl_word
        self.now = now
        self.refuse = halt  # stop the board with this message (nothing is modelled wrong)
        # a block was armed (its end known or not): the core ends the running slice where
        # the next one must end at the block's completion, or must not be a long one
        self.end_slice = end_slice
        self.endpoints: dict[int, Endpoint] = {}
        self.armed: list[Channel] = []  # channels moving data with an endpoint
        self.channels = [Channel(self, n) for n in range(CHANNELS)]
        self.reset()

    def reset(self) -> None:
        self.cfg = 0
        self.common = [0] * 0x20
        for ch in self.channels:
            if ch.enabled:
                ch.stop()
            ch.reset()

    def request_of(self, iface: int) -> int:
        """The peripheral request SYSCTL dma_sel routes to handshake interface ``iface``."""
        if iface < 5:
            return self._sysctl_word(SYSCTL_DMA_SEL0) >> (6 * iface) & 0x3F
        return self._sysctl_word(SYSCTL_DMA_SEL1) & 0x3F

    # ------------------------------------------------------------- the core's side
    def sync(self, now: float) -> None:
        """Bring every armed peripheral transfer up to ``now``."""
        for ch in self.armed[:]:
            if ch.endpoint is not None:
                ch.endpoint.dma_sync(now)

    def due(self, passes: Callable[[int], bool] | None = None) -> float:
        """The first completion of an armed block, if the guest does nothing; with
        ``passes``, of one that raises a done interrupt the PLIC passes (``passes(irq)``)."""
        t = math.inf
        for ch in self.armed:
            if ch.endpoint is None:
                continue
            if passes is None or (ch.raises_irq() and passes(ch.irq)):
                due = ch.endpoint.dma_due()
                if due < t:
                    t = due
        return t

    # ------------------------------------------------------------- registers
    def read(self, offset: int, size: int) -> int:
        if self.armed:
            self.sync(self.now())
        value = self._read64(offset & ~7)
        return value >> (8 * (offset & 7)) & ((1 << (8 * size)) - 1)

    def _read64(self, offset: int) -> int:
        if offset >= CH_BASE:
            n = (offset - CH_BASE) >> 8
            return self.channels[n].read(offset & 0xFF) if n < CHANNELS else 0
        if offset == CFG:
            return self.cfg
        if offset == CHEN:
            return sum(1 << ch.n for ch in self.channels if ch.enabled)
        if offset == INTSTATUS:
            return sum(1 << ch.n for ch in self.channels if ch.reg(CH_INTSTATUS))
        if offset == RESET:
            return 0
        return self.common[offset >> 3]

    def write(self, offset: int, size: int, value: int) -> None:
        if offset >= CH_BASE:
            n = (offset - CH_BASE) >> 8
            if n >= CHANNELS:
                return
            ch = self.channels[n]
            base = offset & 0xF8  # ch.read(base) inlined: SAR/DAR/INTCLEAR once per block
            ch.write(base, merge(ch.regs[base >> 3], offset, size, value, 8)[1])
            return
        if self.armed:
            self.sync(self.now())
        base, written = merge(0, offset, size, value, 8)  # the bits this access writes
        if base == CHEN:
            self._chen(written)
        elif base == CFG:
            self.cfg = merge(self.cfg, offset, size, value, 8)[1] & 3
        elif base == RESET:
            if written & 1:
                self.reset()
        elif base not in (INTSTATUS, COM_INTCLEAR):
            self.common[base >> 3] = merge(self.common[base >> 3], offset, size, value, 8)[1]

    def _chen(self, value: int) -> None:
        if value >> 16 & value >> 24 & 0x3F:
            self.refuse(f"DMAC CHEN=0x{value:x}: channel suspension (not modelled)")
            return
        now = self.now()
        for ch in self.channels:
            if not value >> (ch.n + 8) & 1:
                continue
            on = bool(value >> ch.n & 1)
            if on and not ch.enabled:
                ch.start(now)
            elif not on and ch.enabled:
                ch.stop()
