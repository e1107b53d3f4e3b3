"""``kflashpy demo``: rendering of :func:`kflashpy.demo.run_demo`."""

from __future__ import annotations

import tempfile

import click

from ..errors import MismatchError
from .session import Session


def register(group: click.Group) -> None:
    group.add_command(demo)


@click.command()
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    help="Keep the demo's files here (default: a temporary folder, removed afterwards).",
)
@click.pass_obj
def demo(s: Session, workdir: str | None) -> None:
    """Run the whole workflow on the virtual K210: check, pack, burn, reflash, run, compare.

    Needs no board and downloads nothing. The baud rate follows -b (default 1.5 Mbaud).
    """
    from ..demo import run_demo

    baud = s.baud or 1_500_000
    if workdir:
        result = run_demo(workdir, baud=baud, progress=s.progress())
    else:
        with tempfile.TemporaryDirectory(prefix="kflashpy-demo-") as tmp:
            result = run_demo(tmp, baud=baud, progress=s.progress())
    s.result = result.to_dict()
    s.table(
        ["step", "result", "host s", "what happened"],
        [
            (st.name, "ok" if st.ok else "FAILED", f"{st.seconds:.2f}", st.summary)
            for st in result.steps
        ],
    )
    if not result.ok:
        failed = ", ".join(st.name for st in result.steps if not st.ok)
        raise MismatchError(
            f"demo: {failed} did not succeed", "rerun with -v and report the output"
        )
    s.out(
        f"\nAll good. Next: `kflashpy sim serve` gives this virtual board a serial port; "
        f"`kflashpy -p /dev/ttyUSB0 burn FILE --addr {0x300000:#x}` does it for real."
    )
