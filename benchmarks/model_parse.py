"""Parse, describe and word-swap speed of the kmodel tools on the fixture models.

Run: python benchmarks/model_parse.py   (prints a table; no pass/fail)
"""

from __future__ import annotations

import time
from pathlib import Path

from kflashpy.model import parse
from kflashpy.model.info import model_info
from kflashpy.model.prep import prep_flash
from kflashpy.model.seal import seal_bytes, unseal_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "kmodels"
KEY = bytes(32)


def best_of(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    print(
        f"{'model':42} {'bytes':>10} {'parse ms':>9} {'info ms':>8} {'prep ms':>8} {'seal+unseal ms':>15}"
    )
    for path in sorted(FIXTURES.glob("*/*.kmodel")):
        data = path.read_bytes()
        t_parse = best_of(lambda d=data, n=path.name: parse(d, n))
        t_info = best_of(lambda d=data, n=path.name: model_info(d, n))
        prep = "-"
        if "generated_v5" not in str(path):
            prep = f"{best_of(lambda d=data, n=path.name: prep_flash(d, n)) * 1e3:8.2f}"
        t_seal = best_of(lambda d=data: unseal_bytes(seal_bytes(d, KEY), KEY))
        print(
            f"{path.name:42} {len(data):>10,} {t_parse * 1e3:9.2f} {t_info * 1e3:8.2f} {prep:>8} {t_seal * 1e3:15.2f}"
        )


if __name__ == "__main__":
    main()
