"""The virtual K210 board: pins, reset, mask ROM, core, flash and the serial line.

Everything runs in virtual time (``board.now``, seconds). The host side of the serial line
(:meth:`host_write`, :meth:`host_read`, :meth:`set_host_baud`, :meth:`set_dtr`,
:meth:`set_rts`) is what a USB-serial adapter would see; :meth:`run_until` advances the
board. Stages:

* ``reset`` — RESET held (by the wiring or by a power cut), nothing runs;
* ``rom`` — RESET released, the ROM is starting and will sample IO16;
* ``isp`` — the mask ROM's ISP loop on UARTHS;
* ``core`` — the emulated RV64 core runs what the host uploaded and booted (``C5``);
* ``firmware`` — the ROM booted a valid image from flash; a personality owns the UART;
* ``halted`` — the core stopped (bad access, undecryptable image): silent until reset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .config import BoardConfig
from .faults import FaultInjector, FaultPlan
from .firmware import FIRMWARE_BAUD, Personality, make_personality
from .flash import NorFlash
from .memory import Sram
from .parts import BootResult
from .rom import BOOT_FAIL_TEXT, ISP_BAUD, MaskRom
from .wire import Wire
from .wiring import wiring_for

ROM_SAMPLE_DELAY = 2e-3  # reset release -> ROM samples IO16 (UARTHS init, OTP reads)
_IDLE_STEP = 0.05  # how far a stage with nothing scheduled advances per loop


class VirtualBoard:
    """One K210 board with its flash chip and USB-serial wiring."""

    def __init__(self, config: BoardConfig | None = None) -> None:
        self.config = config or BoardConfig()
        cfg = self.config
        self.wiring = wiring_for(cfg.board, cfg.wiring)
        self.faults = FaultInjector(FaultPlan.from_query(cfg.faults))
        self.flash = NorFlash(
            size=cfg.flash_size,
            chip=cfg.chip,
            timing=cfg.timing,
            backing=cfg.flash,
            unique_id=cfg.unique_id(),
            jedec_id=cfg.jedec,
        )
        self.sram = Sram()
        self.rom = MaskRom(self)
        self.to_board = Wire(cfg.seed)
        self.to_host = Wire(cfg.seed + 1)
        self.now = 0.0
        self.host_baud = float(ISP_BAUD)
        self._host_rx = bytearray()
        self._dtr = self._rts = False
        self._reset_held = False
        self._boot_override: bool | None = None
        self._rom_at = ROM_SAMPLE_DELAY
        self._boot_done_at = 0.0
        self._booting: BootResult | None = None
        self.stage = "rom"
        self.core: Any = None  # kflashpy.sim.core.Core while stage == "core"
        self.personality: Personality | None = None
        self.boot_result: BootResult | None = None
        self.halt_reason = ""
        self.resets = 0
        self.powered = True

    # ------------------------------------------------------------------ host side
    def host_write(self, data: bytes) -> None:
        """The host sends ``data`` at its baud rate from now on."""
        data = self.faults.to_board(bytes(data))
        self.to_board.send(data, self.now, self.host_baud)

    def host_read(self, limit: int | None = None) -> bytes:
        """Bytes that reached the host so far and were not read before (at most ``limit``)."""
        self._collect()
        n = len(self._host_rx) if limit is None else min(limit, len(self._host_rx))
        out = bytes(self._host_rx[:n])
        del self._host_rx[:n]
        return out

    def host_available(self) -> int:
        """Number of bytes the host could read now."""
        self._collect()
        return len(self._host_rx)

    def _collect(self) -> None:
        for _, chunk in self.to_host.receive(self.now, self.host_baud):
            self._host_rx += self.faults.to_host(chunk)

    def host_discard_input(self) -> None:
        """Flush the host's input buffer (bytes still on the wire keep coming)."""
        self._collect()
        self._host_rx.clear()

    def set_host_baud(self, baud: float) -> None:
        """The host reprograms its UART (bytes already sent keep their rate)."""
        self._collect()
        self.host_baud = float(baud)

    def set_dtr(self, asserted: bool) -> None:
        self._dtr = bool(asserted)
        self._update_pins()

    def set_rts(self, asserted: bool) -> None:
        self._rts = bool(asserted)
        self._update_pins()

    # ------------------------------------------------------------------ pins and reset
    @property
    def boot_pin_low(self) -> bool:
        """IO16 as the ROM would sample it now (button override, else the wiring)."""
        if self._boot_override is not None:
            return self._boot_override
        return self.wiring.pins(self._dtr, self._rts)[1]

    def _update_pins(self) -> None:
        reset, _ = self.wiring.pins(self._dtr, self._rts)
        if reset and not self._reset_held:
            self._reset_held = True
            self._enter_reset()
        elif not reset and self._reset_held:
            self._reset_held = False
            self._release_reset()

    def _enter_reset(self) -> None:
        self.stage = "reset"
        self._stop_core()
        self.personality = None

    def _release_reset(self) -> None:
        if not self.powered:
            return
        self.stage = "rom"
        self._rom_at = self.now + ROM_SAMPLE_DELAY
        self.resets += 1

    def soft_reset(self, at: float | None = None) -> None:
        """A SoC reset (SYSCTL soft_reset): the ROM starts again and samples IO16."""
        if at is not None:
            self.now = max(self.now, at)
        self._enter_reset()
        if not self._reset_held:
            self._release_reset()

    def _button_reset(self, boot_low: bool) -> None:
        self._boot_override = boot_low
        self.soft_reset()

    def reset_into_isp(self) -> None:
        """Hold BOOT and press RESET (the buttons; works on any wiring)."""
        self._button_reset(True)

    def reset_to_run(self) -> None:
        """Press RESET with BOOT released: the ROM boots from flash."""
        self._button_reset(False)

    def _rom_start(self) -> None:
        boot_low = self.boot_pin_low
        self._boot_override = None
        self.rom.enter_isp()
        self.to_board.clear()
        if boot_low:
            self.stage = "isp"
            return
        self._booting = self.rom.boot_from_flash()
        # the ROM copies and hashes the image for a while; a reset meanwhile cuts it short
        self.stage = "booting"
        self._boot_done_at = self.now + self._booting.duration

    def _boot_done(self) -> None:
        """The boot that was not cut short is over: its result counts (``status()``)."""
        result = self.boot_result = self._booting
        assert result is not None
        if result.ok:
            self.stage = "firmware"
            self.personality = make_personality(self.config.personality, self)
        elif result.hang:
            self.halt(result.reason)
        else:
            self.board_transmit(BOOT_FAIL_TEXT, self.now, self.rom.baud)
            self.stage = "isp"

    # ------------------------------------------------------------------ board side
    def board_transmit(self, data: bytes, t: float, baud: float) -> None:
        """A board UART puts ``data`` on the TX pin starting at ``t``."""
        self.to_host.send(data, t, baud)

    def start_core(self, entry: int, t: float) -> None:
        """The ROM jumps to ``entry`` (``C5``): the uploaded program runs on the core."""
        from .core import Core

        self.now = max(self.now, t)
        self._stop_core()
        self.core = Core(self, entry)
        self.stage = "core"

    def _stop_core(self) -> None:
        if self.core is not None:
            self.core.close()
            self.core = None

    def halt(self, reason: str) -> None:
        """The core stopped for good (bad access, unknown exception): silent until reset."""
        self._stop_core()
        self.stage = "halted"
        self.halt_reason = reason

    def power_off(self) -> None:
        """Remove power: the flash keeps what was completely written, nothing runs."""
        self.flash.power_cut(self.now)
        self.powered = False
        self._enter_reset()

    # ------------------------------------------------------------------ running
    def run_for(self, seconds: float) -> None:
        self.run_until_time(self.now + seconds)

    def run_until(self, predicate: Callable[[], bool], max_s: float) -> bool:
        """Run until ``predicate()`` holds (checked between steps) or ``max_s`` passed."""
        deadline = self.now + max_s
        while not predicate():
            if self.now >= deadline:
                return False
            self.run_until_time(min(deadline, self.now + 1e-3))
        return True

    def run_until_time(self, t_end: float) -> None:
        """Advance the board to virtual time ``t_end``."""
        cut = self.faults.plan.power_cut_at
        if cut is not None and self.powered and t_end >= cut:
            self._advance(cut)
            self.power_off()
        self._advance(t_end)

    def _advance(self, t_end: float) -> None:
        while self.now < t_end:
            stage = self.stage
            if stage == "core":
                self.core.run(t_end)
            elif stage == "isp":
                self._run_isp(t_end)
            elif stage == "rom" and self._rom_at <= t_end:
                self._drop_input(self._rom_at)
                self.now = max(self.now, self._rom_at)
                self._rom_start()
            elif stage == "booting" and self._boot_done_at <= t_end:
                self._drop_input(self._boot_done_at)
                self.now = max(self.now, self._boot_done_at)
                self._boot_done()
            elif stage == "firmware":
                self._run_firmware(t_end)
            else:
                self._drop_input(t_end)
                self.now = t_end

    def _drop_input(self, until: float) -> None:
        self.to_board.receive(until, self.host_baud)

    def _run_isp(self, t_end: float) -> None:
        rom = self.rom
        for t_last, chunk in self.to_board.receive(t_end, rom.baud):
            dt = (t_last - self.now) / len(chunk) if len(chunk) else 0.0
            start = 0
            # hand the ROM complete frames at the time their final C0 arrived
            while start < len(chunk) and self.stage == "isp":
                end = chunk.find(b"\xc0", start + 1 if chunk[start] == 0xC0 else start)
                end = len(chunk) if end < 0 else end + 1
                t = t_last - (len(chunk) - end) * dt
                self.now = max(self.now, t)
                rom.feed(chunk[start:end], t)
                start = end
            if self.stage != "isp":
                return
        self.now = max(self.now, t_end)

    def _run_firmware(self, t_end: float) -> None:
        pers = self.personality
        assert pers is not None
        for t_last, chunk in self.to_board.receive(t_end, FIRMWARE_BAUD):
            self.now = max(self.now, t_last)
            pers.on_host_bytes(chunk, self.now)
            self._firmware_output()
        self.now = t_end
        self._firmware_output()

    def _firmware_output(self) -> None:
        assert self.personality is not None
        out = self.personality.poll(self.now)
        if out:
            self.board_transmit(out, self.now, FIRMWARE_BAUD)

    # ------------------------------------------------------------------ reporting
    def board_baud(self) -> float | None:
        """Rate of the UART currently listening on IO4 (None when nothing listens)."""
        if self.stage == "isp":
            return self.rom.baud
        if self.stage == "firmware":
            return float(FIRMWARE_BAUD)
        if self.stage == "core" and self.core is not None:
            return self.core.link_baud()
        return None

    def status(self) -> dict[str, Any]:
        """A JSON-able snapshot for status lines, tests and benchmarks."""
        info: dict[str, Any] = {
            "stage": self.stage,
            "now": self.now,
            "board": self.config.board,
            "wiring": self.wiring.name,
            "host_baud": self.host_baud,
            "board_baud": self.board_baud(),
            "bytes_in": self.to_board.bytes_sent,
            "bytes_out": self.to_host.bytes_sent,
            "garbled_in": self.to_board.bytes_garbled,
            "resets": self.resets,
            "rom": {"frames": self.rom.frames, "refused": self.rom.refused},
            "flash": self.flash.stats.to_dict(),
            "faults": self.faults.stats(),
        }
        if self.boot_result is not None:
            info["boot"] = {"ok": self.boot_result.ok, "reason": self.boot_result.reason}
        if self.stage == "halted":
            info["halt_reason"] = self.halt_reason
        if self.core is not None:
            info["core"] = self.core.status()
        return info

    def close(self) -> None:
        """Release the core and flush the flash backing file."""
        self._stop_core()
        self.flash.close()
