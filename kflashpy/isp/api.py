"""One-call operations on a board: burn, erase, load-ram, reboot.

Each opens the port, does its job and closes the port; for several operations in one
session use :func:`kflashpy.connect` and the ``*_on`` functions of
:mod:`kflashpy.isp.burn`. Examples::

    import kflashpy
    result = kflashpy.burn([(0x300000, "model.kmodel")], port="/dev/ttyUSB0", board="maix-bit")
    for region in result.regions:
        print(region.summary())

    kflashpy.burn(kfpkg="maixpy_with_model.kfpkg", port="sim://?board=maix-bit")
    kflashpy.erase(0xD00000, 0x300000, port="/dev/ttyUSB0")
    kflashpy.load_ram("hello.elf", port="/dev/ttyUSB0")
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError, LayoutError
from ..image.kfpkg import read_kfpkg
from ..image.plan import FlashItem, FlashPlan, items_from_kfpkg, plan_flash
from ..progress import ProgressFn
from ..target.boards import Board, Firmware
from .burn import BurnResult, WriteRegion, burn_on, erase_on
from .connect import connect, open_device
from .connect import load_ram as load_ram_on
from .link import TraceFn
from .ramimage import RamImage, load_ram_image
from .stubs import StubProgram

Source = str | os.PathLike[str] | bytes

#: layout warnings that mean two things collide; a burn refuses them unless forced
COLLISION_WARNINGS = frozenset({"shared-sector", "typical-firmware"})


def _item(address: int, source: Source, prefix: bool | None = None) -> FlashItem:
    if isinstance(source, bytes):
        return FlashItem(address, source, f"<{len(source)} bytes>", prefix=prefix)
    return FlashItem.from_file(address, source, prefix=prefix)


def plan_burn(
    files: Sequence[tuple[int, Source]] = (),
    *,
    kfpkg: str | os.PathLike[str] | bytes | None = None,
    firmware: Source | None = None,
    board: Board | str | None = None,
    layout: Firmware | str | None = None,
    force: bool = False,
) -> FlashPlan:
    """Turn burn inputs into a checked :class:`FlashPlan`, before any port is opened.

    ``files`` are ``(address, path-or-bytes)`` pairs written raw (a raw firmware at the
    boot address is wrapped into a boot image); ``kfpkg`` adds a package's files;
    ``firmware`` is a firmware binary wrapped as a boot image at address 0. Layout
    errors always raise :class:`LayoutError`; collision warnings (shared erase sectors,
    a region inside the typical firmware) raise unless ``force``.
    """
    items = [_item(a, src) for a, src in files]
    if kfpkg is not None:
        items += items_from_kfpkg(read_kfpkg(kfpkg))
    if firmware is not None:
        items.insert(0, _item(0, firmware, prefix=True))
    if not items:
        raise InputError(
            "nothing to burn", "give ADDR FILE pairs, FILE --addr, a kfpkg or --firmware"
        )
    plan = plan_flash(items, board=board, layout=layout)
    check_burnable(plan, force=force)
    return plan


def check_burnable(plan: FlashPlan, *, force: bool = False) -> None:
    """Refuse a plan with layout errors, or with collision warnings unless ``force``."""
    plan.raise_on_errors()
    collisions = [f for f in plan.warnings if f.code in COLLISION_WARNINGS]
    if collisions and not force:
        raise LayoutError(
            collisions[0].message,
            (collisions[0].hint + "; " if collisions[0].hint else "")
            + "pass --force (force=True) if this is intended",
        )


def regions_of(plan: FlashPlan) -> list[WriteRegion]:
    """The bytes a plan writes, in the order given."""
    return [WriteRegion(r.address, r.write, r.label) for r in plan.writes]


@dataclass
class ConnectOptions:
    """How to reach the board (the CLI's global options, as one value)."""

    port: str | None = None
    board: str | Board | None = None
    baud: int | None = None
    stub: str | StubProgram | None = None
    reset_sequence: str | None = None
    rom_baud: int | None = None
    trace: TraceFn | None = field(default=None, repr=False)


def burn(
    files: Sequence[tuple[int, Source]] = (),
    *,
    kfpkg: str | os.PathLike[str] | bytes | None = None,
    firmware: Source | None = None,
    port: str | None = None,
    board: str | Board | None = None,
    layout: Firmware | str | None = None,
    baud: int | None = None,
    stub: str | StubProgram | None = None,
    reset_sequence: str | None = None,
    rom_baud: int | None = None,
    reboot: bool = True,
    force: bool = False,
    progress: ProgressFn | None = None,
    trace: TraceFn | None = None,
) -> BurnResult:
    """Check, then burn files and/or a kfpkg to a board; returns per-region results.

    The layout check (:func:`plan_burn`) runs before the port is opened. See
    :func:`kflashpy.connect` for ``port``, ``board``, ``baud``, ``stub``,
    ``reset_sequence`` and ``rom_baud``.
    """
    plan = plan_burn(files, kfpkg=kfpkg, firmware=firmware, board=board, layout=layout, force=force)
    return burn_plan(
        plan,
        port=port,
        board=board,
        baud=baud,
        stub=stub,
        reset_sequence=reset_sequence,
        rom_baud=rom_baud,
        reboot=reboot,
        progress=progress,
        trace=trace,
    )


def burn_plan(
    plan: FlashPlan,
    *,
    reboot: bool = True,
    progress: ProgressFn | None = None,
    **connect_options,
) -> BurnResult:
    """Burn an already checked plan (see :func:`plan_burn`); connect options as :func:`burn`."""
    with _connected(ConnectOptions(**connect_options), progress) as dev:
        result = burn_on(dev, regions_of(plan), reboot=reboot, progress=progress)
    result.notes += [f.message for f in plan.warnings]
    return result


def _connected(opts: ConnectOptions, progress: ProgressFn | None):
    return connect(
        opts.port,
        board=opts.board,
        baud=opts.baud,
        stub=opts.stub,
        reset_sequence=opts.reset_sequence,
        rom_baud=opts.rom_baud,
        progress=progress,
        trace=opts.trace,
    )


@dataclass
class EraseResult:
    port: str
    address: int | None
    size: int | None
    method: str  # "erase", "chip-erase" or "write-ff"
    seconds: float
    rebooted: str = ""
    notes: list[str] = field(default_factory=list)


def erase(
    address: int | None = None,
    size: int | None = None,
    *,
    reboot: bool = False,
    progress: ProgressFn | None = None,
    **connect_options,
) -> EraseResult:
    """Erase ``size`` bytes at ``address`` (4 KiB multiples), or the whole chip if neither."""
    if (address is None) != (size is None):
        raise InputError("erase needs both --addr and --size, or --all")
    opts = ConnectOptions(**connect_options)
    with _connected(opts, progress) as dev:
        start = dev.link.now()
        method = erase_on(dev, address, size, progress=progress)
        seconds = dev.link.now() - start
        rebooted = dev.reboot() if reboot else ""
        return EraseResult(dev.port_name, address, size, method, seconds, rebooted, dev.notes)


@dataclass
class LoadRamResult:
    port: str
    entry: int
    size: int
    seconds: float
    notes: list[str] = field(default_factory=list)


def load_ram(
    program: str | os.PathLike[str] | RamImage,
    *,
    address: int = 0x80000000,
    port: str | None = None,
    board: str | Board | None = None,
    reset_sequence: str | None = None,
    rom_baud: int | None = None,
    progress: ProgressFn | None = None,
    trace: TraceFn | None = None,
) -> LoadRamResult:
    """Load a program (raw binary at ``address``, or ELF) into SRAM and run it."""
    image = program if isinstance(program, RamImage) else load_ram_image(Path(program), address)
    dev = open_device(port, board=board, reset_sequence=reset_sequence, trace=trace)
    try:
        start = dev.link.now()
        load_ram_on(dev, image, rom_baud=rom_baud, progress=progress)
        return LoadRamResult(
            dev.port_name, image.entry, image.size, dev.link.now() - start, dev.notes
        )
    finally:
        dev.close()


@dataclass
class RebootResult:
    port: str
    how: str  # "command", "reset lines" or "manual"
    wiring: str
    notes: list[str] = field(default_factory=list)


def reboot(
    *,
    port: str | None = None,
    board: str | Board | None = None,
    reset_sequence: str | None = None,
    trace: TraceFn | None = None,
) -> RebootResult:
    """Reset the board into its flashed program.

    The board is first brought into ISP, which proves it is there and, with
    ``board=None``, tells which reset wiring it has; then that wiring's run sequence
    is played with BOOT released ("manual" when the wiring cannot reset the board).
    """
    dev = open_device(port, board=board, reset_sequence=reset_sequence, trace=trace)
    try:
        how = dev.reboot()
        wiring = dev.reset_plan.name if dev.reset_plan else ""
        return RebootResult(dev.port_name, how, wiring, dev.notes)
    finally:
        dev.close()
