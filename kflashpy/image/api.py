"""File-level entry points shared by the CLI and scripts: pack, unpack, check, inspect."""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import InputError
from ..fileio import write_atomic
from ..target.boards import Board, Firmware
from .content import ContentInfo, detect_content
from .flatten import flatten
from .kfpkg import Kfpkg, KfpkgEntry, read_kfpkg, unpack_kfpkg, write_kfpkg
from .plan import DEFAULT_MIN_HEADROOM, FlashItem, FlashPlan, items_from_kfpkg, plan_flash

__all__ = ["check_layout", "image_info", "is_package", "load_items", "pack", "unpack"]

PathLike = str | os.PathLike[str]
#: ``(address, file)`` to place a file, or a path alone for a kfpkg
Spec = tuple[int, PathLike] | PathLike


def image_info(source: PathLike | bytes, name: str | None = None) -> ContentInfo:
    """What a file (or bytes) is: see :func:`kflashpy.image.content.detect_content`."""
    if isinstance(source, bytes):
        return detect_content(source, name)
    try:
        data = Path(source).read_bytes()
    except OSError as e:
        raise InputError(f"{source}: cannot read: {e.strerror or e}", "check the path") from None
    return detect_content(data, name or os.fspath(source))


def load_items(specs: Iterable[Spec], **item_options) -> list[FlashItem]:
    """Flash items from ``(address, path)`` pairs and kfpkg paths, in the order given."""
    items: list[FlashItem] = []
    for spec in specs:
        if isinstance(spec, tuple):
            address, path = spec
            items.append(FlashItem.from_file(address, path, **item_options))
        else:
            items += items_from_kfpkg(read_kfpkg(spec))
    return items


def check_layout(
    specs: Iterable[Spec],
    *,
    board: Board | str | None = None,
    layout: Firmware | str | None = None,
    firmware: PathLike | None = None,
    min_headroom: int = DEFAULT_MIN_HEADROOM,
) -> FlashPlan:
    """Plan and check ``specs`` (see :func:`plan_flash`); ``firmware`` is a file already on
    the board (its real size is used for the collision checks)."""
    resident = FlashItem.from_file(0, firmware) if firmware is not None else None
    return plan_flash(
        load_items(specs), board=board, layout=layout, firmware=resident, min_headroom=min_headroom
    )


def pack(
    output: PathLike,
    items: Sequence[FlashItem | Spec],
    *,
    board: Board | str | None = None,
    layout: Firmware | str | None = None,
    force: bool = False,
) -> FlashPlan:
    """Check ``items`` (flash items, ``(address, path)`` pairs or package paths) and
    write them as a portable kfpkg at ``output``.

    The per-file firmware mark (``sha256Prefix``) is each item's ``prefix``, or decided
    from the content when ``None`` (see :class:`FlashItem`). Layout errors raise
    :class:`~kflashpy.errors.LayoutError` unless ``force``; nothing is written then.
    """
    resolved: list[FlashItem] = []
    for it in items:
        resolved += [it] if isinstance(it, FlashItem) else load_items([it])
    plan = plan_flash(resolved, board=board, layout=layout)
    plan.raise_on_errors(force)
    if any(r.item.key is not None for r in plan.writes):
        raise InputError(
            "a kfpkg cannot carry encrypted firmware (its readers never apply a key)",
            "burn the encrypted image directly",
        )
    entries = [
        KfpkgEntry(
            r.address, Path(r.item.name).name, r.prefix, r.item.data, r.item.swap, r.item.reverse4
        )
        for r in plan.writes
    ]
    write_kfpkg(output, entries)
    return plan


def merge(
    output: PathLike | None,
    items: Sequence[FlashItem | Spec],
    *,
    board: Board | str | None = None,
    layout: Firmware | str | None = None,
    fill_to: int | None = None,
    force: bool = False,
) -> tuple[FlashPlan, bytes]:
    """Check ``items`` and lay them out as one flat flash image (see :func:`.merge.flatten`).

    The image is written to ``output`` when given, and returned with the plan. Layout
    errors raise :class:`~kflashpy.errors.LayoutError` unless ``force``; nothing is
    written then.
    """
    resolved: list[FlashItem] = []
    for it in items:
        resolved += [it] if isinstance(it, FlashItem) else load_items([it])
    plan = plan_flash(resolved, board=board, layout=layout)
    plan.raise_on_errors(force)
    image = flatten(plan, fill_to=fill_to)
    if output is not None:
        write_atomic(output, image)
    return plan, image


def unpack(source: PathLike, outdir: PathLike, *, force: bool = False) -> Kfpkg:
    """Read a package and extract its files and manifest into ``outdir``."""
    pkg = read_kfpkg(source)
    unpack_kfpkg(pkg, outdir, force=force)
    return pkg


def is_package(path: PathLike) -> bool:
    """A file the CLI should treat as a kfpkg (by name, or a zip holding flash-list.json)."""
    p = Path(path)
    if p.suffix.lower() == ".kfpkg":
        return True
    try:
        return p.is_file() and zipfile.is_zipfile(p)
    except OSError:
        return False
