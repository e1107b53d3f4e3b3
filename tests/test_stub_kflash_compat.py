"""kflash.py 1.1.6 drives kflashpy's flasher (`kflash -l kflashpy_flasher.bin`).

kflash runs unmodified as a subprocess on a pty served by the virtual board (its DTR/RTS
calls are made no-ops, as in the sim conformance tests): it uploads our flasher to
0x80000000 at 115200 (the flasher copies itself to its link address), greets it, changes
the baud rate to 1.5 Mbaud with D6, initialises the flash with D7, writes 64 KiB D4 frames and reboots
with D5. The flash must then hold kflash's boot image and the board must boot it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kflashpy.stub import load

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from simbench import KFLASH_DIO_FLAG, boot_image, served_board  # noqa: E402

from kflashpy.sim.kflash_pty import kflash_command  # noqa: E402

BAUD = "1500000"


def test_kflash_116_burns_and_reboots_through_our_flasher(tmp_path):
    # 1.5 Mbaud, as users run it. kflash.py 1.1.6 moves on to the next frame after a
    # bad-checksum reply without resending (a known kflash bug), so a single byte the
    # flasher missed would fail this test: it also shows that our flasher serves the
    # UART in time while it programs the previous frame.
    firmware = os.urandom(70000)
    (tmp_path / "fw.bin").write_bytes(firmware)
    (tmp_path / "flasher.bin").write_bytes(load().flasher.image)
    with served_board() as server:
        proc = subprocess.run(
            kflash_command(["-n", "-b", BAUD, "-B", "dan", "-l", str(tmp_path / "flasher.bin"),
                            str(tmp_path / "fw.bin")], server.path),
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        log = proc.stdout + proc.stderr
        expected = boot_image(firmware, KFLASH_DIO_FLAG)
        assert server.board.flash.read(0, len(expected)) == expected, log[-2000:]
        assert "rebooting" in log
        assert server.board.stage == "firmware"  # D5 reset the SoC and the ROM booted it
