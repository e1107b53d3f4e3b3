"""Burning through the PyPI kflash 1.1.6 flasher running on the virtual K210 (sim://).

Nothing here mocks the client: the simulator runs the real flasher binary on its
emulated core, and the assertions read the virtual NOR flash.
"""

import json
import os
import random

import pytest
from support.paths import KMODELS

import kflashpy
from kflashpy.cli import main
from kflashpy.errors import InputError, Interrupted, KflashError
from kflashpy.image.bootimage import wrap_boot_image
from kflashpy.image.kfpkg import KfpkgEntry, write_kfpkg
from kflashpy.isp.api import regions_of
from kflashpy.isp.burn import WriteRegion, burn_on, erase_on

SIM = "sim://?board=maix-bit"
#: not the board default (1.5 Mbaud, measured by benchmarks/isp_burn_yolo.py), so the
#: baud switch is exercised with a rate that needs it
BAUD = 921600


def _flash_file(tmp_path, size=16 << 20):
    img = tmp_path / "board.img"
    img.write_bytes(b"\xff" * size)
    return img


def test_cli_burns_a_kmodel_and_reports_each_region(tmp_path, capsys):
    model = KMODELS / "v4" / "iris_nncase-v0.2.0-beta4.kmodel"
    img = _flash_file(tmp_path)
    url = f"{SIM}&flash={img}"
    rc = main(
        [
            "--json",
            "-p",
            url,
            "-B",
            "maix-bit",
            "-b",
            str(BAUD),
            "burn",
            "--stub",
            "kflash",
            str(model),
            "--addr",
            "0x300000",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0, doc["error"]
    (region,) = doc["result"]["regions"]
    data = model.read_bytes()
    assert region["status"] == "written" and region["bytes_written"] == len(data)
    assert doc["result"]["verification"] == "frame-crc"
    flash = img.read_bytes()
    assert flash[0x300000 : 0x300000 + len(data)] == data
    assert flash[0x300000 + len(data) : 0x310000] == b"\xff" * (0x10000 - len(data))


def test_kfpkg_burn_erase_and_reboot_into_the_firmware(tmp_path):
    fw = os.urandom(20000)
    data = b"\x00" * 0x2000
    pkg = write_kfpkg(
        tmp_path / "app.kfpkg",
        [KfpkgEntry(0, "fw.bin", True, fw), KfpkgEntry(0x200000, "data.bin", False, data)],
    )
    plan = kflashpy.plan_burn(kfpkg=pkg)
    with kflashpy.connect(SIM, board="maix-bit", baud=BAUD, stub="kflash") as dev:
        caps = dev.stage2.capabilities
        assert {"write", "erase", "chip-erase", "reboot"} <= caps and "read" not in caps
        result = burn_on(dev, regions_of(plan), reboot=False)
        assert [r.status for r in result.regions] == ["written", "written"]
        board = dev.port.sim_board
        wrapped = wrap_boot_image(fw)
        assert board.flash.read(0, len(wrapped)) == wrapped
        assert board.flash.read(0x200000, len(data)) == data
        assert erase_on(dev, 0x200000, 0x1000) == "erase"
        assert board.flash.read(0x200000, 0x2000) == b"\xff" * 0x1000 + b"\x00" * 0x1000
        with pytest.raises(InputError, match="4 KiB sectors"):
            erase_on(dev, 0x200800, 0x1000)
        assert dev.reboot() == "command"
        for _ in range(50):  # BOOT was released: the ROM boots our image from flash
            if board.stage == "firmware":
                break
            dev.link.wait(0.01)
        assert board.stage == "firmware" and board.boot_result.ok


@pytest.mark.parametrize(
    "faults",
    [
        "corrupt=1e-5&drop=5e-6&dir=to_board&seed=4",  # hits the 48 KiB write frame
        "corrupt=2e-2&drop=1e-2&dir=to_host&seed=2",  # hits the replies
    ],
)
def test_faults_are_recovered_without_silent_corruption(faults):
    """Seeded faults that hit: the burn recovers (resends after a barrier), and its
    claim of success is checked against the flash itself. The payload is seeded too:
    where a corrupted byte lands in the frame decides the outcome (see the next test)."""
    payload = random.Random(0).randbytes(48 * 1024)
    with kflashpy.connect(f"{SIM}&{faults}", board="maix-bit", baud=BAUD, stub="kflash") as dev:
        board = dev.port.sim_board
        result = burn_on(dev, [WriteRegion(0x3F0000, payload, "p")], reboot=False)
        hit = board.status()["faults"]
        assert sum(v for k, v in hit.items() if k.endswith(("corrupted", "dropped"))) > 0
        assert dev.link.stats.retries > 0
        assert result.regions[0].status == "written"
        assert board.flash.read(0x3F0000, len(payload)) == payload


def test_a_stub_left_answering_stale_replies_fails_loudly():
    """With this payload (as with 2 of 40 seeds tried) a corrupted byte in the write
    frame leaves kflash.py's stub answering every NOP with stale replies (``d7 e0``,
    ``d4 e2``), which only a reset and a new upload would clear: the burn must fail
    with "lost contact" and name what may be damaged, never claim success."""
    payload = random.Random(1).randbytes(48 * 1024)
    faults = "corrupt=1e-5&drop=5e-6&dir=to_board&seed=4"
    with (
        pytest.raises(KflashError) as e,
        kflashpy.connect(f"{SIM}&{faults}", board="maix-bit", baud=BAUD, stub="kflash") as dev,
    ):
        burn_on(dev, [WriteRegion(0x3F0000, payload, "p")], reboot=False)
    assert "lost contact" in str(e.value)
    assert "0x003F0000-0x003FBFFF" in (e.value.hint or "")
    assert dev.link.stats.unexpected


#: both flashers: the kflash 1.1.6 one (at a rate that needs a baud switch) and ours
STUBS = pytest.mark.parametrize("stub,baud", [("kflash", BAUD), ("kflashpy", None)])


@STUBS
def test_disconnect_mid_burn_fails_and_says_what_was_written(stub, baud):
    payload = os.urandom(128 * 1024)
    with (
        pytest.raises(KflashError) as e,
        kflashpy.connect(f"{SIM}&disconnect=60000", board="maix-bit", baud=baud, stub=stub) as dev,
    ):
        burn_on(dev, [WriteRegion(0x300000, payload, "model")], reboot=False)
    assert e.value.exit_code == 1
    assert "model:" in e.value.hint and "B acknowledged" in e.value.hint
    # what was sent and not acknowledged is named, at the flasher's erase unit
    assert e.value.at_risk and all(r.label == "model" for r in e.value.at_risk)
    assert "may now be erased or half-written: 0x0030" in e.value.hint


@STUBS
def test_ctrl_c_stops_at_a_frame_boundary_and_reports(stub, baud):
    payload = os.urandom(128 * 1024)
    regions = [WriteRegion(0x300000, payload, "model"), WriteRegion(0x400000, b"x" * 10, "tail")]

    def stop_after_first_frame(ev):
        if ev.stage == "write" and ev.done >= 0x10000:
            raise KeyboardInterrupt

    with kflashpy.connect(SIM, board="maix-bit", baud=baud, stub=stub) as dev:
        with pytest.raises(Interrupted) as e:
            burn_on(dev, regions, reboot=False, progress=stop_after_first_frame)
        assert "cut short: model (65536 of 131072 B" in e.value.message
        assert "not touched: tail" in e.value.message
        assert e.value.hint.startswith("the board is idle in ISP mode"), e.value.hint
        dev.stage2.greet()  # the board is idle and answering
        assert dev.port.sim_board.flash.read(0x300000, 0x10000) == payload[:0x10000]


@pytest.mark.parametrize("stub", ["kflashpy", "kflash"])
def test_ctrl_c_at_a_low_baud_drops_the_unsent_frames(stub):
    """At 115200 a 64 KiB frame is 5.7 s of wire: Ctrl-C drops what has not left the
    host, the frame cut on the line fails its CRC and is never programmed, and the board
    answers well within a second of board time; the next burn finishes the job."""
    payload = os.urandom(192 * 1024)
    region = WriteRegion(0x300000, payload, "model")
    with kflashpy.connect(SIM, board="maix-bit", baud=115200, stub=stub) as dev:
        board = dev.port.sim_board
        error, stopping = _ctrl_c_in_the_first_frame(dev, region)
        assert stopping < 1.0
        assert board.to_board.pending() == 0  # nothing left on the wire
        assert "cut short: model" in error.message
        burn_on(dev, [region], reboot=False)
        assert board.flash.read(0x300000, len(payload)) == payload


def _ctrl_c_in_the_first_frame(dev, region: WriteRegion) -> tuple[Interrupted, float]:
    """Burn ``region``, Ctrl-C once the first frame is acknowledged: (the error, the
    board seconds from the Ctrl-C to the end of the burn)."""
    board = dev.port.sim_board
    marks: list[float] = []

    def stop_in_the_first_frame(ev):
        if ev.stage == "write" and ev.done > 0 and not marks:
            marks.append(board.now)
            raise KeyboardInterrupt

    with pytest.raises(Interrupted) as e:
        burn_on(dev, [region], reboot=False, progress=stop_in_the_first_frame)
    return e.value, board.now - marks[0]


def test_ctrl_c_waits_a_bounded_time_for_a_busy_board(tmp_path):
    """After Ctrl-C the burn greets the board for at most SETTLE_S of port time (over
    `sim serve` the board can still be receiving frames the server had taken, in real
    time; here the "worst" flash takes 2 s per 64 KiB block erase), then says it did
    not answer instead of calling it idle. The next burn finishes the job."""
    from kflashpy.isp.burn import SETTLE_S

    flash = tmp_path / "old.img"
    flash.write_bytes(os.urandom(1 << 20))  # old contents: every block must be erased
    payload = os.urandom(192 * 1024)
    region = WriteRegion(0x40000, payload, "model")
    url = f"{SIM}&flash={flash}&flash_size=1M&timing=worst"
    with kflashpy.connect(url, board="maix-bit", baud=1500000) as dev:
        error, stopping = _ctrl_c_in_the_first_frame(dev, region)
        assert stopping < SETTLE_S + 0.05
        assert f"did not answer within {SETTLE_S:g} s" in error.hint, error.hint
        burn_on(dev, [region], reboot=False)
        assert dev.port.sim_board.flash.read(0x40000, len(payload)) == payload


def test_wire_flush_keeps_the_bytes_already_on_the_line():
    from kflashpy.sim.wire import Wire

    wire = Wire()
    wire.send(b"abcdefgh", 0.0, 10.0)  # one byte per second
    assert wire.unsent(2.5) == 5  # a, b delivered or done; c is going out
    assert wire.drop_unsent(2.5) == 5
    assert wire.pending() == 3 and wire.idle_at == 3.0
    assert b"".join(c for _, c in wire.receive(10.0, 10.0)) == b"abc"
    assert wire.send(b"z", 3.5, 10.0) == 4.5  # the line is free again


def test_cli_kfpkg_burn_leaves_exact_bytes(tmp_path, capsys):
    fw = os.urandom(30000)
    data = os.urandom(7000)
    pkg = write_kfpkg(
        tmp_path / "app.kfpkg",
        [KfpkgEntry(0, "fw.bin", True, fw), KfpkgEntry(0x300000, "m.bin", False, data)],
    )
    img = _flash_file(tmp_path)
    url = f"{SIM}&flash={img}"
    assert (
        main(
            [
                "-p",
                url,
                "-B",
                "maix-bit",
                "-b",
                str(BAUD),
                "--no-progress",
                "burn",
                "--stub",
                "kflash",
                str(pkg),
                "--no-reboot",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "app.kfpkg:fw.bin @0x00000000: written" in out and "per-frame CRC-32 only" in out
    flash = img.read_bytes()
    wrapped = wrap_boot_image(fw)
    assert flash[: len(wrapped)] == wrapped and flash[0x300000 : 0x300000 + len(data)] == data
