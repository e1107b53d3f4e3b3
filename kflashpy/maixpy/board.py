"""On-board helpers: what kflashpy asks a running MaixPy through its REPL.

All of it is plain MicroPython sent through :class:`~kflashpy.maixpy.repl.MaixPyRepl`:
``Maix.utils.flash_read`` reads flash with the normal 8-bit SPI reads (file order, no
word swap), ``uhashlib`` hashes on the board, and data comes back as base64 lines. So
a burn can be verified while MaixPy runs, without entering ISP mode.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

from ..errors import ProtocolError, UsageError
from ..progress import Progress, ProgressFn, report
from ..units import fmt_addr
from .repl import MaixPyRepl, parse_repr

#: bytes per flash_read call on the board (small: the GC heap holds them)
READ_BLOCK = 4096
#: bytes per exec when reading flash back to the host (a few base64 lines each)
READBACK_BLOCK = 16384


def _check_region(addr: int, size: int) -> None:
    if addr < 0 or size < 0:
        raise UsageError(f"bad flash region {addr:#x}+{size}", "address and size must be >= 0")


def flash_sha256(repl: MaixPyRepl, addr: int, size: int, timeout: float | None = None) -> bytes:
    """SHA-256 of flash ``[addr, addr+size)``, computed by the board itself."""
    _check_region(addr, size)
    code = (
        "import Maix,uhashlib,ubinascii\n"
        f"_h=uhashlib.sha256()\n_a={addr}\n_e={addr + size}\n"
        "while _a<_e:\n"
        f" _n=min({READ_BLOCK},_e-_a)\n _h.update(Maix.utils.flash_read(_a,_n))\n _a+=_n\n"
        "print(ubinascii.hexlify(_h.digest()).decode())"
    )
    # hashing runs at ~1-2 MB/s on the board: allow for it beyond the idle timeout
    budget = (timeout or repl.timeout) + size / 500_000
    out = repl.exec_raw(code, timeout=budget, doing=f"hashing flash at {fmt_addr(addr)}")
    text = out.decode("ascii", "replace").strip()
    try:
        digest = bytes.fromhex(text)
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise ProtocolError(
            f"the board returned {text[:80]!r} instead of a SHA-256",
            "another program may be printing on the REPL UART; retry with --reset",
        )
    return digest


def flash_read(repl: MaixPyRepl, addr: int, size: int, progress: ProgressFn | None = None) -> bytes:
    """Read flash ``[addr, addr+size)`` back to the host, checked against the board's hash."""
    _check_region(addr, size)
    parts: list[bytes] = []
    done = 0
    while done < size:
        n = min(READBACK_BLOCK, size - done)
        a = addr + done
        code = (
            "import Maix,ubinascii\n"
            f"_a={a}\n_e={a + n}\n"
            "while _a<_e:\n"
            " _b=Maix.utils.flash_read(_a,min(768,_e-_a))\n"
            " print(ubinascii.b2a_base64(_b).decode().strip())\n _a+=len(_b)\n"
        )
        block = repl.read_blocks(code, doing=f"reading flash at {fmt_addr(a)}")
        if len(block) != n:
            raise ProtocolError(
                f"flash read at {fmt_addr(a)} returned {len(block)} bytes, {n} expected",
                "bytes were lost on the serial line: retry",
            )
        parts.append(block)
        done += n
        report(progress, Progress("read", done, size, fmt_addr(addr)))
    data = b"".join(parts)
    if hashlib.sha256(data).digest() != flash_sha256(repl, addr, size):
        raise ProtocolError(
            f"flash read back from {fmt_addr(addr)} does not match the board's own hash",
            "bytes were corrupted on the serial line: retry",
        )
    return data


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of checking one file against flash through the REPL."""

    address: int
    size: int
    sha256_file: str
    sha256_board: str
    match: bool

    def to_dict(self) -> dict:
        return asdict(self)


def verify_region(repl: MaixPyRepl, addr: int, data: bytes) -> VerifyResult:
    """Compare ``data`` with flash at ``addr`` by SHA-256 computed on the board."""
    board = flash_sha256(repl, addr, len(data))
    host = hashlib.sha256(data).digest()
    return VerifyResult(addr, len(data), host.hex(), board.hex(), board == host)


@dataclass(frozen=True)
class BoardInfo:
    """What the running firmware says about itself."""

    platform: str
    version: str
    machine: str
    gc_free: int
    heap_free: int
    kmodel_v4: bool

    def to_dict(self) -> dict:
        return asdict(self)


INFO_CODE = (
    "import sys,gc\n"
    "try:\n import uos as _o\n _u=_o.uname()\n _v=_u[3]\n _m=_u[4]\nexcept Exception:\n"
    " _v='.'.join(str(x) for x in sys.implementation.version)\n _m=''\n"
    "try:\n import Maix\n _hf=Maix.utils.heap_free()\nexcept Exception:\n _hf=-1\n"
    "try:\n import KPU\n _v4=hasattr(KPU,'set_outputs')\nexcept Exception:\n _v4=False\n"
    "print(repr((sys.platform,_v,_m,gc.mem_free(),_hf,_v4)))"
)


def board_info(repl: MaixPyRepl) -> BoardInfo:
    """Firmware version, free GC and system heap, and whether kmodel V4 is supported.

    V4 support is inferred from ``KPU.set_outputs``, which only V4-capable builds have.
    """
    out = repl.exec_raw(INFO_CODE, doing="reading board information")
    vals = parse_repr(out.decode("utf-8", "replace"), "board information")
    if not isinstance(vals, tuple) or len(vals) != 6:
        raise ProtocolError(f"unexpected board information {vals!r}", "is this MaixPy?")
    return BoardInfo(
        str(vals[0]), str(vals[1]), str(vals[2]), int(vals[3]), int(vals[4]), bool(vals[5])
    )
