"""Virtual time to burn the 20-class YOLO kmodel (1.35 MB) through the kflash 1.1.6 flasher.

Runs kflashpy's client against the virtual K210 (sim://) and prints a table of virtual
seconds per phase: connect (reset + ROM greeting), flasher upload at 115200, baud switch
and flash init, the model write at 0x300000, and the effective write speed. Virtual time
is what a real board at the same baud rate would take if the simulator's timings hold.

    python benchmarks/isp_burn_yolo.py [--baud 1500000] [--model PATH]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kflashpy.isp.burn import WriteRegion, burn_on
from kflashpy.isp.connect import open_device, start_stage2

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "kmodels"
YOLO = FIXTURES / "v3" / "yolo_20classes_nncase-v0.1.0-rc5.kmodel"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baud", type=int, default=1500000)
    ap.add_argument("--model", type=Path, default=YOLO)
    ap.add_argument("--board", default="maix-bit")
    args = ap.parse_args()
    data = args.model.read_bytes()
    wall = time.perf_counter()
    dev = open_device(f"sim://?board={args.board}", board=args.board)
    try:
        clock = dev.link.now
        t_connect = clock()
        start_stage2(dev, "kflash", baud=args.baud)
        t_stub = clock()
        res = burn_on(dev, [WriteRegion(0x300000, data, args.model.name)], reboot=False)
        t_end = clock()
        ok = dev.port.sim_board.flash.read(0x300000, len(data)) == data
    finally:
        dev.close()
    rows = [
        ("reset + ROM greeting", t_connect),
        ("flasher upload + baud + flash init", t_stub - t_connect),
        (f"write {len(data)} B at 0x300000", t_end - t_stub),
        ("total", t_end),
    ]
    print(f"kflashpy + kflash 1.1.6 flasher, {args.baud} baud, board {args.board}")
    print(f"{'phase':40s} {'virtual s':>10s}")
    for name, secs in rows:
        print(f"{name:40s} {secs:10.2f}")
    speed = len(data) / 1024 / res.regions[0].seconds
    print(f"{'effective write speed (KiB/s)':40s} {speed:10.1f}")
    print(
        f"flash contents correct: {ok}; retries: {dev.link.stats.retries}; "
        f"host time {time.perf_counter() - wall:.1f} s"
    )


if __name__ == "__main__":
    main()
