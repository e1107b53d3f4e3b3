"""The client issue's fault-injection cases, with kflashpy's flasher on the board.

Corrupted and dropped bytes in either direction must never end in a success with wrong
bytes; with this flasher they must end in a success (every frame and reply is CRC-checked
and resent), verified by the on-board SHA-256.
"""

from __future__ import annotations

import os

import pytest

import kflashpy
from kflashpy.errors import Interrupted, KflashError
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


def test_disconnect_mid_burn_fails_and_says_what_was_written():
    payload = os.urandom(128 * 1024)
    with (
        pytest.raises(KflashError) as e,
        kflashpy.connect(f"{SIM}&disconnect=60000", board="maix-bit", stub="kflashpy") as dev,
    ):
        burn_on(dev, [WriteRegion(0x300000, payload, "model")], reboot=False)
    assert e.value.exit_code == 1
    assert "model:" in e.value.hint and "acknowledged before the failure" in e.value.hint


def test_ctrl_c_stops_at_a_frame_boundary_and_reports():
    payload = os.urandom(128 * 1024)
    regions = [WriteRegion(0x300000, payload, "model"), WriteRegion(0x400000, b"x" * 10, "tail")]

    def stop_after_first_frame(ev):
        if ev.stage == "write" and ev.done >= 0x10000:
            raise KeyboardInterrupt

    with kflashpy.connect(SIM, board="maix-bit", stub="kflashpy") as dev:
        with pytest.raises(Interrupted) as e:
            burn_on(dev, regions, reboot=False, progress=stop_after_first_frame)
        assert "cut short: model (65536 of 131072 B" in e.value.message
        assert "not touched: tail" in e.value.message
        dev.stage2.greet()  # the board is idle and answering
        assert dev.port.sim_board.flash.read(0x300000, 0x10000) == payload[:0x10000]
