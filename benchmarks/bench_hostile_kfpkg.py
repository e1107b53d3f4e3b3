"""Time and peak memory of reading and checking a kfpkg with many entries at one address.

A hostile (or merely careless) package lists the same member thousands of times at one
address. Reading it, checking its layout (``check-layout``) and planning a burn must stay
linear: the target is 10,000 entries in under 5 s and 200 MB (issue #17). Each step runs
in a fresh process so its peak resident memory is its own.

Run: python benchmarks/bench_hostile_kfpkg.py [--entries 10000] [--size 65536]
(prints one line per step; no pass/fail)
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

#: each step sets NOTE to what it found
STEPS = {
    "read_kfpkg": "from kflashpy.image.kfpkg import read_kfpkg\nNOTE = str(len(read_kfpkg(PATH).entries))",
    "check-layout": (
        "from kflashpy.image.kfpkg import read_kfpkg\n"
        "from kflashpy.image.plan import items_from_kfpkg, plan_flash\n"
        "plan = plan_flash(items_from_kfpkg(read_kfpkg(PATH)))\n"
        "NOTE = f'{len(plan.findings)} findings, {len(plan.errors)} errors'"
    ),
    "burn planning": (
        "from kflashpy.errors import LayoutError\n"
        "from kflashpy.isp.api import plan_burn\n"
        "try:\n    plan_burn(kfpkg=PATH)\n    NOTE = 'accepted'\n"
        "except LayoutError as e:\n    NOTE = 'refused: ' + e.message[:60]"
    ),
}


def make_package(path: Path, entries: int, size: int, prefix: bool) -> None:
    files = [{"address": 0x300000, "bin": "m.bin", "sha256Prefix": prefix}] * entries
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("flash-list.json", json.dumps({"version": "0.1.0", "files": files}))
        zf.writestr("m.bin", bytes(range(256)) * (size // 256))
    path.write_bytes(buf.getvalue())


def run_step(code: str, path: Path) -> dict:
    script = (
        "import json, resource, time\n"
        f"PATH = {str(path)!r}\n"
        "t0 = time.perf_counter()\n"
        f"{code}\n"
        "print(json.dumps({'s': time.perf_counter() - t0, 'note': NOTE,\n"
        "    'mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return json.loads(run.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=10_000)
    ap.add_argument("--size", type=int, default=64 * 1024, help="bytes of the listed member")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for prefix in (False, True):
            path = Path(tmp) / f"many-{prefix}.kfpkg"
            make_package(path, args.entries, args.size, prefix)
            for step, code in STEPS.items():
                r = run_step(code, path)
                print(
                    f"{args.entries} entries x {args.size} B, sha256Prefix={prefix!s:5} "
                    f"{step:14} {r['s']:7.2f} s {r['mb']:8.1f} MB peak  {r['note']}"
                )


if __name__ == "__main__":
    main()
