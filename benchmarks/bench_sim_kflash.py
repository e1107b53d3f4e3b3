"""Baseline: how long burning takes on the virtual board, per client, payload and baud rate.

Measures virtual seconds (what a real board would take) and host seconds (simulation
cost) for each client in ``simbench.CLIENTS`` burning

* the 1.35 MB YOLO kmodel fixture at 0x300000 (raw data), and
* a 1.5 MB firmware-like payload (zlib-9 ratio ~0.60) as a boot image at 0,

at 115200, 1.5 M and 3 M baud. Usage::

    python benchmarks/bench_sim_kflash.py                 # everything (slow: minutes)
    python benchmarks/bench_sim_kflash.py --baud 1500000 --client kflash-1.1.6 --json out.json
    python benchmarks/bench_sim_kflash.py --size 1M       # 1 MiB of the firmware payload only
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simbench import CLIENTS, firmware_like_payload, table  # noqa: E402

from kflashpy.units import parse_int  # noqa: E402

YOLO = (
    Path(__file__).resolve().parents[1]
    / "tests/fixtures/kmodels/v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel"
)
BAUDS = (115200, 1500000, 3000000)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--client", action="append", choices=sorted(CLIENTS), help="default: all")
    ap.add_argument("--baud", action="append", type=int, help="default: 115200, 1500000, 3000000")
    ap.add_argument("--payload", action="append", choices=["kmodel", "firmware"])
    ap.add_argument("--size", help="burn only this much of the firmware payload (e.g. 1M)")
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    args = ap.parse_args(argv)

    firmware = firmware_like_payload()
    ratio = len(zlib.compress(firmware, 9)) / len(firmware)
    payloads = {"kmodel": (YOLO.read_bytes(), 0x300000, False), "firmware": (firmware, 0, True)}
    chosen = args.payload or list(payloads)
    if args.size:
        payloads = {"firmware": (firmware[: parse_int(args.size, "--size")], 0, True)}
        chosen = ["firmware"]
    print(f"firmware-like payload: {len(firmware)} B, zlib-9 ratio {ratio:.3f}", flush=True)
    rows = []
    for name in args.client or sorted(CLIENTS):
        for baud in args.baud or BAUDS:
            for kind in chosen:
                data, address, is_firmware = payloads[kind]
                m = CLIENTS[name](data, address, baud, firmware=is_firmware)
                rows.append(m)
                print(table([m]).splitlines()[-1], flush=True)
                if not m.ok:
                    print(m.detail, file=sys.stderr)
    print()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(m) for m in rows], indent=2))
    return 0 if all(m.ok for m in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
