"""``kflashpy gui``: the web station (:mod:`kflashpy.web`) in the user's browser."""

from __future__ import annotations

import click

from .session import Session


@click.command("gui")
@click.option(
    "--listen",
    metavar="[HOST]:PORT",
    help="Address to serve on (default 127.0.0.1 and a free port). Another host than "
    "the loopback lets other machines reach the station: they still need the token.",
)
@click.option("--no-browser", is_flag=True, help="Print the URL, do not open a browser.")
@click.pass_obj
def gui_cmd(s: Session, listen: str | None, no_browser: bool) -> None:
    """Serve the web station: boards, plan and flash map, parallel burns, models.

    The page needs the URL printed here (it carries this session's token); requests
    from other web sites are refused. Stop with Ctrl-C.
    """
    from ..web import is_loopback, start

    station = start(listen)
    try:
        if not is_loopback(station.host):
            s.warn(f"listening on {station.host}: anyone who can reach it and has the URL can burn")
        # the URL is this command's output, shown even with -q/--json (stderr, flushed)
        s.echo(f"kflashpy web station: {station.url}  (Ctrl-C to stop)", err=True)
        s.result = {"url": station.url}
        if not no_browser:
            import webbrowser

            webbrowser.open(station.url)
        station.wait()
    finally:
        station.stop()


def register(group: click.Group) -> None:
    group.add_command(gui_cmd)
