"""Reset wirings and the ROM stage against the virtual K210 (sim://)."""

import json

import pytest

from kflashpy.cli import main
from kflashpy.errors import NoResponseError
from kflashpy.isp.connect import load_ram, open_device
from kflashpy.isp.ramimage import load_ram_image
from kflashpy.isp.rom import Rom


@pytest.mark.parametrize(
    "sim_board, board, wiring",
    [
        ("maix-bit", "maix-bit", "dan"),
        ("maixduino", "maixduino", "go-openec"),
        ("kd233", "kd233", "kd233"),
    ],
)
def test_each_wiring_enters_isp(sim_board, board, wiring):
    dev = open_device(f"sim://?board={sim_board}", board=board)
    try:
        assert dev.reset_plan.name == wiring
        assert dev.port.sim_board.stage == "isp"
    finally:
        dev.close()


def test_auto_reports_which_wiring_answered():
    dev = open_device("sim://?board=maixduino", board="auto")
    try:
        assert dev.reset_plan.name == "kd233"
        assert any("'kd233' reset wiring" in n for n in dev.notes)
    finally:
        dev.close()


def test_wrong_wiring_fails_with_a_helpful_message(capsys):
    assert main(["-p", "sim://?board=maixduino", "-B", "maix-bit", "reboot"]) == 1
    err = capsys.readouterr().err
    assert "boot ROM did not answer" in err and "reset wiring tried: dan" in err
    assert "hint:" in err and "--board" in err


def test_silent_port_says_nothing_came_back():
    with pytest.raises(NoResponseError) as e:
        # DTR drives RESET on this board: the custom sequence holds it in reset
        open_device("sim://?board=maixduino", board="maixduino", reset_sequence="D1 W0.05")
    assert "boot ROM did not answer" in e.value.message
    assert "nothing came back at all" in e.value.hint


def test_rom_memory_write_lands_in_sram_and_resends_corrupted_frames():
    url = "sim://?board=maix-bit&corrupt=3e-4&dir=both&seed=3"
    dev = open_device(url, board="maix-bit")
    try:
        payload = bytes((i * 7) & 0xFF for i in range(12 * 1024))
        Rom(dev.link).write_memory(0x80010000, payload)
        assert dev.port.sim_board.sram.read(0x80010000, len(payload)) == payload
        assert dev.link.stats.retries > 0  # the faults were real and were recovered from
    finally:
        dev.close()


def test_load_ram_runs_a_program_from_sram(tmp_path, capsys):
    prog = tmp_path / "loop.bin"
    prog.write_bytes(b"\x13\x00\x00\x00" * 300 + b"\x6f\x00\x00\x00")  # nops, then j .
    dev = open_device("sim://?board=maix-bit", board="maix-bit")
    try:
        load_ram(dev, load_ram_image(prog))
        dev.link.wait(0.01)
        board = dev.port.sim_board
        assert board.stage == "core"  # the ROM jumped into our program
        assert board.sram.read(0x80000000, 1204) == prog.read_bytes()
    finally:
        dev.close()
    # through the CLI, with the board's wiring detected
    assert main(["--json", "-p", "sim://?board=kd233", "load-ram", str(prog)]) == 0
    out = capsys.readouterr().out
    assert '"entry": 2147483648' in out


def test_reboot_detects_the_wiring_and_resets_with_it(capsys):
    assert main(["--json", "-p", "sim://?board=maixduino", "-B", "auto", "reboot"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"]["wiring"] == "kd233" and doc["result"]["rebooted"] == "reset lines"


def test_connect_options_are_the_one_connection_parameter():
    import kflashpy
    from kflashpy.isp.connect import ConnectOptions

    assert ConnectOptions.of("sim://?board=kd233") == ConnectOptions(port="sim://?board=kd233")
    opts = kflashpy.ConnectOptions("sim://?board=kd233", board="kd233")
    assert ConnectOptions.of(opts) is opts
    res = kflashpy.reboot(opts)
    assert res.to_dict() == {"port": opts.port, "rebooted": "reset lines", "wiring": "kd233"}
