"""Soak `kflashpy sim serve`: many client sessions, most of them cut short, one server.

After every session a check client must get the boot ROM's answer to a greeting
(the server reset the board when it opened the port) within ``--check-timeout`` host
seconds, and the idle server must then not be spinning: otherwise the session wedged
the server. ``ok`` sessions (a complete ``flash-id`` through kflashpy's flasher) are
counted apart: they can also fail because the emulation runs slower than real time on
a loaded machine, which is not a wedge. Session kinds (chosen at random, seeded):

* ``ok``        a complete ``flash-id``
* ``int``       a burn stopped by SIGINT after a random delay (the client's Ctrl-C)
* ``kill``      a burn killed by SIGKILL after a random delay (a crashed client)
* ``midframe``  a raw client writes part of a SLIP frame and closes the port
* ``two``       two clients hold the pty open at once, both write, both close
* ``kflash``    kflash.py (``kflashpy sim kflash``) burns, killed after a random delay

Usage::

    python benchmarks/sim_serve_soak.py --sessions 50 --seed 1
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kflashpy.isp.frames import RomOp, legacy_short_request
from kflashpy.isp.slip import encode

KINDS = ("ok", "int", "kill", "midframe", "two", "kflash")
GREETING = encode(legacy_short_request(RomOp.NOP))
ROM_REPLY = bytes.fromhex("c0c2e0c0")


def _default_sigint() -> None:
    # a background shell starts children with SIGINT ignored; a client must see Ctrl-C
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kflashpy(*args: str) -> list[str]:
    return [sys.executable, "-m", "kflashpy", *args]


def start_server(tmp: Path) -> tuple[subprocess.Popen, Path]:
    link = tmp / "k210"
    proc = subprocess.Popen(
        kflashpy("sim", "serve", "--link", str(link), "--flash-file", str(tmp / "board.img")),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        preexec_fn=_default_sigint,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # the pty path: the server is up
    return proc, link


def _stop(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM too: the server is stopped on the way out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def interrupted(cmd: list[str], delay: float, sig: int) -> int | None:
    """Run ``cmd``, send ``sig`` after ``delay`` host seconds; its exit status."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_default_sigint
    )
    try:
        proc.wait(delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(sig)
        try:
            return proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None
    return proc.returncode


def session(kind: str, link: Path, payload: Path, rng: random.Random) -> str:
    port = ["-p", str(link), "-B", "maix-bit", "-q"]
    delay = rng.uniform(0.3, 6.0)
    burn = kflashpy(*port, "burn", "0x300000", str(payload))
    if kind == "ok":
        rc = subprocess.run(kflashpy(*port, "flash-id"), capture_output=True, timeout=120)
        return f"rc {rc.returncode}"
    if kind == "int":
        return f"rc {interrupted(burn, delay, signal.SIGINT)} after {delay:.1f}s"
    if kind == "kill":
        return f"rc {interrupted(burn, delay, signal.SIGKILL)} after {delay:.1f}s"
    if kind == "kflash":
        cmd = kflashpy("sim", "kflash", "--port", str(link), "--", "-b", "1500000", str(payload))
        return f"rc {interrupted(cmd, delay, signal.SIGKILL)} after {delay:.1f}s"
    import serial

    if kind == "midframe":
        with serial.Serial(str(link), 115200, timeout=0.2) as s:
            s.write(b"\xc0\xc2\x00\x00\x00" + rng.randbytes(rng.randrange(1, 200)))
            s.read(64)
        return "partial frame"
    with (
        serial.Serial(str(link), 115200, timeout=0.2, exclusive=False) as a,
        serial.Serial(str(link), 115200, timeout=0.2, exclusive=False) as b,
    ):
        a.write(b"\xc0\xc2\x00\x00\x00\x00\x00\x00\x00\xc0")
        b.write(rng.randbytes(32))
        a.read(64)
        b.read(64)
    return "two clients"


def check(server: subprocess.Popen, link: Path, timeout: float) -> str | None:
    """None if a new client is answered by the boot ROM of a freshly reset board within
    ``timeout`` host seconds and the idle server then does not spin; else why not."""
    import serial

    if server.poll() is not None:
        return f"server exited ({server.returncode})"
    # a new client is a new process, which takes longer than this to start: a pty reports
    # no opens, and an open within a few ms of the last close looks like the same client
    time.sleep(0.2)
    got = b""
    with serial.Serial(str(link), 115200, timeout=0.2) as port:
        port.write(GREETING)
        deadline = time.monotonic() + timeout
        while not got.endswith(ROM_REPLY) and time.monotonic() < deadline:
            got += port.read(64)
    if not got.endswith(ROM_REPLY):
        return f"no boot ROM answer in {timeout:.0f} s (got {got[-16:].hex() or 'nothing'})"
    time.sleep(0.3)  # the client's close reaches the server
    c0 = cpu_seconds(server.pid)
    time.sleep(1.0)
    busy = cpu_seconds(server.pid) - c0
    return f"idle server at {busy:.0%} CPU" if busy > 0.5 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default=",".join(KINDS), help="comma-separated session kinds")
    ap.add_argument("--check-timeout", type=float, default=10.0)
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    signal.signal(signal.SIGTERM, _stop)
    rng = random.Random(args.seed)
    wedges = 0
    failed_ok = 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        payload = tmp / "payload.bin"
        payload.write_bytes(rng.randbytes(300_000))
        server, link = start_server(tmp)
        try:
            for n in range(args.sessions):
                kind = rng.choice(kinds)
                what = session(kind, link, payload, rng)
                failed_ok += kind == "ok" and what != "rc 0"
                problem = check(server, link, args.check_timeout)
                wedges += problem is not None
                print(f"{n + 1:3d} {kind:9s} {what:24s} {problem or 'next client ok'}", flush=True)
                if problem and server.poll() is not None:
                    break
        finally:
            server.send_signal(signal.SIGINT)
            try:
                stopped = server.wait(5)
            except subprocess.TimeoutExpired:
                server.kill()
                stopped = None
    print(
        f"{args.sessions} sessions, {wedges} wedges, {failed_ok} failed flash-id sessions, "
        "server stopped by SIGINT: "
        f"{'yes' if stopped is not None else 'NO'}, {time.monotonic() - t0:.0f} host s"
    )
    return 1 if wedges or stopped is None else 0


if __name__ == "__main__":
    sys.exit(main())
