"""Several virtual boards in one command: one worker per board, rows, worst exit code."""

from __future__ import annotations

import _thread
import io
import json
import random
import threading

import pytest

from kflashpy.cli import main
from kflashpy.errors import EXIT_DEVICE, EXIT_INTERRUPTED, EXIT_MISMATCH, InputError, PortError
from kflashpy.isp import api, parallel
from kflashpy.isp.connect import ConnectOptions
from kflashpy.isp.parallel import BoardRow, claim_port, output_name, run_board, run_on_boards
from kflashpy.isp.ports import Candidate

BAUD = 3_000_000
ADDR = 0x100000
DATA = random.Random(18).randbytes(12 * 1024)


def _url(tmp_path, n: int, extra: str = "") -> str:
    return f"sim://?board=maix-bit&uid={n:016x}&flash={tmp_path / f'b{n}.img'}{extra}"


def _flash(tmp_path, n: int, start: int, size: int) -> bytes:
    with open(tmp_path / f"b{n}.img", "rb") as f:
        f.seek(start)
        return f.read(size)


def test_four_boards_in_parallel_one_fails_cleanly(tmp_path) -> None:
    plan = api.plan_burn([(ADDR, DATA)], board="maix-bit")
    # board 4's line is cut 27000 bytes in: past the bootstrap and the flasher (about
    # 19 KiB on the wire), in the middle of the 12 KiB write
    ports = [_url(tmp_path, n) for n in (1, 2, 3)] + [_url(tmp_path, 4, "&disconnect=27000")]
    seen_threads: set[str] = set()

    def update(row: BoardRow, ev) -> None:
        seen_threads.add(threading.current_thread().name)

    res = run_on_boards(
        ports, parallel.burn_operation(plan), name="burn", on_update=update,
        connection=ConnectOptions(board="maix-bit", baud=BAUD),
    )  # fmt: skip
    assert [b.status for b in res.boards] == ["ok", "ok", "ok", "failed"]
    assert res.exit_code == EXIT_DEVICE and res.passed == 3
    assert seen_threads == {f"board-{n}" for n in range(4)}  # one worker per board
    for n in (1, 2, 3):
        assert _flash(tmp_path, n, ADDR, len(DATA)) == DATA
        row = res.boards[n - 1]
        assert row.serial == f"{n:016x}-EF4018"
        assert row.result.regions[0].verified == "sha256"
    bad = res.boards[3]
    assert bad.error["kind"] == "port" and "disconnected" in bad.error["message"]
    assert "B acknowledged; may now be erased" in bad.error["hint"]  # the damage report
    doc = res.to_dict()
    assert [b["status"] for b in doc["boards"]] == ["ok", "ok", "ok", "failed"]
    assert doc["failed"] == 1 and doc["exit_code"] == EXIT_DEVICE
    # the boards do not slow one another down on their own clocks
    assert len({round(b.seconds, 6) for b in res.boards[:3]}) == 1


def test_cli_verify_on_two_boards_json_and_worst_exit(tmp_path, capsys) -> None:
    good, other = _url(tmp_path, 1), _url(tmp_path, 2)
    (tmp_path / "data.bin").write_bytes(DATA)
    img = bytearray(b"\xff" * (16 << 20))
    img[ADDR : ADDR + len(DATA)] = DATA
    (tmp_path / "b1.img").write_bytes(img)
    args = ["--json", "-p", good, "-p", other, "-B", "maix-bit", "-b", str(BAUD)]
    rc = main([*args, "verify", hex(ADDR), str(tmp_path / "data.bin")])
    doc = json.loads(capsys.readouterr().out)
    assert rc == EXIT_MISMATCH == doc["status"]
    rows = doc["result"]["boards"]
    assert [(r["port"], r["status"]) for r in rows] == [(good, "ok"), (other, "mismatch")]
    assert rows[1]["error"]["kind"] == "verify" and "data.bin" in rows[1]["error"]["message"]
    assert rows[0]["result"]["regions"][0]["ok"] is True


def test_cli_read_gives_each_board_its_own_file(tmp_path, capsys) -> None:
    for n in (1, 2):
        img = bytearray(b"\xff" * (16 << 20))
        img[:4] = bytes([n] * 4)
        (tmp_path / f"b{n}.img").write_bytes(img)
    out = tmp_path / "boot-{uid}.bin"
    ports = ["-p", _url(tmp_path, 1), "-p", _url(tmp_path, 2)]
    rc = main([*ports, "-B", "maix-bit", "-b", str(BAUD), "read", "--addr", "0", "--size", "4K",
               "-o", str(out)])  # fmt: skip
    text = capsys.readouterr().out
    assert rc == 0, text
    for n in (1, 2):
        got = (tmp_path / f"boot-{n:016x}.bin").read_bytes()
        assert got[:4] == bytes([n] * 4) and len(got) == 4096
    assert f"{2:016x}" in text and "flash unique id" in text  # the final table


def test_output_names() -> None:
    row = BoardRow(1, "/dev/ttyUSB1", unique_id="00aa")
    assert output_name("b.bin", row, several=False) == "b.bin"
    assert output_name("b.bin", row, several=True) == "b-2.bin"
    assert output_name("{port}/{uid}-{n}.bin", row, several=True) == "dev_ttyUSB1/00aa-2.bin"


def test_two_workers_never_open_one_port(tmp_path, monkeypatch) -> None:
    dev = tmp_path / "ttyUSB0"
    dev.touch()
    link = tmp_path / "board-link"
    link.symlink_to(dev)
    opened = []
    monkeypatch.setattr(ConnectOptions, "connect", lambda self, *a: opened.append(self.port))
    with claim_port(str(dev)):  # a worker holds the device: its alias is refused
        row = run_board(BoardRow(0, str(link)), parallel.flash_id_operation())
    assert row.status == "failed" and "already being driven" in row.error["message"]
    assert opened == []
    with claim_port(str(link)):  # released after use: claimable again
        pass
    with pytest.raises(InputError, match="given twice"):
        run_on_boards([str(dev), str(link)], parallel.flash_id_operation())


@pytest.mark.parametrize("how", ["stop event", "Ctrl-C"])
def test_stop_interrupts_every_board_cleanly(tmp_path, how) -> None:
    plan = api.plan_burn([(ADDR, DATA)], board="maix-bit")
    stop, fired = threading.Event(), threading.Event()

    def update(row: BoardRow, ev) -> None:
        if ev is not None and ev.stage == "write" and not fired.is_set():
            fired.set()
            if how == "Ctrl-C":
                _thread.interrupt_main()  # KeyboardInterrupt in the waiting main thread
                stop.wait(30)  # until the main thread has seen it and set the stop
            else:
                stop.set()

    ports = [_url(tmp_path, n) for n in (1, 2)]
    res = run_on_boards(ports, parallel.burn_operation(plan), on_update=update, stop=stop,
                        connection=ConnectOptions(board="maix-bit", baud=BAUD))  # fmt: skip
    assert res.interrupted and res.exit_code == EXIT_INTERRUPTED
    # the board that saw the stop is cut at a frame boundary; the other stops or finishes
    # (stopped before its burn began if it was still connecting: a clean stop too)
    assert {b.status for b in res.boards} <= {"interrupted", "ok"}
    messages = [b.error["message"] for b in res.boards if b.status == "interrupted"]
    assert any("interrupted by Ctrl-C" in m for m in messages)
    assert all("interrupted by Ctrl-C" in m or m.startswith("stopped during") for m in messages)
    assert not [t for t in threading.enumerate() if t.name.startswith("board-")]


def test_ports_auto_and_usage(monkeypatch, capsys) -> None:
    bridge = Candidate("/dev/ttyUSB7", "WCH CH340", 0x1A86, 0x7523, None, None)
    monkeypatch.setattr(parallel, "candidates", lambda: [bridge])
    assert parallel.auto_ports() == ["/dev/ttyUSB7"]
    monkeypatch.setattr(parallel, "candidates", lambda: [])
    with pytest.raises(PortError, match="--ports auto"):
        parallel.auto_ports()
    assert main(["-p", "a", "-p", "b", "reboot"]) == 2
    assert "reboot works on one board" in capsys.readouterr().err
    assert main(["-p", "a", "--ports", "auto", "flash-id"]) == 2


def test_live_table_redraws_in_place_on_a_terminal(monkeypatch) -> None:
    from kflashpy.cli import parallel as view
    from kflashpy.cli.session import Session
    from kflashpy.progress import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    monkeypatch.setattr(view.sys, "stderr", err)
    live = view.LiveView(Session(), ["/dev/ttyUSB0", "/dev/ttyUSB1"])
    row = BoardRow(0, "/dev/ttyUSB0", board="maix-bit", unique_id="00aa", stage="write")
    row.done, row.total, row.bytes_per_second = 50, 200, 2048.0
    live(row, Progress("write", 50, 200))
    row.status, row.stage = "ok", "done"
    live(row, None)  # the end of a board redraws at once
    first, second = err.getvalue().split("\x1b[3F")  # the second draw moves up 3 lines
    assert "flash unique id" in first and "25%" in first and "2.0 KiB/s" in first
    assert "/dev/ttyUSB1" in first and "waiting" in first
    assert "ok" in second.splitlines()[1]
