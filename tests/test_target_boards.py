import pytest

from kflashpy.errors import FormatError, InputError
from kflashpy.target.boards import (
    get_board,
    get_firmware,
    load_boards,
    load_firmware_file,
    load_firmwares,
)

REQUIRED_BOARDS = [
    "maix-bit",
    "maix-bit-mic",
    "maix-dock",
    "maix-go",
    "maix-go-cmsis-dap",
    "maixduino",
    "maix-amigo",
    "maix-cube",
    "maix-nano",
    "m1",
    "m1w",
    "m5stickv",
    "kd233",
    "trainer",
    "generic",
]


def test_every_required_board_is_complete():
    boards = load_boards()
    assert set(REQUIRED_BOARDS) <= set(boards)
    for b in boards.values():
        assert b.flash_size == 16 << 20 and b.max_baud >= 115200 and b.default_baud <= b.max_baud
        if b.wiring is None:
            assert b.auto_wirings and not b.reset_isp
        else:
            assert len(b.reset_isp) == 3 and len(b.reset_run) == 3
            assert all(
                s.hold == 0.1 and s.first in ("dtr", "rts") for s in b.reset_isp + b.reset_run
            )


@pytest.mark.parametrize(
    "name,wiring",
    [
        ("dan", "dan"),
        ("bit", "dan"),
        ("bit_mic", "kd233"),
        ("goE", "go-openec"),
        ("goD", "go-cmsis-dap"),
        ("maixduino", "go-openec"),
        ("kd233", "kd233"),
        ("trainer", "dan"),
    ],
)
def test_kflash_board_names_map_to_their_wiring(name, wiring):
    assert get_board(name).wiring.name == wiring


def test_reset_sequences_hold_boot_low_while_reset_is_released():
    """Entering ISP ends with BOOT asserted and RESET released; running ends with both released."""
    for b in load_boards().values():
        if b.wiring is None or b.wiring.name == "go-cmsis-dap":
            continue  # the old CMSIS-DAP bridge inverts its lines
        last_isp, last_run = b.reset_isp[-1], b.reset_run[-1]
        boot, reset = b.wiring.boot_line, b.wiring.reset_line
        assert getattr(last_isp, boot) and not getattr(last_isp, reset)
        assert not getattr(last_run, boot) and not getattr(last_run, reset)
        assert any(getattr(s, reset) for s in b.reset_isp)


def test_usb_hints():
    assert get_board("maix-dock").usb[0].vid == 0x1A86
    go = get_board("maix-go").usb[0]
    assert (go.vid, go.pid, go.interface) == (0x0403, 0x6010, 1)


def test_firmware_layouts():
    fws = load_firmwares()
    maixpy = fws["maixpy"]
    spiffs = next(r for r in maixpy.reserved_regions if r.name == "spiffs")
    assert (spiffs.start, spiffs.size) == (0xD00000, 3 << 20)
    assert maixpy.kmodel_versions == (3, 4) and maixpy.load_flash
    assert fws["maixpy-minimum"].kmodel_versions == (3,)
    assert fws["maixpy-minimum-v4"].kmodel_versions == (3, 4)
    assert fws["maixpy-m5stickv"].typical_size == 1_493_375
    assert fws["maixpy-minimum"].reserved_regions == maixpy.reserved_regions  # inherited
    assert {"kboot", "sdk"} <= set(fws)
    assert get_firmware("minimum").id == "maixpy-minimum"


def test_unknown_names_list_the_known_ones():
    with pytest.raises(InputError, match="no-such-board") as e:
        get_board("no-such-board")
    assert "maix-bit" in e.value.hint
    with pytest.raises(InputError) as e:
        get_firmware("no-such-fw")
    assert "maixpy-minimum" in e.value.hint


def test_user_layout_file(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        '[firmwares.mine]\nname = "Mine"\nkmodel_versions = [4]\ntypical_size = "1M"\n'
        'regions = [{ name = "fs", start = "0x800000", size = "1M", kind = "filesystem", reserved = true }]\n'
    )
    fw = get_firmware(str(f))
    assert fw.id == "mine" and fw.reserved_regions[0].start == 0x800000
    bad = tmp_path / "bad.toml"
    bad.write_text("[firmwares.x]\nregions = [{ start = 'zz', size = 1 }]\n")
    with pytest.raises(FormatError):
        load_firmware_file(bad)
    bad.write_text("not = [toml")
    with pytest.raises(FormatError, match="TOML"):
        load_firmware_file(bad)


def test_board_data_agrees_with_itself():
    """Each wiring's description names only boards that use it (Nano: go-openec, settled
    by kflash_gui's per-board list, docs/formats.md), and auto lists each wiring once."""
    boards = load_boards()
    nano = boards["maix-nano"]
    assert nano.wiring.name == "go-openec" and "Nano" in nano.wiring.description
    assert "Nano" not in boards["maix-bit"].wiring.description
    auto = [w.name for w in boards["generic"].auto_wirings]
    assert auto == ["dan", "kd233", "go-cmsis-dap"]


def test_a_wiring_listed_twice_in_auto_wirings_is_refused():
    from kflashpy.target.boards import _board

    wirings = {w.name: w for w in (get_board("dan").wiring, get_board("kd233").wiring)}
    raw = {"name": "x", "wiring": "auto", "auto_wirings": ["dan", "kd233", "dan"]}
    with pytest.raises(FormatError, match="twice"):
        _board("x", {**raw, "max_baud": 115200, "default_baud": 115200}, wirings)
