"""``read``, ``verify``, ``flash-id``: commands that need a flasher with read-back."""

from __future__ import annotations

import click

from ..units import fmt_addr, fmt_size
from .burn import _connection, connection_options, virtual
from .parallel import run_parallel
from .session import Session, short_label
from .types import ADDRESS, SIZE_OR_ALL, pairs


def stub_option(f):
    return click.option(
        "--stub",
        metavar="NAME|FILE",
        help="Stage-2 flasher (default 'kflashpy': the kflash flashers cannot read flash).",
    )(f)


@click.command("read")
@click.option("--addr", type=ADDRESS, required=True, help="Flash address to start at.")
@click.option(
    "--size",
    type=SIZE_OR_ALL,
    required=True,
    help="Bytes to read (1.5M, 512k, 0x180000), or 'all': to the end of the flash.",
)
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="File to write."
)
@stub_option
@connection_options
@click.pass_obj
def read_cmd(s: Session, addr, size, output, stub, reset_seq, rom_baud):
    """Read flash into a file (checked against the board's SHA-256 of the range).

    \b
    kflashpy read --addr 0x300000 --size 1.5M -o model_backup.bin
    kflashpy read --addr 0 --size all -o whole_flash.bin
    kflashpy -p /dev/ttyUSB0 -p /dev/ttyUSB1 read --addr 0 --size 4K -o 'boot-{uid}.bin'

    With several boards, {n} (board number), {uid} (flash unique id) and {port} in the
    output name are filled in; without them, -1, -2... goes before the suffix.
    """
    from ..isp import flashops, parallel

    if s.several_boards:
        op = parallel.read_operation(addr, size, output)
        run_parallel(s, "read", op, stub=stub, reset_seq=reset_seq, rom_baud=rom_baud)
        return
    res = flashops.read_flash(
        addr,
        size,
        output=output,
        progress=s.progress(),
        connection=_connection(s, reset_seq, rom_baud, baud=s.baud, stub=stub),
    )
    s.out(
        f"read {fmt_size(res.size)} at {fmt_addr(addr)} into {output} in {res.seconds:.2f} s"
        f"{virtual(res.port)} "
        f"(sha256 {res.sha256[:16]}...)"
    )
    s.result = res.to_dict()


@click.command("verify")
@click.argument("args", nargs=-1, required=True, metavar="ADDR FILE [ADDR FILE ...]")
@click.option(
    "--via-repl",
    is_flag=True,
    help="Hash through a running MaixPy's REPL instead of ISP mode (see repl-verify).",
)
@stub_option
@connection_options
@click.pass_obj
def verify_cmd(s: Session, args, via_repl, stub, reset_seq, rom_baud):
    """Check that flash holds FILE at ADDR (exit code 3 and the region named if not).

    \b
    kflashpy verify 0 firmware_image.bin 0x300000 model.kmodel
    kflashpy verify --via-repl 0x300000 model.kmodel    # MaixPy keeps running
    """
    from ..image.plan import AS_IS
    from ..isp import flashops, parallel

    if via_repl:
        from .compare import verify_via_repl

        verify_via_repl(s, pairs(args))
        return
    if s.several_boards:
        op = parallel.verify_operation(pairs(args))
        run_parallel(s, "verify", op, stub=stub, reset_seq=reset_seq, rom_baud=rom_baud)
        return
    res = flashops.verify_flash(
        pairs(args),
        progress=s.progress(),
        connection=_connection(s, reset_seq, rom_baud, baud=s.baud, stub=stub),
    )
    rows = [
        [
            short_label(r.label),
            fmt_addr(r.address),
            fmt_size(r.size),
            "ok" if r.ok else "MISMATCH",
            r.method,
        ]
        for r in res.regions
    ]
    s.table(["file", "address", "size", "flash", "checked by"], rows)
    for r in res.regions:
        if r.compared != AS_IS:
            s.info(f"{r.label}: compared with {r.compared}")
    s.result = res.to_dict()
    if not res.ok:
        raise flashops.mismatch_error(res)


@click.command("flash-id")
@stub_option
@connection_options
@click.pass_obj
def flash_id_cmd(s: Session, stub, reset_seq, rom_baud):
    """Show the flash chip's JEDEC id, size and unique id."""
    from ..isp import flashops, parallel

    if s.several_boards:
        op = parallel.flash_id_operation()
        run_parallel(s, "flash-id", op, stub=stub, reset_seq=reset_seq, rom_baud=rom_baud)
        return
    res = flashops.flash_id(
        progress=s.progress(),
        connection=_connection(s, reset_seq, rom_baud, baud=s.baud, stub=stub),
    )
    s.out(
        f"flash: {res.manufacturer} JEDEC 0x{res.jedec_id:06X}, {fmt_size(res.size)}, "
        f"unique id {res.unique_id}"
    )
    for key, value in res.details.items():
        s.out(f"  {key}: {value}")
    s.result = res.to_dict()


def register(group: click.Group) -> None:
    group.add_command(read_cmd)
    group.add_command(verify_cmd)
    group.add_command(flash_id_cmd)
