"""The pty server: bytes, baud changes, virtual time, reset commands, client detection."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import serial

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from simbench import start_serve_cli  # noqa: E402
from support.rom import REPLY, greet  # noqa: E402

from kflashpy.isp.frames import RomOp, legacy_short_request
from kflashpy.isp.slip import encode
from kflashpy.sim.board import VirtualBoard
from kflashpy.sim.config import BoardConfig
from kflashpy.sim.serve import PtyServer, pty_baud


class Running:
    """A PtyServer served from a thread for the duration of a test."""

    def __init__(self, server: PtyServer) -> None:
        self.server = server
        self.events: list[str] = []
        server.on_event = self.events.append
        self.thread = threading.Thread(target=server.serve, daemon=True)
        self.thread.start()

    @property
    def board(self) -> VirtualBoard:
        return self.server.board  # type: ignore[return-value]

    def wait_for(self, predicate, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < deadline, f"timed out; events: {self.events}"
            time.sleep(0.01)


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    board = VirtualBoard(BoardConfig())
    server = PtyServer(board, link=tmp_path / "k210", control=tmp_path / "ctl", status_interval=0.0)
    run = Running(server)
    statuses: list[dict] = []
    server.on_status = statuses.append
    yield run
    server.stop()
    run.thread.join(5)
    server.close()
    board.close()
    assert statuses and statuses[-1]["pty"] == server.path
    assert not (tmp_path / "k210").exists() and not (tmp_path / "ctl").exists()


def open_port(running: Running, baud: int = 115200) -> serial.Serial:
    port = serial.Serial(str(running.server.link or running.server.path), baud, timeout=0.2)
    running.wait_for(lambda: running.server.client)
    return port


def test_greeting_through_the_link(running: Running) -> None:
    assert os.path.realpath(running.server.link) == running.server.path
    with open_port(running) as port:
        assert greet(port).endswith(REPLY)
    running.wait_for(lambda: not running.server.client)
    assert running.events[:3] == [
        f"client opened {running.server.path}",
        "command: isp",
        "host baud 115200",
    ]
    assert "command: isp" in running.events and "client closed the port" in running.events


def test_baud_change_reaches_the_board(running: Running) -> None:
    with open_port(running) as port:
        port.baudrate = 1500000
        running.wait_for(lambda: running.board.host_baud == 1500000)
        assert pty_baud(port.fd) == 1500000
        assert not greet(port, 0.5).endswith(REPLY)  # the ROM listens at 115200: garbage
        assert running.board.status()["garbled_in"] > 0
        port.baudrate = 115200
        assert greet(port).endswith(REPLY)


def test_idle_time_follows_the_host_clock(running: Running) -> None:
    with open_port(running) as port:
        assert greet(port).endswith(REPLY)
        v0, t0 = running.board.now, time.monotonic()
        time.sleep(0.5)
        assert greet(port).endswith(REPLY)
        dv, dt = running.board.now - v0, time.monotonic() - t0
    # the sleep costs its real length, not less and not much more
    assert 0.45 <= dv <= dt + 0.1


def test_busy_board_runs_ahead_of_the_host_clock(running: Running) -> None:
    """64 KiB of ISP frames at 115200 need ~5.7 virtual seconds; the host does not wait them."""
    frame = encode(legacy_short_request(RomOp.NOP))
    with open_port(running) as port:
        t0, v0 = time.monotonic(), running.board.now
        port.write(frame * 4400)  # 66 000 bytes
        got = b""
        while got.count(b"\xc0\xc2\xe0\xc0") < 4400 and time.monotonic() - t0 < 20:
            got += port.read(port.in_waiting or 1)
        dv, dt = running.board.now - v0, time.monotonic() - t0
    assert got.count(REPLY) == 4400
    assert dv >= 66000 * 10 / 115200
    assert dt < dv / 2


def test_control_fifo_and_on_open(running: Running) -> None:
    with open_port(running) as port:
        running.wait_for(lambda: running.board.stage == "isp")
        Path(running.server.control).write_text("run\nbogus\n")
        running.wait_for(lambda: running.board.stage != "isp" or running.board.resets > 1)
        assert "command: run" in running.events
        assert any(e.startswith("unknown command 'bogus'") for e in running.events)
        Path(running.server.control).write_text("isp\n")
        running.wait_for(lambda: running.events[-1] == "command: isp")
        assert greet(port).endswith(REPLY)
        Path(running.server.control).write_text("quit\n")
        running.thread.join(5)
        assert running.server.stopped


def test_disconnect_fault_stops_the_server() -> None:
    board = VirtualBoard(BoardConfig.from_url("sim://?disconnect=300"))
    run = Running(PtyServer(board))
    with open_port(run) as port:
        assert greet(port).endswith(REPLY)
        for _ in range(20):
            if run.server.stopped:
                break
            greet(port, 0.3)
        run.thread.join(5)
        assert run.server.stopped and run.events[-1] == "disconnected (fault injection)"
    run.server.close()
    board.close()


def test_bad_paths(tmp_path: Path) -> None:
    from kflashpy.errors import InputError

    (tmp_path / "file").write_text("x")
    board = VirtualBoard(BoardConfig())
    with pytest.raises(InputError, match="exists and is not a FIFO"):
        PtyServer(board, control=tmp_path / "file")
    with pytest.raises(InputError, match="a file of that name exists"):
        PtyServer(board, link=tmp_path / "file")
    with pytest.raises(InputError, match="on_open"):
        PtyServer(board, on_open="later")
    board.close()


def test_cli_serve_keeps_the_flash_file(tmp_path: Path) -> None:
    """`kflashpy sim serve --once` prints the pty, serves one client, flushes its flash file."""
    image = tmp_path / "board.img"
    proc, path = start_serve_cli(image, "1M")
    try:
        assert path.startswith("/dev/pts/")
        with serial.Serial(path, 115200, timeout=2) as port:
            assert greet(port).endswith(REPLY)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "client opened" in err and "isp" in err
    assert image.stat().st_size == 1 << 20


def test_kflashpy_burns_through_sim_serve(tmp_path: Path) -> None:
    """The issue's user story: `kflashpy sim serve` in one terminal, `kflashpy burn` on
    its pty in another, our own flasher at 1.5 Mbaud. The emulated flasher runs slower
    than real time; the client measures that on its first upload frame and waits
    accordingly (a pty has no DTR/RTS: the server resets the board when it is opened)."""
    import subprocess

    image = tmp_path / "board.img"
    data = os.urandom(100_000)
    (tmp_path / "data.bin").write_bytes(data)
    proc, path = start_serve_cli(image, "4M")
    try:
        burn = subprocess.run(
            [sys.executable, "-m", "kflashpy", "--no-progress", "-p", path, "-B", "maix-bit",
             "-b", "1500000", "burn", "--addr", "0x100000", str(tmp_path / "data.bin")],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert burn.returncode == 0, burn.stdout + burn.stderr
    assert "on-board SHA-256" in burn.stdout + burn.stderr
    assert image.read_bytes()[0x100000 : 0x100000 + len(data)] == data


def test_cli_info_json(capsys) -> None:
    from kflashpy.cli import main

    code = main(["--json", "sim", "info", "--chip", "gd25lq128", "--flash-size", "8M",
                 "--fault", "drop=1e-3", "--fault", "seed=3"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc
    assert doc["result"]["flash"]["jedec_id"] == "c86017"
    assert doc["result"]["faults"] == "drop=0.001&seed=3"
    assert main(["sim", "info", "--fault", "drop"]) == 2
    assert "not KEY=VALUE" in capsys.readouterr().err
    assert main(["sim", "info", "--fault", "drop=lots"]) == 2


def test_cli_flash_dump(tmp_path: Path, capsys) -> None:
    from kflashpy.cli import main

    image = tmp_path / "board.img"
    image.write_bytes(b"\x00" * 16 + b"model" + b"\xff" * 100)
    out = tmp_path / "out.bin"
    assert main(["sim", "flash-dump", str(image), "-a", "16", "-o", str(out), "--trim"]) == 0
    assert out.read_bytes() == b"model"
    assert main(["sim", "flash-dump", str(image), "-a", "16", "-l", "1M", "-o", str(out)]) == 2
    assert "run past its end" in capsys.readouterr().err


def test_status_line() -> None:
    from kflashpy.cli.sim import _status_line

    board = VirtualBoard(BoardConfig())
    board.run_for(0.01)
    line = _status_line({**board.status(), "client": False})
    assert "isp" in line and "[no client]" in line and "baud 115" in line
    board.close()
