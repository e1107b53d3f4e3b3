"""Shared helpers for benchmarks (and conformance tests) that burn through the virtual board.

A *client* is a function ``client(payload, address, baud, *, firmware) -> Measurement``:
it burns ``payload`` at ``address`` (as a boot image with the SHA-256 prefix when
``firmware`` is true) into a fresh virtual board at ``baud`` and reports how long that
took in virtual seconds (what a real board would take) and in host seconds (what the
simulation cost), and whether the board's flash then holds exactly the expected bytes.
Add other clients (the project's own flasher, other stubs) to :data:`CLIENTS`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kflashpy.sim.board import VirtualBoard
from kflashpy.sim.config import BoardConfig
from kflashpy.sim.kflash_pty import kflash_command
from kflashpy.sim.serve import PtyServer

#: boot-image flag byte kflash 1.1.6 writes by default (--iomode dio sets bit 1)
KFLASH_DIO_FLAG = 0x02


@dataclass
class Measurement:
    client: str
    size: int
    address: int
    baud: int
    virtual_s: float
    host_s: float
    ok: bool
    detail: str = ""


Client = Callable[..., Measurement]


def firmware_like_payload(size: int = 1_500_000, seed: int = 2024) -> bytes:
    """Deterministic bytes that zlib level 9 shrinks to about 60 %, like MaixPy firmware.

    Blocks of 4-byte "instruction words" drawn from a skewed vocabulary (compressible,
    like code) alternate with random 256-byte blocks (like tables and compressed assets).
    """
    rng = random.Random(seed)
    vocab = [rng.getrandbits(32).to_bytes(4, "little") for _ in range(2048)]
    weights = [1.0 / (k + 1) for k in range(len(vocab))]
    out = bytearray()
    while len(out) < size:
        if rng.random() < 0.2:
            out += rng.randbytes(256)
        else:
            out += b"".join(rng.choices(vocab, weights, k=64))
    return bytes(out[:size])


def boot_image(payload: bytes, flag: int) -> bytes:
    """What a boot image looks like in flash: flag, u32 length, payload, SHA-256."""
    head = bytes((flag,)) + struct.pack("<I", len(payload)) + payload
    return head + hashlib.sha256(head).digest()


@contextmanager
def served_board(url: str = "sim://?board=maix-bit", **server_options) -> Iterator[PtyServer]:
    """A fresh virtual board on a pty, served from a thread (``server.board``)."""
    board = VirtualBoard(BoardConfig.from_url(url))
    server = PtyServer(board, **server_options)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop()
        thread.join(10)
        server.close()
        board.close()


def start_serve_cli(image: Path, flash_size: str, *extra: str) -> tuple[subprocess.Popen, str]:
    """Start `kflashpy sim serve --once` with a flash file; return the process and its pty."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kflashpy", "--no-progress", "sim", "serve",
         "--flash-file", str(image), "--flash-size", flash_size, "--once", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def write_kfpkg(path: Path, files: list[tuple[int, str, bytes, bool]]) -> Path:
    """A kfpkg (zip with flash-list.json) of ``(address, name, data, sha256_prefix)``."""
    listing = {
        "version": "0.1.0",
        "files": [{"address": a, "bin": n, "sha256Prefix": p} for a, n, _, p in files],
    }
    with zipfile.ZipFile(path, "w") as zf:
        # one key per line: kflash 1.1.6 rewrites `"address": <value>,` line by line
        zf.writestr("flash-list.json", json.dumps(listing, indent=1))
        for _, name, data, _ in files:
            zf.writestr(name, data)
    return path


def run_kflash(port: str, baud: int, image: Path, timeout: float = 1800) -> str:
    """Run PyPI kflash 1.1.6 on ``port`` (a pty) to burn ``image``; return its output."""
    proc = subprocess.run(
        kflash_command(["-n", "-b", str(baud), "-B", "dan", str(image)], port),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "100", "LINES": "24"},
    )
    return proc.stdout + proc.stderr


def kflash_116(payload: bytes, address: int, baud: int, *, firmware: bool) -> Measurement:
    """PyPI kflash.py 1.1.6 (client and its stub) over a pty to ``kflashpy sim serve``."""
    with tempfile.TemporaryDirectory() as tmp, served_board() as server:
        board = server.board
        if firmware:
            image = Path(tmp) / "firmware.bin"
            image.write_bytes(payload)
        else:
            image = write_kfpkg(Path(tmp) / "data.kfpkg", [(address, "data.bin", payload, False)])
        v0, t0 = board.now, time.monotonic()
        log = run_kflash(server.path, baud, image)
        host_s = time.monotonic() - t0
        virtual_s = board.now - v0
        expected = boot_image(payload, KFLASH_DIO_FLAG) if firmware else payload
        ok = board.flash.read(address, len(expected)) == expected
    detail = "" if ok else log[-2000:]
    return Measurement("kflash-1.1.6", len(payload), address, baud, virtual_s, host_s, ok, detail)


#: name -> client function; later clients are added here side by side
CLIENTS: dict[str, Client] = {"kflash-1.1.6": kflash_116}


def table(rows: list[Measurement]) -> str:
    """A plain-text table of measurements."""
    head = f"{'client':<14} {'payload':>10} {'address':>10} {'baud':>8} {'virtual s':>10} {'host s':>8} {'KiB/s (virt)':>12}  ok"
    lines = [head, "-" * len(head)]
    for m in rows:
        rate = m.size / 1024 / m.virtual_s if m.virtual_s else 0.0
        lines.append(
            f"{m.client:<14} {m.size:>10} {m.address:>#10x} {m.baud:>8} {m.virtual_s:>10.2f} "
            f"{m.host_s:>8.2f} {rate:>12.1f}  {'yes' if m.ok else 'NO'}"
        )
    return "\n".join(lines)
