"""Host cost of the simulator: host seconds per virtual second of a burn, per flasher and baud.

A short configuration of bench_flashers.py's kflashpy cases (the first SIZE bytes of the
YOLO kmodel at 0x300000, blank flash) plus kflash.py 1.1.6's stub driven in-process
(sim_kflash_stub_burn.py's sequence: upload, optional 0xD6, 0xD7, 64 KiB 0xD4 frames of
deterministic bytes). For each case it prints the exact virtual time (``repr``, to
compare before/after a simulator change: it must not move) and the host wall and CPU
seconds per virtual second simulated (the emulator's modules are imported before the
first case and their import time printed apart). For kflashpy's flasher that divides by all the
board time the run simulated, the check hash and the reboot after the burn included
(their host time is in the run too; the printed burn time leaves them out). Run it from
two checkouts to compare, alternating the checkouts' runs (the machine's load changes
from minute to minute: a block of one checkout's runs, then the other's, can differ by
a third either way); ``--repeat N`` runs the cases N times round-robin within one run
and adds each case's median and lowest ratio (other jobs only ever add host time);
``--phases`` adds, per case, the host CPU and board time of the core's slices split by
whether bytes were on their way to the board as each run of slices began ("receiving")
or not ("other": flash programming, replies, waits)::

    python benchmarks/bench_sim_speed.py --size 256K
    PYTHONPATH=/path/to/old/checkout python benchmarks/bench_sim_speed.py --size 256K
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import serial  # noqa: E402
from bench_flashers import YOLO, ours  # noqa: E402
from support.simwire import enter_isp, reply  # noqa: E402

from kflashpy.isp.frames import build_request, legacy_short_request  # noqa: E402
from kflashpy.isp.slip import encode  # noqa: E402
from kflashpy.isp.stubs import kflash_package_stub  # noqa: E402
from kflashpy.units import parse_int  # noqa: E402

serial.protocol_handler_packages.append("kflashpy.sim")
CASES = (
    ("kflashpy", 3_000_000),
    ("kflashpy", 1_500_000),
    ("kflashpy", 115200),
    ("kflash-stub", 1_500_000),
    ("kflash-stub", 115200),
)


def kflash_stub_burn(data: bytes, baud: int) -> float:
    """Burn ``data`` at 0 with kflash.py's stub in-process; the virtual seconds taken."""
    port = serial.serial_for_url("sim://?board=maix-bit", baudrate=115200)
    board = port.sim_board

    def request(packet: bytes, timeout: float = 1.0) -> bytes | None:
        port.write(encode(packet))
        return reply(port, timeout)

    enter_isp(port)
    t0 = board.now
    stub = kflash_package_stub()
    for off in range(0, len(stub), 1024):
        assert request(build_request(0xC3, 0x8000_0000 + off, stub[off : off + 1024]))
    port.write(encode(build_request(0xC5, 0x8000_0000)))
    port.read(4096)
    assert request(legacy_short_request(0xD2)) == b"\xd2\xe0"
    if baud != 115200:
        port.write(encode(build_request(0xD6, 0, struct.pack("<I", baud))))
        port.timeout = 0.05
        port.read(4096)
        port.baudrate = baud
        assert request(legacy_short_request(0xD2)) == b"\xd2\xe0"
    assert request(build_request(0xD7, 1, data_len=0), 3) == b"\xd7\xe0"
    for off in range(0, len(data), 65536):
        assert request(build_request(0xD4, off, data[off : off + 65536]), 90) == b"\xd4\xe0"
    assert board.flash.read(0, len(data)) == data
    seconds = board.now - t0
    port.close()
    return seconds


class Phases:
    """Host CPU and board seconds of ``Core._run`` calls, by whether bytes were on their
    way to the board when each began (a wrapper :meth:`install` puts on ``Core._run``)."""

    def __init__(self) -> None:
        self.host: dict[str, float] = {}
        self.board: dict[str, float] = {}
        self.reset()

    def reset(self) -> None:
        self.host = {"receiving": 0.0, "other": 0.0}
        self.board = {"receiving": 0.0, "other": 0.0}

    def install(self) -> None:
        from kflashpy.sim.core import Core

        run = Core._run
        phases = self

        def timed(core: Core, t_end: float) -> None:
            phase = "receiving" if core.board.to_board.pending() else "other"
            cpu, now = time.process_time(), core.board.now
            try:
                run(core, t_end)
            finally:
                phases.host[phase] += time.process_time() - cpu
                phases.board[phase] += core.board.now - now

        Core._run = timed  # type: ignore[method-assign]

    def lines(self) -> list[str]:
        return [
            f"  {phase:10} {self.host[phase]:8.2f} host s {self.board[phase]:8.3f} board s"
            f" {self.host[phase] / self.board[phase] if self.board[phase] else 0:6.2f}"
            for phase in self.host
        ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="256K", help="bytes burnt per case (default 256K)")
    ap.add_argument("--case", action="append", help="client@baud, e.g. kflashpy@3000000")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds over the cases; then each case's median and lowest CPU s per virtual s"
        " (this machine's noise is mostly other jobs: the lowest is the least disturbed)",
    )
    ap.add_argument(
        "--phases",
        action="store_true",
        help="per case, the core's host CPU and board time receiving and otherwise",
    )
    args = ap.parse_args()
    size = parse_int(args.size, "size")
    cases = [(c, int(b)) for c, b in (x.split("@") for x in args.case)] if args.case else CASES
    image = YOLO.read_bytes()[:size]
    data = random.Random(7).randbytes(size)
    # The emulator's modules (unicorn, numpy) are imported when the first board starts
    # its core: a one-time cost per process (~0.1 s), not one per virtual second, so it
    # is taken here and shown apart instead of inflating whichever case comes first.
    cpu = time.process_time()
    importlib.import_module("kflashpy.sim.core")
    print(f"one-time import of the emulator: {time.process_time() - cpu:.2f} s CPU")
    print(f"{'case':22} {'virtual s (exact)':>22} {'host s':>8} {'host/virt':>9} {'cpu/virt':>9}")
    ratios: dict[str, list[float]] = {}
    phases = Phases()
    if args.phases:
        phases.install()
    for client, baud in [case for _ in range(args.repeat) for case in cases]:
        phases.reset()
        wall, cpu = time.perf_counter(), time.process_time()
        if client == "kflashpy":
            with tempfile.TemporaryDirectory() as tmp:
                row = ours("kmodel", image, 0x300000, baud, Path(tmp) / "flash.img")
            assert row.ok
            virtual, simulated = row.total_s, row.simulated_s
        else:
            virtual = simulated = kflash_stub_burn(data, baud)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(
            f"{client + '@' + str(baud):22} {virtual!r:>22} {wall:8.1f} "
            f"{wall / simulated:9.2f} {cpu / simulated:9.2f}",
            flush=True,
        )
        if args.phases:
            print("\n".join(phases.lines()))
        ratios.setdefault(f"{client}@{baud}", []).append(cpu / simulated)
    if args.repeat > 1:
        print(f"{'case':22} {'median cpu/virt':>22} {'lowest':>8}")
        for name, values in ratios.items():
            print(f"{name:22} {statistics.median(values):22.2f} {min(values):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
