"""The flash map SVG (kflashpy.image.flashmap) and ``check-layout --svg``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from kflashpy.cli import main
from kflashpy.image.flashmap import flash_map_svg
from kflashpy.image.plan import FlashItem, plan_flash

NS = "{http://www.w3.org/2000/svg}"
FW = b"\x13\x00\x00\x00" * 64 * 1024  # a 256 KiB raw "firmware"


def _parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def _by_class(root: ET.Element, cls: str) -> list[ET.Element]:
    return [e for e in root.iter() if e.get("class") == cls]


def test_map_shows_regions_reserved_free_and_no_collision() -> None:
    plan = plan_flash(
        [FlashItem(0, FW, "maixpy.bin"), FlashItem(0x300000, bytes(range(256)) * 400, "a.bin")],
        layout="maixpy",
    )
    root = _parse(flash_map_svg(plan))
    assert root.get("data-flash-size") == str(16 << 20) and root.get("data-ok") == "true"
    regions = {g.get("data-name"): g for g in _by_class(root, "region")}
    assert set(regions) == {"maixpy.bin", "a.bin"}
    assert int(regions["a.bin"].get("data-start")) == 0x300000
    assert int(regions["a.bin"].get("data-end")) == 0x300000 + 102400
    assert all(g.get("data-status") == "ok" for g in regions.values())
    (spiffs,) = _by_class(root, "reserved")
    assert (spiffs.get("data-name"), int(spiffs.get("data-start"))) == ("spiffs", 0xD00000)
    free = [(int(r.get("data-start")), int(r.get("data-end"))) for r in _by_class(root, "free")]
    assert free == [(0x40025, 0x300000), (0x300000 + 102400, 0xD00000)]  # SPIFFS ends the flash
    assert not _by_class(root, "collision")
    legend = " ".join(t.text or "" for t in _by_class(root, "legend"))
    assert "a.bin" in legend and "spiffs" in legend


def test_map_marks_overlap_and_reserved_collisions() -> None:
    plan = plan_flash(
        [
            FlashItem(0, FW, "maixpy.bin"),
            FlashItem(0x20000, b"\x01" * 8192, "model.kmodel"),  # inside the firmware
            FlashItem(0xD10000, b"\x02" * 4096, "data.bin"),  # inside SPIFFS
        ],
        layout="maixpy",
    )
    root = _parse(flash_map_svg(plan))
    assert root.get("data-ok") == "false"
    status = {g.get("data-name"): g.get("data-status") for g in _by_class(root, "region")}
    assert status == {"maixpy.bin": "error", "model.kmodel": "error", "data.bin": "error"}
    marks = {(int(r.get("data-start")), int(r.get("data-end")), r.get("data-severity"))
             for r in _by_class(root, "collision")}  # fmt: skip
    assert (0x20000, 0x20000 + 8192, "error") in marks
    assert (0xD10000, 0xD11000, "error") in marks
    # overlapping regions are drawn on different lanes, so both stay visible
    ys = {g.get("data-name"): g.find(f"{NS}rect").get("y") for g in _by_class(root, "region")}
    assert ys["maixpy.bin"] != ys["model.kmodel"]


def test_shared_sector_is_a_warning_mark_and_names_are_escaped() -> None:
    plan = plan_flash([FlashItem(0x300000, b"\x01" * 100, "a<&>.bin"),
                       FlashItem(0x300100, b"\x02" * 100, "b.bin")])  # fmt: skip
    root = _parse(flash_map_svg(plan))  # parses: the name is escaped
    marks = [r.get("data-severity") for r in _by_class(root, "collision")]
    assert marks == ["warning"]
    assert {g.get("data-name") for g in _by_class(root, "region")} == {"a<&>.bin", "b.bin"}


def test_small_plans_get_a_magnified_bar() -> None:
    small = plan_flash([FlashItem(0x300000, b"\x01" * 5000, "a.bin"),
                        FlashItem(0x310000, b"\x02" * 5000, "b.bin")])  # fmt: skip
    (detail,) = _by_class(_parse(flash_map_svg(small)), "detail")
    assert (int(detail.get("data-start")), int(detail.get("data-end"))) == (0x300000, 0x320000)
    assert detail.find(f"{NS}rect") is not None  # the regions are drawn again, magnified
    spread = plan_flash([FlashItem(0, FW, "maixpy.bin"), FlashItem(0xC00000, b"\x01", "x.bin")])
    assert not _by_class(_parse(flash_map_svg(spread)), "detail")


def test_check_layout_writes_svg(tmp_path, capsys) -> None:
    (tmp_path / "a.bin").write_bytes(b"\x01" * 5000)
    (tmp_path / "b.bin").write_bytes(b"\x02" * 5000)
    svg = tmp_path / "map.svg"
    argv = ["--json", "check-layout", "0x300000", str(tmp_path / "a.bin"), "0x301000",
            str(tmp_path / "b.bin"), "--svg", str(svg)]  # fmt: skip
    assert main(argv) == 2  # the overlap is an error, and the map is still written
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"]["svg"] == str(svg)
    root = _parse(svg.read_text())
    assert [r.get("data-severity") for r in _by_class(root, "collision")] == ["error"]
