"""benchmarks/bench_inflate.py counts the flasher decoder's guest instructions exactly.

The count is deterministic (no clock in it), so it can guard the table-driven decoder's
fast paths: a change that sent literals or copies down a slow path would multiply it
(the bit-by-bit decoder before it took 82 instructions per byte of the kmodel).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_inflate  # noqa: E402


def test_the_decoder_stays_on_its_fast_paths():
    source = Path(bench_inflate.ROOT) / "stub" / "inflate.c"
    result = bench_inflate.measure(source, 2 * bench_inflate.FRAME)
    for name, (instructions, n) in result.items():
        assert n == 2 * bench_inflate.FRAME
        assert instructions / n < 22, f"{name}: {instructions / n:.1f} instructions a byte"


def test_a_wrong_output_stops_the_benchmark(tmp_path):
    """The count is only worth something for a decoder that decodes: one that writes
    other bytes stops the run."""
    bad = tmp_path / "inflate.c"
    source = (Path(bench_inflate.ROOT) / "stub" / "inflate.c").read_text()
    bad.write_text(source.replace("*o++ = (u8)(e >> 8);", "*o++ = (u8)(e >> 9);", 1))
    with pytest.raises(SystemExit, match="differs"):
        bench_inflate.measure(bad, bench_inflate.FRAME)
