"""Several virtual boards burned at once: does the client serialise them, does it busy-wait?

For N = 1, 2, 4, 8 boards, ``kflashpy.isp.parallel.run_on_boards`` burns the same
payload (random, so nothing compresses) to N ``sim://`` boards, each with its own flash
unique id. Two things are measured:

* **Virtual time per board** (the port's clock, from ISP entry to the reboot). A client
  that made one board wait for another would stretch it; it must stay within 2 % of the
  solo burn (N = 1). Virtual time is what a real board would see.
* **Client CPU per board per MB**: CPU time of the board's worker thread *outside* the
  virtual port (its read/write/line calls are where the emulator runs; on a real port they
  are system calls that sleep). A client that polled or spun while the board programs
  would show up here, growing with the flash's busy time; the figure must not grow with N.

Host wall time is shown too, honestly: in-process virtual boards run their emulator in
the client process, CPU-bound and under one GIL, so N boards take about N times one
board's host time on this machine. That is the emulator's cost, not the client's; on
real ports the worker threads sleep in blocking reads and the boards program in parallel.

    python benchmarks/bench_parallel.py                       # N = 1, 2, 4, 8; 64 KiB at 1.5 M
    python benchmarks/bench_parallel.py --boards 1,2 --size 64K --baud 3000000
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import defaultdict

from kflashpy.isp import api, parallel
from kflashpy.isp.connect import ConnectOptions
from kflashpy.sim import protocol_sim
from kflashpy.units import parse_int

ADDRESS = 0x300000
TOLERANCE = 0.02  # a board's virtual time may differ from the solo burn by this much
#: methods of the virtual port in which the emulator runs (the "board side")
PORT_METHODS = ("read", "write", "in_waiting", "reset_input_buffer", "_update_dtr_state",
                "_update_rts_state", "_reconfigure_port", "open", "close")  # fmt: skip


class PortCpu:
    """CPU time each thread spends inside the virtual port (the emulator's share)."""

    def __init__(self) -> None:
        self.inside: dict[str, float] = defaultdict(float)
        self._depth = threading.local()

    def wrap(self, fn):
        def timed(*args, **kwargs):
            depth = getattr(self._depth, "n", 0)
            self._depth.n = depth + 1
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth.n = depth
                if depth == 0:
                    self.inside[threading.current_thread().name] += time.thread_time() - start

        return timed

    def install(self) -> None:
        for name in PORT_METHODS:
            attr = protocol_sim.Serial.__dict__.get(name)
            if isinstance(attr, property):
                setattr(protocol_sim.Serial, name, property(self.wrap(attr.fget)))
            elif attr is not None:
                setattr(protocol_sim.Serial, name, self.wrap(attr))


def run(n: int, data: bytes, baud: int, cpu: PortCpu) -> dict:
    plan = api.plan_burn([(ADDRESS, data)], board="maix-bit")
    ports = [f"sim://?board=maix-bit&uid={k + 1:016x}" for k in range(n)]
    cpu.inside.clear()
    wall0, proc0 = time.monotonic(), time.process_time()
    res = parallel.run_on_boards(
        ports,
        parallel.burn_operation(plan),
        name="burn",
        connection=ConnectOptions(board="maix-bit", baud=baud),
    )
    wall, proc = time.monotonic() - wall0, time.process_time() - proc0
    bad = [b for b in res.boards if b.status != "ok"]
    if bad:
        raise SystemExit(f"N={n}: {bad[0].port}: {bad[0].error}")
    mb = len(data) / 1e6
    client = [b.cpu_seconds - cpu.inside[f"board-{b.index}"] for b in res.boards]
    return {
        "boards": n,
        "virtual_s": [round(b.seconds, 5) for b in res.boards],
        "serials": [b.serial for b in res.boards],
        "host_wall_s": round(wall, 2),
        "process_cpu_s": round(proc, 2),
        "board_thread_cpu_s_per_mb": round(sum(b.cpu_seconds for b in res.boards) / n / mb, 3),
        "client_cpu_s_per_mb": round(sum(client) / n / mb, 4),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--boards", default="1,2,4,8", help="board counts (default 1,2,4,8)")
    ap.add_argument("--size", default="64K", help="payload per board (default 64K)")
    ap.add_argument("--baud", type=int, default=1_500_000)
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    counts = [int(x) for x in args.boards.split(",")]
    data = random.Random(5).randbytes(parse_int(args.size, "size"))
    cpu = PortCpu()
    cpu.install()
    run(1, data[:4096], args.baud, cpu)  # warm-up: imports and one-time set-up, not measured
    print(f"payload {len(data)} B at 0x{ADDRESS:X}, {args.baud} baud, sim:// boards in-process")
    head = (
        "N  virtual s/board (min..max)  vs solo  host wall s  process CPU s  "
        "client CPU s/MB  board thread CPU s/MB"
    )
    print(head)
    rows, solo, ok = [], None, True
    for n in counts:
        row = run(n, data, args.baud, cpu)
        solo = solo or row["virtual_s"][0]
        worst = max(abs(t - solo) / solo for t in row["virtual_s"])
        row["worst_vs_solo"] = round(worst, 5)
        ok &= worst <= TOLERANCE
        lo, hi = min(row["virtual_s"]), max(row["virtual_s"])
        print(
            f"{n:<2} {lo:>10.4f}..{hi:<10.4f}       {worst * 100:6.2f} %  "
            f"{row['host_wall_s']:>10.2f}  {row['process_cpu_s']:>13.2f}  "
            f"{row['client_cpu_s_per_mb']:>15.4f}  "
            f"{row['board_thread_cpu_s_per_mb']:>21.3f}"
        )
        rows.append(row)
    print(f"every board within {TOLERANCE:.0%} of the solo burn: {'yes' if ok else 'NO'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
