"""The fault campaign: seeded burns on the virtual board under a user's bad day.

Each category is a fault plan of the simulator (docs/simulator.md, "Fault injection"):
bytes corrupted or dropped in either direction, a disconnect, a power cut on blank or on
used flash (old data in the region and a neighbour's bytes after the file in its last
sector). Every run burns the same kind of file with one flasher, then classifies:

* ``exact``: the burn succeeded and the flash holds the file (and the neighbour bytes);
* ``clean error``: a :class:`~kflashpy.errors.KflashError` (exit code and hint);
* ``silent``: the burn succeeded but the flash holds other bytes (must stay 0);
* ``hang``: no end within ``--wall-limit`` seconds of wall time (must stay 0);
* ``traceback``: any other exception (must stay 0);
* ``rerun exact``: after the run, the same burn without faults (on the same flash)
  leaves the file and the neighbour bytes exact.

Run: python benchmarks/bench_faults.py [--runs 3] [--flashers kflashpy,kflash]
[--categories "corrupt to host,..."] [--size 67584] [--seed 0]
Prints one line per run (``-v``) and the table; no pass/fail. Each run names its URL, so a
bad seed is reproduced with that URL.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import kflashpy
from kflashpy.errors import KflashError
from kflashpy.isp.burn import WriteRegion, burn_on

AT = 0x300000
#: flasher name -> the baud rate it is driven at (kflash's needs a baud switch)
FLASHERS = {"kflashpy": None, "kflash": 921600}
COLUMNS = ("exact", "clean error", "silent", "hang", "traceback")


class Hang(BaseException):
    """The wall-clock limit of one run passed (not an Exception: nothing may swallow it)."""


def _alarm(signum, frame):  # noqa: ARG001 (signal handler signature)
    raise Hang


#: category -> (fault query for (seed, rng, dry-run virtual seconds), used flash?)
CATEGORIES: dict[str, tuple[Callable[[int, random.Random, float], str], bool]] = {
    "corrupt to board": (lambda s, r, t: f"corrupt=1e-3&dir=board&seed={s}", False),
    "corrupt to host": (lambda s, r, t: f"corrupt=2e-3&dir=host&seed={s}", False),
    "drop to board": (lambda s, r, t: f"drop=5e-4&dir=board&seed={s}", False),
    "drop to host": (lambda s, r, t: f"drop=1e-3&dir=host&seed={s}", False),
    "disconnect": (lambda s, r, t: f"disconnect={r.randrange(2_000, 120_000)}", False),
    "power cut blank": (lambda s, r, t: f"power_cut={r.uniform(0.2, t):.4f}", False),
    "power cut used": (lambda s, r, t: f"power_cut={r.uniform(0.2, t):.4f}", True),
}


def _image(path: Path, used: bool, seed: int, size: int) -> bytes:
    """A blank flash, or one with old data where the file goes and a neighbour after it;
    returns the neighbour's bytes (what must survive)."""
    img = bytearray(b"\xff" * (16 << 20))
    neighbour = b""
    if used:
        rng = random.Random(f"old:{seed}")
        end = AT + size
        img[AT:end] = rng.randbytes(size)
        neighbour = rng.randbytes(-end % 4096)
        img[end : end + len(neighbour)] = neighbour
    path.write_bytes(img)
    return neighbour


def _burn(url: str, flasher: str, data: bytes) -> float:
    with kflashpy.connect(url, board="maix-bit", stub=flasher, baud=FLASHERS[flasher]) as dev:
        burn_on(dev, [WriteRegion(AT, data, "file")], reboot=False)
        return dev.link.now()


def _exact(img: Path, data: bytes, neighbour: bytes) -> bool:
    flash = img.read_bytes()
    end = AT + len(data)
    return flash[AT:end] == data and flash[end : end + len(neighbour)] == neighbour


def run_one(
    category: str, flasher: str, seed: int, size: int, dry_s: float, tmp: Path, wall: float
) -> tuple[str, bool, str]:
    """One seeded run: (outcome, rerun exact, what to reproduce it with)."""
    query, used = CATEGORIES[category]
    rng = random.Random(f"{category}:{flasher}:{seed}")
    data = rng.randbytes(size)
    img = tmp / f"run-{flasher}-{seed}.img"
    neighbour = _image(img, used, seed, size)
    url = f"sim://?board=maix-bit&flash={img}&{query(seed, rng, dry_s)}"
    signal.alarm(int(wall))
    try:
        _burn(url, flasher, data)
        outcome = "exact" if _exact(img, data, neighbour) else "silent"
    except KflashError as e:
        outcome = "clean error"
        print(f"    {type(e).__name__}: {e.message}", file=sys.stderr)
    except Hang:
        outcome = "hang"
    except Exception:  # noqa: BLE001 (the campaign counts them)
        outcome = "traceback"
        traceback.print_exc(file=sys.stderr)
    finally:
        signal.alarm(0)
    try:
        signal.alarm(int(wall))
        _burn(f"sim://?board=maix-bit&flash={img}", flasher, data)
        rerun = _exact(img, data, neighbour)
    except (KflashError, Hang, Exception):  # noqa: BLE001
        rerun = False
    finally:
        signal.alarm(0)
        img.unlink(missing_ok=True)
    return outcome, rerun, url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="seeded runs per category and flasher")
    ap.add_argument("--flashers", default=",".join(FLASHERS))
    ap.add_argument("--categories", default=",".join(CATEGORIES))
    ap.add_argument("--size", type=int, default=0x10800, help="bytes of the burned file")
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--wall-limit", type=float, default=600.0, help="seconds before 'hang'")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per run")
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["KFLASHPY_STATE_DIR"] = str(tmp / "state")  # kept bytes stay here
        for flasher in args.flashers.split(","):
            dry = tmp / "dry.img"
            _image(dry, False, 0, args.size)
            some = random.Random(0).randbytes(args.size)
            dry_s = _burn(f"sim://?board=maix-bit&flash={dry}", flasher, some)
            for category in args.categories.split(","):
                counts: Counter[str] = Counter()
                reruns = 0
                t0 = time.perf_counter()
                for seed in range(args.seed, args.seed + args.runs):
                    outcome, rerun, url = run_one(
                        category, flasher, seed, args.size, dry_s, tmp, args.wall_limit
                    )
                    counts[outcome] += 1
                    reruns += rerun
                    if args.verbose:
                        print(f"  {flasher:8} {category:18} {outcome:12} rerun={rerun} {url}")
                rows.append((category, flasher, args.runs, counts, reruns))
                if args.verbose:
                    print(f"  ({time.perf_counter() - t0:.0f} s wall)", flush=True)
    head = f"{'category':18} {'flasher':8} {'runs':>4} " + " ".join(f"{c:>11}" for c in COLUMNS)
    print(head + f" {'rerun exact':>11}")
    for category, flasher, runs, counts, reruns in rows:
        cells = " ".join(f"{counts[c]:>11}" for c in COLUMNS)
        print(f"{category:18} {flasher:8} {runs:>4} {cells} {reruns:>11}")


if __name__ == "__main__":
    main()
