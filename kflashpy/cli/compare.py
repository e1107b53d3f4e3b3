"""``compare``, ``board-info``, ``repl-verify``: commands that talk to a running MaixPy."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import CompareMismatch, InputError, UsageError, VerifyError
from ..units import fmt_addr, fmt_size
from .session import Session, short_label
from .types import ADDRESS, pairs


def repl_options(f):
    """Options of every command that drives the MaixPy REPL."""
    f = click.option(
        "--timeout",
        type=float,
        default=10.0,
        show_default=True,
        help="Seconds of silence from the board before giving up.",
    )(f)
    f = click.option(
        "--reset-seq",
        metavar="SEQ",
        help="DTR/RTS sequence that restarts the program, e.g. 'D0 R1 W0.1 R0' "
        "(default: the run sequence of -B's wiring in firmware_layouts/boards.toml).",
    )(f)
    f = click.option(
        "--wait-reset",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="If a boot.py ignores Ctrl-C, wait this long for you to press RESET.",
    )(f)
    f = click.option(
        "--reset",
        is_flag=True,
        help="Reset the board first and interrupt _boot.py (skips boot.py and main.py).",
    )(f)
    return f


def _port(s: Session) -> str:
    if not s.port:
        raise UsageError("this command needs the board's port", "give -p/--port (or KFLASHPY_PORT)")
    return s.port


def _trace(s: Session):
    if s.verbose < 2 or s.json:
        return None

    def trace(direction: str, data: bytes) -> None:
        click.echo(f"{direction} {data[:120]!r}{'...' if len(data) > 120 else ''}", err=True)

    return trace


def _open(s: Session, reset: bool, wait_reset: float, reset_seq: str | None, timeout: float):
    from ..maixpy.repl import open_repl

    if wait_reset > 0 and not s.json:
        s.info(f"if the board does not answer, press its RESET button (waiting {wait_reset:g} s)")
    return open_repl(
        _port(s),
        baud=s.baud or 115200,
        reset=reset,
        board=s.board,
        reset_sequence=reset_seq,
        wait_reset=wait_reset,
        timeout=timeout,
        trace=_trace(s),
    )


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.6g}"


def register(group: click.Group) -> None:
    @group.command("compare")
    @click.argument("model", type=click.Path(dir_okay=False))
    @click.option("--addr", type=ADDRESS, help="Flash address the model is burned at.")
    @click.option("--load-flash", is_flag=True, help="Load with kpu.load_flash (swapped model).")
    @click.option("--path", "board_path", help="Model file on the board, e.g. /sd/m.kmodel.")
    @click.option(
        "-i",
        "--input",
        "input_spec",
        required=True,
        help="Image, .npy/.bin tensor or numbers ('5.1,3.8,1.9,0.4'), as `run` takes, or "
        "random[:SEED].",
    )
    @click.option(
        "--resize", is_flag=True, help="Scale images to the model input size (never implicit)."
    )
    @click.option(
        "--rgb888",
        is_flag=True,
        help="Feed the host the 8-bit RGB planes (as `run --rgb888`); the board still reads "
        "MaixPy's RGB565 frame.",
    )
    @click.option("--atol", type=float, default=1e-5, show_default=True, help="Float outputs.")
    @click.option("--rtol", type=float, default=1e-5, show_default=True, help="Float outputs.")
    @click.option("--bisect", is_flag=True, help="V3: find the first differing layer.")
    @click.option(
        "--no-check-model",
        is_flag=True,
        help="Skip the hash check that the board holds MODEL where it loads it.",
    )
    @click.option(
        "--host-opt",
        multiple=True,
        metavar="KEY=VALUE",
        help="Host runtime run option, e.g. rounding=sdk or segment='>='.",
    )
    @repl_options
    @click.pass_obj
    def compare_cmd(
        s: Session,
        model,
        addr,
        load_flash,
        board_path,
        input_spec,
        resize,
        rgb888,
        atol,
        rtol,
        bisect,
        no_check_model,
        host_opt,
        reset,
        wait_reset,
        reset_seq,
        timeout,
    ):
        """Run MODEL on the board (MaixPy REPL) and on the host; compare every output.

        Integer (raw KPU) outputs must match exactly, float outputs within
        --atol + --rtol*|host|. Exit 3 when an output differs.

        \b
        kflashpy -p /dev/ttyUSB0 compare mnist.kmodel --addr 0x300000 --input digit.png
        kflashpy -p /dev/ttyUSB0 compare m.kmodel --path /sd/m.kmodel --input random:1 --bisect
        """
        from ..maixpy.compare import LoadSpec, compare

        spec = LoadSpec(addr=addr, path=board_path, load_flash=load_flash)
        try:
            data = Path(model).read_bytes()
        except OSError as e:
            raise InputError(f"{model}: cannot read ({e.strerror})", "check the path") from None
        options = {}
        for item in host_opt:
            key, sep, value = item.partition("=")
            if not sep:
                raise UsageError(f"--host-opt {item!r} is not KEY=VALUE", "e.g. rounding=sdk")
            options[key] = value
        with _open(s, reset, wait_reset, reset_seq, timeout) as repl:
            rep = compare(
                repl,
                data,
                spec,
                input_spec,
                model_name=model,
                atol=atol,
                rtol=rtol,
                bisect=bisect,
                check_model=not no_check_model,
                host_options=options,
                input_mode="rgb888" if rgb888 else "maixpy",
                resize=resize,
                progress=s.progress(),
            )
        s.result = rep.to_dict()
        s.out(
            f"{model} (kmodel V{rep.version}) via {rep.load}, input {rep.input} ({rep.input_kind})"
        )
        for note in rep.notes:
            s.warn(note)
        s.table(
            [
                "out",
                "shape",
                "dtype",
                "max |diff|",
                "mean |diff|",
                "mismatches",
                "tolerance",
                "verdict",
            ],
            [
                [
                    d.index,
                    "x".join(map(str, d.shape)),
                    d.dtype,
                    _fmt(d.max_abs),
                    _fmt(d.mean_abs),
                    f"{d.mismatches}/{d.elements}",
                    "exact" if d.atol == d.rtol == 0 else f"{_fmt(d.atol)}+{_fmt(d.rtol)}*|h|",
                    "ok" if d.passed else "DIFFERS",
                ]
                for d in rep.outputs
            ],
        )
        for d in rep.outputs:
            if d.problem:
                s.out(f"  output {d.index}: {d.problem}")
            for m in d.first:
                pos = ",".join(map(str, m.position))
                s.out(
                    f"  output {d.index} [{pos}] (element {m.index}, byte {m.byte_offset}): "
                    f"board {_fmt(m.board)} host {_fmt(m.host)}"
                )
        b = rep.bisect
        if b is not None and b.all_agree:
            s.out(
                f"bisect: all {b.layers} layers agree on the board and the host "
                f"({b.steps} board run{'s' if b.steps != 1 else ''}); the difference is in "
                "the output transfer (reading the outputs back), not in the layers"
            )
        elif b is not None:
            s.out(
                f"bisect: first differing layer {b.layer} ({b.name}) of {b.layers}, "
                f"{b.diff.mismatches} element(s) differ ({b.steps} board runs)"
            )
        if not rep.passed:
            bad = [str(d.index) for d in rep.outputs if not d.passed]
            if b is None:
                hint = "rerun with --bisect (V3) to find the first differing layer"
            elif b.all_agree:
                hint = (
                    "the KPU computed the same values: check how outputs are read "
                    "(kpu.get_output index, kpu.set_outputs shapes, byte order)"
                )
            else:
                hint = f"layer {b.layer} ({b.name}) is where the board and the host part"
            raise CompareMismatch(
                f"board and host differ in output(s) {', '.join(bad)} of {model}",
                hint + "; see docs/compare.md",
            )
        s.out("board and host agree")

    @group.command("board-info")
    @repl_options
    @click.pass_obj
    def board_info_cmd(s: Session, reset, wait_reset, reset_seq, timeout):
        """Firmware version, free heap and kmodel V4 support of a running MaixPy."""
        from ..maixpy.board import board_info

        with _open(s, reset, wait_reset, reset_seq, timeout) as repl:
            info = board_info(repl)
        s.result = info.to_dict()
        s.table(
            ["field", "value"],
            [
                ["platform", info.platform],
                ["firmware", info.version],
                ["machine", info.machine],
                ["GC heap free", fmt_size(info.gc_free)],
                ["system heap free", fmt_size(info.heap_free) if info.heap_free >= 0 else "?"],
                ["kmodel V4", "yes" if info.kmodel_v4 else "no (V3 only)"],
            ],
        )

    @group.command("repl-verify")
    @click.argument("args", nargs=-1, required=True, metavar="ADDR FILE [ADDR FILE ...]")
    @repl_options
    @click.pass_obj
    def repl_verify_cmd(s: Session, args, reset, wait_reset, reset_seq, timeout):
        """Check that flash holds FILE at ADDR, through a running MaixPy (no ISP mode).

        The board hashes its own flash (Maix.utils.flash_read + uhashlib); exit 3 if a
        region differs. Same as `kflashpy verify --via-repl`, with the REPL options.

        \b
        kflashpy -p /dev/ttyUSB0 repl-verify 0x300000 model.kmodel
        """
        verify_via_repl(s, pairs(args), reset, wait_reset, reset_seq, timeout)


def verify_via_repl(
    s: Session,
    items: list[tuple[int, str]],
    reset: bool = False,
    wait_reset: float = 0.0,
    reset_seq: str | None = None,
    timeout: float = 10.0,
) -> None:
    """Render ``verify`` for (ADDR, FILE) pairs checked by hash through the MaixPy REPL."""
    from ..image.plan import AS_IS, as_burned
    from ..maixpy.board import verify_region

    files = []
    for addr, name in items:
        try:
            files.append(as_burned(addr, Path(name).read_bytes(), name))  # what burn wrote
        except OSError as e:
            raise InputError(f"{name}: cannot read ({e.strerror})", "check the path") from None
    with _open(s, reset, wait_reset, reset_seq, timeout) as repl:
        results = [(f.label, verify_region(repl, f.address, f.write)) for f in files]
    for f in files:
        if f.written_as != AS_IS:
            s.info(f"{f.label}: compared with {f.written_as}")
    s.table(
        ["file", "address", "size", "flash", "checked by"],
        [
            [
                short_label(name),
                fmt_addr(r.address),
                fmt_size(r.size),
                "ok" if r.match else "MISMATCH",
                "repl",
            ]
            for name, r in results
        ],
    )
    s.result = {
        "ok": all(r.match for _, r in results),
        "method": "repl",
        "regions": [
            {"file": name, **r.to_dict(), "compared": f.written_as}
            for (name, r), f in zip(results, files, strict=True)
        ],
    }
    bad = [f"{name} at {fmt_addr(r.address)}" for name, r in results if not r.match]
    if bad:
        raise VerifyError(
            "flash differs from " + ", ".join(bad),
            "burn those files again; for kpu.load_flash models burn the word-swapped file",
        )
