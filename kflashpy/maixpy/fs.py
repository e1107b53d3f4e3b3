"""Files on a running MaixPy: list, read, write, remove, make directories, free space.

Every operation is a short MicroPython program run through the raw REPL
(:class:`~kflashpy.maixpy.repl.MaixPyRepl`); data travels as base64 lines, and every
transfer ends with a SHA-256 computed *on the board* (``uhashlib``) and compared with
the host's copy, so a byte lost on the serial line is an error, never a silently
damaged file. MaixPy's quirks (docs/files.md):

- ``/flash`` is SPIFFS: flat, so ``os.mkdir`` raises ``NotImplementedError``; a name
  (the whole path inside ``/flash``) has at most 127 bytes; a directory put there
  becomes files named ``dir/file``; ``os.statvfs`` counts whole 128 KiB blocks;
- ``/sd`` is FAT (directories, 255-byte names), mounted only when a card is in;
- some builds have no ``os.stat``: sizes then come from ``seek(0, 2)`` on an open file
  and directories from ``os.listdir``;
- a file bigger than the free space is refused before anything is written
  (MaixPy would fail half way and leave a truncated file behind).
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import (
    DeviceError,
    InputError,
    IntegrityError,
    KflashError,
    ProtocolError,
    UsageError,
)
from ..progress import Progress, ProgressFn, report
from ..units import fmt_size
from .errors import ReplError
from .repl import MaixPyRepl, parse_repr, py_bytes, py_str

#: the mount points of MaixPy's VFS
MOUNTS = ("/flash", "/sd")
#: raw bytes per exec when writing (base64 adds a third; the ring is paced by the driver)
WRITE_BLOCK = 3072
#: raw bytes per exec when reading (printed as base64 lines of READ_LINE bytes)
READ_BLOCK = 12288
READ_LINE = 768
#: SPIFFS logical page on MaixPy (CONFIG_SPIFFS_LOGICAL_PAGE_SIZE)
SPIFFS_PAGE = 4096

#: on-board helper: (is_dir, size) of a path or None, with or without os.stat
STAT_CODE = (
    "import uos as _os\n"
    "def _st(p):\n"
    " if hasattr(_os,'stat'):\n"
    "  try:\n   s=_os.stat(p)\n   return (s[0]&0x4000!=0,s[6])\n"
    "  except OSError:\n   return None\n"
    " try:\n  f=open(p,'rb')\n  n=f.seek(0,2)\n  f.close()\n  return (False,n)\n"
    " except OSError:\n  pass\n"
    " try:\n  _os.listdir(p)\n  return (True,0)\n except OSError:\n  return None\n"
)


class FsError(DeviceError):
    """A file operation the board refused (no such file, not empty, no space...)."""

    kind = "fs"


class NoSpaceError(FsError):
    """The file does not fit in the free space of its filesystem."""

    kind = "no-space"


@dataclass(frozen=True)
class Entry:
    """One file or directory on the board."""

    path: str
    is_dir: bool
    size: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Usage:
    """Size and free space of one mounted filesystem (``os.statvfs``)."""

    mount: str
    total: int
    free: int
    block: int
    name_max: int

    @property
    def used(self) -> int:
        return self.total - self.free

    def to_dict(self) -> dict:
        return {**asdict(self), "used": self.used}


@dataclass(frozen=True)
class Transfer:
    """One file copied: where from, where to, how many bytes, its SHA-256."""

    source: str
    dest: str
    size: int
    sha256: str

    def to_dict(self) -> dict:
        return asdict(self)


# --- paths -------------------------------------------------------------------------------


def board_path(path: str) -> str:
    """A board path, absolute under ``/flash`` or ``/sd``; ``:x`` and ``x`` mean ``/flash/x``.

    Raises :class:`UsageError` for ``..`` or a path outside the mounts.
    """
    p = path[1:] if path.startswith(":") else path
    if not p.startswith("/"):
        p = "/flash/" + p
    parts = [x for x in p.split("/") if x and x != "."]
    if ".." in parts:
        raise UsageError(f"board path {path!r} contains '..'", "give an absolute path like /sd/x")
    norm = "/" + "/".join(parts)
    if not any(norm == m or norm.startswith(m + "/") for m in MOUNTS):
        raise UsageError(
            f"board path {path!r} is not on /flash or /sd",
            "MaixPy's files live under /flash (SPIFFS) and /sd (SD card)",
        )
    return norm


def mount_of(path: str) -> str:
    return "/" + board_path(path).split("/")[1]


def _doing(e: ReplError, path: str, doing: str) -> KflashError:
    """A board ``OSError`` turned into a sentence about ``path``."""
    msg = e.exc_message
    table = {
        "ENOENT": ("no such file or directory on the board", "check the path with `fs ls`"),
        "ENOSPC": ("the filesystem is full", "free space with `fs rm`, see `fs df`"),
        "EEXIST": ("it already exists", "remove it first or pick another name"),
        "EACCES": ("the directory is not empty", "use `fs rm -r`"),
        "ENAMETOOLONG": ("the name is too long", "SPIFFS names: 127 bytes, FAT: 255"),
        "EISDIR": ("it is a directory", "use -r for directories"),
        "ENOTDIR": ("a part of the path is a file", "check the path with `fs ls`"),
    }
    for key, (what, hint) in table.items():
        if key in msg:
            cls = NoSpaceError if key == "ENOSPC" else FsError
            return cls(f"{doing} {path}: {what} ({msg})", hint)
    if e.exc_type == "NotImplementedError" and path.startswith("/flash"):
        return FsError(
            f"{doing} {path}: /flash (SPIFFS) has no directories",
            "files on /flash may still be named a/b; use /sd for real directories",
        )
    return e


def _run(repl: MaixPyRepl, code: str, path: str, doing: str, timeout: float | None = None):
    try:
        return repl.exec_raw(code, timeout=timeout, doing=f"{doing} {path}")
    except ReplError as e:
        raise _doing(e, path, doing) from e


def _eval(repl: MaixPyRepl, code: str, path: str, doing: str) -> object:
    out = _run(repl, code, path, doing)
    return parse_repr(out.decode("utf-8", "replace"), f"{doing} {path}")


# --- looking ------------------------------------------------------------------------------


def stat(repl: MaixPyRepl, path: str) -> Entry | None:
    """The file or directory at ``path``, or None if there is none."""
    p = board_path(path)
    val = _eval(repl, STAT_CODE + f"print(repr(_st({py_str(p)})))", p, "looking at")
    if val is None:
        return None
    if not (isinstance(val, tuple) and len(val) == 2):
        raise ProtocolError(f"unexpected stat answer {val!r} for {p}", "is this MaixPy?")
    return Entry(p, bool(val[0]), int(val[1]))


def ls(repl: MaixPyRepl, path: str = "/flash", recursive: bool = False) -> list[Entry]:
    """Entries of a directory (sorted; the file itself if ``path`` is a file)."""
    p = board_path(path)
    code = (
        STAT_CODE + "def _ls(d,r,out):\n"
        " for n in sorted(_os.listdir(d)):\n"
        "  q=d+'/'+n\n  s=_st(q) or (False,-1)\n  out.append((q,s[0],s[1]))\n"
        "  if r and s[0]:\n   _ls(q,r,out)\n"
        f"_p={py_str(p)}\n_s=_st(_p)\n_o=[]\n"
        "if _s is None:\n raise OSError(2,'ENOENT')\n"
        f"if _s[0]:\n _ls(_p,{bool(recursive)},_o)\nelse:\n _o.append((_p,False,_s[1]))\n"
        "print(repr(_o))"
    )
    vals = _eval(repl, code, p, "listing")
    if not isinstance(vals, list):
        raise ProtocolError(f"unexpected listing {vals!r} of {p}", "is this MaixPy?")
    return [Entry(str(q), bool(d), int(n)) for q, d, n in vals]


def df(repl: MaixPyRepl) -> list[Usage]:
    """Size and free space of every mounted filesystem (``/flash``, and ``/sd`` if present)."""
    code = (
        "import uos as _os\n_o=[]\n"
        "for _m in _os.listdir('/'):\n"
        " _v=_os.statvfs('/'+_m)\n _o.append(('/'+_m,_v[0],_v[2],_v[3],_v[9]))\n"
        "print(repr(_o))"
    )
    vals = _eval(repl, code, "/", "measuring")
    if not isinstance(vals, list):
        raise ProtocolError(f"unexpected statvfs answer {vals!r}", "is this MaixPy?")
    return [Usage(m, b * n, b * f, b, nmax) for m, b, n, f, nmax in vals]


def sha256(repl: MaixPyRepl, path: str) -> bytes:
    """SHA-256 of a board file, computed by the board (``uhashlib``)."""
    p = board_path(path)
    code = (
        "import uhashlib,ubinascii\n"
        f"_h=uhashlib.sha256()\n_f=open({py_str(p)},'rb')\n"
        "while True:\n _b=_f.read(4096)\n if not _b: break\n _h.update(_b)\n"
        "_f.close()\nprint(ubinascii.hexlify(_h.digest()).decode())"
    )
    text = _run(repl, code, p, "hashing").decode("ascii", "replace").strip()
    try:
        digest = bytes.fromhex(text)
    except ValueError:
        digest = b""
    if len(digest) != 32:
        raise ProtocolError(f"the board returned {text[:80]!r} instead of a SHA-256 of {p}")
    return digest


def _check_hash(repl: MaixPyRepl, path: str, data: bytes) -> str:
    board = sha256(repl, path)
    host = hashlib.sha256(data).digest()
    if board != host:
        raise IntegrityError(
            f"{path}: SHA-256 on the board differs from the host copy "
            f"({board.hex()[:16]}... vs {host.hex()[:16]}...)",
            "bytes were lost on the serial line: retry, or use a lower baud rate",
        )
    return host.hex()


# --- reading ------------------------------------------------------------------------------


def read_file(repl: MaixPyRepl, path: str, progress: ProgressFn | None = None) -> bytes:
    """The bytes of a board file, checked against the board's own SHA-256."""
    p = board_path(path)
    entry = stat(repl, p)
    if entry is None:
        raise FsError(f"reading {p}: no such file on the board", "check the path with `fs ls`")
    if entry.is_dir:
        raise FsError(f"reading {p}: it is a directory", "use -r to copy a directory")
    _run(repl, f"_f=open({py_str(p)},'rb')", p, "opening")
    parts: list[bytes] = []
    done = 0
    try:
        while True:
            code = (
                "import ubinascii\n"
                f"_n={READ_BLOCK}\n"
                f"while _n>0:\n _b=_f.read(min({READ_LINE},_n))\n if not _b: break\n"
                " print(ubinascii.b2a_base64(_b).decode().strip())\n _n-=len(_b)\n"
            )
            block = repl.read_blocks(code, doing=f"reading {p}")
            parts.append(block)
            done += len(block)
            report(progress, Progress("get", done, max(entry.size, done), p))
            if len(block) < READ_BLOCK:
                break
    finally:
        _close(repl)
    data = b"".join(parts)
    _check_hash(repl, p, data)
    return data


def _close(repl: MaixPyRepl) -> None:
    """Close the transfer's file on the board, if the board still answers."""
    with suppress(KflashError):  # the original error says what went wrong
        repl.exec_raw("_f.close()", doing="closing the file")


# --- writing ------------------------------------------------------------------------------


def _check_name(p: str, name_max: int) -> None:
    inside = p[len(mount_of(p)) :]
    if mount_of(p) == "/flash":
        if len(inside.encode()) > name_max - 1:
            raise UsageError(
                f"{p}: SPIFFS names are at most {name_max - 1} bytes (this one has "
                f"{len(inside.encode())}, counted from after /flash)",
                "use a shorter name, or put the file on /sd",
            )
    elif any(len(part.encode()) > name_max for part in inside.split("/")):
        raise UsageError(f"{p}: a name is longer than {name_max} bytes", "use a shorter name")


def _needs(path: str, size: int) -> int:
    """Bytes a file takes: SPIFFS adds an index page and whole 4 KiB pages (estimate)."""
    if mount_of(path) == "/flash":
        return SPIFFS_PAGE * (1 + -(-size // SPIFFS_PAGE))
    return size


def write_file(
    repl: MaixPyRepl, path: str, data: bytes, progress: ProgressFn | None = None
) -> Transfer:
    """Write ``data`` to a board file, then check the board's SHA-256 of it.

    Refuses (:class:`NoSpaceError`) before writing anything when the file cannot fit:
    the free space plus what the old file of that name occupies.
    """
    p = board_path(path)
    usage = next((u for u in df(repl) if u.mount == mount_of(p)), None)
    if usage is None:
        raise FsError(
            f"writing {p}: {mount_of(p)} is not mounted on the board",
            "insert an SD card (FAT formatted) and reset the board",
        )
    _check_name(p, usage.name_max)
    old = stat(repl, p)
    if old is not None and old.is_dir:
        raise FsError(f"writing {p}: it is a directory", "give a file name inside it")
    room = usage.free + (old.size if old else 0)
    if _needs(p, len(data)) > room:
        raise NoSpaceError(
            f"{p}: {fmt_size(len(data))} does not fit in the {fmt_size(room)} free on "
            f"{usage.mount} (of {fmt_size(usage.total)}); nothing was written",
            "free space with `kflashpy fs rm`, or put large files (models) on /sd",
        )
    _run(repl, f"import ubinascii\n_f=open({py_str(p)},'wb')", p, "creating")
    done = 0
    try:
        for at in range(0, len(data), WRITE_BLOCK):
            block = data[at : at + WRITE_BLOCK]
            _run(repl, f"_f.write({py_bytes(block)})", p, "writing")
            done += len(block)
            report(progress, Progress("put", done, len(data), p))
    except KflashError as e:
        _close(repl)
        e.hint = (e.hint + "; " if e.hint else "") + f"{p} on the board is incomplete: put again"
        raise
    _run(repl, "_f.close()", p, "closing")
    if not data:
        report(progress, Progress("put", 0, 0, p))
    return Transfer("", p, len(data), _check_hash(repl, p, data))


# --- whole trees ---------------------------------------------------------------------------


def put(
    repl: MaixPyRepl, local: str | Path, remote: str, progress: ProgressFn | None = None
) -> list[Transfer]:
    """Copy a host file or directory (recursively) to the board, like ``cp -r``.

    A ``remote`` that is an existing directory (or ends with ``/``) receives ``local``
    under its own name. On ``/flash`` (flat SPIFFS) a directory's files are named
    ``dir/file``; on ``/sd`` the directories are created.
    """
    src = Path(local)
    if not src.exists():
        raise InputError(f"{src}: no such file or directory", "check the host path")
    dest = board_path(remote)
    target = stat(repl, dest)
    if remote.endswith("/") or (target is not None and target.is_dir):
        dest = posixpath.join(dest, src.name)
    if src.is_file():
        return [_put_one(repl, src, dest, progress)]
    flat = mount_of(dest) == "/flash"
    done: list[Transfer] = []
    for sub in [src, *sorted(q for q in src.rglob("*") if q.is_dir())]:
        where = posixpath.join(dest, *sub.relative_to(src).parts) if sub != src else dest
        if not flat and stat(repl, where) is None:
            mkdir(repl, where)
        for f in sorted(q for q in sub.iterdir() if q.is_file()):
            done.append(_put_one(repl, f, posixpath.join(where, f.name), progress))
    return done


def _put_one(repl: MaixPyRepl, src: Path, dest: str, progress: ProgressFn | None) -> Transfer:
    try:
        data = src.read_bytes()
    except OSError as e:
        raise InputError(f"{src}: cannot read ({e.strerror})", "check the host path") from None
    t = write_file(repl, dest, data, progress)
    return Transfer(str(src), t.dest, t.size, t.sha256)


def get(
    repl: MaixPyRepl, remote: str, local: str | Path, progress: ProgressFn | None = None
) -> list[Transfer]:
    """Copy a board file or directory (recursively) to the host, every file hash-checked."""
    src = board_path(remote)
    entries = ls(repl, src, recursive=True)
    top = stat(repl, src)
    dest = Path(local)
    if top is not None and not top.is_dir:
        if dest.is_dir():
            dest = dest / posixpath.basename(src)
        return [_get_one(repl, src, dest, progress)]
    if dest.exists() and dest.is_dir():
        dest = dest / posixpath.basename(src)
    done = []
    for e in entries:
        rel = Path(*e.path[len(src) + 1 :].split("/"))
        if e.is_dir:
            (dest / rel).mkdir(parents=True, exist_ok=True)
        else:
            done.append(_get_one(repl, e.path, dest / rel, progress))
    dest.mkdir(parents=True, exist_ok=True)
    return done


def _get_one(repl: MaixPyRepl, src: str, dest: Path, progress: ProgressFn | None) -> Transfer:
    from ..fileio import write_atomic

    data = read_file(repl, src, progress)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest, data)
    except OSError as e:
        raise InputError(f"{dest}: cannot write ({e.strerror})", "check the host path") from None
    return Transfer(src, str(dest), len(data), hashlib.sha256(data).hexdigest())


def rm(repl: MaixPyRepl, path: str, recursive: bool = False) -> list[str]:
    """Remove a file (or, with ``recursive``, a directory and everything in it)."""
    p = board_path(path)
    if p in MOUNTS and not recursive:
        raise UsageError(f"{p} is a mount point", "use -r to empty it")
    top = stat(repl, p)
    if top is None:
        raise FsError(f"removing {p}: no such file on the board", "check the path with `fs ls`")
    if not top.is_dir:
        _run(repl, f"import uos\nuos.remove({py_str(p)})", p, "removing")
        return [p]
    if not recursive:
        raise FsError(f"removing {p}: it is a directory", "use -r to remove it and its files")
    removed = []
    for e in reversed(ls(repl, p, recursive=True)):
        op = "rmdir" if e.is_dir else "remove"
        _run(repl, f"import uos\nuos.{op}({py_str(e.path)})", e.path, "removing")
        removed.append(e.path)
    if p not in MOUNTS:
        _run(repl, f"import uos\nuos.rmdir({py_str(p)})", p, "removing")
        removed.append(p)
    return removed


def mkdir(repl: MaixPyRepl, path: str) -> str:
    """Create a directory (``/sd`` only: SPIFFS on ``/flash`` has none)."""
    p = board_path(path)
    if mount_of(p) == "/flash":
        raise FsError(
            f"creating {p}: /flash (SPIFFS) has no directories",
            "files on /flash may still be named a/b; use /sd for real directories",
        )
    _run(repl, f"import uos\nuos.mkdir({py_str(p)})", p, "creating")
    return p


# --- running scripts ------------------------------------------------------------------------


def run_script(
    repl: MaixPyRepl,
    code: str,
    on_output: Callable[[bytes], None],
    timeout: float | None = None,
) -> None:
    """Run a script on the board, handing its output to ``on_output`` as it arrives.

    ``timeout`` is the longest silence tolerated (None: the REPL's). Ctrl-C on the
    host (KeyboardInterrupt) interrupts the script on the board too.
    """
    try:
        repl.exec_raw(code, timeout=timeout, doing="running the script", on_output=on_output)
    except KeyboardInterrupt:
        repl.interrupt()
        repl.in_raw = False
        raise
