"""``check-layout`` and ``boards``: what a burn would do to the flash, and the known boards."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import click

from ..errors import InputError
from ..units import fmt_addr, fmt_size, parse_int
from .session import Session, short_label

if TYPE_CHECKING:  # the library is imported by the commands, not at start-up
    from ..image.plan import FlashItem, FlashPlan
from .types import ADDRESS

_MARK = {"error": "ERROR", "warning": "warn", "ok": "ok"}


def exact_size(n: int) -> str:
    """``1,572,901 B`` (table cells: exact, no approximation)."""
    return f"{n:,} B"


def short_size(n: int) -> str:
    """``1.50 MiB`` (table cells: approximate)."""
    return fmt_size(n).split(" (")[-1].rstrip(")")


def _default_headroom() -> int:
    from ..image.plan import DEFAULT_MIN_HEADROOM  # the library: not imported at start-up

    return DEFAULT_MIN_HEADROOM


def parse_specs(args: tuple[str, ...]) -> list[tuple[int, str] | str]:
    """``ADDR FILE`` pairs and package paths, in order (a package needs no address)."""
    from ..image.api import is_package

    specs: list[tuple[int, str] | str] = []
    i = 0
    while i < len(args):
        token = args[i]
        try:
            address = parse_int(token, "address")
        except InputError:
            if not is_package(token):
                raise InputError(
                    f"{token!r} is neither an address nor a .kfpkg package",
                    "give ADDR FILE pairs (0x300000 model.kmodel) and/or package files",
                ) from None
            specs.append(token)
            i += 1
            continue
        if i + 1 >= len(args):
            raise InputError(f"address {token} has no file after it", "give ADDR FILE pairs")
        specs.append((address, args[i + 1]))
        i += 2
    if not specs:
        raise InputError("nothing to check", "give ADDR FILE pairs and/or .kfpkg files")
    return specs


def build_items(
    specs: list[tuple[int, str] | str],
    *,
    prefix_at: tuple[int, ...] = (),
    raw_at: tuple[int, ...] = (),
    kpu_load: tuple[int, ...] = (),
    load_flash: tuple[int, ...] = (),
    dio: bool = True,
) -> list[FlashItem]:
    """Items from specs, with the per-address options applied."""
    from ..image.kfpkg import read_kfpkg
    from ..image.plan import FlashItem, items_from_kfpkg

    both = set(prefix_at) & set(raw_at) or set(kpu_load) & set(load_flash)
    if both:
        raise InputError(
            f"contradicting options for address {fmt_addr(min(both))}",
            "give --prefix-at or --raw-at, --kpu-load or --load-flash, not both for one address",
        )
    items: list[FlashItem] = []
    for spec in specs:
        if isinstance(spec, tuple):
            items.append(FlashItem.from_file(*spec, dio=dio))
        else:
            items += items_from_kfpkg(read_kfpkg(spec), dio=dio)
    for item in items:
        if item.address in prefix_at:
            item.prefix = True
        elif item.address in raw_at:
            item.prefix = False
        if item.address in kpu_load:
            item.loader = "kpu.load"
        elif item.address in load_flash:
            item.loader = "load_flash"
    known = {it.address for it in items}
    for opt, addrs in (
        ("--prefix-at", prefix_at),
        ("--raw-at", raw_at),
        ("--kpu-load", kpu_load),
        ("--load-flash", load_flash),
    ):
        for a in addrs:
            if a not in known:
                raise InputError(
                    f"{opt} {fmt_addr(a)}: no file at that address",
                    "give the address of one of the ADDR FILE pairs: "
                    + ", ".join(fmt_addr(k) for k in sorted(known)),
                )
    return items


def render_plan(s: Session, plan: FlashPlan) -> None:
    """The region table and the findings, on stdout."""
    from ..image.flashmap import region_status

    status = {label: _MARK[st] for label, st in region_status(plan).items()}
    rows = []
    for r in sorted(plan.regions, key=lambda r: (r.address, r.end)):
        fs, fe = r.footprint
        kind = r.content.label + (" -> boot image" if r.prefix else "")
        rows.append(
            (
                fmt_addr(r.address),
                exact_size(r.size),
                exact_size(fe - fs),
                short_label(r.label) + (" (on board)" if r.resident else ""),
                status.get(r.label, "ok"),
                kind,
            )
        )
    if plan.layout:
        for res in plan.layout.reserved_regions:
            rows.append(
                (
                    fmt_addr(res.start),
                    exact_size(res.size),
                    "",
                    f"[{res.name}]",
                    "",
                    f"reserved: {res.kind}",
                )
            )
    s.table(("address", "size", "footprint", "file", "status", "content"), rows)
    # warnings also go into the --json envelope's "warnings" (errors become its "error")
    s.warnings += [f.message for f in plan.findings if f.severity == "warning"]
    for f in plan.findings:
        colour = {"error": "red", "warning": "yellow", "info": "green"}[f.severity]
        lines = [s.style(f"{f.severity}:", fg=colour) + f" {f.message}"]
        if f.hint and f.severity != "info":
            lines.append(f"  hint: {f.hint}")
        for line in lines:  # errors on stderr, even with -q (main then adds no copy)
            if f.severity != "error":
                s.out(line)
            elif not s.json:
                s.echo(line, err=True)
    s.error_shown = bool(plan.errors) and not s.json


def plan_options(f):
    """Options shared by check-layout, pack and merge: --layout, and the per-address
    marks (``prefix_at``, ``raw_at``, ``kpu_load``, ``load_flash``) for :func:`build_items`."""
    for opt in reversed(
        [
            click.option(
                "--layout",
                help="Firmware layout (maixpy, maixpy-minimum, kboot, sdk...) or a .toml file.",
            ),
            click.option(
                "--prefix-at",
                multiple=True,
                type=ADDRESS,
                metavar="ADDR",
                help="Wrap the file at ADDR as firmware (sha256Prefix true).",
            ),
            click.option(
                "--raw-at",
                multiple=True,
                type=ADDRESS,
                metavar="ADDR",
                help="Write the file at ADDR raw (sha256Prefix false).",
            ),
            click.option(
                "--kpu-load",
                multiple=True,
                type=ADDRESS,
                metavar="ADDR",
                help="The model at ADDR is loaded with kpu.load (plain form).",
            ),
            click.option(
                "--load-flash",
                multiple=True,
                type=ADDRESS,
                metavar="ADDR",
                help="The model at ADDR is loaded with kpu.load_flash (word-swapped form).",
            ),
        ]
    ):
        f = opt(f)
    return f


@click.command("check-layout")
@click.argument("specs", nargs=-1, required=True, metavar="[ADDR FILE | PKG.kfpkg]...")
@plan_options
@click.option(
    "--firmware",
    "firmware_file",
    type=click.Path(dir_okay=False),
    help="The firmware on the board (its real size is checked).",
)
@click.option(
    "--min-headroom",
    type=ADDRESS,
    metavar="SIZE",
    default=lambda: _default_headroom(),
    help="Warn when the firmware can grow less than this (default: the checker's margin).",
)
@click.option("--force", is_flag=True, help="Exit 0 even when there are errors.")
@click.option(
    "--svg",
    "svg_file",
    type=click.Path(dir_okay=False),
    help="Also write the flash map (regions, reserved areas, free space, collisions) as SVG.",
)
@click.pass_obj
def check_layout_cmd(
    s: Session, specs, layout, firmware_file, min_headroom, force, svg_file, **marks
) -> None:
    """Check what burning the given files would do to the flash, before burning.

    For each file: its range, the bytes really written (boot-image wrapper and AES
    padding included), its footprint in 4 KiB erase sectors and the content kind read
    from its bytes. Findings: overlaps (naming both files and ranges), shared erase
    sectors, past the end of flash, unaligned addresses, reserved regions (SPIFFS),
    firmware growth room, kmodel versions and forms the firmware cannot load.
    Exit 2 when there is an error.

    Example: kflashpy check-layout 0 maixpy.bin 0x300000 model.kmodel --layout maixpy
    """
    from ..image.plan import FlashItem, plan_flash

    items = build_items(parse_specs(specs), **marks)
    resident = FlashItem.from_file(0, firmware_file) if firmware_file else None
    plan = plan_flash(
        items,
        board=s.board,
        layout=layout,
        firmware=resident,
        min_headroom=min_headroom,
    )
    s.result = plan.to_dict()
    render_plan(s, plan)
    if svg_file:
        from ..fileio import write_atomic
        from ..image.flashmap import flash_map_svg

        s.result["svg"] = str(write_atomic(svg_file, flash_map_svg(plan).encode()))
        s.out(f"flash map written to {svg_file}")
    plan.raise_on_errors(force)


@click.command("boards")
@click.option("--firmwares", is_flag=True, help="List firmware layouts instead of boards.")
@click.pass_obj
def boards_cmd(s: Session, firmwares: bool) -> None:
    """List board profiles (for -B/--board) or firmware layouts (for --layout)."""
    from ..target.boards import load_boards, load_firmwares

    if firmwares:
        fws = load_firmwares()
        s.table(
            ("id", "kmodels", "typical size", "name; reserved regions"),
            [
                (
                    f.id,
                    "/".join(f"V{v}" for v in f.kmodel_versions) or "-",
                    short_size(f.typical_size),
                    "; ".join(
                        [f.name, *(f"{r.name}@{fmt_addr(r.start)}" for r in f.reserved_regions)]
                    ),
                )
                for f in fws.values()
            ],
        )
        s.result = {"firmwares": {f.id: asdict(f) for f in fws.values()}}
        return
    boards = load_boards()
    s.table(
        ("id", "flash", "reset", "max baud", "name (aliases)"),
        [
            (
                b.id,
                short_size(b.flash_size),
                b.wiring.name if b.wiring else "auto",
                b.max_baud,
                b.name + (f" ({', '.join(b.aliases)})" if b.aliases else ""),
            )
            for b in boards.values()
        ],
    )
    s.result = {"boards": {b.id: asdict(b) for b in boards.values()}}


def register(group: click.Group) -> None:
    group.add_command(check_layout_cmd)
    group.add_command(boards_cmd)
