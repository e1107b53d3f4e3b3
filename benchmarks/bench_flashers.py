"""kflashpy's flasher vs PyPI kflash.py 1.1.6 (client and stub), in the simulator's virtual time.

Cases: the 1.35 MB YOLO kmodel at 0x300000 and a 1.5 MB firmware-like payload (zlib-9
ratio ~0.60, burnt as a boot image at 0), at 115200, 1.5 M and 3 M baud, on a blank
flash; for our flasher also a reflash of unchanged content, of a 10 % change (every
10th 4 KiB sector), and a burn over other data (every block must be erased). Each
line also shows the physical floor: max(wire time of the zlib-9 compressed bytes, erase
+ program time at the flash model's typical timings), and the blank-flash floor, the same
without the erases (a blank flash needs none, so that is the bar for a first burn).
Times run from opening the port (reset) to the end, including the reboot; ours include
the on-board verification (each write acknowledgement's digest of the pages read back,
and a separate SHA-256 pass of the region where the burn needs one: the "verify" column,
"-" when the acknowledgements proved the region).

    python benchmarks/bench_flashers.py                        # everything (slow)
    python benchmarks/bench_flashers.py --baud 3000000 --payload kmodel --client kflashpy
    python benchmarks/bench_flashers.py --json results.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sys
import tempfile
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))

from simbench import KFLASH_DIO_FLAG, boot_image, firmware_like_payload, kflash_116  # noqa: E402

from kflashpy.isp.burn import WriteRegion, burn_on  # noqa: E402
from kflashpy.isp.connect import connect  # noqa: E402
from kflashpy.sim.flash import TIMING_PROFILES  # noqa: E402

YOLO = (
    Path(__file__).resolve().parents[1]
    / "tests/fixtures/kmodels/v3/yolo_20classes_nncase-v0.1.0-rc5.kmodel"
)
BAUDS = (115200, 1500000, 3000000)
#: The boards' flash unique id, fixed. Without ``uid`` a board derives it from its flash
#: file's path (docs/simulator.md), here a new temporary directory each run, and the id
#: travels in the flasher's IDENTIFY reply: when that reply holds a byte SLIP escapes
#: (0xC0, 0xDB) it is one byte longer on the wire, and the virtual time of the same burn
#: changed from run to run.
UID = "0011223344556677"


@dataclass
class Row:
    case: str
    client: str
    baud: int
    size: int
    total_s: float  # reset to done (virtual seconds)
    ready_s: float | None  # reset to flasher ready at full baud
    verify_s: float | None  # the burn's separate on-board SHA-256 pass of the region
    floor_s: float  # the floor: max(wire, erase + program)
    host_s: float
    ok: bool
    blank_floor_s: float = 0.0  # max(wire, program): nothing to erase on a blank flash
    # all the board time the simulator ran (with the check hash and the reboot that
    # total_s leaves out): what host time is divided by for the simulator's host cost
    simulated_s: float = 0.0


def floor_seconds(data: bytes, baud: int, erase: bool = True) -> float:
    """max(wire time of the zlib-9 compressed bytes, erase + program time), typical
    timings. ``erase=False``: the floor of a blank flash, where nothing needs erasing."""
    t = TIMING_PROFILES["typical"]
    wire = len(zlib.compress(data, 9)) * 10 / baud
    program = math.ceil(len(data) / 256) * t.program_time(256)
    erase_s = math.ceil(len(data) / 65536) * t.block64_erase if erase else 0.0
    return max(wire, program + erase_s)


def ours(case: str, image: bytes, address: int, baud: int, flash: Path) -> Row:
    """Burn with kflashpy's flasher on a board whose flash lives in ``flash``."""
    h0 = time.monotonic()
    url = f"sim://?board=maix-bit&uid={UID}&flash={flash}"
    # bytes a burn keeps (kflashpy/isp/kept.py) are filed by board id: beside the flash
    # file, so that one run's never reach another's board of the same fixed id
    state = {"KFLASHPY_STATE_DIR": str(flash.parent / f"{flash.name}.state")}
    with (
        mock.patch.dict(os.environ, state),
        connect(url, board="maix-bit", baud=baud, stub="kflashpy") as dev,
    ):
        board = dev.port.sim_board
        ready = board.now
        passes: list[float] = []
        s2, hash_pass = dev.stage2, dev.stage2.sha256

        def timed(at: int, n: int) -> bytes:
            t = board.now
            digest = hash_pass(at, n)
            passes.append(board.now - t)
            return digest

        s2.sha256 = timed  # type: ignore[method-assign]
        burn_on(dev, [WriteRegion(address, image, case)], reboot=False)
        del s2.sha256
        t = board.now
        ok = s2.sha256(address, len(image)) == hashlib.sha256(image).digest()
        extra = board.now - t  # this extra hash is not part of the burn
        s2.reboot()
        simulated = board.now
        total = simulated - extra
    verify = sum(passes) if passes else None
    host = time.monotonic() - h0
    return Row(
        case, "kflashpy", baud, len(image), total, ready, verify, 0.0, host, ok, 0.0, simulated
    )


def old_content(flash: Path, address: int, size: int) -> None:
    """Fill the region with other data (a previous firmware or model): every block
    must then be erased, so the floor's erase time is really spent."""
    rng = random.Random(size)
    with flash.open("r+b") as f:
        f.seek(address)
        f.write(rng.randbytes(size))


def changed(image: bytes) -> bytes:
    """Every 10th 4 KiB sector modified (10 % of the content)."""
    out = bytearray(image)
    for pos in range(0, len(out), 40960):
        out[pos : pos + 64] = bytes(b ^ 0x5A for b in out[pos : pos + 64])
    return bytes(out)


def run(args) -> list[Row]:
    firmware = firmware_like_payload()
    payloads = {
        "kmodel": (YOLO.read_bytes(), 0x300000, False),
        "firmware": (firmware, 0, True),
    }
    rows: list[Row] = []
    for kind in args.payload or list(payloads):
        data, address, is_fw = payloads[kind]
        image = boot_image(data, KFLASH_DIO_FLAG) if is_fw else data
        for baud in args.baud or BAUDS:
            floor = floor_seconds(image, baud)
            blank_floor = floor_seconds(image, baud, erase=False)
            if "kflash" in (args.client or ["kflash", "kflashpy"]):
                h0 = time.monotonic()
                m = kflash_116(data, address, baud, firmware=is_fw)
                rows.append(
                    Row(
                        kind,
                        "kflash-1.1.6",
                        baud,
                        len(image),
                        m.virtual_s,
                        None,
                        None,
                        floor,
                        time.monotonic() - h0,
                        m.ok,
                        blank_floor,
                    )  # fmt: skip
                )
                print(table(rows[-1:]), flush=True)
            if "kflashpy" in (args.client or ["kflash", "kflashpy"]):
                with tempfile.TemporaryDirectory() as tmp:
                    flash = Path(tmp) / "board.img"
                    flash.write_bytes(b"\xff" * (16 << 20))
                    for case, img in ((kind, image), (f"{kind} unchanged", image),
                                      (f"{kind} 10% changed", changed(image)),
                                      (f"{kind} over old data", image)):  # fmt: skip
                        if case != kind and not args.reflash:
                            continue
                        if case.endswith("old data"):
                            old_content(flash, address, len(img))
                        row = ours(case, img, address, baud, flash)
                        row.floor_s, row.blank_floor_s = floor, blank_floor
                        rows.append(row)
                        print(table(rows[-1:]), flush=True)
    return rows


def table(rows: list[Row], header: bool = False) -> str:
    lines = []
    if header:
        lines.append(
            "| case | client | baud | bytes | total s | ready s | verify s | floor s "
            "| total/floor | blank floor s | total/blank floor | host s |"
        )
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ready = f"{r.ready_s:.2f}" if r.ready_s is not None else "-"
        verify = f"{r.verify_s:.2f}" if r.verify_s is not None else "-"
        lines.append(
            f"| {r.case} | {r.client} | {r.baud} | {r.size} | {r.total_s:.2f} | {ready} | "
            f"{verify} | {r.floor_s:.2f} | {r.total_s / r.floor_s:.2f}"
            + ("" if r.ok else " WRONG BYTES")
            + f" | {r.blank_floor_s:.2f} | {r.total_s / r.blank_floor_s:.2f} | {r.host_s:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--client", action="append", choices=["kflash", "kflashpy"])
    ap.add_argument("--baud", action="append", type=int)
    ap.add_argument("--payload", action="append", choices=["kmodel", "firmware"])
    ap.add_argument("--no-reflash", dest="reflash", action="store_false")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = run(args)
    print()
    print(table(rows, header=True))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
