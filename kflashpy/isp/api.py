"""One-call operations on a board: burn, erase, load-ram, reboot.

Each opens the port, does its job and closes the port; for several operations in one
session use :func:`kflashpy.connect` and the ``*_on`` functions of
:mod:`kflashpy.isp.burn`. Examples::

    import kflashpy
    board = kflashpy.ConnectOptions("/dev/ttyUSB0", board="maix-bit")
    result = kflashpy.burn([(0x300000, "model.kmodel")], connection=board)
    for region in result.regions:
        print(region.summary())

    kflashpy.burn(kfpkg="maixpy_with_model.kfpkg", connection="sim://?board=maix-bit")
    kflashpy.erase(0xD00000, 0x300000, connection="/dev/ttyUSB0")
    kflashpy.load_ram("hello.elf", connection="/dev/ttyUSB0")

``connection`` is a :class:`~kflashpy.isp.connect.ConnectOptions`, a port name, or None
(auto-detect the port, detect the wiring).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError, LayoutError
from ..image.kfpkg import read_kfpkg
from ..image.plan import FlashItem, FlashPlan, items_from_kfpkg, plan_flash
from ..progress import ProgressFn
from ..target import k210
from ..target.boards import Board, Firmware, get_board
from ..units import fmt_addr
from .burn import BurnResult, WriteRegion, burn_on, erase_on
from .connect import Connection, ConnectOptions, Device
from .connect import load_ram as load_ram_on
from .ramimage import RamImage, load_ram_image

Source = str | os.PathLike[str] | bytes

#: layout warnings a burn refuses unless forced: two things collide, or a model is damaged
COLLISION_WARNINGS = frozenset({"shared-sector", "typical-firmware", "kmodel-damaged"})


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


def burn(
    files: Sequence[tuple[int, Source]] = (),
    *,
    kfpkg: str | os.PathLike[str] | bytes | None = None,
    firmware: Source | None = None,
    connection: Connection = None,
    layout: Firmware | str | None = None,
    reboot: bool = True,
    erase_all: bool = False,
    force: bool = False,
    progress: ProgressFn | None = None,
) -> BurnResult:
    """Check, then burn files and/or a kfpkg to a board; returns per-region results.

    The layout check (:func:`plan_burn`, against the connection's board) runs before the
    port is opened; ``erase_all`` as :func:`burn_plan`.
    """
    opts = ConnectOptions.of(connection)
    plan = plan_burn(
        files, kfpkg=kfpkg, firmware=firmware, board=opts.board, layout=layout, force=force
    )
    return burn_plan(plan, opts, reboot=reboot, erase_all=erase_all, progress=progress)


def burn_plan(
    plan: FlashPlan,
    connection: Connection = None,
    *,
    reboot: bool = True,
    erase_all: bool = False,
    progress: ProgressFn | None = None,
) -> BurnResult:
    """Burn an already checked plan (see :func:`plan_burn`).

    ``erase_all``: erase the whole chip first (kflash.py's ``-e``); nothing outside the
    plan survives, and no sector is skipped as unchanged.
    """
    with ConnectOptions.of(connection).connect(progress) as dev:
        return burn_plan_on(dev, plan, reboot=reboot, erase_all=erase_all, progress=progress)


def burn_plan_on(
    dev: Device,
    plan: FlashPlan,
    *,
    reboot: bool = True,
    erase_all: bool = False,
    progress: ProgressFn | None = None,
) -> BurnResult:
    """:func:`burn_plan` on an already connected device."""
    erased = erase_on(dev, progress=progress) if erase_all else ""
    result = burn_on(
        dev, regions_of(plan), reboot=reboot, skip_unchanged=not erase_all, progress=progress
    )
    if erased:
        result.notes.insert(0, f"erased the whole chip first ({erased})")
    result.notes += [f.message for f in plan.warnings]
    return result


@dataclass
class EraseResult:
    port: str
    address: int | None  # None: the whole chip
    size: int | None
    method: str  # "erase", "chip-erase" or "write-ff"
    seconds: float
    rebooted: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "address": self.address,
            "size": self.size,
            "all": self.address is None,
            "method": self.method,
            "seconds": round(self.seconds, 4),
            "rebooted": self.rebooted or None,
        }


def erase(
    address: int | None = None,
    size: int | None = None,
    *,
    connection: Connection = None,
    reboot: bool = False,
    progress: ProgressFn | None = None,
) -> EraseResult:
    """Erase ``size`` bytes at ``address`` (4 KiB multiples), or the whole chip if neither."""
    if (address is None) != (size is None):
        raise InputError("erase needs both --addr and --size, or --all")
    opts = ConnectOptions.of(connection)
    if address is not None and size is not None:
        flash_size = (
            opts.board if isinstance(opts.board, Board) else get_board(opts.board)
        ).flash_size
        if address + size > flash_size:  # refused before the port is opened
            raise InputError(
                f"erase of {fmt_addr(address)} + 0x{size:X} ends at {fmt_addr(address + size)}, "
                f"past the end of the {flash_size >> 20} MiB flash",
                f"keep --addr + --size <= 0x{flash_size:X}, or use erase --all",
            )
    with opts.connect(progress) as dev:
        return erase_device(dev, address, size, reboot=reboot, progress=progress)


def erase_device(
    dev: Device,
    address: int | None = None,
    size: int | None = None,
    *,
    reboot: bool = False,
    progress: ProgressFn | None = None,
) -> EraseResult:
    """:func:`erase` on an already connected device."""
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "entry": self.entry,
            "size": self.size,
            "seconds": round(self.seconds, 4),
        }


def load_ram(
    program: str | os.PathLike[str] | RamImage,
    *,
    address: int = k210.SRAM_BASE,
    connection: Connection = None,
    progress: ProgressFn | None = None,
) -> LoadRamResult:
    """Load a program (raw binary at ``address``, or ELF) into SRAM and run it."""
    image = program if isinstance(program, RamImage) else load_ram_image(Path(program), address)
    opts = ConnectOptions.of(connection)
    dev = opts.open_device()
    try:
        start = dev.link.now()
        load_ram_on(dev, image, rom_baud=opts.rom_baud, progress=progress)
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

    def to_dict(self) -> dict[str, Any]:
        return {"port": self.port, "rebooted": self.how, "wiring": self.wiring}


def reboot(connection: Connection = None) -> RebootResult:
    """Reset the board into its flashed program.

    The board is first brought into ISP, which proves it is there and, with no board
    given, tells which reset wiring it has; then that wiring's run sequence is played
    with BOOT released ("manual" when the wiring cannot reset the board).
    """
    dev = ConnectOptions.of(connection).open_device()
    try:
        how = dev.reboot()
        wiring = dev.reset_plan.name if dev.reset_plan else ""
        return RebootResult(dev.port_name, how, wiring, dev.notes)
    finally:
        dev.close()
