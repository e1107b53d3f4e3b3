"""Conformance (b): PyPI kflash.py 1.1.6 itself burns through `kflashpy sim serve`.

kflash runs as a subprocess, unmodified except that its DTR/RTS calls (which a pty
cannot take) are made no-ops by a wrapper; the server resets the board into ISP mode
when kflash opens the pty. One kfpkg carries a kmodel for 0x300000 (raw) and a
firmware for 0 (boot image with SHA-256 prefix); the flash file must then hold
exactly those bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from simbench import (  # noqa: E402
    KFLASH_DIO_FLAG,
    boot_image,
    firmware_like_payload,
    run_kflash,
    start_serve_cli,
    write_kfpkg,
)

KMODEL = Path(__file__).resolve().parent / "fixtures/kmodels/v3/iris_nncase-v0.1.0-rc5.kmodel"
MODEL_ADDRESS = 0x300000
#: kflash changes the stub's UART to this rate after the upload (D6)
BAUD = 1500000


def test_kflash_burns_kmodel_and_firmware(tmp_path: Path) -> None:
    kmodel = KMODEL.read_bytes()
    firmware = firmware_like_payload(6000, seed=7)
    package = write_kfpkg(
        tmp_path / "both.kfpkg",
        [(MODEL_ADDRESS, "model.kmodel", kmodel, False), (0, "firmware.bin", firmware, True)],
    )
    image = tmp_path / "board.img"
    server, pty = start_serve_cli(image, "4M")
    try:
        log = run_kflash(pty, BAUD, package, timeout=300)
        _, err = server.communicate(timeout=30)
    finally:
        server.kill()
    flash = image.read_bytes()
    assert "Baudrate changed" in log and "Rebooting" in log, log[-3000:]
    assert flash[MODEL_ADDRESS : MODEL_ADDRESS + len(kmodel)] == kmodel, log[-3000:] + err
    expected = boot_image(firmware, KFLASH_DIO_FLAG)
    assert flash[: len(expected)] == expected
    # nothing else was touched: the rest of both 64 KiB blocks is still erased
    assert flash[len(expected) : 0x10000] == b"\xff" * (0x10000 - len(expected))
    rest = MODEL_ADDRESS + len(kmodel)
    assert flash[rest : MODEL_ADDRESS + 0x10000] == b"\xff" * (MODEL_ADDRESS + 0x10000 - rest)
