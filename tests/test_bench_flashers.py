"""benchmarks/bench_flashers.py's burns are exact: the same burn, the same virtual time.

bench_sim_speed.py prints that time to compare simulator changes (it must not move), and
each burn puts its flash file in a new temporary directory. A board without ``uid``
derives its flash unique id from that path (docs/simulator.md), and the IDENTIFY reply
carrying the id is one byte longer when SLIP escapes one of its bytes: the burn's time
then depended on the directory's random name (issue #16).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import serial

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_flashers import YOLO, ours  # noqa: E402

serial.protocol_handler_packages.append("kflashpy.sim")


def _derived_uid_escapes(path: Path) -> bool:
    """Does the id a board derives from ``path`` hold a byte SLIP escapes?"""
    uid = hashlib.sha256(f"flash-file:{path.resolve()}".encode()).digest()[:8]
    return any(b in (0xC0, 0xDB) for b in uid)


def _flash_path(tmp_path: Path, escapes: bool) -> Path:
    for i in range(10_000):
        path = tmp_path / f"d{i}" / "flash.img"
        if _derived_uid_escapes(path) == escapes:
            path.parent.mkdir()
            return path
    raise AssertionError("no such path")


def test_virtual_time_does_not_depend_on_the_flash_files_path(tmp_path: Path) -> None:
    image = YOLO.read_bytes()[:8192]
    times = {
        escapes: ours("kmodel", image, 0x300000, 115200, _flash_path(tmp_path, escapes))
        for escapes in (False, True)
    }
    assert all(row.ok for row in times.values())
    assert times[False].total_s == times[True].total_s


def test_bench_sim_speed_repeats_cases_and_sums_them_up(monkeypatch, capsys) -> None:
    """``--repeat 2`` runs each case twice, round-robin, with the same exact virtual time,
    and closes with each case's median and lowest CPU s per virtual s."""
    import bench_sim_speed

    argv = ["bench_sim_speed.py", "--size", "4K", "--case", "kflashpy@3000000", "--repeat", "2"]
    monkeypatch.setattr(sys, "argv", argv)
    assert bench_sim_speed.main() == 0
    lines = capsys.readouterr().out.splitlines()
    runs = [line.split() for line in lines if line.startswith("kflashpy@3000000")]
    assert len(runs) == 3 and runs[0][1] == runs[1][1]  # two runs, one summary
    median, lowest = float(runs[2][1]), float(runs[2][2])
    assert 0 < lowest <= median


def test_bench_mmio_callback_measures_each_kind(monkeypatch, capsys) -> None:
    """Each kind's loop runs all its loads, through the device callback where there is
    one (per_load checks the loop counter and the callback's count; a load that faults
    stops the engine with an error)."""
    import bench_mmio_callback

    assert bench_mmio_callback.per_load("ram", 2000) > 0
    monkeypatch.setattr(sys, "argv", ["bench_mmio_callback.py", "--loads", "2000"])
    assert bench_mmio_callback.main() == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["ram", "callback", "plic"]


def test_bench_sim_speed_splits_the_cores_time_by_phase(monkeypatch, capsys) -> None:
    """``--phases``: each case is followed by the core's host and board time while bytes
    were coming and otherwise; a burn spends board time in both, and the wrapper it
    installs on Core._run is taken off again by monkeypatch."""
    import bench_sim_speed

    from kflashpy.sim.core import Core

    monkeypatch.setattr(Core, "_run", Core._run)
    argv = ["bench_sim_speed.py", "--size", "4K", "--case", "kflashpy@3000000", "--phases"]
    monkeypatch.setattr(sys, "argv", argv)
    assert bench_sim_speed.main() == 0
    lines = capsys.readouterr().out.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("kflashpy@3000000"))
    rows = {line.split()[0]: line.split() for line in lines[i + 1 : i + 3]}
    assert set(rows) == {"receiving", "other"}
    assert all(float(row[4]) > 0 for row in rows.values())  # board seconds in each
