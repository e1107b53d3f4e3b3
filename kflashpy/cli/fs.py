"""``kflashpy fs ls|cat|get|put|rm|mkdir|df`` and ``kflashpy exec``: files and scripts on MaixPy.

Board paths are ``/flash/...`` or ``/sd/...`` (``:name`` and a bare ``name`` mean
``/flash/name``, as in mpremote). The library is :mod:`kflashpy.maixpy.fs`; MaixPy's
quirks are in docs/files.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import InputError
from ..units import fmt_size
from .compare import _open, repl_options
from .session import Session


def _transfers(s: Session, done, verb: str) -> None:
    s.result = {"files": [t.to_dict() for t in done]}
    for t in done:
        s.out(
            f"{verb} {t.source or '-'} -> {t.dest} ({fmt_size(t.size)}, sha256 {t.sha256[:16]} ok)"
        )


def _raw_out(data: bytes) -> None:
    """Bytes from the board to stdout as they are (file contents, script output)."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def register(group: click.Group) -> None:
    @group.group("fs")
    def fs_group() -> None:
        """Files on a running MaixPy (/flash SPIFFS, /sd card), checked by SHA-256 on the board.

        \b
        kflashpy -p /dev/ttyUSB0 fs put boot.py /flash/
        kflashpy -p /dev/ttyUSB0 fs put model.kmodel /sd/
        kflashpy -p /dev/ttyUSB0 fs ls /sd
        """

    @fs_group.command("ls")
    @click.argument("path", default="/flash")
    @click.option("-r", "--recursive", is_flag=True, help="List subdirectories too.")
    @repl_options
    @click.pass_obj
    def ls_cmd(s: Session, path, recursive, reset, wait_reset, reset_seq, timeout):
        """List PATH on the board (default /flash)."""
        from ..maixpy import fs

        with _open(s, reset, wait_reset, reset_seq, timeout) as repl:
            entries = fs.ls(repl, path, recursive)
        s.result = {"path": fs.board_path(path), "entries": [e.to_dict() for e in entries]}
        s.table(
            ["size", "path"],
            [["dir" if e.is_dir else e.size, e.path + ("/" if e.is_dir else "")] for e in entries],
        )

    @fs_group.command("cat")
    @click.argument("path")
    @repl_options
    @click.pass_obj
    def cat_cmd(s: Session, path, reset, wait_reset, reset_seq, timeout):
        """Print a board file (bytes as they are) on stdout."""
        from ..maixpy import fs

        with _open(s, reset, wait_reset, reset_seq, timeout) as repl:
            data = fs.read_file(repl, path)
        s.result = {"path": fs.board_path(path), "size": len(data)}
        if not s.json:
            _raw_out(data)

    @fs_group.command("get")
    @click.argument("remote")
    @click.argument("local", required=False, type=click.Path())
    @repl_options
    @click.pass_obj
    def get_cmd(s: Session, remote, local, reset, wait_reset, reset_seq, timeout):
        """Copy REMOTE (a file, or a directory recursively) to LOCAL (default: here)."""
        from ..maixpy import fs

        with _open(s, reset, wait_reset, reset_seq, timeout) as repl:
            done = fs.get(repl, remote, local or ".", s.progress())
        _transfers(s, done, "got")

    @fs_group.command("put")
    @click.argument("local", type=click.Path())
    @click.argument("remote", default="/flash/")
    @repl_options
    @click.pass_obj
    def put_cmd(s: Session, local, remote, reset, wait_reset, reset_seq, timeout):
        """Copy LOCAL (a file, or a directory recursively) to REMOTE (default /flash/).

        A REMOTE that is a directory or ends with / receives LOCAL under its own name.
        A file larger than the free space is refused before anything is written.
        """
        from ..maixpy import fs

        with _open(s, reset, wait_reset, reset_seq, timeout) as repl:
            done = fs.put(repl, local, remote, s.progress())
        _transfers(s, done, "put")

    @fs_group.command("rm")
    @click.argument("paths", nargs=-1, required=True, metavar="PATH...")
    @click.option("-r", "--recursive", is_flag=True, help="Remove directories and their files.")
    @repl_options
    @click.pass_obj
    def rm_cmd(s: Session, paths, recursive, reset, wait_reset, reset_seq, timeout):
        """Remove files (and with -r directories) on the board."""
        from ..maixpy import fs

        removed: list[str] = []
        with _open(s, reset, wait_reset, reset_seq, timeout) as repl:
            for p in paths:
                removed += fs.rm(repl, p, recursive)
        s.result = {"removed": removed}
        for p in removed:
            s.out(f"removed {p}")

    @fs_group.command("mkdir")
    @click.argument("paths", nargs=-1, required=True, metavar="PATH...")
    @repl_options
    @click.pass_obj
    def mkdir_cmd(s: Session, paths, reset, wait_reset, reset_seq, timeout):
        """Create directories (on /sd: SPIFFS on /flash has none)."""
        from ..maixpy import fs

        with _open(s, reset, wait_reset, reset_seq, timeout) as repl:
            made = [fs.mkdir(repl, p) for p in paths]
        s.result = {"created": made}
        for p in made:
            s.out(f"created {p}/")

    @fs_group.command("df")
    @repl_options
    @click.pass_obj
    def df_cmd(s: Session, reset, wait_reset, reset_seq, timeout):
        """Size and free space of /flash and /sd."""
        from ..maixpy import fs

        with _open(s, reset, wait_reset, reset_seq, timeout) as repl:
            usage = fs.df(repl)
        s.result = {"filesystems": [u.to_dict() for u in usage]}
        s.table(
            ["mount", "size", "used", "free", "block", "name max"],
            [
                [
                    u.mount,
                    fmt_size(u.total),
                    fmt_size(u.used),
                    fmt_size(u.free),
                    fmt_size(u.block),
                    u.name_max,
                ]
                for u in usage
            ],
        )

    @group.command("exec")
    @click.argument("script", required=False, type=click.Path(dir_okay=False))
    @click.option("-c", "--code", help="Run this code instead of a SCRIPT file.")
    @repl_options
    @click.pass_obj
    def exec_cmd(s: Session, script, code, reset, wait_reset, reset_seq, timeout):
        """Run SCRIPT (or -c CODE) on the board and stream its output.

        --timeout is the longest the script may stay silent. Ctrl-C stops it on the
        board too. Exit 1 with the board's traceback if it raises.

        \b
        kflashpy -p /dev/ttyUSB0 exec test_camera.py
        kflashpy -p /dev/ttyUSB0 exec -c "import os; print(os.listdir('/sd'))"
        """
        from ..maixpy import fs

        if (script is None) == (code is None):
            raise click.UsageError("give a SCRIPT file or -c CODE (one of them)")
        if script is not None:
            try:
                code = Path(script).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise InputError(f"{script}: cannot read ({e})", "give a UTF-8 .py file") from None
        chunks: list[bytes] = []

        def show(data: bytes) -> None:
            chunks.append(data)
            if not s.json:
                _raw_out(data)

        with _open(s, reset, wait_reset, reset_seq, timeout) as repl:
            fs.run_script(repl, code, show, timeout)
        s.result = {"output": b"".join(chunks).decode("utf-8", "replace")}
