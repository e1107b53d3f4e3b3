"""Start-up time of the kflashpy command line, as a ratio to `python -c pass`.

The target (issue #14): `kflashpy --help` and every command that needs no model start
without importing NumPy, in a median under 0.15 s on the reference machine. Absolute
times on a shared, loaded machine are noisy, so each command is timed interleaved with
the bare interpreter in the same run and reported as a ratio too; the ratio is what to
compare between runs. The ``numpy`` column checks (in a separate run) whether the
command imported NumPy.

    python benchmarks/bench_startup.py              # 15 runs of each command
    python benchmarks/bench_startup.py --runs 31 --json startup.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: commands that need no model: none of them may import NumPy
COMMANDS: list[list[str]] = [
    ["--help"],
    ["burn", "--help"],
    ["boards"],
    ["ports"],
    ["check-layout", "0x300000", "{data}"],
    ["image-info", "{data}"],
]
#: python code that runs the CLI the way the console script does
RUNNER = "import sys; from kflashpy.cli import main; sys.exit(main(sys.argv[1:]))"
PROBE = (
    "import sys; from kflashpy.cli import main; main(sys.argv[1:]); "
    "sys.stderr.write('NUMPY=%d' % ('numpy' in sys.modules))"
)


def _time(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def _imports_numpy(args: list[str]) -> bool:
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, check=False
    )
    return "NUMPY=1" in run.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--json", metavar="FILE", help="Also write the results as JSON.")
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data.bin"
        data.write_bytes(bytes(range(256)) * 16)
        results = []
        print(f"{'command':34} {'median s':>9} {'python -c pass':>15} {'ratio':>6}  numpy")
        for command in COMMANDS:
            args = [a.replace("{data}", str(data)) for a in command]
            ours, bare = [], []
            for _ in range(opts.runs):  # interleaved: both see the same machine load
                bare.append(_time([sys.executable, "-c", "pass"]))
                ours.append(_time([sys.executable, "-c", RUNNER, *args]))
            row = {
                "command": "kflashpy " + " ".join(command).replace("{data}", "data.bin"),
                "median_s": statistics.median(ours),
                "python_pass_median_s": statistics.median(bare),
                "imports_numpy": _imports_numpy(args),
            }
            row["ratio"] = row["median_s"] / row["python_pass_median_s"]
            results.append(row)
            print(
                f"{row['command']:34} {row['median_s']:9.3f} {row['python_pass_median_s']:15.3f} "
                f"{row['ratio']:6.1f}  {'YES' if row['imports_numpy'] else 'no'}"
            )
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=2))
    return 1 if any(r["imports_numpy"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
