"""Each virtual board has its own flash identity (unique id, JEDEC id), so reports can
tell boards apart; the flasher reads it from the simulated chip (commands 4B and 9F)."""

from __future__ import annotations

import pytest

from kflashpy.errors import InputError
from kflashpy.isp import flashops
from kflashpy.isp.connect import ConnectOptions
from kflashpy.sim.config import BoardConfig
from kflashpy.sim.flash import NorFlash


def test_uid_and_jedec_from_the_url() -> None:
    cfg = BoardConfig.from_url("sim://?uid=0011223344556677&jedec=c84018")
    assert cfg.unique_id() == bytes.fromhex("0011223344556677")
    assert cfg.jedec == bytes.fromhex("c84018")


def test_uid_derived_from_the_flash_file(tmp_path) -> None:
    a = BoardConfig.from_url(f"sim://?flash={tmp_path / 'a.img'}").unique_id()
    b = BoardConfig.from_url(f"sim://?flash={tmp_path / 'b.img'}").unique_id()
    again = BoardConfig.from_url(f"sim://?flash={tmp_path / 'a.img'}").unique_id()
    assert a is not None and len(a) == 8
    assert a != b and a == again
    assert BoardConfig.from_url("sim://").unique_id() is None  # the chip model's default


@pytest.mark.parametrize(
    "query, words",
    [("uid=0011", "uid must be 16 hex digits"), ("jedec=zz4018", "jedec must be 6 hex digits")],
)
def test_bad_identity_options_are_named(query: str, words: str) -> None:
    with pytest.raises(InputError, match=words):
        BoardConfig.from_url(f"sim://?{query}")


def test_jedec_capacity_must_match_the_flash_size() -> None:
    with pytest.raises(InputError, match="JEDEC id EF4017 says 2\\^23 bytes"):
        NorFlash(size=16 << 20, jedec_id=bytes.fromhex("ef4017"))


def test_flasher_reads_each_boards_own_identity(tmp_path) -> None:
    seen = {}
    for name, url in {
        "given": "sim://?board=maix-bit&uid=0011223344556677&jedec=C84018",
        "file": f"sim://?board=maix-bit&flash={tmp_path / 'board.img'}",
    }.items():
        options = ConnectOptions(url, board="maix-bit", baud=3_000_000)
        seen[name] = flashops.flash_id(connection=options)
    assert seen["given"].unique_id == "0011223344556677"
    assert seen["given"].jedec_id == 0xC84018 and seen["given"].manufacturer == "GigaDevice"
    derived = BoardConfig.from_url(f"sim://?flash={tmp_path / 'board.img'}").unique_id()
    assert seen["file"].unique_id == derived.hex()
    assert seen["file"].jedec_id == 0xEF4018
