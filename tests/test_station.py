"""Station mode on virtual boards: hot-plug, yield report, one worker per port, stop."""

from __future__ import annotations

import _thread
import csv
import io
import json
import random
import threading
import time
from pathlib import Path

import pytest

from kflashpy.cli import main
from kflashpy.errors import InputError
from kflashpy.isp import parallel, station
from kflashpy.isp.ports import Candidate
from kflashpy.isp.station import Station, YieldReport, load_station_plan

ADDR = 0x100000
DATA = random.Random(7).randbytes(8 * 1024)


class Bench:
    """Ports that a test plugs and unplugs (a pluggable port source)."""

    def __init__(self) -> None:
        self.ports: list[str] = []
        self.lock = threading.Lock()

    def __call__(self) -> list[str]:
        with self.lock:
            return list(self.ports)

    def plug(self, port: str) -> None:
        with self.lock:
            self.ports.append(port)

    def unplug(self, port: str) -> None:
        with self.lock:
            self.ports.remove(port)


def _wait(predicate, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def _plan_file(tmp_path: Path, **extra: str) -> Path:
    extra.setdefault("baud", "3000000")
    (tmp_path / "data.bin").write_bytes(DATA)
    text = 'board = "maix-bit"\n' + "".join(f"{k} = {v}\n" for k, v in extra.items())
    text += f'[[file]]\naddress = {ADDR:#x}\npath = "data.bin"\n'
    plan = tmp_path / "plan.toml"
    plan.write_text(text)
    return plan


def _url(tmp_path: Path, n: int, extra: str = "") -> str:
    return f"sim://?board=maix-bit&uid={n:016x}&flash={tmp_path / f'b{n}.img'}{extra}"


def test_hot_plug_sequence_and_yield_report(tmp_path) -> None:
    plan = load_station_plan(_plan_file(tmp_path))
    bench = Bench()
    events: list[tuple[str, object]] = []
    with YieldReport(tmp_path / "yield") as report:
        st = Station(plan, bench, report=report, log_dir=tmp_path / "logs", poll=0.02,
                     on_event=lambda kind, what: events.append((kind, what)))  # fmt: skip
        runner = threading.Thread(target=st.run)
        runner.start()
        a, b = _url(tmp_path, 1), _url(tmp_path, 2, "&disconnect=24000")
        bench.plug(a)
        bench.plug(b)  # two boards at once; b fails mid-write
        _wait(lambda: len(report.records) == 2)
        time.sleep(0.1)  # still plugged: nothing is burned twice
        assert len(report.records) == 2
        bench.unplug(a)
        _wait(lambda: ("unplugged", parallel.port_key(a)) in events)
        c = _url(tmp_path, 3)
        bench.plug(c)  # a new board on the line
        bench.plug(a)  # the first board comes back: burned again (skips unchanged bytes)
        _wait(lambda: len(report.records) == 4)
        st.stop.set()
        runner.join(30)
        summary = report.summary()
    assert not runner.is_alive()
    assert (summary.boards, summary.passed, summary.failed) == (4, 3, 1)
    assert summary.mean_seconds > 0 and summary.exit_code == 1
    rows = list(csv.DictReader(io.StringIO((tmp_path / "yield.csv").read_text())))
    lines = [json.loads(x) for x in (tmp_path / "yield.jsonl").read_text().splitlines()]
    assert [r["serial"] for r in rows] == [x["serial"] for x in lines]
    by_serial = {}
    for r in rows:
        by_serial.setdefault(r["serial"], []).append(r)
    one, two, three = (f"{n:016x}-EF4018" for n in (1, 2, 3))
    assert sorted(by_serial) == [one, two, three]
    first, again = by_serial[one]
    assert (first["result"], first["verify"], first["bytes_written"]) == ("pass", "ok", "8192")
    assert (again["bytes_written"], again["bytes_skipped"]) == ("0", "8192")
    (bad,) = by_serial[two]
    assert bad["result"] == "fail" and bad["verify"] == "not run"
    assert "disconnected" in bad["error"] and "acknowledged" in bad["hint"]
    assert by_serial[three][0]["result"] == "pass"
    for r in rows:
        assert r["start"] <= r["end"] and float(r["duration_s"]) > 0
        log = Path(r["log"]).read_text()
        assert r["port"] in log and "end: " in log
    assert "error: " in Path(bad["log"]).read_text()
    with open(tmp_path / "b3.img", "rb") as f:
        f.seek(ADDR)
        assert f.read(len(DATA)) == DATA


def test_one_worker_per_port(tmp_path, monkeypatch) -> None:
    """A port listed twice (two links to one device) or held elsewhere gets no second worker."""
    plan = load_station_plan(_plan_file(tmp_path))
    dev = tmp_path / "ttyUSB0"
    dev.touch()
    (tmp_path / "link-a").symlink_to(dev)
    (tmp_path / "link-b").symlink_to(dev)
    busy = tmp_path / "ttyUSB1"
    busy.touch()
    started: list[str] = []
    opened: list[str] = []

    def fake_run_board(row, operation, **kw):
        opened.append(row.port)
        time.sleep(0.2)
        row.status, row.exit_code = "ok", 0
        return row

    monkeypatch.setattr(station, "run_board", fake_run_board)
    source = station.glob_source(str(tmp_path / "link-*"))
    assert source() == [str(tmp_path / "link-a"), str(tmp_path / "link-b")]
    with parallel.claim_port(str(busy)), YieldReport(tmp_path / "y") as report:
        st = Station(plan, lambda: [*source(), str(busy)], report=report,
                     log_dir=tmp_path / "logs", poll=0.02,
                     on_event=lambda k, w: started.append(w.port) if k == "start" else None)  # fmt: skip
        runner = threading.Thread(target=st.run)
        runner.start()
        time.sleep(0.6)
        st.stop.set()
        runner.join(10)
    assert opened == [str(tmp_path / "link-a")] == started


@pytest.mark.parametrize("how", ["stop event", "Ctrl-C"])
def test_stop_interrupts_a_burn_and_the_report_is_complete(tmp_path, how) -> None:
    plan = load_station_plan(_plan_file(tmp_path))
    bench = Bench()
    bench.plug(_url(tmp_path, 1))
    stop, fired = threading.Event(), threading.Event()
    with YieldReport(tmp_path / "yield") as report:
        st = Station(plan, bench, report=report, log_dir=tmp_path / "logs", poll=0.02, stop=stop)
        original = st._operation

        def stop_mid_write(dev, progress, row):
            def watch(ev):
                if ev.stage == "write" and not fired.is_set():
                    fired.set()
                    if how == "Ctrl-C":
                        _thread.interrupt_main()  # KeyboardInterrupt in the station's loop
                        stop.wait(30)  # until the main thread has seen it and set the stop
                    else:
                        stop.set()
                progress(ev)

            return original(dev, watch, row)

        st._operation = stop_mid_write
        summary = st.run()
    (rec,) = report.records
    assert rec.result == "interrupted" and rec.exit_code == 130
    assert "cut short" in rec.error and rec.serial == f"{1:016x}-EF4018"
    assert summary.interrupted == 1 and summary.boards == 1
    assert len((tmp_path / "yield.csv").read_text().splitlines()) == 2  # header + the board


def test_plan_files(tmp_path) -> None:
    plan = load_station_plan(_plan_file(tmp_path, verify="false", erase='"chip"'))
    want = ("maix-bit", 3000000, False, "chip")
    assert (plan.board, plan.baud, plan.verify, plan.erase) == want
    assert [w.address for w in plan.plan.writes] == [ADDR]
    bad = tmp_path / "bad.toml"
    bad.write_text('board = "maix-bit"\nspeed = 3\n')
    with pytest.raises(InputError, match="unknown plan key 'speed'"):
        load_station_plan(bad)
    bad.write_text('erase = "sector"\n')
    with pytest.raises(InputError, match="erase"):
        load_station_plan(bad)
    bad.write_text("[[file]]\naddress = 0\n")
    with pytest.raises(InputError, match="needs exactly address and path"):
        load_station_plan(bad)
    with pytest.raises(InputError, match="no such plan file"):
        load_station_plan(tmp_path / "missing.toml")


def test_cli_station_boards_plugged_one_after_another(tmp_path, capsys, monkeypatch) -> None:
    """`kflashpy station PLAN` (--watch usb): USB bridges appear and disappear; here the
    bridges' devices are virtual boards (a pty served by `sim serve` works the same way,
    through --watch GLOB, but its timing depends on the host's load)."""
    plan = _plan_file(tmp_path)
    bench = Bench()
    monkeypatch.setattr(
        station,
        "candidates",
        lambda: [Candidate(p, "WCH CH340", 0x1A86, 0x7523, None, None) for p in bench()],
    )
    a, b = _url(tmp_path, 0xA1), _url(tmp_path, 0xB2)
    bench.plug(a)
    out = tmp_path / "out"
    args = ["--json", "station", str(plan), "--max-boards", "2", "--poll", "0.02",
            "--report", str(out / "yield"), "--log-dir", str(out / "logs")]  # fmt: skip
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(main(args)))
    runner.start()
    csv_path = out / "yield.csv"
    _wait(lambda: csv_path.exists() and len(csv_path.read_text().splitlines()) == 2)
    bench.unplug(a)
    bench.plug(b)
    runner.join(120)
    assert result == [0]
    doc = json.loads(capsys.readouterr().out)
    assert doc["result"]["summary"]["passed"] == 2
    serials = [r["serial"] for r in doc["result"]["boards"]]
    assert serials == [f"{0xA1:016x}-EF4018", f"{0xB2:016x}-EF4018"]
    assert all(r["verify"] == "ok" for r in doc["result"]["boards"])
    assert len(csv_path.read_text().splitlines()) == 3
    assert main(["-p", a, "station", str(plan)]) == 2  # boards are found, not given
