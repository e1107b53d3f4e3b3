"""The ``kflashpy`` command line: parsing and rendering only.

Every command lives in a module of this package that defines ``register(group)``;
the module names are listed in :data:`COMMAND_MODULES`. Commands call the library,
which never prints or exits; :func:`main` maps errors to exit codes and prints the
``--json`` envelope.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from typing import Any

import click

from .. import __version__
from ..errors import EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, KflashError
from .options import accept_anywhere, apply_global
from .session import JSON_SCHEMA, Session

#: modules of this package that add commands to the ``kflashpy`` group
COMMAND_MODULES: list[str] = [
    "imageinfo",
    "pack",
    "layout",
    "burn",
    "sim",
    "compare",
    "model",
    "run",
    "flashops",
    "demo",
    "gui",
    "fs",
    "repl",
    "station",
]

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, "-V", "--version", prog_name="kflashpy")
@click.option(
    "-p",
    "--port",
    envvar="KFLASHPY_PORT",
    multiple=True,
    help="Serial port or pyserial URL (sim://, socket://...); repeat it for several boards "
    "at once. [env: KFLASHPY_PORT]",
)
@click.option(
    "--ports",
    type=click.Choice(["auto"]),
    help="'auto': every detected K210 USB bridge, all boards at once.",
)
@click.option(
    "-b",
    "--baud",
    envvar="KFLASHPY_BAUD",
    type=int,
    help="Baud rate for the transfer phase. [env: KFLASHPY_BAUD]",
)
@click.option(
    "-B",
    "--board",
    envvar="KFLASHPY_BOARD",
    help="Board profile (see `kflashpy boards`), or 'auto'. [env: KFLASHPY_BOARD]",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document (schema 1.x) on stdout."
)
@click.option("-v", "--verbose", count=True, help="More detail on stderr; -vv for protocol traces.")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
@click.option("--no-progress", is_flag=True, help="No progress bars or milestone lines.")
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Colour output (NO_COLOR is respected in auto).",
)
@click.pass_context
def cli(ctx: click.Context, **_options) -> None:
    """kflashpy: burn, pack, check and validate firmware and kmodels for Kendryte K210 boards.

    Exit codes: 0 ok, 1 device/serial error, 2 bad input or usage,
    3 verification mismatch, 4 internal error, 130 interrupted.
    """
    s: Session = ctx.ensure_object(Session)
    for name, value in ctx.params.items():
        apply_global(s, name, value)


for _name in COMMAND_MODULES:
    importlib.import_module(f"{__name__}.{_name}").register(cli)
accept_anywhere(cli)  # after every command is registered


def _envelope(session: Session, status: int, error: dict | None) -> str:
    doc = {
        "kflashpy_version": __version__,
        "schema": JSON_SCHEMA,
        "status": status,
        "error": error,
        "warnings": session.warnings,
        "result": session.result,
    }
    return json.dumps(doc, indent=2, sort_keys=False, default=str)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return the exit status (never calls ``sys.exit``)."""
    session = Session()
    args = sys.argv[1:] if argv is None else list(argv)
    session.json = "--json" in args  # known before parsing, for errors raised while parsing
    # --help prints text and stops: an envelope after it would break "one JSON document"
    help_requested = bool({"-h", "--help"} & set(args))
    status = 0
    error: dict[str, Any] | None = None
    try:
        cli.main(args=args, prog_name="kflashpy", standalone_mode=False, obj=session)
    except click.exceptions.Exit as e:
        status = e.exit_code
    except click.exceptions.Abort:
        status, error = (
            EXIT_INTERRUPTED,
            {"kind": "interrupted", "message": "interrupted", "hint": ""},
        )
    except click.ClickException as e:
        status = EXIT_INPUT
        error = {"kind": "usage", "message": e.format_message(), "hint": "see --help"}
    except KflashError as e:
        status = e.exit_code
        error = {"kind": e.kind, "message": e.message, "hint": e.hint}
        if hasattr(e, "at_risk"):  # a failed burn: the flash it may have damaged
            error["at_risk"] = [r.to_dict() for r in e.at_risk]
    except KeyboardInterrupt:
        status, error = (
            EXIT_INTERRUPTED,
            {"kind": "interrupted", "message": "interrupted by Ctrl-C", "hint": ""},
        )
    except Exception as e:  # a bug: say so, show the traceback only when asked
        status = EXIT_INTERNAL
        error = {
            "kind": "internal",
            "message": f"internal error: {type(e).__name__}: {e}",
            "hint": "this is a bug in kflashpy; rerun with -v and report the output",
        }
        if session.verbose:
            traceback.print_exc()
    if session.json and not (help_requested and status == 0):
        click.echo(_envelope(session, status, error))
    elif error is not None and not session.error_shown:
        session.echo(session.style("error: ", fg="red", bold=True) + error["message"], err=True)
        if error.get("hint"):
            hint = error["hint"].replace("\n", "\n  ")
            session.echo(f"  hint: {hint}", err=True)
    return status


def console_main() -> None:
    """Console-script entry point: the only place that exits the process."""
    sys.exit(main())
