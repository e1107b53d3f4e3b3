"""Burn data through the PyPI kflash 1.1.6 stub running on the virtual K210.

Measures host wall time, host CPU time and virtual (board) time for: ROM upload of the
stub (C3/C5), greeting, optional baud change (0xD6), flash init (0xD7) and 64 KiB flash
writes (0xD4), all through the ``sim://`` URL handler. The stub is decoded at run time
from the installed ``kflash`` module. Usage::

    python benchmarks/sim_kflash_stub_burn.py --size 1M --baud 1500000
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import serial  # noqa: E402
from support.simwire import enter_isp, reply  # noqa: E402

from kflashpy.isp.frames import build_request, legacy_short_request  # noqa: E402
from kflashpy.isp.slip import encode  # noqa: E402
from kflashpy.isp.stubs import kflash_package_stub  # noqa: E402
from kflashpy.units import parse_int  # noqa: E402

serial.protocol_handler_packages.append("kflashpy.sim")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="1M", help="bytes to burn (default 1M)")
    ap.add_argument("--baud", type=int, default=1_500_000, help="stage-2 baud (0xD6)")
    ap.add_argument("--timing", default="typical", help="flash timing profile")
    ap.add_argument("-v", "--verbose", action="store_true", help="print a line per frame")
    args = ap.parse_args()
    size = parse_int(args.size, "size")

    port = serial.serial_for_url(f"sim://?board=maix-bit&timing={args.timing}", baudrate=115200)
    board = port.sim_board

    def request(packet: bytes, timeout: float = 1.0) -> bytes | None:
        port.write(encode(packet))
        return reply(port, timeout)

    enter_isp(port)
    rows = []
    wall, cpu, virt = time.perf_counter(), time.process_time(), board.now

    def mark(stage: str) -> None:
        nonlocal wall, cpu, virt
        rows.append(
            (stage, time.perf_counter() - wall, time.process_time() - cpu, board.now - virt)
        )
        wall, cpu, virt = time.perf_counter(), time.process_time(), board.now

    assert request(legacy_short_request(0xC2)) == b"\xc2\xe0"
    stub = kflash_package_stub()
    for off in range(0, len(stub), 1024):
        assert (
            request(build_request(0xC3, 0x8000_0000 + off, stub[off : off + 1024])) == b"\xc3\xe0"
        )
    port.write(encode(build_request(0xC5, 0x8000_0000)))
    port.timeout = 0.1
    port.read(4096)
    assert request(legacy_short_request(0xD2)) == b"\xd2\xe0"
    mark("stub upload + boot + greet")
    if args.baud != 115200:
        port.write(encode(build_request(0xD6, 0, struct.pack("<I", args.baud))))
        port.timeout = 0.05
        port.read(4096)
        port.baudrate = args.baud
        assert request(legacy_short_request(0xD2)) == b"\xd2\xe0"
    assert request(build_request(0xD7, 1, data_len=0), 3) == b"\xd7\xe0"
    mark(f"baud {args.baud} + flash init")
    data = os.urandom(size)
    for off in range(0, size, 65536):
        answer = request(build_request(0xD4, off, data[off : off + 65536]), 90)
        assert answer == b"\xd4\xe0", answer
        if args.verbose:
            print(
                f"  0x{off:06x}: {time.process_time() - cpu:.1f} s cpu, {board.now - virt:.2f} s virtual"
            )
    mark(f"write {size} bytes")
    ok = board.flash.read(0, size) == data
    print(f"{'stage':34} {'wall s':>8} {'cpu s':>8} {'virtual s':>10}")
    for stage, w, c, v in rows:
        print(f"{stage:34} {w:8.2f} {c:8.2f} {v:10.3f}")
    print(f"flash contents {'verified' if ok else 'MISMATCH'}; core: {board.status()['core']}")


if __name__ == "__main__":
    main()
