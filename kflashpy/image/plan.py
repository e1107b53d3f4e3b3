"""The flash layout checker: what a burn will really write, and what it will break.

:func:`plan_flash` turns ``ADDR FILE`` items (and the files of kfpkgs) into a
:class:`FlashPlan`: for every item the exact bytes to write (wrapped into a boot image
when ``sha256Prefix`` applies, AES-padded when encrypted, word-swapped when a package
asks for it), the erase sectors it touches, the content kind read from its bytes, and a
list of findings. ``check-layout``, ``pack`` and the burn pipeline all call it, so a plan
that is wrong is refused the same way everywhere (:meth:`FlashPlan.raise_on_errors`).

Findings (``Finding.code``), error unless noted:

* ``overlap``: two items share bytes (both files and both ranges are named);
* ``shared-sector`` (warning): no shared byte, but one 4 KiB erase sector, so writing
  the second erases the end of the first on a sector-erasing flasher;
* ``past-end``: an item ends beyond the board's flash;
* ``unaligned`` (warning): an address that is not a multiple of 4 KiB (kflash_gui and
  sipeed kflash.py refuse it);
* ``reserved``: an item inside a reserved region such as MaixPy's SPIFFS (an item that
  starts at the region and fits in it replaces the region: ``replaces``, info);
* ``headroom``: how far the firmware can grow before it reaches the next region
  (warning under ``min_headroom``, info otherwise); ``typical-firmware`` (warning): no
  firmware is given, and an item lies where a typical firmware of the layout ends;
* ``kmodel-version``: the layout's firmware cannot load this kmodel version;
* ``kmodel-loader``: a word-swapped model declared for ``kpu.load``, or a plain one
  declared for ``kpu.load_flash`` (or load_flash on a firmware without it);
* ``kmodel-damaged`` (warning): a V3/V4/V5 kmodel whose tables do not parse (truncated
  download, damaged export);
* ``kmodel-prefixed``: a model wrapped as firmware (it would be shifted by 5 bytes);
* ``double-wrap``: an already wrapped boot image marked sha256Prefix again;
* ``unbootable``: raw bytes at the boot address, which the ROM cannot start;
* ``bad-sha``: a boot image whose SHA-256 is wrong; ``aes`` (warning): encrypted;
* ``elf``, ``nested-package``, ``empty``: files that are not flash content.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError, KflashError, LayoutError
from ..model.detect import swap_words
from ..target.boards import Board, Firmware, get_board, get_firmware
from ..units import fmt_addr, fmt_size
from .bootimage import wrap_boot_image, wrapped_size
from .content import SECTOR, ContentInfo, align_down, align_up, detect_content, footprint

__all__ = [
    "DEFAULT_MIN_HEADROOM",
    "Finding",
    "FlashItem",
    "FlashPlan",
    "PlannedRegion",
    "find_overlaps",
    "items_from_kfpkg",
    "plan_flash",
]

DEFAULT_MIN_HEADROOM = 128 * 1024
BOOT_ADDRESS = 0
#: what verify compares a file with when burn writes it unchanged
AS_IS = "the file as is"
LOADERS = ("kpu.load", "load_flash")


@dataclass
class FlashItem:
    """Something to put in flash: bytes, where, and how to write them.

    ``prefix``: wrap as a boot image (kfpkg ``sha256Prefix``); ``None`` decides from
    the content (raw firmware, or anything raw at the boot address, is wrapped).
    ``loader``: how the firmware will load a model placed here (``"kpu.load"`` or
    ``"load_flash"``), when the user declares it.
    """

    address: int
    data: bytes = field(repr=False)
    name: str
    prefix: bool | None = None
    key: bytes | None = field(default=None, repr=False)
    dio: bool = True
    swap: bool = False
    reverse4: bool = False
    loader: str | None = None
    #: the package this item came from, if any
    source: str | None = None

    @classmethod
    def from_file(cls, address: int, path: str | os.PathLike[str], **kw: Any) -> FlashItem:
        """Read ``path`` into an item (InputError names the file when it cannot be read)."""
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            raise InputError(
                f"{path}: cannot read: {e.strerror or e}", "check the path and permissions"
            ) from None
        return cls(address, data, os.fspath(path), **kw)

    @property
    def label(self) -> str:
        return f"{self.source}:{self.name}" if self.source else self.name


@dataclass(frozen=True)
class Finding:
    """One thing the checker found; ``subjects`` are the labels of the items concerned."""

    severity: str  # "error" | "warning" | "info"
    code: str
    message: str
    hint: str = ""
    subjects: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "subjects": list(self.subjects),
        }


@dataclass(frozen=True)
class PlannedRegion:
    """One item as it will be in flash. ``resident``: already there, not written."""

    item: FlashItem
    content: ContentInfo
    prefix: bool
    write: bytes = field(repr=False)
    resident: bool = False

    @property
    def address(self) -> int:
        return self.item.address

    @property
    def size(self) -> int:
        return len(self.write)

    @property
    def end(self) -> int:
        return self.address + len(self.write)

    @property
    def footprint(self) -> tuple[int, int]:
        return footprint(self.address, len(self.write))

    @property
    def label(self) -> str:
        return self.item.label

    @property
    def written_as(self) -> str:
        """How the file's bytes go to flash, in words (verify says what it compared)."""
        if self.prefix:
            return f"the boot image burn writes ({self.item.name} wrapped: +{self.size - len(self.item.data)} B)"
        return AS_IS

    @property
    def range_text(self) -> str:
        return _range(self.address, self.end)

    def to_dict(self) -> dict[str, Any]:
        fs, fe = self.footprint
        return {
            "name": self.label,
            "address": self.address,
            "end": self.end,
            "range": self.range_text,
            "file_size": self.content.size,
            "write_size": self.size,
            "footprint": {"start": fs, "end": fe, "size": fe - fs},
            "sha256Prefix": self.prefix,
            "encrypted": self.item.key is not None,
            "resident": self.resident,
            "content": self.content.to_dict(),
        }


def _some(group: Sequence[PlannedRegion], ranges: bool = False) -> str:
    """Name the regions of a finding: two by name, more as the first two and a count."""
    names = [f"{r.label} ({r.range_text})" if ranges else r.label for r in group[:2]]
    if len({r.label for r in group}) == 1 and len(group) > 2:
        return f"{names[0]}, listed {len(group)} times,"
    if len(group) == 2:
        return " and ".join(names)
    return f"{len(group)} files ({', '.join(names)} and {len(group) - 2} more)"


def _range(start: int, end: int) -> str:
    """First and last byte, inclusive (an empty range shows its start only)."""
    return fmt_addr(start) if end <= start else f"{fmt_addr(start)}-{fmt_addr(end - 1)}"


@dataclass
class FlashPlan:
    """The checked plan: regions in address order and findings."""

    regions: list[PlannedRegion]
    findings: list[Finding]
    board: Board
    layout: Firmware | None
    flash_size: int

    @property
    def writes(self) -> list[PlannedRegion]:
        """Regions to write, in the order given (the order a burn should use)."""
        return [r for r in self.regions if not r.resident]

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def raise_on_errors(self, force: bool = False) -> None:
        """Raise :class:`LayoutError` for the first error unless ``force``."""
        errors = self.errors
        if errors and not force:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise LayoutError(
                errors[0].message + more,
                errors[0].hint or "fix the addresses, or pass --force if you really mean it",
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "board": self.board.id,
            "layout": self.layout.id if self.layout else None,
            "flash_size": self.flash_size,
            "regions": [r.to_dict() for r in sorted(self.regions, key=lambda r: r.address)],
            "reserved": [
                {"name": r.name, "start": r.start, "end": r.end, "kind": r.kind}
                for r in (self.layout.reserved_regions if self.layout else ())
            ],
            "findings": [f.to_dict() for f in self.findings],
            "ok": self.ok,
        }


def find_overlaps(spans: Sequence[tuple[int, int]]) -> list[tuple[tuple[int, ...], int, int]]:
    """Groups of half-open spans ``[start, end)`` that share bytes, in linear-size output.

    Returns ``(indices, start, end)``: the indices (into ``spans``) of spans that all hold
    the shared range ``[start, end)``. Spans with the same start and end form one group
    however many there are (a package listing one file 10,000 times at one address gives
    one group, not 50 million pairs); every other span that shares bytes with an earlier
    one (by start) is paired with the earlier one reaching furthest. So each span in a
    conflict is named, there are fewer groups than spans, and a sweep over the sorted
    spans costs ``O(n log n)``.
    """
    same: dict[tuple[int, int], list[int]] = {}
    for i, (s, e) in enumerate(spans):
        if e > s:
            same.setdefault((s, e), []).append(i)
    out = [(tuple(ids), s, e) for (s, e), ids in same.items() if len(ids) > 1]
    reach: tuple[int, int] | None = None  # (end, index) of the earlier span reaching furthest
    for (s, e), ids in sorted(same.items()):
        if reach is not None and reach[0] > s:
            out.append(((reach[1], ids[0]), s, min(reach[0], e)))
        if reach is None or e > reach[0]:
            reach = (e, ids[0])
    return sorted(out, key=lambda g: (g[1], g[2], g[0]))


def items_from_kfpkg(pkg: Any, **kw: Any) -> list[FlashItem]:
    """Flash items for the files of a :class:`~kflashpy.image.kfpkg.Kfpkg`."""
    return [
        FlashItem(
            e.address,
            e.data,
            e.name,
            prefix=e.sha256_prefix,
            swap=e.swap,
            reverse4=e.reverse4,
            source=Path(pkg.path).name,
            **kw,
        )
        for e in pkg.entries
    ]


def _bytes_to_write(item: FlashItem, prefix: bool) -> bytes:
    if prefix:
        return wrap_boot_image(item.data, key=item.key, dio=item.dio)
    data = item.data
    if item.reverse4:
        data += bytes(-len(data) % 64)
    if item.swap or item.reverse4:
        data += bytes(-len(data) % 4)
        data = swap_words(data)
    return data


def _decide_prefix(item: FlashItem, content: ContentInfo, boot_address: int) -> bool:
    if item.prefix is not None:
        return item.prefix
    if content.kind == "firmware":
        return True
    return item.address == boot_address and content.kind == "data"


def plan_footprint(plan: FlashPlan) -> int:
    """Bytes of flash the plan's writes occupy, in whole erase sectors, shared ones once."""
    total, covered_to = 0, 0
    for start, end in sorted(r.footprint for r in plan.writes):
        start = max(start, covered_to)
        if end > start:
            total += end - start
            covered_to = end
    return total


def as_burned(address: int, data: bytes, name: str) -> PlannedRegion:
    """What ``burn ADDR FILE`` writes for ``data`` at ``address``: the rule verify applies too."""
    return _region(FlashItem(address, data, name), BOOT_ADDRESS, {})


def _boots(r: PlannedRegion, boot_address: int) -> bool:
    """Whether ``r`` is the firmware the ROM boots."""
    return r.address == boot_address and (r.prefix or r.content.kind == "boot-image")


def _region(
    item: FlashItem,
    boot_address: int,
    memo: dict[tuple, tuple[ContentInfo, bool, bytes]],
    resident: bool = False,
) -> PlannedRegion:
    """Plan one item; items with the same bytes and flags share one detection and one
    copy of the bytes to write (``memo``), so a package that lists one file 10,000
    times costs one file's memory."""
    shape: tuple = (id(item.data), item.name, item.prefix, item.key, item.dio, item.swap)
    shape += (item.reverse4, item.address == boot_address)
    if shape not in memo:
        content = detect_content(item.data, item.name)
        prefix = _decide_prefix(item, content, boot_address)
        memo[shape] = (content, prefix, _bytes_to_write(item, prefix))
    return PlannedRegion(item, *memo[shape], resident)


class _Checker:
    def __init__(self, plan: FlashPlan, boot_address: int, min_headroom: int) -> None:
        self.plan = plan
        self.boot = boot_address
        self.min_headroom = min_headroom
        #: the region the per-item checks are looking at
        self.subject: PlannedRegion | None = None
        #: why each kmodel's tables do not parse ("" if they do), by ``id`` of its bytes
        self.damage: dict[int, str] = {}

    def add(
        self, severity: str, code: str, message: str, hint: str = "", *subjects: PlannedRegion
    ) -> None:
        labels = tuple(r.label for r in subjects or (self.subject,) if r is not None)
        self.plan.findings.append(Finding(severity, code, message, hint, labels))

    # --- per item ---------------------------------------------------------------------

    def content(self, r: PlannedRegion) -> None:
        c, name = r.content, r.label
        kind_errors = {
            "empty": ("empty", f"{name} is empty", "nothing to write"),
            "elf": (
                "elf",
                f"{name} is an ELF file; flash takes the raw binary",
                "convert it: riscv64-unknown-elf-objcopy -O binary app.elf app.bin",
            ),
            "kfpkg": (
                "nested-package",
                f"{name} is a kfpkg; packages cannot be nested",
                "give the package itself, not as a file at an address",
            ),
            "lfs-pointer": (
                "not-the-file",
                f"{name} is a Git LFS pointer ({c.size} B of text), not the file it stands for",
                "fetch the real file (git lfs install && git lfs pull), or download it again",
            ),
            "html": (
                "not-the-file",
                f"{name} is an HTML page, not a binary: what a failed or redirected download saves",
                "download the file itself (on GitHub: the Raw or release-asset link)",
            ),
            "zip": (
                "not-the-file",
                f"{name} is a {c.label}, not something to write to flash",
                "unpack it and burn the file inside (a kfpkg needs flash-list.json at its root)",
            ),
        }
        if c.kind in kind_errors:
            self.add("error", *kind_errors[c.kind])
        elif name.lower().endswith(".kmodel") and c.kind != "kmodel":
            self.add(
                "error",
                "not-the-file",
                f"{name} is named .kmodel but holds {c.label}, not a kmodel",
                "check that this is the model file (kflashpy image-info shows what it is)",
            )
        if self.plan.findings and self.plan.findings[-1].code == "not-the-file":
            return  # what such bytes would do at this address is beside the point
        if r.prefix and c.kind == "kmodel":
            self.add(
                "error",
                "kmodel-prefixed",
                f"{name} at {fmt_addr(r.address)} is a kmodel marked as firmware (sha256Prefix): "
                "the model would start 5 bytes late and fail to load (error 2002)",
                "write models raw: sha256Prefix false",
            )
        if r.prefix and c.kind == "boot-image":
            self.add(
                "error",
                "double-wrap",
                f"{name} is already a boot image; wrapping it again makes it unbootable",
                "write it raw (sha256Prefix false / --raw-at)",
            )
        if not r.prefix and r.address == self.boot and c.kind not in ("boot-image", "erased"):
            self.add(
                "error",
                "unbootable",
                f"{name} is written raw at the boot address {fmt_addr(self.boot)}: "
                f"the ROM boots only a wrapped image ({c.label})",
                "mark it as firmware (sha256Prefix true)",
            )
        if c.boot is not None and not c.boot.sha_valid and not r.prefix:
            self.add(
                "error",
                "bad-sha",
                f"{name} is a boot image with a wrong SHA-256: the ROM will refuse it",
                "rebuild or re-wrap the firmware",
            )
        if r.item.key is not None or (c.boot is not None and c.boot.aes and not r.prefix):
            self.add(
                "warning",
                "aes",
                f"{name} is AES-encrypted: it starts only on a chip whose OTP holds the key",
                "there is no public tool to program the OTP key",
            )
        if r.item.swap or r.item.reverse4:
            self.add(
                "info",
                "swap",
                f"{name}: 32-bit words reversed before writing (package key "
                f"{'swap' if r.item.swap else 'reverse4Bytes'}; kflash.py ignores it)",
            )

    def bounds(self, r: PlannedRegion) -> None:
        if r.end > self.plan.flash_size:
            self.add(
                "error",
                "past-end",
                f"{r.label} ({r.range_text}) ends past the end of the "
                f"{fmt_size(self.plan.flash_size)} flash of {self.plan.board.name}",
                "move it lower or choose the right --board",
            )
        if r.address % SECTOR and not r.resident:
            self.add(
                "warning",
                "unaligned",
                f"{r.label} at {fmt_addr(r.address)} is not 4 KiB aligned "
                "(kflash_gui and sipeed kflash.py refuse it)",
                f"use {fmt_addr(align_up(r.address))} or {fmt_addr(align_down(r.address))}",
            )

    def kmodel(self, r: PlannedRegion) -> None:
        sig, layout, loader = r.content.kmodel, self.plan.layout, r.item.loader
        if sig is None or sig.opaque:
            return
        if sig.version in (3, 4, 5):
            damage = self.damage.get(id(r.item.data), "")
            if id(r.item.data) not in self.damage:
                # the parsers (and NumPy) load only when a plan holds a kmodel, so that
                # importing the serial side stays light
                from ..model.dispatch import parse as parse_kmodel

                try:  # a truncated download or a damaged export fails on the board, not here
                    parse_kmodel(r.item.data, r.label, allow_swapped=True)
                except KflashError as e:
                    damage = e.message.removeprefix(r.label + ": ")
                self.damage[id(r.item.data)] = damage
            if damage:
                self.add(
                    "warning",
                    "kmodel-damaged",
                    f"{r.label} looks damaged: {damage}",
                    "copy or export the model again; `kflashpy model info` shows the details",
                )
        if layout and layout.kmodel_versions and sig.version not in layout.kmodel_versions:
            loads = "/".join(f"V{v}" for v in layout.kmodel_versions)
            self.add(
                "error",
                "kmodel-version",
                f"{r.label} is a kmodel V{sig.version}; {layout.name} loads {loads} only",
                "convert the model, or pick a firmware that loads it (kflashpy boards --firmwares)",
            )
        if loader == "kpu.load" and sig.swapped:
            self.add(
                "error",
                "kmodel-loader",
                f"{r.label} is word-swapped (for kpu.load_flash) but declared for kpu.load",
                "burn the plain model for kpu.load, or load it with kpu.load_flash",
            )
        elif loader == "load_flash" and not sig.swapped:
            self.add(
                "error",
                "kmodel-loader",
                f"{r.label} is a plain kmodel but declared for kpu.load_flash, which needs "
                "the word-swapped form",
                "convert it first: kflashpy model prep-flash (or use kpu.load)",
            )
        if loader == "load_flash" and layout and not layout.load_flash:
            self.add(
                "error",
                "kmodel-loader",
                f"{r.label} is declared for kpu.load_flash, which {layout.name} does not have",
                "use kpu.load, or a MaixPy firmware from 2020-08 or later",
            )

    # --- between items ----------------------------------------------------------------

    def overlaps(self, regions: list[PlannedRegion]) -> None:
        for ids, s, e in find_overlaps([(r.address, r.end) for r in regions]):
            group = sorted((regions[i] for i in ids), key=lambda r: (r.address, r.end))
            a, b = group[0], group[-1]
            if len(group) == 2:
                message = (
                    f"{a.label} ({a.range_text}) and {b.label} ({b.range_text}) overlap by "
                    f"{fmt_size(e - s)} at {_range(s, e)}"
                )
            else:
                message = f"{_some(group)} all at {a.range_text}: only one can be there"
            hint = f"move {b.label} to {fmt_addr(align_up(a.end))} or later"
            self.add("error", "overlap", message, hint, *group)
        for ids, s, e in find_overlaps([r.footprint for r in regions]):
            group = sorted((regions[i] for i in ids), key=lambda r: r.address)
            a, b = group[0], group[-1]
            if all(r.address == a.address and r.end == a.end for r in group) or (
                len(group) == 2 and a.end > b.address
            ):
                continue  # the same bytes: reported as an overlap
            shared = "one erase sector" if e - s == SECTOR else "the erase sectors"
            self.add(
                "warning",
                "shared-sector",
                f"{_some(group, ranges=True)} share {shared} {_range(s, e)}: "
                "writing one erases part of the other",
                f"start {b.label} at {fmt_addr(align_up(a.end))}",
                *group,
            )

    def reserved(self, r: PlannedRegion) -> None:
        if self.plan.layout is None:
            return
        for res in self.plan.layout.reserved_regions:
            if r.address >= res.end or r.end <= res.start:
                continue
            if r.address == res.start and r.end <= res.end and r.content.kind == "kmodel":
                self.add(
                    "warning",
                    "model-in-filesystem",
                    f"{r.label} is a model in the {res.name} region ({_range(res.start, res.end)}), "
                    "the firmware's file system: formatting it (or writing files) destroys the model",
                    f"place the model below {fmt_addr(res.start)}, or use a layout without "
                    f"{res.name}",
                )
            elif r.address == res.start and r.end <= res.end:
                self.add(
                    "info",
                    "replaces",
                    f"{r.label} replaces the {res.name} region ({_range(res.start, res.end)})",
                )
            else:
                self.add(
                    "error",
                    "reserved",
                    f"{r.label} ({r.range_text}) is inside the reserved {res.name} region "
                    f"({_range(res.start, res.end)}): {res.note}",
                    f"place it below {fmt_addr(res.start)}",
                )

    def headroom(self, regions: list[PlannedRegion]) -> None:
        layout = self.plan.layout
        fw = next((r for r in regions if _boots(r, self.boot)), None)
        if fw is None:
            self.typical_firmware(regions)
            return
        starts = [r.address for r in regions if r is not fw and r.address > fw.address]
        if layout:
            starts += [res.start for res in layout.reserved_regions if res.start > fw.address]
        limit = min(starts, default=self.plan.flash_size)
        room = align_down(limit) - fw.end
        if room < 0:
            return  # already reported as an overlap
        what = (
            "the end of flash" if limit == self.plan.flash_size and not starts else fmt_addr(limit)
        )
        text = (
            f"firmware {fw.label} takes {fw.range_text}; it can grow {fmt_size(room)} before {what}"
        )
        if room < self.min_headroom:
            hint = "a bigger firmware build would overwrite the next region"
            self.add("warning", "headroom", text, hint, fw)
        else:
            self.add("info", "headroom", text, "", fw)
        if layout and layout.max_size and len(fw.item.data) > layout.max_size:
            self.add(
                "warning",
                "firmware-size",
                f"{fw.label} ({fmt_size(len(fw.item.data))}) is bigger than {layout.name} "
                f"usually is (up to {fmt_size(layout.max_size)})",
                "is --layout right?",
                fw,
            )

    def typical_firmware(self, regions: list[PlannedRegion]) -> None:
        layout = self.plan.layout
        if layout is None or not layout.typical_size:
            return
        end = self.boot + wrapped_size(layout.typical_size)
        for r in regions:
            if self.boot < r.address < end:
                self.add(
                    "warning",
                    "typical-firmware",
                    f"{r.label} at {fmt_addr(r.address)} is inside the space a typical {layout.name} "
                    f"firmware occupies (about {fmt_size(layout.typical_size)}, up to {fmt_addr(end)})",
                    "pass --firmware FILE to check against the real firmware size",
                    r,
                )


def _resolve_board(board: Board | str | None) -> Board:
    return board if isinstance(board, Board) else get_board(board)


def _resolve_layout(layout: Firmware | str | None) -> Firmware | None:
    if layout is None or isinstance(layout, Firmware):
        return layout
    return get_firmware(layout)


def plan_flash(
    items: Iterable[FlashItem],
    *,
    board: Board | str | None = None,
    layout: Firmware | str | None = None,
    firmware: FlashItem | None = None,
    min_headroom: int = DEFAULT_MIN_HEADROOM,
) -> FlashPlan:
    """Check a set of flash items against a board and a firmware layout.

    ``firmware``: a firmware that is (or stays) on the board but is not part of this
    burn, e.g. from ``--firmware FILE``: it takes part in the checks, not in the writes.
    Never raises for layout problems: they are findings (see
    :meth:`FlashPlan.raise_on_errors`).
    """
    items = list(items)
    b = _resolve_board(board)
    lay = _resolve_layout(layout)
    fw_region = lay.firmware_region if lay else None
    boot = fw_region.start if fw_region else BOOT_ADDRESS
    plan = FlashPlan([], [], b, lay, b.flash_size)
    memo: dict[tuple, tuple[ContentInfo, bool, bytes]] = {}
    for item in items:
        if item.loader is not None and item.loader not in LOADERS:
            raise InputError(
                f"{item.label}: unknown loader {item.loader!r}", f"use one of {LOADERS}"
            )
        plan.regions.append(_region(item, boot, memo))
    checker = _Checker(plan, boot, min_headroom)
    if firmware is not None:
        if any(_boots(r, boot) for r in plan.regions):
            checker.add(
                "info", "firmware-ignored", f"{firmware.name}: the burn includes a firmware"
            )
        else:
            plan.regions.append(_region(firmware, boot, memo, resident=True))
    for r in plan.regions:
        checker.subject = r
        checker.content(r)
        checker.bounds(r)
        checker.kmodel(r)
        if not r.resident:
            checker.reserved(r)
    checker.subject = None
    checker.overlaps(plan.regions)
    checker.headroom(plan.regions)
    order = {"error": 0, "warning": 1, "info": 2}
    plan.findings.sort(key=lambda f: order[f.severity])
    return plan
