"""Fault plans and the deterministic fault injector."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest
import serial

from kflashpy.errors import InputError
from kflashpy.isp.frames import RomOp, legacy_short_request
from kflashpy.isp.slip import encode
from kflashpy.sim.faults import FaultInjector, FaultPlan

GREETING = encode(legacy_short_request(RomOp.NOP))
REPLY = bytes.fromhex("c0c2e0c0")

DATA = bytes(range(256)) * 400  # 102 400 bytes


def feed(inj: FaultInjector, data: bytes, sizes: list[int], direction: str = "to_board") -> bytes:
    out = bytearray()
    pos = 0
    k = 0
    while pos < len(data):
        n = sizes[k % len(sizes)]
        out += getattr(inj, direction)(data[pos : pos + n])
        pos += n
        k += 1
    return bytes(out)


def test_query_round_trip_and_defaults() -> None:
    plan = FaultPlan.from_query(
        parse_qs(
            "board=maix-bit&corrupt=1e-4&drop=2e-4&dir=host&disconnect=100k&power_cut=2.5&seed=7"
        )
    )
    assert plan == FaultPlan(1e-4, 2e-4, "host", 102400, 2.5, 7)
    assert FaultPlan.from_query(parse_qs(plan.to_query())) == plan
    assert FaultPlan.from_query({"flash": "x.img"}) == FaultPlan()
    assert not FaultPlan().active and FaultPlan().to_query() == ""


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"corrupt": "2"}, "corrupt=2.0 is outside"),
        ({"drop": "often"}, "drop='often' is not a number"),
        ({"dir": "sideways"}, "dir='sideways'"),
        ({"power_cut": "-1"}, "power_cut=-1.0"),
        ({"disconnect": "lots"}, "disconnect='lots'"),
    ],
)
def test_bad_query_names_the_parameter(query: dict, message: str) -> None:
    with pytest.raises(InputError, match=message):
        FaultPlan.from_query(query)


def test_no_plan_is_transparent() -> None:
    inj = FaultInjector()
    assert inj.to_board(DATA) == DATA and inj.to_host(DATA) == DATA
    assert not inj.disconnected and not inj.power_cut_due(1e9)


def test_rates_are_about_right_and_split_independent() -> None:
    plan = FaultPlan(corrupt_rate=1e-3, drop_rate=1e-3, seed=3)
    whole = FaultInjector(plan).to_board(DATA)
    inj = FaultInjector(plan)
    inj.to_host(b"x" * 999)  # the other direction does not disturb this one
    pieces = feed(inj, DATA, [1, 7, 4096, 13])
    assert pieces == whole
    stats = inj.stats()
    assert 50 < stats["to_board_dropped"] < 160 and 50 < stats["to_board_corrupted"] < 160
    assert len(whole) == len(DATA) - stats["to_board_dropped"]
    # a corrupted byte differs in exactly one bit
    clean = FaultInjector(FaultPlan(corrupt_rate=1e-3, seed=3)).to_board(DATA)
    diffs = [a ^ b for a, b in zip(clean, DATA, strict=True) if a != b]
    assert diffs and all(bin(x).count("1") == 1 for x in diffs)
    assert FaultInjector(FaultPlan(corrupt_rate=1e-3, seed=4)).to_board(DATA) != clean


def test_direction_filter() -> None:
    inj = FaultInjector(FaultPlan(drop_rate=0.5, direction="host", seed=1))
    assert inj.to_board(DATA) == DATA
    assert len(inj.to_host(DATA)) < len(DATA)


def test_rate_one_drops_everything() -> None:
    assert FaultInjector(FaultPlan(drop_rate=1.0)).to_host(DATA) == b""


def test_disconnect_after_counts_both_directions() -> None:
    inj = FaultInjector(FaultPlan(disconnect_after=10))
    assert inj.to_board(b"123456") == b"123456"
    assert inj.to_host(b"abcdef") == b"abcd"
    assert inj.disconnected
    assert inj.to_board(b"more") == b""


def test_power_cut_due() -> None:
    inj = FaultInjector(FaultPlan(power_cut_at=2.5))
    assert not inj.power_cut_due(2.4) and inj.power_cut_due(2.5)


def open_sim(query: str) -> serial.SerialBase:
    serial.protocol_handler_packages.append("kflashpy.sim")
    try:
        port = serial.serial_for_url(f"sim://?{query}", baudrate=115200, do_not_open=True)
    finally:
        serial.protocol_handler_packages.remove("kflashpy.sim")
    port.dtr = port.rts = False
    port.timeout = 0.05
    port.open()
    board = port.sim_board
    board.reset_into_isp()
    assert board.run_until(lambda: board.stage == "isp", 0.1)
    return port


def exchange_greetings(port: serial.SerialBase, count: int) -> bytes:
    got = b""
    for _ in range(count):
        port.write(GREETING)
        got += port.read(64)
    return got


def test_board_line_faults_from_the_url() -> None:
    """The sim:// port applies the plan: same seed, same damage; other seed, other damage."""
    clean = exchange_greetings(open_sim("flash_size=1M"), 200)
    assert clean == REPLY * 200
    faulty = [
        exchange_greetings(open_sim(f"flash_size=1M&corrupt=3e-3&drop=3e-3&seed={s}"), 200)
        for s in (5, 5, 6)
    ]
    assert faulty[0] == faulty[1] != faulty[2]
    assert 100 < faulty[0].count(REPLY) < 200


def test_board_disconnect_from_the_url() -> None:
    port = open_sim("flash_size=1M&disconnect=40")
    assert exchange_greetings(port, 1) == REPLY
    with pytest.raises(serial.SerialException, match="disconnected"):
        exchange_greetings(port, 3)


def test_board_power_cut_from_the_url() -> None:
    port = open_sim("flash_size=1M&power_cut=0.5")
    board = port.sim_board
    board.run_for(0.6)
    assert not board.powered and board.stage == "reset"
    assert exchange_greetings(port, 1) == b""


def test_board_power_cut_leaves_an_erase_half_done() -> None:
    """power_cut= reaches the flash: an erase running at the cut is left part done."""
    from kflashpy.sim.board import VirtualBoard
    from kflashpy.sim.config import BoardConfig

    board = VirtualBoard(BoardConfig.from_url("sim://?flash_size=1M&power_cut=0.01"))
    flash = board.flash
    flash.preload(0, b"\x00" * 4096)
    for command in (b"\x06", b"\x20\x00\x00\x00"):  # WREN, 4 KiB sector erase at 0
        flash.select(board.now)
        flash.exchange(command, board.now)
        flash.deselect(board.now)
    assert flash.busy(board.now)
    board.run_until_time(0.05)
    assert not board.powered
    erased = flash.read(0, 4096).count(0xFF)
    assert 0 < erased < 2048  # ~22 % of a 45 ms erase after 10 ms
    board.close()
