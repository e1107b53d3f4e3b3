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


def test_hash_list_comes_in_pieces_that_survive_a_noisy_reply_line():
    """A 16-sector hash list in one reply (560 B) crosses a line that damages 1 byte in 200
    one time in 16; pieces of a few sectors mostly do, and the list resumes after the last
    good one."""
    from hashlib import sha256

    from kflashpy.sim.faults import FaultInjector, FaultPlan

    with kflashpy.connect(SIM, board="maix-bit", stub="kflashpy") as dev:
        board = dev.port.sim_board
        board.flash.data[0x300800:0x310800] = os.urandom(0x10000)
        board.faults = FaultInjector(FaultPlan(corrupt_rate=5e-3, direction="to_host", seed=3))
        got = dev.stage2.hash_list(0x300800, 0x10000)  # an unaligned start, too
        flash = board.flash.read(0x300800, 0x10000)
        want = [sha256(flash[0:0x800]).digest()]
        want += [sha256(flash[o : o + 0x1000]).digest() for o in range(0x800, 0x10000, 0x1000)]
        assert got == want
        assert board.status()["faults"]["to_host_corrupted"] > 2


def test_hints_say_what_came_back():
    from kflashpy.isp.kfpy_stage2 import _seen

    silent = "the board answered before but went silent"
    hint = _seen(["damaged reply", "no reply", "damaged reply"], silent)
    assert "2 replies came back damaged (CRC mismatch)" in hint and silent not in hint
    hint = _seen(["request damaged", "request damaged"], silent)
    assert "the board received 2 requests damaged" in hint
    assert _seen(["no reply"] * 3, silent).startswith(silent)


def test_campaign_seed_flasher_upload_through_host_to_board_noise():
    """bench_faults.py "corrupt to board" seed 0 (1e-3 per byte): the upload stopped at
    1 KiB pieces, which got through one time in three; 256-byte pieces get through."""
    with kflashpy.connect(
        f"{SIM}&corrupt=1e-3&dir=board&seed=0", board="maix-bit", stub="kflashpy"
    ) as dev:
        assert dev.stage2.identify().size == 16 << 20
        assert dev.port.sim_board.status()["faults"]["to_board_corrupted"] > 10
