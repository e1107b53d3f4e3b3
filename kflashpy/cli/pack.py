"""``pack``, ``unpack``, ``info``: kfpkg packages."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..units import fmt_addr
from .layout import build_items, exact_size, parse_specs, plan_options, render_plan
from .session import Session

if TYPE_CHECKING:  # the library is imported by the commands, not at start-up
    from ..image.kfpkg import Kfpkg
from .types import ADDRESS


def _package_notes(s: Session, pkg: Kfpkg) -> None:
    """A package's quirks: warnings, but the Kendryte SDK's hex addresses only with -v."""
    from ..image.kfpkg import HEX_LITERALS

    for w in pkg.warnings:
        if w.endswith(HEX_LITERALS):
            s.debug(w)
        else:
            s.warn(w)


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


@click.command("pack")
@click.argument("pairs", nargs=-1, required=True, metavar="ADDR FILE [ADDR FILE]...")
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="The .kfpkg to write."
)
@plan_options
@click.option(
    "--force", is_flag=True, help="Write the package even when the layout check finds errors."
)
@click.pass_obj
def pack_cmd(s: Session, pairs, output, layout, force, **marks) -> None:
    """Pack files into a kfpkg that kflash.py, kflash_gui and K-Flash all read.

    Each file is marked as firmware (sha256Prefix: wrapped into a boot image when
    burned) or raw: raw firmware, and raw data at address 0, are marked as firmware;
    everything else is raw. --prefix-at/--raw-at override the choice per address.
    The layout is checked first (as check-layout does); errors stop the packing.
    Existing packages can be given too: their files are repacked.

    Example: kflashpy pack -o app.kfpkg 0 maixpy.bin 0x300000 model.kmodel
    """
    from ..image.api import pack

    items = build_items(parse_specs(pairs), **marks)
    plan = pack(output, items, board=s.board, layout=layout, force=force)
    s.result = {"output": output, "plan": plan.to_dict()}
    render_plan(s, plan)
    s.out(f"wrote {output} ({_files(len(plan.writes))})")


@click.command("unpack")
@click.argument("package", type=click.Path(dir_okay=False))
@click.option(
    "-d",
    "--directory",
    "outdir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory to extract into.",
)
@click.option("--force", is_flag=True, help="Overwrite existing files.")
@click.pass_obj
def unpack_cmd(s: Session, package, outdir, force) -> None:
    """Extract a kfpkg's files and flash-list.json into a directory (never outside it)."""
    from ..image.api import unpack

    pkg = unpack(package, outdir, force=force)
    _package_notes(s, pkg)
    s.out(
        f"extracted {_files(len({e.name for e in pkg.entries}))} and flash-list.json into {outdir}"
    )
    s.result = {"directory": outdir, "package": pkg.to_dict()}


@click.command("info")
@click.argument("package", type=click.Path(dir_okay=False))
@click.pass_obj
def info_cmd(s: Session, package) -> None:
    """List a kfpkg's files: address, size, firmware mark, per-producer quirks."""
    from ..image.kfpkg import read_kfpkg

    pkg = read_kfpkg(package)
    _package_notes(s, pkg)
    version = "(none)" if pkg.version is None else repr(pkg.version)
    s.out(f"{package}: version {version}, {_files(len(pkg.entries))}")
    s.table(
        ("address", "size", "sha256Prefix", "file", "notes"),
        [
            (
                fmt_addr(e.address),
                exact_size(len(e.data)),
                "yes" if e.sha256_prefix else "no",
                e.name,
                ", ".join(n for n, on in (("swap", e.swap), ("reverse4Bytes", e.reverse4)) if on),
            )
            for e in pkg.entries
        ],
    )
    s.result = pkg.to_dict()


@click.command("merge")
@click.argument("specs", nargs=-1, required=True, metavar="[ADDR FILE | PKG.kfpkg]...")
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="The image to write."
)
@click.option(
    "--fill-to",
    type=ADDRESS,
    metavar="SIZE",
    help="Pad with 0xFF up to SIZE (e.g. 16M: a whole-flash image). Default: the last byte.",
)
@plan_options
@click.option("--force", is_flag=True, help="Write the image even when the layout check fails.")
@click.pass_obj
def merge_cmd(s: Session, specs, output, fill_to, layout, force, **marks) -> None:
    """Write one flat flash image from ADDR FILE pairs or a kfpkg (esptool's merge_bin).

    Each file is placed as burn writes it (a raw firmware at 0 as its boot image), the
    gaps are 0xFF (erased flash). For factory programmers, which write one file from
    address 0, and for the virtual board: -p "sim://?flash=IMAGE".

    Example: kflashpy merge -o flash.bin --fill-to 16M 0 maixpy.bin 0x300000 model.kmodel
    """
    from ..image.api import merge

    items = build_items(parse_specs(specs), **marks)
    plan, image = merge(output, items, board=s.board, layout=layout, fill_to=fill_to, force=force)
    render_plan(s, plan)
    s.out(f"wrote {output}: {exact_size(len(image))} from 0x00000000 ({_files(len(plan.writes))})")
    s.result = {"output": output, "size": len(image), "plan": plan.to_dict()}


def register(group: click.Group) -> None:
    group.add_command(pack_cmd)
    group.add_command(merge_cmd)
    group.add_command(unpack_cmd)
    group.add_command(info_cmd)
