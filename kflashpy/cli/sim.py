"""``kflashpy sim``: the virtual K210 board outside the process (pty) and its flash image."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import termios
import tty
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from ..errors import InputError
from ..units import fmt_size
from .session import Session
from .types import ADDRESS

KEYS = {"i": "isp", "r": "run", "q": "quit"}


def _board_config(session: Session, url: str | None, options: dict[str, Any], faults: tuple):
    """A BoardConfig from an optional sim:// URL, then the explicit options on top."""
    from ..sim.config import BoardConfig

    cfg = BoardConfig.from_url(url) if url else BoardConfig()
    if session.board and session.board != "auto":
        cfg.apply("board", session.board)
    for key, value in options.items():
        if value is not None:
            cfg.apply(key, str(value))
    for item in faults:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(
                f"--fault {item!r} is not KEY=VALUE",
                hint="e.g. --fault corrupt=1e-4 --fault seed=7 (see docs/simulator.md)",
            )
        cfg.apply(key.strip(), value.strip())
    return cfg


def board_options(f):
    """Options shared by the commands that build a virtual board."""
    for decorator in reversed(
        [
            click.option(
                "--url", metavar="sim://?...", help="Start from this sim:// URL's options."
            ),
            click.option(
                "--flash-file",
                type=click.Path(dir_okay=False),
                help="Keep the flash in this file (created erased, 0xFF, when missing).",
            ),
            click.option("--flash-size", metavar="SIZE", help="Flash size, e.g. 16M (default)."),
            click.option(
                "--chip", type=click.Choice(["w25q128", "gd25lq128"]), help="Flash chip identity."
            ),
            click.option(
                "--timing",
                type=click.Choice(["typical", "worst", "instant"]),
                help="Flash busy times: datasheet typical (default), worst case, or none.",
            ),
            click.option(
                "--fault",
                "faults",
                multiple=True,
                metavar="KEY=VALUE",
                help="Fault injection: corrupt=RATE drop=RATE dir=both|board|host "
                "disconnect=BYTES power_cut=SECONDS seed=N (repeatable).",
            ),
        ]
    ):
        f = decorator(f)
    return f


def _options(flash_file, flash_size, chip, timing) -> dict[str, Any]:
    return {"flash": flash_file, "flash_size": flash_size, "chip": chip, "timing": timing}


def _short(n: float) -> str:
    """1536 -> "1.5K": sizes that fit a status line."""
    for unit in ("", "K", "M"):
        if n < 1024:
            return f"{n:.0f}{unit}" if not unit or n >= 100 else f"{n:.1f}{unit}"
        n /= 1024
    return f"{n:.1f}G"


def _status_line(st: dict[str, Any]) -> str:
    """One line of what the board is doing, for the live display."""
    fl = st["flash"]
    baud = st.get("board_baud")
    parts = [
        f"{st['now']:9.3f}s",
        f"{st['stage']:<8}",
        f"baud {int(baud) if baud else '-'}",
        f"in {_short(st['bytes_in'])}",
        f"out {_short(st['bytes_out'])}",
        f"erase {fl['erases']}",
        f"prog {fl['programs']} ({_short(fl['bytes_programmed'])})",
    ]
    if fl["last_op"]:
        parts.append(fl["last_op"])
    if not st.get("client"):
        parts.append("[no client]")
    return " | ".join(parts)


@contextlib.contextmanager
def _keyboard(server) -> Iterator[bool]:
    """Typed keys (i/r/q) as server commands while stdin is a terminal."""
    fd = sys.stdin.fileno() if sys.stdin and sys.stdin.isatty() else -1
    if fd < 0:
        yield False
        return
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def on_key() -> None:
        key = os.read(fd, 1).decode("ascii", "replace").lower()
        if key in KEYS:
            server.command(KEYS[key])

    server.add_reader(fd, on_key)
    try:
        yield True
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def register(group: click.Group) -> None:
    @group.group("sim")
    def sim() -> None:
        """The virtual K210 board: serve it on a pty, inspect its flash image.

        In-process programs use the port URL sim://?board=maix-bit&flash=board.img
        (see docs/simulator.md); other programs use `kflashpy sim serve`.
        """

    @sim.command("serve")
    @board_options
    @click.option("--link", type=click.Path(dir_okay=False), help="Symlink to the pty here.")
    @click.option(
        "--control",
        type=click.Path(dir_okay=False),
        help="Create a FIFO here; write lines isp, run, dtr 0|1, rts 0|1, quit to it.",
    )
    @click.option(
        "--on-open",
        type=click.Choice(["isp", "run", "none"]),
        default="isp",
        show_default=True,
        help="Reset the board this way whenever a client opens the pty (a pty has no DTR/RTS).",
    )
    @click.option("--once", is_flag=True, help="Exit when the first client closes the port again.")
    @click.pass_obj
    def serve(
        session: Session,
        url,
        flash_file,
        flash_size,
        chip,
        timing,
        faults,
        link,
        control,
        on_open,
        once,
    ) -> None:
        """Offer a virtual board on a pseudo-terminal for any serial program.

        Prints the pty path. Keys (when stdin is a terminal): i = reset into ISP,
        r = reset and run from flash, q = quit. Ctrl-C or SIGTERM stop the server
        and flush the flash file.
        """
        from ..sim.board import VirtualBoard
        from ..sim.serve import PtyServer

        cfg = _board_config(session, url, _options(flash_file, flash_size, chip, timing), faults)
        board = VirtualBoard(cfg)
        live = sys.stderr.isatty() and session.show_progress and not session.quiet
        last_stage: list[str] = []

        def on_status(st: dict[str, Any]) -> None:
            if live:
                click.echo("\r\x1b[K" + _status_line(st), nl=False, err=True)
            elif st["stage"] not in last_stage[-1:]:
                last_stage.append(st["stage"])
                session.info(_status_line(st))

        def on_event(text: str) -> None:
            if live:
                click.echo("\r\x1b[K", nl=False, err=True)
            session.info(text)

        try:
            server = PtyServer(
                board,
                link=link,
                control=control,
                on_open=on_open,
                on_event=on_event,
                on_status=on_status if not session.json else None,
            )
        except BaseException:
            board.close()
            raise
        previous = signal.signal(signal.SIGTERM, lambda *_: server.stop())
        session.out(server.path)
        sys.stdout.flush()
        session.info(
            f"virtual {cfg.board} on {server.path}"
            + (f" (link {link})" if link else "")
            + f"; flash {cfg.flash or 'in memory'}; keys: i=ISP r=run q=quit"
        )
        try:
            with _keyboard(server), contextlib.suppress(KeyboardInterrupt):
                server.serve(until=lambda: once and server.clients > 0 and not server.client)
        finally:
            signal.signal(signal.SIGTERM, previous)
            st = server.status()
            server.close()
            board.close()
            if live:
                click.echo("", err=True)
        session.result = {
            "pty": server.path,
            "link": link,
            "clients": server.clients,
            "virtual_seconds": st["now"],
            "host_seconds": st["host_seconds"],
            "status": st,
        }
        session.info(_status_line(st))

    @sim.command("kflash")
    @board_options
    @click.argument("kflash_args", nargs=-1, type=click.UNPROCESSED)
    @click.pass_obj
    def kflash(
        session: Session, url, flash_file, flash_size, chip, timing, faults, kflash_args
    ) -> None:
        """Run the installed kflash.py on a virtual board: kflashpy sim kflash -- ARGS.

        ARGS are kflash.py's own (without -p). With -p PTY it uses the board a running
        `kflashpy sim serve` offers on that pty; without, it serves one here for the run,
        built from the board options. A pty takes no DTR/RTS, which kflash.py insists on
        toggling: here those calls are ignored and the board is reset into ISP when
        kflash.py opens the port. Exit status: kflash.py's.
        """
        from ..errors import DeviceError
        from ..sim.kflash_pty import run_kflash

        args = list(kflash_args)
        port = session.port
        if port is not None:
            run = run_kflash(args, port=port)
        else:
            from ..sim.board import VirtualBoard
            from ..sim.serve import PtyServer

            opts = _options(flash_file, flash_size, chip, timing)
            cfg = _board_config(session, url, opts, faults)
            board = VirtualBoard(cfg)
            try:
                with PtyServer(board, on_open="isp") as server:
                    run = run_kflash(args, server=server)
            finally:
                board.close()
        session.result = {
            "returncode": run.returncode,
            "pty": run.pty,
            "virtual_seconds": run.virtual_seconds,
        }
        if run.returncode:
            raise DeviceError(
                f"kflash.py exited with status {run.returncode} on {run.pty}",
                hint="its own output above says why",
            )
        if run.virtual_seconds is not None:
            session.info(f"kflash.py done; {run.virtual_seconds:.2f} s of board time")

    @sim.command("info")
    @board_options
    @click.pass_obj
    def info(session: Session, url, flash_file, flash_size, chip, timing, faults) -> None:
        """Describe the virtual board a URL/options give: wiring, flash identity, faults."""
        from ..sim.faults import FaultPlan
        from ..sim.flash import NorFlash
        from ..sim.wiring import wiring_for

        cfg = _board_config(session, url, _options(flash_file, flash_size, chip, timing), faults)
        wiring = wiring_for(cfg.board, cfg.wiring)
        plan = FaultPlan.from_query(cfg.faults)
        with NorFlash(
            cfg.flash_size, cfg.chip, cfg.timing, cfg.flash, cfg.unique_id(), cfg.jedec
        ) as flash:
            fi = flash.info()
        session.result = {
            "board": cfg.board,
            "wiring": wiring.name,
            "flash": fi,
            "timing": cfg.timing,
            "faults": plan.to_query() or None,
        }
        session.table(
            ["field", "value"],
            [
                ["board", cfg.board],
                ["wiring", f"{wiring.name}: {wiring.description}"],
                ["flash chip", f"{fi['chip']} JEDEC {fi['jedec_id']} UID {fi['unique_id']}"],
                ["flash size", fmt_size(int(fi["size"]))],  # type: ignore[call-overload]
                ["flash file", fi["backing"] or "(in memory)"],
                ["timing", cfg.timing],
                ["faults", plan.to_query() or "none"],
            ],
        )

    @sim.command("flash-dump")
    @click.argument("flash_file", type=click.Path(exists=True, dir_okay=False))
    @click.option("-a", "--address", type=ADDRESS, default=0, help="First byte to copy.")
    @click.option("-l", "--length", type=ADDRESS, help="Bytes to copy (default: to the end).")
    @click.option("-o", "--output", type=click.Path(dir_okay=False), required=True)
    @click.option("--trim", is_flag=True, help="Drop trailing erased (0xFF) bytes.")
    @click.pass_obj
    def flash_dump(session: Session, flash_file, address, length, output, trim) -> None:
        """Copy a region of a virtual flash file (from --flash-file / flash=) to OUTPUT."""
        from ..fileio import write_atomic

        size = Path(flash_file).stat().st_size
        length = size - address if length is None else length
        if address + length > size:
            raise InputError(
                f"{flash_file}: {length} bytes at {address:#x} run past its end ({size} bytes)",
                hint="give a smaller --length or a lower --address",
            )
        with open(flash_file, "rb") as f:
            f.seek(address)
            data = f.read(length)
        if trim:
            data = data.rstrip(b"\xff")
        write_atomic(output, data)
        session.result = {
            "file": flash_file,
            "address": address,
            "length": len(data),
            "output": output,
        }
        session.info(f"{output}: {fmt_size(len(data))} from {flash_file} at {address:#x}")
