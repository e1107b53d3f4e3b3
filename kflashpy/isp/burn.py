"""The burn pipeline on a connected board: write regions, check them, reboot.

What is verified is stated, never implied: with the kflash flasher every frame carries a
CRC-32 the board checks before writing, and the board acknowledges each frame, but the
flash cannot be read back, so the result says ``"frame-crc"``. A flasher with the
``hash`` capability adds an on-board SHA-256 of every region after writing (``"sha256"``)
and lets unchanged regions be skipped.

Ctrl-C stops at a frame boundary: the frame on the wire is allowed to finish (so the
board is not left mid-command), and :class:`~kflashpy.errors.Interrupted` lists which
regions were written, which were cut short (and how far), and which were not touched.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import Interrupted, KflashError, VerifyError
from ..progress import Progress, ProgressFn, report
from ..units import fmt_addr
from .connect import Device
from .stage2 import CAP_CHIP_ERASE, CAP_ERASE, CAP_HASH, Stage2, check_sector_range


@dataclass(frozen=True)
class WriteRegion:
    """Bytes to put at a flash address (already wrapped/transformed as they go to flash)."""

    address: int
    data: bytes = field(repr=False)
    label: str = ""

    @property
    def end(self) -> int:
        return self.address + len(self.data)


@dataclass
class RegionResult:
    """What happened to one region."""

    label: str
    address: int
    size: int
    #: "written", "skipped" (already on flash), "interrupted", "failed", "not written"
    status: str = "not written"
    done: int = 0  # bytes acknowledged by the board
    seconds: float = 0.0  # port time (virtual seconds on the simulator)
    verified: str = ""  # "sha256" | "frame-crc" | ""

    @property
    def bytes_per_second(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        speed = self.bytes_per_second / 1024
        what = f"{self.label} @{fmt_addr(self.address)}"
        if self.status == "skipped":
            return f"{what}: {self.size} B unchanged on flash, skipped"
        return (
            f"{what}: {self.status} {self.done}/{self.size} B in {self.seconds:.2f} s "
            f"({speed:.1f} KiB/s effective)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "address": self.address,
            "address_hex": fmt_addr(self.address),
            "size": self.size,
            "status": self.status,
            "bytes_written": self.done,
            "seconds": round(self.seconds, 4),
            "bytes_per_second": round(self.bytes_per_second),
            "verified": self.verified,
        }


@dataclass
class BurnResult:
    """Outcome of a burn: per-region results plus how the session went."""

    port: str
    board: str
    wiring: str
    flasher: str
    baud: int
    regions: list[RegionResult]
    #: "frame-crc" (acknowledged CRC-checked frames only) or "sha256" (on-board hash)
    verification: str
    rebooted: str = ""  # "command", "reset lines", "manual", "" = left in ISP
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "board": self.board,
            "wiring": self.wiring,
            "flasher": self.flasher,
            "baud": self.baud,
            "verification": self.verification,
            "rebooted": self.rebooted or None,
            "seconds": round(self.seconds, 4),
            "regions": [r.to_dict() for r in self.regions],
            "notes": self.notes,
        }


def _labelled(progress: ProgressFn | None, label: str, sink: list[int]) -> ProgressFn:
    """Forward progress with the region's label and remember how far the board got."""

    def fn(ev: Progress) -> None:
        sink[0] = ev.done
        report(progress, Progress(ev.stage, ev.done, ev.total, label, ev.message))

    return fn


def _settle(s2: Stage2) -> None:
    """After Ctrl-C: let the frame in flight finish so the board is idle and answering."""
    with contextlib.suppress(KflashError):  # the board may be gone: the report says so
        s2.greet(attempts=3)


def _interrupted(results: list[RegionResult]) -> Interrupted:
    done = [r.label for r in results if r.status in ("written", "skipped")]
    cut = [r for r in results if r.status == "interrupted"]
    todo = [r.label for r in results if r.status == "not written"]
    parts = []
    if done:
        parts.append(f"complete: {', '.join(done)}")
    for r in cut:
        parts.append(
            f"cut short: {r.label} ({r.done} of {r.size} B from {fmt_addr(r.address)}; "
            "the rest of its range holds old or erased data)"
        )
    if todo:
        parts.append(f"not touched: {', '.join(todo)}")
    return Interrupted(
        "interrupted by Ctrl-C; " + "; ".join(parts),
        "the board is idle in ISP mode; run the same burn again to finish",
    )


def write_regions(
    dev: Device,
    regions: Sequence[WriteRegion],
    *,
    skip_unchanged: bool = True,
    progress: ProgressFn | None = None,
) -> list[RegionResult]:
    """Write every region in order through the running flasher.

    With the ``hash`` capability, a region whose on-board SHA-256 already matches is
    skipped (``skip_unchanged``), and each written region is hashed on the board and
    compared (:class:`VerifyError` on mismatch).
    """
    s2 = dev.require_stage2()
    hashing = s2.has(CAP_HASH)
    results = [RegionResult(r.label, r.address, len(r.data)) for r in regions]
    for region, res in zip(regions, results, strict=True):
        want = hashlib.sha256(region.data).digest() if hashing else b""
        if hashing and skip_unchanged and s2.holds(region.address, region.data):
            res.status, res.verified = "skipped", "sha256"
            continue
        sink = [0]
        start = dev.link.now()
        try:
            s2.write(region.address, region.data, _labelled(progress, region.label, sink))
        except KeyboardInterrupt:
            res.status, res.done = "interrupted", sink[0]
            res.seconds = dev.link.now() - start
            _settle(s2)
            raise _interrupted(results) from None
        except KflashError as e:
            res.status, res.done = "failed", sink[0]
            written = [r.label for r in results if r.status in ("written", "skipped")]
            e.hint = "; ".join(
                x
                for x in (
                    e.hint,
                    f"{region.label}: {res.done} of {res.size} B acknowledged before the failure",
                    f"complete before it: {', '.join(written)}" if written else "",
                )
                if x
            )
            raise
        res.status, res.done = "written", len(region.data)
        res.seconds = dev.link.now() - start
        res.verified = "frame-crc"
        if hashing:
            got = s2.sha256(region.address, len(region.data))
            if got != want:
                raise VerifyError(
                    f"{region.label} at {fmt_addr(region.address)}: the flash holds other bytes "
                    f"than were sent (sha256 {got.hex()[:16]}... != {want.hex()[:16]}...)",
                    "burn again; if it repeats, lower the baud rate or check the flash chip",
                )
            res.verified = "sha256"
    return results


def burn_on(
    dev: Device,
    regions: Sequence[WriteRegion],
    *,
    reboot: bool = True,
    skip_unchanged: bool = True,
    progress: ProgressFn | None = None,
) -> BurnResult:
    """Burn ``regions`` on an already connected device (see :func:`kflashpy.connect`)."""
    s2 = dev.require_stage2()
    start = dev.link.now()
    results = write_regions(dev, regions, skip_unchanged=skip_unchanged, progress=progress)
    rebooted = dev.reboot() if reboot else ""
    return BurnResult(
        port=dev.port_name,
        board=dev.board.id,
        wiring=dev.reset_plan.name if dev.reset_plan else "",
        flasher=s2.name,
        baud=dev.baud,
        regions=results,
        verification="sha256" if s2.has(CAP_HASH) else "frame-crc",
        rebooted=rebooted,
        seconds=dev.link.now() - start,
        notes=list(dev.notes),
    )


def erase_on(
    dev: Device,
    address: int | None = None,
    size: int | None = None,
    *,
    progress: ProgressFn | None = None,
) -> str:
    """Erase a region (``address``/``size``, 4 KiB multiples) or, with neither, the chip.

    Returns how it was done: ``"erase"``, ``"chip-erase"``, or ``"write-ff"`` for a
    flasher without an erase command (its writes erase each sector, then program 0xFF).
    """
    s2 = dev.require_stage2()
    if address is None and size is None:
        if s2.has(CAP_CHIP_ERASE):
            s2.chip_erase(progress)
            return "chip-erase"
        address, size = 0, dev.board.flash_size
    if address is None or size is None:
        raise ValueError("erase needs both address and size, or neither")
    check_sector_range(address, size, "erase")
    if s2.has(CAP_ERASE):
        s2.erase(address, size, progress)
        return "erase"
    s2.write(address, b"\xff" * size, progress)
    return "write-ff"
