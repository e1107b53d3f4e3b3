"""The flash map: a checked :class:`~kflashpy.image.plan.FlashPlan` drawn as an SVG picture.

The whole flash of the board (16 MiB on most K210 boards) is one horizontal bar. Each
region the plan writes is a box at its address, coloured by content kind and outlined
by its worst finding (red: error, orange: warning); regions that overlap go on separate
lanes so both stay visible. The firmware layout's reserved areas (MaixPy's SPIFFS) are
hatched across all lanes, free space is shown as such, and every collision (bytes two
regions share, a region inside a reserved area, a shared 4 KiB erase sector) is a red or
orange mark on the collision band under the bar. When everything written fits in a
quarter of the flash, a magnified bar under the first shows that span, so a 64 KiB
region and its collisions are visible too; a legend lists every region with its range.

``check-layout --svg FILE`` writes it; the web station (:mod:`kflashpy.web`) shows it.
Every element carries ``class`` and ``data-*`` attributes (``region``, ``reserved``,
``free``, ``collision``) so tests and scripts can read the picture without pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from ..units import fmt_addr
from .plan import FlashPlan, PlannedRegion, find_overlaps

__all__ = ["flash_map_svg", "region_status"]

WIDTH = 960
MARGIN = 20
LANE_HEIGHT = 34
MIN_BOX = 3  # px: a 4 KiB region on a 16 MiB map is a quarter of a pixel wide
DETAIL_STEP = 64 * 1024

#: fill per content kind (``ContentInfo.kind``); anything else is "other"
_KIND_FILL = {
    "firmware": "#4e79a7",
    "boot-image": "#4e79a7",
    "kmodel": "#59a14f",
    "data": "#b07aa1",
    "other": "#9c755f",
}
_STATUS_STROKE = {"error": "#d62728", "warning": "#ff7f0e", "ok": "#333333"}
_RANK = {"ok": 0, "warning": 1, "error": 2}


def region_status(plan: FlashPlan) -> dict[str, str]:
    """Worst finding per region label: ``"error"``, ``"warning"`` or ``"ok"``."""
    status: dict[str, str] = {}
    for f in plan.findings:
        sev = f.severity if f.severity in _RANK else "ok"
        for label in f.subjects:
            if _RANK[sev] > _RANK[status.get(label, "ok")]:
                status[label] = sev
    return status


def _mib(n: int) -> str:
    v = n / (1 << 20)
    if v >= 1:
        return f"{v:.2f}".rstrip("0").rstrip(".") + " MiB"
    return f"{n / 1024:.1f}".rstrip("0").rstrip(".") + " KiB"


def _lanes(regions: list[PlannedRegion]) -> list[int]:
    """Greedy interval partitioning: lane index per region (overlapping ones differ)."""
    ends: list[int] = []
    out = []
    for r in regions:
        for lane, end in enumerate(ends):
            if end <= r.address:
                ends[lane] = r.end
                out.append(lane)
                break
        else:
            ends.append(r.end)
            out.append(len(ends) - 1)
    return out


def _collisions(plan: FlashPlan, regions: list[PlannedRegion]) -> list[tuple[int, int, str, str]]:
    """``(start, end, severity, text)`` for every collision to mark on the band."""
    marks = []

    def names(ids: tuple[int, ...]) -> str:
        labels = [regions[i].label for i in ids]
        return " and ".join(labels) if len(labels) == 2 else f"{len(labels)} files"

    for ids, s, e in find_overlaps([(r.address, r.end) for r in regions]):
        marks.append((s, e, "error", f"{names(ids)} overlap"))
    for ids, s, e in find_overlaps([r.footprint for r in regions]):
        a, b = (
            min(ids, key=lambda i: regions[i].address),
            max(ids, key=lambda i: regions[i].address),
        )
        same = len({(regions[i].address, regions[i].end) for i in ids}) == 1
        if not same and not (len(ids) == 2 and regions[a].end > regions[b].address):
            marks.append((s, e, "warning", f"{names(ids)} share an erase sector"))  # else: overlap
    for res in plan.layout.reserved_regions if plan.layout else ():
        for r in regions:
            inside = max(r.address, res.start), min(r.end, res.end)
            replaces = r.address == res.start and r.end <= res.end
            if inside[0] < inside[1] and not r.resident and not replaces:
                marks.append((*inside, "error", f"{r.label} is inside reserved {res.name}"))
    for r in regions:
        if r.end > plan.flash_size:
            marks.append(
                (max(r.address, plan.flash_size), r.end, "error", f"{r.label} ends past the flash")
            )
    return marks


def _free(plan: FlashPlan, regions: list[PlannedRegion]) -> list[tuple[int, int]]:
    taken = sorted(
        [(r.address, r.end) for r in regions]
        + [(res.start, res.end) for res in (plan.layout.reserved_regions if plan.layout else ())]
    )
    gaps, cursor = [], 0
    for s, e in taken:
        if s > cursor:
            gaps.append((cursor, min(s, plan.flash_size)))
        cursor = max(cursor, e)
    if cursor < plan.flash_size:
        gaps.append((cursor, plan.flash_size))
    return [(s, e) for s, e in gaps if e > s]


@dataclass
class _Bar:
    """One drawn bar: the address window ``[lo, hi)`` mapped onto the picture's width."""

    lo: int
    hi: int
    top: int
    height: int
    #: the main bar carries the class/data attributes; the magnified one is a picture only
    semantic: bool

    def x(self, addr: int) -> float:
        return MARGIN + (min(max(addr, self.lo), self.hi) - self.lo) * WIDTH / (self.hi - self.lo)

    def w(self, start: int, end: int) -> float:
        return max(MIN_BOX, self.x(end) - self.x(start))

    def attrs(self, cls: str, **data: object) -> str:
        if not self.semantic:
            return ""
        return f'class="{cls}" ' + "".join(
            f"data-{k.replace('_', '-')}={quoteattr(str(v))} " for k, v in data.items()
        )


def _draw_bar(out: list[str], plan: FlashPlan, regions: list[PlannedRegion], bar: _Bar) -> int:
    """Free space, reserved areas, regions (one lane each) and collision marks; returns
    the y of the collision band's bottom."""
    lanes = _lanes(regions)
    status = region_status(plan)
    top, bar_h = bar.top, bar.height
    visible = [(s, e) for s, e in _free(plan, regions) if e > bar.lo and s < bar.hi]
    for s, e in visible:
        x, w = bar.x(s), bar.w(s, e)
        out.append(
            f'<rect {bar.attrs("free", start=s, end=e)}x="{x:.1f}" y="{top}" width="{w:.1f}" '
            f'height="{bar_h}" fill="#f7f7f2" stroke="#cccccc">'
            f"<title>free {fmt_addr(s)}-{fmt_addr(e - 1)} ({_mib(e - s)})</title></rect>"
        )
        if w > 70:
            out.append(
                f'<text x="{x + 4:.1f}" y="{top + 14}" fill="#888888">free {_mib(e - s)}</text>'
            )
    for res in plan.layout.reserved_regions if plan.layout else ():
        if res.end <= bar.lo or res.start >= bar.hi:
            continue
        out.append(
            f"<g {bar.attrs('reserved', name=res.name, start=res.start, end=res.end)}>"
            f'<rect x="{bar.x(res.start):.1f}" y="{top}" width="{bar.w(res.start, res.end):.1f}" '
            f'height="{bar_h}" fill="url(#hatch)" stroke="#777777"><title>reserved '
            f"{escape(res.name)} {fmt_addr(res.start)}-{fmt_addr(res.end - 1)}: "
            f"{escape(res.note)}</title></rect>"
            f'<text x="{bar.x(res.start) + 4:.1f}" y="{top + bar_h - 6}" fill="#444444">'
            f"{escape(res.name)} (reserved)</text></g>"
        )
    for r, lane in zip(regions, lanes, strict=True):
        if r.end <= bar.lo or r.address >= bar.hi:
            continue
        st = status.get(r.label, "ok")
        fill = _KIND_FILL.get(r.content.kind, _KIND_FILL["other"])
        y = top + lane * LANE_HEIGHT + 3
        bw = bar.w(r.address, r.end)
        short = r.label.replace("\\", "/").rsplit("/", 1)[-1]
        label = escape(short) if bw > 7 * len(short) else ""
        data = bar.attrs("region", name=r.label, start=r.address, end=r.end, status=st,
                         kind=r.content.kind)  # fmt: skip
        out.append(
            f'<g {data}><rect x="{bar.x(r.address):.1f}" y="{y}" width="{bw:.1f}" '
            f'height="{LANE_HEIGHT - 6}" fill="{fill}" '
            f'fill-opacity="{0.45 if r.resident else 0.85}" stroke="{_STATUS_STROKE[st]}" '
            f'stroke-width="{3 if st != "ok" else 1}"><title>{escape(r.label)} '
            f"{escape(r.range_text)} ({_mib(r.size)}, {escape(r.content.label)}): {st}</title>"
            "</rect>"
            + (
                f'<text x="{bar.x(r.address) + 4:.1f}" y="{y + 18}" fill="#ffffff">{label}</text>'
                if label
                else ""
            )
            + "</g>"
        )
    band_y = top + bar_h + 6
    out.append(
        f'<rect x="{MARGIN}" y="{band_y}" width="{WIDTH}" height="8" fill="#fafafa" '
        'stroke="#dddddd"/>'
    )
    for s, e, sev, text in _collisions(plan, regions):
        if e <= bar.lo or s >= bar.hi:
            continue
        out.append(
            f"<rect {bar.attrs('collision', severity=sev, start=s, end=e)}"
            f'x="{bar.x(s) - 2:.1f}" y="{top - 2}" width="{bar.w(s, e) + 4:.1f}" '
            f'height="{band_y + 8 - top + 4}" fill="{_STATUS_STROKE[sev]}" fill-opacity="0.25" '
            f'stroke="{_STATUS_STROKE[sev]}" stroke-width="2" stroke-dasharray="4 2">'
            f"<title>{escape(text)} at {fmt_addr(s)}-{fmt_addr(e - 1)}</title></rect>"
        )
    return band_y + 8


def _detail_window(plan: FlashPlan, regions: list[PlannedRegion]) -> tuple[int, int] | None:
    """The span the regions use, on 64 KiB bounds, when it is small enough to magnify."""
    if not regions:
        return None
    lo = min(r.address for r in regions) // DETAIL_STEP * DETAIL_STEP
    hi = -(-max(r.end for r in regions) // DETAIL_STEP) * DETAIL_STEP
    hi = min(hi, plan.flash_size) if lo < plan.flash_size else hi
    return (lo, hi) if hi > lo and (hi - lo) * 4 <= plan.flash_size else None


def flash_map_svg(plan: FlashPlan, *, title: str | None = None) -> str:
    """The plan's flash map as a standalone SVG document (a ``str``).

    When everything written fits in a quarter of the flash, a second, magnified bar
    shows that span (64 KiB bounds), so small regions and their collisions are visible.
    """
    size = plan.flash_size
    regions = sorted(plan.regions, key=lambda r: (r.address, r.end))
    n_lanes = max(_lanes(regions), default=0) + 1
    reserved = plan.layout.reserved_regions if plan.layout else ()
    bar_h = n_lanes * LANE_HEIGHT
    main = _Bar(0, size, 44, bar_h, semantic=True)
    errors, warnings = len(plan.errors), len(plan.warnings)
    head = title or (
        f"Flash map: {plan.board.name}, {_mib(size)}"
        + (f", layout {plan.layout.name}" if plan.layout else "")
    )
    verdict = (
        "no collision" if plan.ok and not warnings else f"{errors} error(s), {warnings} warning(s)"
    )
    body: list[str] = [
        f'<text x="{MARGIN}" y="18" font-size="14" font-weight="bold">{escape(head)}</text>',
        f'<text x="{MARGIN}" y="34" class="verdict" '
        f'fill="{_STATUS_STROKE["error" if errors else "warning" if warnings else "ok"]}">'
        f"{escape(verdict)}</text>",
    ]
    axis_y = _draw_bar(body, plan, regions, main) + 8
    for mib in range(0, size // (1 << 20) + 1, 2 if size > (8 << 20) else 1):
        ax = main.x(mib << 20)
        body.append(
            f'<line x1="{ax:.1f}" y1="{axis_y - 4}" x2="{ax:.1f}" y2="{axis_y}" stroke="#666666"/>'
            f'<text x="{ax:.1f}" y="{axis_y + 11}" text-anchor="middle" fill="#666666">'
            f"{mib}M</text>"
        )
    y = axis_y + 30
    window = _detail_window(plan, regions)
    if window is not None:
        lo, hi = window
        detail = _Bar(lo, hi, y + 20, bar_h, semantic=False)
        body.append(
            f'<g class="detail" data-start="{lo}" data-end="{hi}">'
            f'<text x="{MARGIN}" y="{y + 10}" fill="#444444">magnified: '
            f"{fmt_addr(lo)}-{fmt_addr(hi - 1)} ({_mib(hi - lo)})</text>"
            f'<path d="M{main.x(lo):.1f},{main.top + bar_h} L{MARGIN},{detail.top} '
            f'M{main.x(hi):.1f},{main.top + bar_h} L{MARGIN + WIDTH},{detail.top}" '
            'stroke="#aaaaaa" stroke-dasharray="3 3" fill="none"/>'
        )
        bottom = _draw_bar(body, plan, regions, detail)
        for addr, anchor in ((lo, "start"), (hi, "end")):
            body.append(
                f'<text x="{detail.x(addr):.1f}" y="{bottom + 12}" text-anchor="{anchor}" '
                f'fill="#666666">{fmt_addr(addr)}</text>'
            )
        body.append("</g>")
        y = bottom + 40
    status = region_status(plan)
    for r in regions:
        st = status.get(r.label, "ok")
        fill = _KIND_FILL.get(r.content.kind, _KIND_FILL["other"])
        where = " (on board)" if r.resident else ""
        body.append(
            f'<rect x="{MARGIN}" y="{y - 9}" width="10" height="10" fill="{fill}" '
            f'stroke="{_STATUS_STROKE[st]}" stroke-width="2"/>'
            f'<text class="legend" x="{MARGIN + 16}" y="{y}" fill="{_STATUS_STROKE[st]}">'
            f"{escape(r.range_text)}  {_mib(r.size):>10}  {escape(r.label)}{where}  "
            f"[{escape(r.content.label)}]  {st}</text>"
        )
        y += 18
    for res in reserved:
        body.append(
            f'<rect x="{MARGIN}" y="{y - 9}" width="10" height="10" fill="url(#hatch)" '
            f'stroke="#777777"/><text class="legend" x="{MARGIN + 16}" y="{y}" fill="#444444">'
            f"{fmt_addr(res.start)}-{fmt_addr(res.end - 1)}  {_mib(res.size):>10}  "
            f"[{escape(res.name)}] reserved {escape(res.kind)}</text>"
        )
        y += 18
    height, total_w = y + 10, WIDTH + 2 * MARGIN
    head_svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="flash-map" width="{total_w}" '
        f'height="{height}" viewBox="0 0 {total_w} {height}" font-family="sans-serif" '
        f'font-size="11" data-flash-size="{size}" data-ok="{str(plan.ok).lower()}">'
        "<defs>"
        '<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#eeeeee"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#999999" stroke-width="2"/></pattern>'
        "</defs>"
    )
    return "\n".join([head_svg, *body, "</svg>"])
