"""Soak `kflashpy sim serve`: many client sessions, most of them cut short, one server.

After every session a check client (``flash-id``) must get an answer within
``--check-timeout`` host seconds, and the idle server must not be spinning: otherwise
the session wedged the server. Session kinds (chosen at random, seeded):

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

KINDS = ("ok", "int", "kill", "midframe", "two", "kflash")


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
    """None if the server answers a flash-id and idles without spinning; else why not."""
    if server.poll() is not None:
        return f"server exited ({server.returncode})"
    try:
        rc = subprocess.run(
            kflashpy("-p", str(link), "-B", "maix-bit", "-q", "flash-id"),
            capture_output=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"flash-id took more than {timeout:.0f} s"
    if rc.returncode:
        return f"flash-id failed: {rc.stderr.decode(errors='replace').strip()[:200]}"
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
    ap.add_argument("--check-timeout", type=float, default=60.0)
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    rng = random.Random(args.seed)
    wedges = 0
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
        f"{args.sessions} sessions, {wedges} wedges, server stopped by SIGINT: "
        f"{'yes' if stopped is not None else 'NO'}, {time.monotonic() - t0:.0f} host s"
    )
    return 1 if wedges or stopped is None else 0


if __name__ == "__main__":
    sys.exit(main())
