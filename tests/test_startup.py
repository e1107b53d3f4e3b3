"""Commands that need no model start without NumPy (start-up time: benchmarks/bench_startup.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = (
    "import sys; from kflashpy.cli import main; main(sys.argv[1:]); "
    "print('numpy' in sys.modules, file=sys.stderr)"
)


@pytest.mark.parametrize(
    "args",
    [["--help"], ["burn", "--help"], ["boards"], ["check-layout", "0x300000", "{data}"],
     ["image-info", "{data}"], ["verify", "0", "{data}", "-p", "/dev/ttyNO_SUCH"]],
    ids=lambda a: " ".join(a[:2]),
)  # fmt: skip
def test_commands_that_need_no_model_do_not_import_numpy(tmp_path, args):
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(range(256)) * 16)
    argv = [a.replace("{data}", str(data)) for a in args]
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60
    )
    assert run.stderr.strip().splitlines()[-1] == "False", run.stderr


def test_a_model_command_still_gets_numpy():
    run = subprocess.run(
        [sys.executable, "-c", PROBE, "model", "info",
         "tests/fixtures/kmodels/v3/mnist_maixpy-scripts.kmodel"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.stderr.strip().splitlines()[-1] == "True"  # the probe itself can fail
