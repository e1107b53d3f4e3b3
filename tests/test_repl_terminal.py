"""``kflashpy repl`` under a pty (keys in, screen out) against the virtual MaixPy."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from support.maixpy import flash16

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")


class Screen:
    """A kflashpy process on a pseudo-terminal: type keys, wait for text on its screen."""

    def __init__(self, *args: str) -> None:
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kflashpy", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
        )
        os.close(slave)
        self.text = b""
        self.seen = 0

    def expect(self, pattern: bytes, timeout: float = 30.0) -> bytes:
        """Wait for ``pattern`` (a regex) after what was matched before; return the match."""
        rx = re.compile(pattern, re.DOTALL)
        end = time.monotonic() + timeout
        while True:
            m = rx.search(self.text, self.seen)
            if m:
                self.seen = m.end()
                return m.group(0)
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{pattern!r} not on the screen: {self.text[-600:]!r}")
            ready, _, _ = select.select([self.master], [], [], min(left, 0.2))
            if ready:
                try:
                    self.text += os.read(self.master, 4096)
                except OSError:  # the process ended and closed the pty
                    time.sleep(0.05)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=20)
        finally:
            os.close(self.master)


@pytest.fixture
def screens():
    opened: list[Screen] = []

    def start(*args: str) -> Screen:
        opened.append(Screen(*args))
        return opened[-1]

    yield start
    for s in opened:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def test_keys_in_screen_out_ctrl_c_ctrl_d_and_leave(tmp_path, screens):
    scr = screens("-p", f"sim://?flash={flash16(tmp_path)}", "repl")
    scr.expect(rb"Ctrl-\] leaves")
    scr.expect(rb"init end.*?>>> ", 60)
    scr.type(b"6*7\r")
    scr.expect(rb"42\r\n>>> ")
    scr.type(b"1/0\r")
    scr.expect(rb"ZeroDivisionError.*?>>> ")
    scr.type(b"import os; os.listdir('/')\r")  # expression values echo, as on MicroPython
    scr.expect(rb"\['flash'\]\r\n>>> ")
    scr.type(b"for i in range(2):\r")  # a compound statement continues with "... "
    scr.expect(rb"\.\.\. ")
    scr.type(b"    print('loop', i)\r\r")
    scr.expect(rb"loop 0\r\nloop 1\r\n>>> ")
    scr.type(b"abc\x03")  # Ctrl-C reaches the board: the line is dropped
    scr.expect(rb"\r\n>>> ")
    scr.type(b"\x04")  # Ctrl-D: MaixPy soft-reboots, the terminal stays
    scr.expect(rb"soft reboot.*?init end.*?>>> ", 30)
    scr.type(b"print('still here')\r")
    scr.expect(rb"still here\r\n>>> ")
    scr.type(b"\x1d")
    scr.expect(rb"left the terminal")
    assert scr.close() == 0


def test_terminal_reconnects_when_the_port_goes_away(tmp_path, screens):
    # the virtual port drops after 1200 bytes; every reconnection boots the board again
    scr = screens("-p", f"sim://?flash={flash16(tmp_path)}&disconnect=1200", "repl")
    scr.expect(rb">>> ", 60)
    scr.type(b"print('x' * 1500)\r")
    scr.expect(rb"connection lost; reconnecting", 60)
    scr.expect(rb"reconnected")
    scr.expect(rb"init end.*?>>> ", 60)
    scr.type(b"2+3\r")
    scr.expect(rb"5\r\n>>> ")
    scr.type(b"\x1d")
    assert scr.close() == 0


def test_reset_first_gets_a_prompt_past_a_looping_boot_py(tmp_path, screens):
    scr = screens("-p", f"sim://?flash={flash16(tmp_path)}&maixpy_boot=trap", "repl", "--reset")
    scr.expect(rb">>> ", 60)
    scr.type(b"'clean'\r")
    scr.expect(rb"'clean'\r\n>>> ")
    scr.type(b"\x1d")
    assert scr.close() == 0
    assert b"app: running" not in scr.text[scr.text.find(b"Ctrl-]") :]


def test_burn_monitor_opens_the_terminal_on_the_new_firmware(tmp_path, screens):
    from kflashpy.demo import demo_firmware

    fw = tmp_path / "maixpy.bin"
    fw.write_bytes(demo_firmware(64 * 1024))
    flash = tmp_path / "board.img"  # erased: the burn makes it bootable
    scr = screens(
        "-p", f"sim://?board=maix-bit&flash={flash}", "burn", "--firmware", str(fw), "--monitor"
    )
    scr.expect(rb"verified: .*?rebooted", 120)
    scr.expect(rb"connected to sim://.*?init end.*?>>> ", 60)
    scr.type(b"'monitor'\r")
    scr.expect(rb"'monitor'\r\n>>> ")
    scr.type(b"\x1d")
    assert scr.close() == 0


def test_terminal_keeps_going_through_a_reset_button_press(tmp_path):
    """RESET pressed while connected: the port stays, the terminal shows the new boot."""
    from kflashpy.isp.ports import open_port
    from kflashpy.maixpy.terminal import EXIT_KEY, Terminal

    u = f"sim://?flash={flash16(tmp_path)}"
    keys_r, keys_w = os.pipe()
    screen = bytearray()
    port = open_port(u)

    def show(data: bytes) -> None:
        screen.extend(data)
        if screen.count(b">>> ") == 1 and b"[pressed]" not in screen:
            screen.extend(b"[pressed]")
            port.sim_board.reset_to_run()
        elif screen.count(b"init end") == 2 and screen.endswith(b">>> "):
            os.write(keys_w, b"7*6\r")
        if b"42\r\n>>> " in screen:
            os.write(keys_w, EXIT_KEY)

    notes: list[str] = []
    term = Terminal(lambda: open_port(u), keys_r, show, notes.append, port=port)
    term.run()
    os.close(keys_r)
    os.close(keys_w)
    assert screen.count(b"[MaixPy] init end") == 2 and b"42\r\n>>> " in screen
    assert term.reconnects == 0 and notes == []


def test_the_readme_session(tmp_path, screens, capsys):
    """Burn MaixPy and a model, open the REPL, put boot.py and an image on /sd, compare."""
    from PIL import Image

    from kflashpy.cli import main
    from kflashpy.demo import demo_firmware

    mnist = Path(__file__).parent / "fixtures" / "kmodels" / "v3" / "mnist_maixpy-scripts.kmodel"
    fw, card = tmp_path / "maixpy.bin", tmp_path / "card"
    fw.write_bytes(demo_firmware(64 * 1024))
    card.mkdir()
    board = f"sim://?board=maix-bit&flash={tmp_path / 'board.img'}&maixpy_sd={card}"
    burn = ["-p", board, "burn", "--firmware", str(fw), "0x300000", str(mnist)]
    assert main(burn) == 0
    scr = screens("-p", board, "repl")
    scr.expect(rb"init end.*?>>> ", 60)
    scr.type(b"import os\r")
    scr.expect(rb">>> ")
    scr.type(b"os.listdir('/')\r")
    scr.expect(rb"\['flash', 'sd'\]\r\n>>> ")
    scr.type(b"\x1d")
    assert scr.close() == 0
    (tmp_path / "boot.py").write_text("import KPU as kpu\ntask = kpu.load('/sd/mnist.kmodel')\n")
    Image.fromarray(np.random.default_rng(9).integers(0, 256, (64, 64), np.uint8)).save(
        tmp_path / "digit.png"
    )
    for name in ("boot.py", "digit.png"):
        assert main(["-p", board, "fs", "put", str(tmp_path / name), "/sd/"]) == 0
    assert main(["-p", board, "fs", "put", str(mnist), "/sd/mnist.kmodel"]) == 0
    assert sorted(p.name for p in card.iterdir()) == ["boot.py", "digit.png", "mnist.kmodel"]
    capsys.readouterr()
    cmp = ["compare", str(mnist), "-i", str(tmp_path / "digit.png"), "--resize"]
    assert main(["-p", board, *cmp, "--path", "/sd/mnist.kmodel"]) == 0
    assert main(["-p", board, *cmp, "--addr", "0x300000"]) == 0
    assert capsys.readouterr().out.count("board and host agree") == 2


def test_monitor_with_json_is_refused_before_burning(tmp_path, capsys):
    from kflashpy.cli import main

    fw = tmp_path / "maixpy.bin"
    fw.write_bytes(bytes(4096))
    flash = tmp_path / "board.img"
    u = f"sim://?board=maix-bit&flash={flash}"
    assert main(["--json", "-p", u, "burn", "--firmware", str(fw), "--monitor"]) == 2
    assert "interactive" in capsys.readouterr().out and not flash.exists()
