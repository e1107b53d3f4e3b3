"""Ctrl-C and misbehaving clients: a sim:// operation stops with exit 130, `sim serve`
always stops on q/Ctrl-C, and whatever a client did, the next client is served."""

from __future__ import annotations

import os
import pty
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import serial
from support.rom import REPLY, greet

from kflashpy.sim.board import VirtualBoard
from kflashpy.sim.config import BoardConfig
from kflashpy.sim.memory import SRAM_BASE

# lui a1, 0x38000; loop: lw a0, 4(a1); addi a2, a2, 1; j loop  (polls UARTHS rxdata)
POLLING = bytes.fromhex("b705003803a54500130616006ff09fff")


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # background shells start us ignoring it


def _kflashpy(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "kflashpy", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_sigint_default,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # progress lines as they happen
        **kw,
    )


def _wait_line(proc: subprocess.Popen, needle: str, timeout: float) -> list[str]:
    """Lines of ``proc``'s output up to one containing ``needle`` (read by a thread)."""
    lines: list[str] = []
    found = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if needle in line:
                found.set()

    threading.Thread(target=read, daemon=True).start()
    assert found.wait(timeout), f"no {needle!r} in {timeout} s: {lines}"
    return lines


def test_sigint_inside_engine_callbacks_interrupts_the_core() -> None:
    """SIGINT while the core polls a register (so the handler runs inside an MMIO
    callback): run_until_time raises KeyboardInterrupt at once, and the board runs on."""
    # Python's own handler, as in a terminal (a background shell starts us ignoring SIGINT)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    board = VirtualBoard(BoardConfig())
    try:
        board.sram.data[0 : len(POLLING)] = POLLING
        board.start_core(SRAM_BASE, board.now)
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            board.run_until_time(board.now + 20.0)  # minutes of polling on the host
        assert board.stage == "core" and 0 < board.now < 20.0
        before = board.core.instructions
        board.run_for(1e-4)  # the interrupted core goes on where it stopped
        assert board.core.instructions > before
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        board.close()
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_a_sim_burn_with_exit_130(tmp_path: Path) -> None:
    data = tmp_path / "data.bin"
    data.write_bytes(os.urandom(400_000))
    proc = _kflashpy("-p", "sim://?board=maix-bit", "burn", "0x300000", str(data))
    try:
        lines = _wait_line(proc, "data.bin: 25%", 120)
        proc.send_signal(signal.SIGINT)  # how soon it stops is benchmarks/ business
        assert proc.wait(300) == 130
    finally:
        proc.kill()
    out = "".join(lines)
    assert "interrupted by Ctrl-C" in out and "cut short: " in out and "data.bin (" in out, out


def _serve(tmp_path: Path, *extra: str, **kw) -> tuple[subprocess.Popen, Path]:
    link = tmp_path / "k210"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kflashpy", "--no-progress", "sim", "serve", "--link", str(link),
         *extra],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, preexec_fn=_sigint_default, **kw,
    )  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc, link


def _next_client_works(link: Path) -> None:
    # a new client process takes longer than this to start; a pty reports no opens, and
    # an open within a few ms of the last close looks like the same client to the server
    time.sleep(0.2)
    with serial.Serial(str(link), 115200, timeout=0.2) as port:
        assert greet(port, 10).endswith(REPLY)


def test_killed_client_mid_burn_then_the_next_client_works(tmp_path: Path) -> None:
    (tmp_path / "data.bin").write_bytes(os.urandom(200_000))
    server, link = _serve(tmp_path)
    try:
        client = _kflashpy("-p", str(link), "-B", "maix-bit", "burn", "0x300000",
                           str(tmp_path / "data.bin"))  # fmt: skip
        _wait_line(client, "data.bin: 25%", 120)
        time.sleep(0.5)
        client.kill()
        client.wait()
        _next_client_works(link)
        server.send_signal(signal.SIGINT)  # Ctrl-C stops the server
        assert server.wait(10) == 0
    finally:
        server.kill()


def test_ctrl_c_of_a_burn_over_sim_serve(tmp_path: Path) -> None:
    """Ctrl-C of a burn through `sim serve`: exit 130 with the report (the board, still
    receiving the frames the server had taken, is given a bounded time to answer:
    docs/burning.md "Ctrl-C"), and the next client is answered."""
    (tmp_path / "data.bin").write_bytes(os.urandom(400_000))
    server, link = _serve(tmp_path)
    client = _kflashpy("-p", str(link), "-B", "maix-bit", "burn", "0x300000",
                       str(tmp_path / "data.bin"))  # fmt: skip
    try:
        lines = _wait_line(client, "data.bin: 25%", 120)
        client.send_signal(signal.SIGINT)
        assert client.wait(60) == 130
        _next_client_works(link)
        server.send_signal(signal.SIGINT)
        assert server.wait(10) == 0
    finally:
        client.kill()
        server.kill()
    out = "".join(lines)
    assert "interrupted by Ctrl-C" in out and "cut short: " in out, out
    assert "run the same burn again to finish" in out, out


def test_partial_frame_and_two_clients_then_the_next_client_works(tmp_path: Path) -> None:
    server, link = _serve(tmp_path)
    try:
        with serial.Serial(str(link), 115200, timeout=0.2) as port:
            port.write(b"\xc0\xc2\x00\x00\x00\x11\x22")  # a frame cut short
        _next_client_works(link)
        with (
            serial.Serial(str(link), 115200, timeout=0.2, exclusive=False) as a,
            serial.Serial(str(link), 115200, timeout=0.2, exclusive=False) as b,
        ):
            b.write(b"\x55" * 40)
            assert greet(a, 10).endswith(REPLY)
        _next_client_works(link)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(10)


def test_q_key_stops_the_server(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    server, link = _serve(tmp_path, stdin=slave)
    os.close(slave)
    try:
        with serial.Serial(str(link), 115200, timeout=0.2) as port:
            port.write(b"\xc0" + os.urandom(3000))  # the board is busy receiving
            time.sleep(0.2)
            os.write(master, b"q")
            assert server.wait(10) == 0
    finally:
        server.kill()
        os.close(master)


def test_sim_kflash_serves_its_own_board(tmp_path: Path) -> None:
    """`kflashpy sim kflash -- ARGS`: the installed kflash.py burns a board served for it
    (its DTR/RTS calls on the pty are ignored), and the flash file holds the image."""
    payload = os.urandom(3000)
    (tmp_path / "app.bin").write_bytes(payload)
    image = tmp_path / "board.img"
    proc = subprocess.run(
        [sys.executable, "-m", "kflashpy", "sim", "kflash", "--flash-file", str(image),
         "--flash-size", "1M", "--", "-n", "-b", "115200", "-B", "dan",
         str(tmp_path / "app.bin")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "board time" in proc.stderr + proc.stdout
    assert payload in image.read_bytes()[:8192]


def test_kflash_then_kflashpy_on_one_server(tmp_path: Path) -> None:
    """kflash.py (through `sim kflash -p PTY`) on a running `sim serve`, killed mid-burn;
    then the next client is answered by the boot ROM."""
    (tmp_path / "app.bin").write_bytes(os.urandom(60_000))
    server, link = _serve(tmp_path)
    try:
        client = _kflashpy("sim", "kflash", "-p", str(link), "--", "-n", "-b", "115200",
                           "-B", "dan", str(tmp_path / "app.bin"))  # fmt: skip
        _wait_line(client, "Programming BIN", 120)
        client.kill()
        client.wait()
        time.sleep(1.0)  # kflash.py, its child, ends with it (and closes the pty)
        _next_client_works(link)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(10)


def test_sim_kflash_refuses_a_port_of_its_own() -> None:
    from kflashpy.errors import InputError
    from kflashpy.sim.kflash_pty import kflash_command

    with pytest.raises(InputError, match="-p/--port"):
        kflash_command(["-p", "/dev/ttyUSB0", "app.bin"], "/dev/pts/9")
    assert kflash_command(["app.bin"], "/dev/pts/9")[-3:] == ["-p", "/dev/pts/9", "app.bin"]
