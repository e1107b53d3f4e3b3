"""A power cut at every stage of a file's last, shared sector: the failure names what may
be damaged (including the bytes outside the file), and a rerun restores them (issue #17).
"""

from __future__ import annotations

import random

import pytest

import kflashpy
from kflashpy.errors import KflashError
from kflashpy.isp.burn import WriteRegion, burn_on
from kflashpy.isp.kept import kept_dir
from kflashpy.isp.kfpy_stage2 import KfpyStage2
from kflashpy.sim.flash import NorFlash

AT = 0x300000
FILE = random.Random(1).randbytes(0x10800)  # ends in the middle of the sector 0x310000
END = AT + len(FILE)
LAST = 0x310000  # the last sector: 2 KiB of the file, 2 KiB of a neighbour
NEIGHBOUR = random.Random(2).randbytes(0x800)
OLD = random.Random(3).randbytes(0x11000)  # what the flash held before: needs erases


def _board_image(path):
    img = bytearray(b"\xff" * (16 << 20))
    img[AT : AT + len(OLD)] = OLD
    img[END : END + len(NEIGHBOUR)] = NEIGHBOUR
    path.write_bytes(img)
    return path


def _burn(img, faults=""):
    url = f"sim://?board=maix-bit&flash={img}{faults}"
    with kflashpy.connect(url, board="maix-bit", stub="kflashpy") as dev:
        return burn_on(dev, [WriteRegion(AT, FILE, "app.bin")], reboot=False)


def _last_sector_stages(tmp_path, monkeypatch):
    """Virtual times inside each flash operation on the last sector, from a clean run."""
    ops = []
    begin = NorFlash._begin

    def record(self, kind, now, duration, **kw):
        begin(self, kind, now, duration, **kw)
        address = kw.get("address", 0)
        if kind in ("erase", "program") and LAST <= address < LAST + 0x1000:
            ops.append((kind, now, now + duration, address))

    with monkeypatch.context() as m:
        m.setattr(NorFlash, "_begin", record)
        _burn(_board_image(tmp_path / "dry.img"))
    erase = next(op for op in ops if op[0] == "erase")
    programs = [op for op in ops if op[0] == "program"]
    neighbour_page = next(op for op in programs if op[3] >= END)
    return {
        "mid-erase": (erase[1] + erase[2]) / 2,
        "erased, not programmed": erase[2] + 1e-6,
        "first program": (programs[0][1] + programs[0][2]) / 2,
        "neighbour page": (neighbour_page[1] + neighbour_page[2]) / 2,
        "last program": (programs[-1][1] + programs[-1][2]) / 2,
    }


def test_power_cut_in_the_last_sector_is_reported_and_repaired(tmp_path, monkeypatch):
    monkeypatch.setenv("KFLASHPY_STATE_DIR", str(tmp_path / "state"))
    stages = _last_sector_stages(tmp_path, monkeypatch)
    assert not list(kept_dir().glob("*"))  # a clean burn keeps nothing behind
    for stage, when in stages.items():
        img = _board_image(tmp_path / f"{stage}.img")
        with pytest.raises(KflashError) as e:
            _burn(img, f"&power_cut={when!r}")
        at_risk = e.value.at_risk
        outside = [r for r in at_risk if r.outside]
        assert (outside[0].start, outside[0].end) == (END, LAST + 0x1000), stage
        assert outside[0].kept and "kept in" in e.value.hint, stage
        assert any(r.start <= LAST < r.end and not r.outside for r in at_risk), stage
        assert "Repair: run the same burn again" in e.value.hint
        flash = img.read_bytes()
        assert flash[AT : AT + LAST - AT] == FILE[: LAST - AT]  # acknowledged, intact
        result = _burn(img)  # the rerun
        assert result.regions[0].verified == "sha256"
        flash = img.read_bytes()
        assert flash[AT:END] == FILE, stage
        assert flash[END : LAST + 0x1000] == NEIGHBOUR, stage
        assert not list(kept_dir().glob("*")), stage  # restored, then forgotten


def test_a_cut_after_the_last_frame_says_nothing_is_half_written(tmp_path, monkeypatch):
    monkeypatch.setenv("KFLASHPY_STATE_DIR", str(tmp_path / "state"))
    written_at = []
    write = KfpyStage2.write

    def record(s2, *args, **kw):
        write(s2, *args, **kw)
        written_at.append(s2.link.now())

    with monkeypatch.context() as m:
        m.setattr(KfpyStage2, "write", record)
        _burn(_board_image(tmp_path / "dry.img"))
    img = _board_image(tmp_path / "b.img")
    # every frame acknowledged (and checked on the flash): the board dies while the
    # kept neighbour bytes are compared with the flash
    with pytest.raises(KflashError) as e:
        _burn(img, f"&power_cut={written_at[0] + 1e-5!r}")
    assert e.value.at_risk == []
    assert "no frame was waiting for its answer" in e.value.hint
    flash = img.read_bytes()
    assert flash[AT:END] == FILE and flash[END : LAST + 0x1000] == NEIGHBOUR


def test_cli_renders_the_damage(tmp_path, monkeypatch, capsys):
    import json

    from kflashpy.cli import main

    monkeypatch.setenv("KFLASHPY_STATE_DIR", str(tmp_path / "state"))
    img = _board_image(tmp_path / "c.img")
    app = tmp_path / "app.bin"
    app.write_bytes(FILE)
    url = f"sim://?board=maix-bit&flash={img}&disconnect=40000"
    argv = ["-p", url, "-B", "maix-bit", "--no-progress", "burn", "--no-reboot"]
    assert main(["--json", *argv, str(AT), str(app)]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["at_risk"] and "may now be erased or half-written" in error["hint"]
    assert all(r["label"].endswith("app.bin") and r["end"] > r["start"] for r in error["at_risk"])
    assert main([*argv, str(AT), str(app)]) == 1
    assert "app.bin: " in capsys.readouterr().err.split("\n  ", 2)[-1]  # its own hint line
