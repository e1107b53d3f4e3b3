"""``station``: burn and verify every board plugged in, with a yield report (docs/production.md)."""

from __future__ import annotations

import click

from ..errors import EXIT_OK, UsageError
from ..isp import station
from ..isp.parallel import BoardsFailed
from .session import Session


def _event(s: Session, watch: str):
    def on_event(kind: str, what) -> None:
        if kind == "waiting":
            s.info(f"waiting for boards ({watch}); Ctrl-C ends the station")
        elif kind == "start":
            s.info(f"[{what.index:04d}] {what.port}: burning")
        elif kind == "unplugged":
            s.info(f"{what}: unplugged")
        elif kind == "done":
            word = {"pass": "PASS", "fail": "FAIL"}.get(what.result, what.result.upper())
            line = f"[{what.seq:04d}] {word} {what.port} serial {what.serial or '?'}"
            line += f" in {what.duration_s:.1f} s"
            if what.error:
                line += f": {what.error}"
            s.info(line + (f"\n  hint: {what.hint}" if what.hint else ""))

    return on_event


@click.command("station")
@click.argument("plan", type=click.Path(dir_okay=False))
@click.option(
    "--watch",
    default="usb",
    show_default=True,
    metavar="usb|GLOB",
    help="Where boards appear: 'usb' (ports with a K210 USB bridge) or a glob of port "
    "paths, e.g. '/tmp/line/board*' (links made by `kflashpy sim serve --link`).",
)
@click.option(
    "--report",
    "report_prefix",
    default="yield",
    show_default=True,
    metavar="PREFIX",
    help="Yield report: PREFIX.csv and PREFIX.jsonl (appended to).",
)
@click.option("--log-dir", default="station-logs", show_default=True, help="One log per board.")
@click.option("--max-boards", type=int, help="Stop after this many boards (default: Ctrl-C).")
@click.option(
    "--poll", type=float, default=0.25, show_default=True, help="Seconds between port scans."
)
@click.option("--force", is_flag=True, help="Burn despite layout collision warnings.")
@click.pass_obj
def station_cmd(s: Session, plan, watch, report_prefix, log_dir, max_boards, poll, force):
    """Burn and verify every board as it is plugged in, until Ctrl-C.

    \b
    kflashpy station maixpy_with_model.kfpkg -B maix-bit
    kflashpy station line.toml --report out/yield --log-dir out/logs
    kflashpy station line.toml --watch '/tmp/line/board*'     # virtual boards

    PLAN is a kfpkg or a TOML plan (files, addresses, board, baud, verify, erase,
    reboot: see docs/production.md). Each board is recorded with its serial number
    (flash unique id + JEDEC id); a failing board never stops the others; a board is
    burned again only after it was unplugged.
    """
    if s.port_list or s.ports:
        raise UsageError("station finds its boards itself", "use --watch usb or --watch GLOB")
    if max_boards is not None and max_boards < 1:
        raise UsageError("--max-boards must be at least 1")
    the_plan = station.load_station_plan(plan, board=s.board, force=force)
    the_plan.baud = s.baud or the_plan.baud
    for f in the_plan.plan.warnings:
        s.warn(f.message)
    source = station.usb_source() if watch == "usb" else station.glob_source(watch)
    with station.YieldReport(report_prefix) as report:
        st = station.Station(
            the_plan,
            source,
            report=report,
            log_dir=log_dir,
            poll=poll,
            max_boards=max_boards,
            on_event=_event(s, watch),
        )
        summary = st.run()
        records = list(report.records)
    s.table(
        ["boards", "passed", "failed", "interrupted", "mean time"],
        [
            [
                summary.boards,
                summary.passed,
                summary.failed,
                summary.interrupted,
                f"{summary.mean_seconds:.2f} s",
            ]
        ],
    )
    s.out(f"report: {report.csv_path}, {report.jsonl_path}; logs in {log_dir}")
    s.result = {
        "summary": summary.to_dict(),
        "report": {"csv": str(report.csv_path), "jsonl": str(report.jsonl_path)},
        "boards": [vars(r) for r in records],
    }
    if summary.exit_code != EXIT_OK:
        raise BoardsFailed(
            f"{summary.failed + summary.interrupted} of {summary.boards} boards did not pass",
            f"see {report.csv_path} and the board logs in {log_dir}",
            summary.exit_code,
        )


def register(group: click.Group) -> None:
    group.add_command(station_cmd)
