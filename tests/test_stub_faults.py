"""The client issue's fault-injection cases, with kflashpy's flasher on the board.

Corrupted and dropped bytes in either direction must never end in a success with wrong
bytes (disconnect and Ctrl-C run for both flashers in test_isp_burn_kflash116_stub.py); with this flasher they must end in a success (every frame and reply is CRC-checked
and resent), verified by the on-board SHA-256.
"""

from __future__ import annotations

import os

import pytest

import kflashpy
from kflashpy.isp.burn import WriteRegion, burn_on

pytest.importorskip("kflashpy.sim.core")

SIM = "sim://?board=maix-bit"


@pytest.mark.parametrize(
    "faults",
    [
        "corrupt=2e-4&dir=to_board&seed=1",
        "corrupt=5e-4&dir=to_host&seed=2",
        "drop=1e-4&dir=both&seed=5",
    ],
)
def test_faults_are_recovered_and_the_result_verified(faults):
    payload = os.urandom(12 * 1024) + bytes(4 * 1024)
    with kflashpy.connect(f"{SIM}&{faults}", board="maix-bit", stub="kflashpy") as dev:
        board = dev.port.sim_board
        result = burn_on(dev, [WriteRegion(0x3F0000, payload, "p")], reboot=False)
        assert result.regions[0].status == "written"
        assert result.regions[0].verified == "sha256"
        assert board.flash.read(0x3F0000, len(payload)) == payload
        assert dev.stage2.read(0x3F0000, 2048) == payload[:2048]
