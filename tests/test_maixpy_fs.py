"""Files on the board (kflashpy.maixpy.fs) against the virtual MaixPy's /flash and /sd."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from support.maixpy import flash16

from kflashpy.errors import InputError, NoResponseError, UsageError
from kflashpy.isp.ports import open_port
from kflashpy.maixpy import fs
from kflashpy.maixpy.errors import ReplError
from kflashpy.maixpy.repl import MaixPyRepl
from kflashpy.sim.maixpy_vfs import SPIFFS_START, STORE_MAGIC


def url(flash: str, **opts: str) -> str:
    extra = "".join(f"&{k}={v}" for k, v in opts.items())
    return f"sim://?flash={flash}{extra}"


def connect(u: str, **kw) -> MaixPyRepl:
    repl = MaixPyRepl(open_port(u), **kw)
    repl.connect()
    return repl


@pytest.fixture
def board(tmp_path):
    return connect(url(flash16(tmp_path), maixpy_sd="16M"))


# --- the virtual board's filesystems, as code on the board sees them ---------------------------


def test_mounts_and_maixpy_quirks_on_the_board(board):
    assert board.eval("__import__('os').listdir('/')") == ["flash", "sd"]
    assert "boot.py" in board.eval("__import__('os').listdir()")  # cwd is /flash
    with pytest.raises(ReplError, match="NotImplementedError"):  # SPIFFS is flat
        board.exec_raw("import os\nos.mkdir('/flash/d')")
    with pytest.raises(ReplError, match="ENAMETOOLONG"):
        board.exec_raw(f"open('/flash/{'n' * 128}','wb').close()")
    open_ok = f"f=open('/flash/{'n' * 126}','wb')\nf.write(b'x')\nf.close()"
    board.exec_raw(open_ok)  # 127 bytes with the leading '/' is the longest SPIFFS name
    vfs = board.eval("__import__('os').statvfs('/flash')")
    assert vfs[0] == 0x20000 and vfs[2] == 22 and vfs[9] == 128  # 128 KiB logical blocks
    board.exec_raw("import os\nos.mkdir('/sd/d')\nopen('/sd/d/a.txt','w').write('hi')")
    assert board.eval("__import__('os').listdir('/sd/d')") == ["a.txt"]
    assert board.eval("__import__('os').stat('/sd/d')[0]") == 0x4000
    with pytest.raises(ReplError, match="ENOENT"):
        board.exec_raw("open('/sd/nope/x','wb')")


def test_flash_filesystem_persists_in_the_flash_file(tmp_path):
    flash = flash16(tmp_path)
    first = connect(url(flash))
    fs.write_file(first, "/flash/keep.txt", b"kept")
    first.port.close()
    raw = Path(flash).read_bytes()
    assert raw[SPIFFS_START : SPIFFS_START + len(STORE_MAGIC)] == STORE_MAGIC
    again = connect(url(flash))  # another "process": a new board on the same flash file
    assert fs.read_file(again, "/flash/keep.txt") == b"kept"


def test_sd_can_be_a_host_directory(tmp_path):
    card = tmp_path / "card"
    (card / "pics").mkdir(parents=True)
    (card / "pics" / "a.bin").write_bytes(b"abc")
    repl = connect(url(flash16(tmp_path), maixpy_sd=str(card)))
    assert [e.path for e in fs.ls(repl, "/sd", recursive=True)] == ["/sd/pics", "/sd/pics/a.bin"]
    fs.write_file(repl, "/sd/new.txt", b"written by the board")
    assert (card / "new.txt").read_bytes() == b"written by the board"


def test_bad_sd_option_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="maixpy_sd"):
        connect(url(flash16(tmp_path), maixpy_sd=str(tmp_path / "missing")))


# --- the fs library ------------------------------------------------------------------------


def test_one_megabyte_round_trip_is_hash_checked(board, tmp_path):
    data = os.urandom(1 << 20)
    events = []
    t = fs.write_file(board, "/sd/big.bin", data, progress=events.append)
    assert t.sha256 == hashlib.sha256(data).hexdigest() and t.size == len(data)
    assert events[-1].done == events[-1].total == len(data) and len(events) > 100
    got = []
    assert fs.read_file(board, "/sd/big.bin", progress=got.append) == data
    assert got[-1].done == len(data)
    assert fs.sha256(board, "/sd/big.bin") == hashlib.sha256(data).digest()


def test_ls_stat_rm_mkdir_df(board):
    fs.write_file(board, "/sd/a.txt", b"12345")
    fs.mkdir(board, "/sd/sub")
    fs.write_file(board, "/sd/sub/b.txt", b"")
    assert fs.ls(board, "/sd") == [
        fs.Entry("/sd/a.txt", False, 5),
        fs.Entry("/sd/sub", True, 0),
    ]
    assert fs.stat(board, "sub") is None  # relative paths are on /flash
    assert fs.stat(board, "/sd/sub/b.txt") == fs.Entry("/sd/sub/b.txt", False, 0)
    usage = {u.mount: u for u in fs.df(board)}
    assert usage["/sd"].total == 16 << 20 and usage["/sd"].free < usage["/sd"].total
    assert usage["/flash"].total == 22 * 0x20000 and usage["/flash"].name_max == 128
    with pytest.raises(fs.FsError, match="is a directory"):
        fs.rm(board, "/sd/sub")
    with pytest.raises(fs.FsError, match="no directories"):
        fs.mkdir(board, "/flash/x")
    with pytest.raises(fs.FsError, match="EEXIST|exists"):
        fs.mkdir(board, "/sd/sub")
    assert fs.rm(board, "/sd/sub", recursive=True) == ["/sd/sub/b.txt", "/sd/sub"]
    fs.rm(board, "/sd/a.txt")
    assert fs.ls(board, "/sd") == []
    with pytest.raises(fs.FsError, match="no such file"):
        fs.rm(board, "/sd/a.txt")


def test_board_paths_are_checked_on_the_host():
    assert fs.board_path(":main.py") == "/flash/main.py"
    assert fs.board_path("/sd//x/./y") == "/sd/x/y"
    for bad in ("/etc/passwd", "/sd/../flash", "/"):
        with pytest.raises(UsageError):
            fs.board_path(bad)


def test_put_and_get_directories(board, tmp_path):
    src = tmp_path / "app"
    (src / "lib").mkdir(parents=True)
    (src / "boot.py").write_text("print('hi')\n")
    (src / "lib" / "util.py").write_bytes(b"X = 1\n")
    sd = fs.put(board, src, "/sd/")
    assert sorted(t.dest for t in sd) == ["/sd/app/boot.py", "/sd/app/lib/util.py"]
    flat = fs.put(board, src / "lib", "/flash/lib")  # SPIFFS: names with slashes
    assert [t.dest for t in flat] == ["/flash/lib/util.py"]
    assert "lib/util.py" in board.eval("__import__('os').listdir('/flash')")
    out = tmp_path / "back"
    got = fs.get(board, "/sd/app", out)
    assert len(got) == 2
    assert (out / "lib" / "util.py").read_bytes() == b"X = 1\n"
    assert (out / "boot.py").read_text() == "print('hi')\n"
    one = fs.get(board, "/sd/app/boot.py", tmp_path)
    assert one[0].dest == str(tmp_path / "boot.py")


def test_a_full_filesystem_refuses_before_writing(board):
    free = next(u.free for u in fs.df(board) if u.mount == "/sd")
    with pytest.raises(fs.NoSpaceError, match="nothing was written"):
        fs.write_file(board, "/sd/huge.bin", bytes(free + 1))
    assert fs.stat(board, "/sd/huge.bin") is None
    # filling /flash: the last file that does not fit is refused, the others stay
    chunk = bytes(600 * 1024)
    stored = 0
    with pytest.raises(fs.NoSpaceError):
        for i in range(10):
            fs.write_file(board, f"/flash/fill{i}.bin", chunk)
            stored += 1
    assert 3 <= stored < 10
    assert fs.stat(board, f"/flash/fill{stored}.bin") is None


def test_name_too_long_is_refused_on_the_host(board):
    with pytest.raises(UsageError, match="127 bytes"):
        fs.write_file(board, "/flash/" + "n" * 130, b"x")


def test_a_build_without_os_stat(tmp_path):
    repl = connect(url(flash16(tmp_path), maixpy_stat="0", maixpy_sd="4M"))
    assert repl.eval("hasattr(__import__('os'), 'stat')") is False
    fs.write_file(repl, "/sd/a.bin", b"abc" * 100)
    fs.mkdir(repl, "/sd/d")
    assert fs.ls(repl, "/sd") == [fs.Entry("/sd/a.bin", False, 300), fs.Entry("/sd/d", True, 0)]
    assert fs.read_file(repl, "/sd/a.bin") == b"abc" * 100


class _ResetMidway:
    """A progress listener that presses RESET once the transfer is under way."""

    def __init__(self, repl: MaixPyRepl, after: int) -> None:
        self.repl, self.after, self.done = repl, after, False

    def __call__(self, ev) -> None:
        if not self.done and ev.done >= self.after:
            self.done = True
            self.repl.port.sim_board.reset_to_run()


def test_reset_in_the_middle_of_a_put_is_a_clear_error_and_a_retry_works(board):
    data = os.urandom(40_000)
    with pytest.raises((ReplError, NoResponseError)) as info:
        fs.write_file(board, "/sd/model.bin", data, progress=_ResetMidway(board, 9000))
    assert "incomplete" in info.value.hint
    board.connect()  # the REPL comes back after the reset
    fs.write_file(board, "/sd/model.bin", data)
    assert fs.read_file(board, "/sd/model.bin") == data


def test_reset_in_the_middle_of_a_get_never_returns_partial_data(board, tmp_path):
    data = os.urandom(60_000)
    fs.write_file(board, "/sd/x.bin", data)
    with pytest.raises((ReplError, NoResponseError)):
        fs.get(board, "/sd/x.bin", tmp_path / "x.bin", progress=_ResetMidway(board, 12000))
    assert not (tmp_path / "x.bin").exists()
    board.connect()
    assert fs.get(board, "/sd/x.bin", tmp_path / "x.bin")[0].size == len(data)


def test_run_script_streams_output_and_reports_errors(board):
    pieces: list[bytes] = []
    fs.run_script(board, "for i in range(3):\n    print('line', i)\n", pieces.append)
    assert b"".join(pieces) == b"line 0\nline 1\nline 2\n"
    with pytest.raises(ReplError, match="ZeroDivisionError"):
        fs.run_script(board, "print('before')\n1/0\n", pieces.append)
    assert b"".join(pieces).endswith(b"before\n")


# --- the CLI ---------------------------------------------------------------------------------


def test_cli_fs_commands_and_exec_across_invocations(tmp_path, capsys):
    """Each command is a new process's board: /flash lives in the flash file, /sd in a dir."""
    from kflashpy.cli import main

    card = tmp_path / "card"
    card.mkdir()
    u = url(flash16(tmp_path), maixpy_sd=str(card))
    script = tmp_path / "hello.py"
    script.write_text("import os\nprint('files:', os.listdir('/sd'))\n")
    assert main(["-p", u, "fs", "put", str(script), "/sd/"]) == 0
    assert "put " in capsys.readouterr().out and (card / "hello.py").exists()
    assert main(["-p", u, "fs", "put", str(script), ":main.py"]) == 0
    capsys.readouterr()
    assert main(["--json", "-p", u, "fs", "ls"]) == 0
    paths = [e["path"] for e in json.loads(capsys.readouterr().out)["result"]["entries"]]
    assert "/flash/main.py" in paths
    assert main(["-p", u, "fs", "cat", "/sd/hello.py"]) == 0
    assert capsys.readouterr().out == script.read_text()
    assert main(["-p", u, "exec", str(script)]) == 0
    assert capsys.readouterr().out == "files: ['hello.py']\n"
    assert main(["-p", u, "exec", "-c", "1/0"]) == 1
    assert "ZeroDivisionError" in capsys.readouterr().err
    assert main(["-p", u, "fs", "mkdir", "/sd/d"]) == 0
    assert main(["-p", u, "fs", "get", "/sd/hello.py", str(tmp_path / "copy.py")]) == 0
    capsys.readouterr()
    assert (tmp_path / "copy.py").read_text() == script.read_text()
    assert main(["--json", "-p", u, "fs", "df"]) == 0
    mounts = {f["mount"] for f in json.loads(capsys.readouterr().out)["result"]["filesystems"]}
    assert mounts == {"/flash", "/sd"}
    assert main(["-p", u, "fs", "rm", "-r", "/sd/d", "/sd/hello.py"]) == 0
    assert sorted(p.name for p in card.iterdir()) == []
    assert main(["-p", u, "fs", "mkdir", "/flash/d"]) == 1
    assert "no directories" in capsys.readouterr().err
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(3 << 20))
    assert main(["-p", u, "fs", "put", str(big), "/flash/"]) == 1
    assert "nothing was written" in capsys.readouterr().err
    assert main(["-p", u, "fs", "ls", "/etc"]) == 2


def test_a_write_that_fills_the_card_fails_on_the_board_with_enospc(board):
    """What the host check prevents: MaixPy's own ENOSPC, mapped to NoSpaceError."""
    code = "f=open('/sd/x.bin','wb')\nf.write(bytes(17 << 20))"
    with pytest.raises(fs.NoSpaceError, match="full"):
        fs._run(board, code, "/sd/x.bin", "writing")
    assert fs.stat(board, "/sd/x.bin") == fs.Entry("/sd/x.bin", False, 0)  # truncated by open
