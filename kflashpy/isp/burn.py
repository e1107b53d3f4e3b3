"""The burn pipeline on a connected board: write regions, check them, reboot.

What is verified is stated, never implied: with the kflash flasher every frame carries a
CRC-32 the board checks before writing, and the board acknowledges each frame, but the
flash cannot be read back, so the result says ``"frame-crc"``. A flasher with the
``hash`` capability adds an on-board SHA-256 of every region after writing (``"sha256"``)
and lets unchanged regions be skipped.

The pipeline decides, the flasher client acts: with the ``hash`` capability the
pipeline asks for the per-sector digests of a region, sends only the sectors that differ
(or skips the region), and verifies it afterwards; the client keeps no memory between
calls.

Any failure reports its damage: every error raised while writing carries ``at_risk``
(a list of :class:`AtRisk`), the flash ranges that may now be erased or half-written —
the erase units (4 KiB sectors or 64 KiB blocks, as the flasher works) of every frame
that was sent and not acknowledged, including bytes outside the file — and its hint
names them and the command that repairs them. Before a write that may erase bytes
outside the file, they are read and kept on disk (:mod:`kflashpy.isp.kept`), and the
rerun of the same burn writes them back.

Ctrl-C stops at a frame boundary: the frame on the wire is allowed to finish (so the
board is not left mid-command), and :class:`~kflashpy.errors.Interrupted` lists which
regions were written, which were cut short (and how far), and which were not touched.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import Interrupted, KflashError, VerifyError
from ..progress import Progress, ProgressFn, report
from ..units import fmt_addr
from .connect import Device
from .kept import KeptBytes
from .stage2 import (
    BLOCK_SIZE,
    CAP_CHIP_ERASE,
    CAP_ERASE,
    CAP_HASH,
    CAP_IDENTIFY,
    CAP_READ,
    SECTOR,
    Pieces,
    Stage2,
    WriteLedger,
    check_sector_range,
    join_pieces,
    sector_blocks,
)

#: after Ctrl-C, the longest wait for the board to finish the frames it has (port
#: seconds), greeting it every SETTLE_TRY_S: the process ends within a second
SETTLE_S, SETTLE_TRY_S = 0.6, 0.1


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


@dataclass(frozen=True)
class AtRisk:
    """A flash range a failed burn may have left erased or half-written."""

    start: int
    end: int
    #: the region whose write touched it
    label: str
    #: bytes outside the region (old data that shared its sector or block)
    outside: bool = False
    #: outside bytes: "kept" (on disk, restored by the rerun), "blank" (nothing to
    #: restore) or "unread" (the flasher cannot read flash back)
    old: str = ""
    #: where the old bytes were kept
    kept: str = ""

    def describe(self) -> str:
        span = f"{fmt_addr(self.start)}-{fmt_addr(self.end - 1)} ({self.end - self.start} B"
        if not self.outside:
            return f"{span} of {self.label})"
        old = {
            "kept": f"old data kept in {self.kept}",
            "blank": "blank before: nothing to restore",
            "unread": "old data not kept: this flasher cannot read flash back",
        }[self.old]
        return f"{span} outside {self.label}, {old})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "label": self.label,
            "outside": self.outside,
            "old": self.old,
            "kept": self.kept,
        }


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _at_risk(
    s2: Stage2, region: WriteRegion, ledger: WriteLedger, kept: KeptBytes | None, keeping: bool
) -> list[AtRisk]:
    """The erase units of every frame sent and not acknowledged, split at the region.

    ``keeping``: the non-blank old bytes outside the region were kept (``kept``)."""
    units = _merge([u for at, n in ledger.pending.items() for u in s2.erase_units(at, n)])
    out = []
    kept_at = {a: len(b) for a, b in kept.pieces} if kept else {}
    for s, e in units:
        inside = (max(s, region.address), min(e, region.end))
        for lo, hi in ((s, inside[0]), inside, (inside[1], e)):
            if lo >= hi:
                continue
            if (lo, hi) == inside:
                out.append(AtRisk(lo, hi, region.label))
            elif kept and any(lo < a + n and a < hi for a, n in kept_at.items()):
                out.append(AtRisk(lo, hi, region.label, True, "kept", str(kept.path)))
            else:
                out.append(AtRisk(lo, hi, region.label, True, "blank" if keeping else "unread"))
    return out


def _damage_hint(region: WriteRegion, at_risk: list[AtRisk], acked: int) -> str:
    if not at_risk:
        return (
            f"{region.label}: {acked} of {len(region.data)} B acknowledged; no frame was "
            "waiting for its answer, so the flash holds old or new data, nothing half-written"
        )
    ranges = "; ".join(r.describe() for r in at_risk)
    kept = any(r.old == "kept" for r in at_risk)
    lost = [r for r in at_risk if r.old == "unread"]
    repair = "run the same burn again to rewrite them" + (
        " and restore the kept bytes" if kept else ""
    )
    if lost:
        repair += (
            "; this flasher cannot read flash back, so restore the old data outside "
            "the file from your own copy of it (or burn it again)"
        )
    return (
        f"{region.label}: {acked} of {len(region.data)} B acknowledged; may now be erased or "
        f"half-written: {ranges}. Repair: {repair}"
    )


def _labelled(progress: ProgressFn | None, label: str, sink: list[int]) -> ProgressFn:
    """Forward progress with the region's label and remember how far the board got."""

    def fn(ev: Progress) -> None:
        sink[0] = ev.done
        report(progress, Progress(ev.stage, ev.done, ev.total, label, ev.message))

    return fn


def _settle(s2: Stage2) -> bool:
    """After Ctrl-C: drop the frames still waiting in the host's output buffer (at a
    low baud they would take seconds; cut, the one on the line fails its CRC and is
    never programmed), then let the board finish the frames it has, so it is idle and
    answering. True if it answered within ``SETTLE_S``. A greeting goes out every
    ``SETTLE_TRY_S``: the flasher drops one that arrives while its receive slots are
    all taken by frames waiting to be programmed, and one answer is enough."""
    s2.link.discard_output()
    try:
        s2.greet(attempts=round(SETTLE_S / SETTLE_TRY_S), timeout=SETTLE_TRY_S)
    except KflashError:  # still busy, or gone: the report says so
        return False
    return True


def _interrupted(
    results: list[RegionResult], at_risk: list[AtRisk], idle: bool = True
) -> Interrupted:
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
    risk = "; ".join(r.describe() for r in at_risk)
    state = (
        "the board is idle in ISP mode"
        if idle
        else f"the board did not answer within {SETTLE_S:g} s (it may still be programming "
        "the frames it had received, or be gone)"
    )
    error = Interrupted(
        "interrupted by Ctrl-C; " + "; ".join(parts),
        f"{state}; run the same burn again to finish" + (f" (it rewrites {risk})" if risk else ""),
    )
    error.at_risk = at_risk  # type: ignore[attr-defined]
    return error


def _pieces(
    s2: Stage2, region: WriteRegion, skip_unchanged: bool, ledger: WriteLedger | None = None
) -> tuple[Pieces, Pieces]:
    """The ``(offset, length)`` sector pieces of a region that differ from the flash,
    and those the flash holds erased.

    The board hashes the region sector by sector (one pass) where that can spare
    sectors; a small region is compared whole. ``[]``: the flash already holds it.
    """
    data, size = region.data, len(region.data)
    if size >= 2 * SECTOR and (skip_unchanged or size >= BLOCK_SIZE):
        old = s2.hash_list_ahead(region.address, data, ledger)
        sectors = list(zip(sector_blocks(region.address, size), old, strict=True))
        return (
            [
                (off, n)
                for (off, n), d in sectors
                if hashlib.sha256(data[off : off + n]).digest() != d
            ],
            [(off, n) for (off, n), d in sectors if d == hashlib.sha256(b"\xff" * n).digest()],
        )
    if skip_unchanged and s2.sha256(region.address, size) == hashlib.sha256(data).digest():
        return [], []
    return [(0, size)], []


def _outside(s2: Stage2, region: WriteRegion, pieces: Pieces) -> list[tuple[int, int]]:
    """Flash outside the region that writing ``pieces`` may erase (shared units)."""
    spans = []
    for off, n in join_pieces(region.address, pieces):
        for s, e in s2.erase_units(region.address + off, n):
            spans += [(s, min(e, region.address)), (max(s, region.end), e)]
    return _merge([(s, e) for s, e in spans if s < e])


def _keep(s2: Stage2, board: str, region: WriteRegion, pieces: Pieces) -> KeptBytes | None:
    """Keep the non-blank old bytes a write of ``pieces`` may erase (see kflashpy.isp.kept).

    A rerun after a failure finds them on disk (the flash may have lost them)."""
    kept = KeptBytes.load(board, region.address, region.data)
    if kept is not None:
        return kept
    pieces_kept = []
    for s, e in _outside(s2, region, pieces):
        for (off, n), d in zip(sector_blocks(s, e - s), s2.hash_list(s, e - s), strict=True):
            if d != hashlib.sha256(b"\xff" * n).digest():
                pieces_kept.append((s + off, s2.read(s + off, n)))
    if not pieces_kept:
        return None
    kept = KeptBytes(board, region.address, hashlib.sha256(region.data).hexdigest(), pieces_kept)
    kept.save()
    return kept


def _restore(s2: Stage2, kept: KeptBytes, ledger: WriteLedger) -> None:
    """Write back the kept bytes the flash no longer holds, then forget them."""
    for at, data in kept.pieces:
        if s2.sha256(at, len(data)) != hashlib.sha256(data).digest():
            s2.write(at, data, ledger=ledger)
    kept.drop()


def write_regions(
    dev: Device,
    regions: Sequence[WriteRegion],
    *,
    skip_unchanged: bool = True,
    progress: ProgressFn | None = None,
) -> list[RegionResult]:
    """Write every region in order through the running flasher.

    With the ``hash`` capability, a region whose on-board SHA-256 already matches is
    skipped (``skip_unchanged``), only its changed sectors are sent otherwise, and each
    written region is hashed on the board and compared (:class:`VerifyError` on
    mismatch). With ``read`` too, old bytes outside a region that its write may erase are
    kept until it is verified (see the module docstring). Errors carry ``at_risk``.
    """
    s2 = dev.require_stage2()
    hashing = s2.has(CAP_HASH)
    keeping = hashing and s2.has(CAP_READ) and s2.has(CAP_IDENTIFY)
    board = s2.identify().unique_id.hex() if keeping else ""
    results = [RegionResult(r.label, r.address, len(r.data)) for r in regions]
    for region, res in zip(regions, results, strict=True):
        ledger, kept = WriteLedger(), None
        sink = [0]
        start = dev.link.now()
        try:
            pieces, blank = _pieces(s2, region, skip_unchanged, ledger) if hashing else (None, [])
            if pieces == [] and skip_unchanged:
                kept = KeptBytes.load(board, region.address, region.data) if keeping else None
                if kept is not None:
                    _restore(s2, kept, ledger)
                res.status, res.verified = "skipped", "sha256"
                continue
            if keeping and pieces:
                kept = _keep(s2, board, region, pieces)
            s2.write(
                region.address,
                region.data,
                _labelled(progress, region.label, sink),
                pieces=pieces,
                ledger=ledger,
                blank=join_pieces(region.address, blank, 1 << 32),
            )
            res.status, res.done = "written", len(region.data)
            res.seconds = dev.link.now() - start
            res.verified = "frame-crc"
            if hashing:
                if not _checked_on_write(s2, region, ledger):
                    _verify(s2, region)
                res.verified = "sha256"
            if kept is not None:
                _restore(s2, kept, ledger)
        except KeyboardInterrupt:
            res.status, res.done = "interrupted", sink[0]
            res.seconds = dev.link.now() - start
            idle = _settle(s2)
            at_risk = _at_risk(s2, region, ledger, kept, keeping)
            raise _interrupted(results, at_risk, idle) from None
        except KflashError as e:
            if res.status != "written":
                res.status, res.done = "failed", sink[0]
            at_risk = _at_risk(s2, region, ledger, kept, keeping)
            written = [
                r.label for r in results if r.status in ("written", "skipped") and r is not res
            ]
            e.hint = "\n".join(
                x
                for x in (
                    e.hint,
                    _damage_hint(region, at_risk, ledger.acked),
                    f"complete before it: {', '.join(written)}" if written else "",
                )
                if x
            )
            e.at_risk = at_risk  # type: ignore[attr-defined]
            raise
    return results


def _checked_on_write(s2: Stage2, region: WriteRegion, ledger: WriteLedger) -> bool:
    """Did the write's acknowledgements already verify the region on the flash?

    Yes when every frame came back with an on-board digest equal to ours (its pages read
    back after writing, see :class:`WriteLedger`) and no frame that erased has an erase
    unit reaching into another part of the region: it could otherwise have erased and
    rewritten bytes an earlier frame checked, or sectors left alone as unchanged (whose
    digests in the hash list were their check). A frame that erased nothing programmed
    only the pages of its own range. Then a separate hash of the region would only
    repeat what is proven, so it is skipped.
    """
    if ledger.pending or ledger.unchecked or not ledger.checked:
        return False
    for at, n, erased in ledger.checked:
        if not erased:  # it programmed only pages of its own range
            continue
        for s, e in s2.erase_units(at, n):
            lo, hi = max(s, region.address), min(e, region.end)
            if lo < hi and (lo < at or hi > at + n):
                return False
    return True


def _verify(s2: Stage2, region: WriteRegion) -> None:
    got = s2.sha256(region.address, len(region.data))
    want = hashlib.sha256(region.data).digest()
    if got != want:
        raise VerifyError(
            f"{region.label} at {fmt_addr(region.address)}: the flash holds other bytes "
            f"than were sent (sha256 {got.hex()[:16]}... != {want.hex()[:16]}...)",
            "burn again; if it repeats, lower the baud rate or check the flash chip",
        )


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
