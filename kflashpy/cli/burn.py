"""``burn``, ``erase``, ``load-ram``, ``reboot``, ``ports``: the commands that touch a board."""

from __future__ import annotations

import functools
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import InputError, UsageError
from ..target import k210
from ..units import fmt_addr, fmt_size
from .parallel import run_parallel
from .session import Session
from .types import ADDRESS, pairs

if TYPE_CHECKING:
    from ..isp.connect import ConnectOptions

#: what --before no-reset asks of the user (the ROM enters ISP when IO16 is low at reset)
BUTTONS = "hold the BOOT button (IO16), press and release RESET, then release BOOT"


def _reset_for(before: str | None, reset_seq: str | None) -> str | None:
    """The reset sequence that --before asks for (``no-reset``: the user resets by hand)."""
    if before != "no-reset":
        return reset_seq
    if reset_seq is not None and reset_seq.strip().lower() != "none":
        raise UsageError(
            "--before no-reset and --reset-seq contradict each other", "give one of them"
        )
    s = click.get_current_context().find_object(Session)
    if s is not None and not s.json:  # said even with -q: the user has to act
        s.echo(f"--before no-reset: {BUTTONS}; waiting for the board...", err=True)
    return "none"


def connection_options(f):
    """Options shared by every command that connects to a board."""

    command = f

    @functools.wraps(command)
    def with_reset(*args, before: str | None = None, reset_seq: str | None = None, **kw):
        return command(*args, reset_seq=_reset_for(before, reset_seq), **kw)

    f = click.option(
        "--before",
        type=click.Choice(["reset", "no-reset"]),
        help="How to enter ISP mode: reset by the board's DTR/RTS wiring (default), or "
        "no-reset: you press the buttons (esptool's --before).",
    )(with_reset)
    f = click.option(
        "--rom-baud",
        type=int,
        metavar="BAUD",
        help="Ask the boot ROM for this rate before uploading (fast mode; not all boards).",
    )(f)
    f = click.option(
        "--reset-seq",
        metavar="SEQ",
        help="Custom DTR/RTS sequence, e.g. 'D0 R0 W0.1 R1 W0.1 R0 D1 W0.1'; 'none' = reset by hand.",
    )(f)
    return f


def stub_option(f):
    return click.option(
        "--stub",
        metavar="NAME|FILE",
        help="Stage-2 flasher: 'kflash' (from the installed kflash package) or a "
        "kflash-compatible binary.",
    )(f)


def virtual(port: str) -> str:
    """The label for times measured on the virtual board: its clock, not the wall's."""
    return " (virtual time)" if port.startswith("sim://") else ""


def after_option(f):
    """esptool's --after, beside --reboot/--no-reboot."""
    return click.option(
        "--after",
        type=click.Choice(["reboot", "stay"]),
        help="Afterwards: start the program (reboot) or stay in ISP mode (--reboot/--no-reboot).",
    )(f)


def _reboot(after: str | None, reboot: bool) -> bool:
    return reboot if after is None else after == "reboot"


def _op_names() -> dict[int, str]:
    from ..isp.frames import FlashOp, RomOp
    from ..isp.kfpy_stage2 import KfpyOp

    return {op.value: op.name for enum in (RomOp, FlashOp, KfpyOp) for op in enum}


def _trace(s: Session):
    """-vv: every frame, with the time since the port opened and its decoded command."""
    if s.verbose < 2 or s.json:
        return None
    from ..isp.frames import STATUS_TEXT

    names, start = _op_names(), time.monotonic()

    def trace(direction: str, frame: bytes) -> None:
        op = int.from_bytes(frame[:2], "little") if direction == "tx" else frame[0] if frame else -1
        name = names.get(op, f"0x{op:02X}")
        if direction == "rx" and len(frame) > 1:
            name += f" {STATUS_TEXT.get(frame[1], f'status 0x{frame[1]:02X}')}"
        more = "..." if len(frame) > 32 else ""
        click.echo(
            f"{time.monotonic() - start:9.3f}s {direction} {name:28} [{len(frame):5d}] "
            f"{frame[:32].hex(' ')}{more}",
            err=True,
        )

    return trace


def _connection(s: Session, reset_seq, rom_baud, **extra) -> ConnectOptions:
    """How to reach the board, from the global options."""
    from ..isp.connect import ConnectOptions

    return ConnectOptions(
        port=s.port,
        board=s.board,
        reset_sequence=reset_seq,
        rom_baud=rom_baud,
        trace=_trace(s),
        **extra,
    )


def _is_kfpkg(path: str) -> bool:
    if path.lower().endswith(".kfpkg"):
        return True
    try:
        with zipfile.ZipFile(path) as zf:
            return "flash-list.json" in zf.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def _firmware_file(path: str) -> bool:
    """Whether ``path`` holds a firmware (raw or boot image): those go to address 0."""
    from ..image.content import detect_content

    try:
        return detect_content(Path(path).read_bytes(), path).is_firmware
    except OSError:
        return False  # the plan names the unreadable file


def _inputs(
    s: Session, args: tuple[str, ...], addr: int | None
) -> tuple[list[tuple[int, str]], str | None]:
    """(ADDR, FILE) pairs and an optional kfpkg from the positional arguments."""
    if addr is not None:
        if len(args) != 1:
            raise UsageError(
                "--addr takes exactly one FILE", "kflashpy burn model.kmodel --addr 0x300000"
            )
        return [(addr, args[0])], None
    if len(args) == 1:
        if _is_kfpkg(args[0]):
            return [], args[0]
        if _firmware_file(args[0]):
            s.info(f"{Path(args[0]).name} is a K210 firmware: burning it at 0x00000000")
            return [(0, args[0])], None
        raise UsageError(
            f"{args[0]}: where should it go? (it is not a firmware, which would go to 0)",
            "give --addr (kflashpy burn FILE --addr 0x300000), or ADDR FILE pairs",
        )
    return pairs(args), None


@click.command("burn")
@click.argument("args", nargs=-1, metavar="[FILE --addr ADDR | ADDR FILE... | PKG.kfpkg]")
@click.option("--addr", type=ADDRESS, help="Flash address for a single FILE.")
@click.option(
    "--firmware",
    type=click.Path(dir_okay=False),
    help="Firmware binary to wrap as a boot image and burn at 0.",
)
@click.option("--layout", metavar="NAME|TOML", help="Firmware layout to check against (maixpy...).")
@click.option("--force", is_flag=True, help="Burn despite collision warnings (never errors).")
@click.option(
    "--reboot/--no-reboot", default=True, show_default=True, help="Start the program afterwards."
)
@click.option(
    "--erase-all", is_flag=True, help="Erase the whole chip first (kflash.py's -e; slow)."
)
@after_option
@click.option("--monitor", is_flag=True, help="Open the REPL terminal (`kflashpy repl`) after.")
@stub_option
@connection_options
@click.pass_obj
def burn_cmd(
    s: Session,
    args,
    addr,
    firmware,
    layout,
    force,
    reboot,
    erase_all,
    after,
    monitor,
    stub,
    reset_seq,
    rom_baud,
):
    """Burn files, ADDR FILE pairs or a kfpkg to flash.

    \b
    kflashpy -p /dev/ttyUSB0 burn model.kmodel --addr 0x300000
    kflashpy burn 0 maixpy.bin 0x300000 model.kmodel
    kflashpy burn --firmware maixpy.bin 0x300000 model.kmodel
    kflashpy burn app_with_model.kfpkg

    The layout check runs before the port is opened. The default flasher (kflashpy's own)
    skips sectors that already hold the data and verifies every region by a SHA-256
    computed on the board. With --stub kflash, frames are only CRC-checked and
    acknowledged (that flasher cannot read flash back); the result says which was done.
    """
    if monitor:
        from .repl import check_terminal

        check_terminal(s)
    from ..isp import api, parallel

    files, kfpkg = _inputs(s, args, addr) if args else ([], None)
    plan = api.plan_burn(
        files, kfpkg=kfpkg, firmware=firmware, board=s.board, layout=layout, force=force
    )
    for f in plan.warnings:
        s.warn(f.message)
    for r in plan.writes:
        s.info(f"{r.label}: {fmt_size(r.size)} at {fmt_addr(r.address)}")
    if s.several_boards:
        op = parallel.burn_operation(plan, reboot=_reboot(after, reboot), erase_all=erase_all)
        run_parallel(s, "burn", op, stub=stub, reset_seq=reset_seq, rom_baud=rom_baud)
        return
    progress = s.progress()
    result = api.burn_plan(
        plan,
        reboot=_reboot(after, reboot),
        erase_all=erase_all,
        progress=progress,
        connection=_connection(s, reset_seq, rom_baud, baud=s.baud, stub=stub),
    )
    warned = {f.message for f in plan.warnings}
    for note in result.notes if progress is None else ():  # else shown as they happened
        if note not in warned:
            s.info(note)
    for region in result.regions:
        s.out(region.summary() + virtual(result.port))
    s.out(
        f"verified: {'on-board SHA-256' if result.verification == 'sha256' else 'per-frame CRC-32 only (no read-back)'}"
        + (f"; rebooted ({result.rebooted})" if result.rebooted else "; left in ISP mode")
    )
    s.result = {**result.to_dict(), "findings": [f.to_dict() for f in plan.findings]}
    if monitor:
        from .repl import monitor as open_terminal

        open_terminal(s)


@click.command("erase")
@click.option("--addr", type=ADDRESS, help="Start (multiple of 4 KiB).")
@click.option("--size", type=ADDRESS, help="Bytes to erase (multiple of 4 KiB).")
@click.option("--all", "whole", is_flag=True, help="Erase the whole chip.")
@click.option("--reboot/--no-reboot", default=False, show_default=True)
@after_option
@stub_option
@connection_options
@click.pass_obj
def erase_cmd(s: Session, addr, size, whole, reboot, after, stub, reset_seq, rom_baud):
    """Erase a flash region (--addr --size) or the whole chip (--all)."""
    from ..isp import api, parallel

    if whole == (addr is not None or size is not None):
        raise UsageError("give either --addr and --size, or --all")
    if not whole and (addr is None or size is None):
        raise UsageError("--addr and --size go together")
    if s.several_boards:
        op = parallel.erase_operation(addr, size, reboot=reboot)
        run_parallel(s, "erase", op, stub=stub, reset_seq=reset_seq, rom_baud=rom_baud)
        return
    res = api.erase(
        addr,
        size,
        reboot=_reboot(after, reboot),
        progress=s.progress(),
        connection=_connection(s, reset_seq, rom_baud, baud=s.baud, stub=stub),
    )
    for note in res.notes:
        s.info(note)
    what = "whole chip" if whole else f"{fmt_size(size)} at {fmt_addr(addr)}"
    s.out(f"erased {what} ({res.method}) in {res.seconds:.2f} s{virtual(res.port)}")
    s.result = res.to_dict()


@click.command("load-ram")
@click.argument("program", type=click.Path(dir_okay=False))
@click.option(
    "--addr",
    type=ADDRESS,
    default=k210.SRAM_BASE,
    show_default=f"0x{k210.SRAM_BASE:08X}",
    help="Load address of a raw binary (ELF files carry their own).",
)
@connection_options
@click.pass_obj
def load_ram_cmd(s: Session, program, addr, reset_seq, rom_baud):
    """Load a program (.bin or .elf) into SRAM through the boot ROM and run it."""
    from ..isp import api

    if not Path(program).is_file():
        raise InputError(f"{program}: no such file")
    res = api.load_ram(
        program, address=addr, progress=s.progress(), connection=_connection(s, reset_seq, rom_baud)
    )
    for note in res.notes:
        s.info(note)
    s.out(
        f"loaded {fmt_size(res.size)} in {res.seconds:.2f} s{virtual(res.port)}; "
        f"running from {fmt_addr(res.entry)}"
    )
    s.result = res.to_dict()


@click.command("reboot")
@click.option("--reset-seq", metavar="SEQ", help="Custom DTR/RTS sequence for entering ISP.")
@click.pass_obj
def reboot_cmd(s: Session, reset_seq):
    """Reset the board into its flashed program."""
    from ..isp import api

    res = api.reboot(api.ConnectOptions(s.port, s.board, reset_sequence=reset_seq, trace=_trace(s)))
    for note in res.notes:
        s.info(note)
    s.out(f"rebooted ({res.how})" if res.how != "manual" else "press the board's RESET button")
    s.result = res.to_dict()


@click.command("ports")
@click.pass_obj
def ports_cmd(s: Session):
    """List serial ports with a USB bridge K210 boards use."""
    from ..isp.ports import candidates

    found = candidates()
    if found:
        s.table(
            ["port", "bridge", "usb id", "serial"],
            [
                (c.device, c.bridge, f"{c.vid:04X}:{c.pid:04X}", c.serial_number or "")
                for c in found
            ],
        )
    else:
        s.info("no K210-style USB serial bridge found")
    s.result = {
        "ports": [
            {
                "device": c.device,
                "bridge": c.bridge,
                "vid": c.vid,
                "pid": c.pid,
                "interface": c.interface,
                "serial_number": c.serial_number,
            }
            for c in found
        ]
    }


def register(group: click.Group) -> None:
    for cmd in (burn_cmd, erase_cmd, load_ram_cmd, reboot_cmd, ports_cmd):
        group.add_command(cmd)
