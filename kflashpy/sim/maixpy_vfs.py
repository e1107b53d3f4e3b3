"""The virtual MaixPy's filesystems: SPIFFS on ``/flash`` and a FAT card on ``/sd``.

What code sent to the MaixPy personality sees through ``open()`` and ``os``, with the
limits the fs commands must cope with on a real board (docs/files.md):

- ``/flash`` is SPIFFS: **flat** (``os.mkdir`` raises ``NotImplementedError``, a name may
  contain ``/``), names of at most 127 bytes (``CONFIG_SPIFFS_OBJ_NAME_LEN`` is 128 with
  the NUL), 3 MiB at 0xD00000 of which two 128 KiB logical blocks stay free for garbage
  collection, every file costing one 4 KiB index page plus its data pages;
  ``os.statvfs`` counts in 128 KiB logical blocks, rounded down;
- ``/sd`` is FatFs: directories, 255-byte names, 4 KiB clusters, ``os.statvfs`` in clusters.

``/flash`` is kept in the board's flash at 0xD00000 when the flash is 16 MiB (so it
survives across processes and a ``flash=FILE`` image holds it; anything that is not
our store there is "formatted" at mount, as MaixPy does), else in the board object's
memory. ``/sd`` is a RAM card of ``maixpy_sd=SIZE`` or a host directory
``maixpy_sd=DIR`` (capacity ``maixpy_sd_size``, default 1 GiB).

A file being written is committed at ``close()`` (and ``flush()``): a reset in the
middle of a transfer leaves the file empty, as it was truncated by ``open(..., 'w')``.
The virtual board never writes outside its mounts: a host-directory card rejects names
that would leave it.
"""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

SPIFFS_START = 0xD00000
SPIFFS_SIZE = 0x300000
SPIFFS_BLOCK = 0x20000
SPIFFS_PAGE = 0x1000
SPIFFS_NAME_LEN = 128
FAT_CLUSTER = 4096
FAT_NAME_MAX = 255
DEFAULT_SD_SIZE = 1 << 30
#: head of the serialised /flash store inside the SPIFFS region
STORE_MAGIC = b"KFSIMFS1"

S_IFDIR = 0x4000
S_IFREG = 0x8000


def oserror(code: int) -> OSError:
    """``OSError`` as MicroPython raises it: ``[Errno 2] ENOENT``."""
    return OSError(code, errno.errorcode.get(code, str(code)))


class Volume:
    """One mounted filesystem; names are absolute inside it (``/boot.py``, ``/a/b.txt``)."""

    def __init__(self, mount: str, size: int, *, flat: bool, store: _Store | None = None) -> None:
        self.mount, self.size, self.flat, self.store = mount, size, flat, store
        self.files: dict[str, bytes] = {}
        self.dirs: set[str] = set()
        if store is not None:
            store.load(self)

    # --- accounting ------------------------------------------------------------------------

    @property
    def block(self) -> int:
        return SPIFFS_BLOCK if self.flat else FAT_CLUSTER

    @property
    def name_max(self) -> int:
        return SPIFFS_NAME_LEN - 1 if self.flat else FAT_NAME_MAX

    def total(self) -> int:
        return self.size - 2 * SPIFFS_BLOCK if self.flat else self.size

    def cost(self, size: int) -> int:
        if self.flat:
            return SPIFFS_PAGE * (1 + -(-size // SPIFFS_PAGE))
        return FAT_CLUSTER * -(-size // FAT_CLUSTER)

    def used(self) -> int:
        return sum(self.cost(len(d)) for d in self.files.values()) + len(self.dirs) * (
            0 if self.flat else FAT_CLUSTER
        )

    def statvfs(self) -> tuple[int, ...]:
        b = self.block
        free = max(0, self.total() - self.used())
        return (b, b, self.total() // b, free // b, free // b, 0, 0, 0, 0, self.name_max + 1)

    # --- names -----------------------------------------------------------------------------

    def check_name(self, name: str) -> None:
        parts = [p for p in name.split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise oserror(errno.EINVAL)
        if self.flat:
            if len(name.encode()) > self.name_max:
                raise oserror(errno.ENAMETOOLONG)
        elif any(len(p.encode()) > self.name_max for p in parts):
            raise oserror(errno.ENAMETOOLONG)

    def is_dir(self, name: str) -> bool:
        return name == "/" or name in self.dirs

    def _parent_ok(self, name: str) -> None:
        if self.flat:
            return
        parent = name.rsplit("/", 1)[0] or "/"
        if not self.is_dir(parent):
            raise oserror(errno.ENOENT if parent not in self.files else errno.ENOTDIR)

    # --- operations ------------------------------------------------------------------------

    def read(self, name: str) -> bytes:
        if name in self.files:
            return self.files[name]
        raise oserror(errno.EISDIR if self.is_dir(name) else errno.ENOENT)

    def check_space(self, name: str, size: int) -> None:
        old = self.cost(len(self.files[name])) if name in self.files else 0
        if self.used() - old + self.cost(size) > self.total():
            raise oserror(errno.ENOSPC)

    def write(self, name: str, data: bytes) -> None:
        self.check_name(name)
        if self.is_dir(name):
            raise oserror(errno.EISDIR)
        self._parent_ok(name)
        self.check_space(name, len(data))
        self.files[name] = bytes(data)
        self._sync("write", name)

    def remove(self, name: str) -> None:
        if name not in self.files:
            raise oserror(errno.EISDIR if self.is_dir(name) else errno.ENOENT)
        del self.files[name]
        self._sync("remove", name)

    def mkdir(self, name: str) -> None:
        if self.flat:
            raise NotImplementedError("SPIFFS not support")
        self.check_name(name)
        if name in self.files or self.is_dir(name):
            raise oserror(errno.EEXIST)
        self._parent_ok(name)
        if self.used() + FAT_CLUSTER > self.total():
            raise oserror(errno.ENOSPC)
        self.dirs.add(name)
        self._sync("mkdir", name)

    def rmdir(self, name: str) -> None:
        if not self.is_dir(name) or name == "/":
            raise oserror(errno.ENOENT if name not in self.files else errno.ENOTDIR)
        if self.listdir(name):
            raise oserror(errno.EACCES)  # FatFs: FR_DENIED for a directory that is not empty
        self.dirs.discard(name)
        self._sync("rmdir", name)

    def rename(self, old: str, new: str) -> None:
        data = self.read(old)
        self.write(new, data)
        self.remove(old)

    def listdir(self, name: str) -> list[str]:
        if not self.is_dir(name):
            raise oserror(errno.ENOTDIR if name in self.files else errno.ENOENT)
        if self.flat:  # SPIFFS lists every object, slashes and all
            return sorted(n[1:] for n in self.files)
        pre = name.rstrip("/") + "/"
        out = {n[len(pre) :].split("/")[0] for n in (*self.files, *self.dirs) if n.startswith(pre)}
        return sorted(out)

    def stat(self, name: str) -> tuple[int, ...]:
        if self.is_dir(name):
            return (S_IFDIR, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        data = self.read(name)
        return (S_IFREG, 0, 0, 0, 0, 0, len(data), 0, 0, 0)

    def _sync(self, op: str, name: str) -> None:
        if self.store is not None:
            self.store.changed(self, op, name)


class _Store:
    """Where a volume's contents live besides the board's memory."""

    def load(self, vol: Volume) -> None:
        raise NotImplementedError

    def changed(self, vol: Volume, op: str, name: str) -> None:
        raise NotImplementedError


class FlashStore(_Store):
    """``/flash`` serialised into the SPIFFS region of the board's flash array."""

    def __init__(self, flash_data, start: int = SPIFFS_START, size: int = SPIFFS_SIZE) -> None:
        self.data, self.start, self.size = flash_data, start, size

    def load(self, vol: Volume) -> None:
        raw = bytes(self.data[self.start : self.start + self.size])
        if not raw.startswith(STORE_MAGIC):
            return  # erased or foreign bytes: MaixPy formats the region at mount
        pos = len(STORE_MAGIC)
        while pos < len(raw) and raw[pos] in (ord("F"), ord("D")):
            kind = raw[pos]
            nlen, dlen = struct.unpack_from("<HI", raw, pos + 1)
            pos += 7
            name = raw[pos : pos + nlen].decode("utf-8", "replace")
            pos += nlen
            if kind == ord("F"):
                vol.files[name] = raw[pos : pos + dlen]
            else:
                vol.dirs.add(name)
            pos += dlen

    def changed(self, vol: Volume, op: str, name: str) -> None:
        out = bytearray(STORE_MAGIC)
        for n in sorted(vol.dirs):
            enc = n.encode()
            out += b"D" + struct.pack("<HI", len(enc), 0) + enc
        for n, d in vol.files.items():
            enc = n.encode()
            out += b"F" + struct.pack("<HI", len(enc), len(d)) + enc + d
        out += b"\xff" * (self.size - len(out))
        self.data[self.start : self.start + self.size] = bytes(out[: self.size])


class DirStore(_Store):
    """A host directory that is the SD card (files written through at once)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def _host(self, name: str) -> Path:
        path = (self.root / name.lstrip("/")).resolve()
        if path != self.root and self.root not in path.parents:
            raise oserror(errno.EINVAL)
        return path

    def load(self, vol: Volume) -> None:
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = "/" + Path(dirpath).relative_to(self.root).as_posix()
            rel = "" if rel == "/." else rel
            for d in dirnames:
                vol.dirs.add(f"{rel}/{d}")
            for f in filenames:
                vol.files[f"{rel}/{f}"] = (Path(dirpath) / f).read_bytes()

    def changed(self, vol: Volume, op: str, name: str) -> None:
        path = self._host(name)
        if op == "write":
            path.write_bytes(vol.files[name])
        elif op == "remove":
            path.unlink()
        elif op == "mkdir":
            path.mkdir()
        elif op == "rmdir":
            path.rmdir()


class VFS:
    """The mount table: ``/flash`` (current directory at boot) and optionally ``/sd``."""

    def __init__(self, volumes: list[Volume], stat: bool = True) -> None:
        self.volumes = {v.mount: v for v in volumes}
        self.cwd = "/flash"
        self.has_stat = stat

    def resolve(self, path: str) -> tuple[Volume | None, str]:
        """``path`` -> (volume, name inside it); (None, "/") for the root."""
        if not isinstance(path, str):
            raise TypeError("can't convert to str implicitly")
        full = path if path.startswith("/") else self.cwd.rstrip("/") + "/" + path
        parts = [p for p in full.split("/") if p and p != "."]
        if not parts:
            return None, "/"
        vol = self.volumes.get("/" + parts[0])
        if vol is None:
            raise oserror(errno.ENOENT)
        return vol, "/" + "/".join(parts[1:])

    def listdir(self, path: str | None = None) -> list[str]:
        vol, name = self.resolve(self.cwd if path is None else path)
        if vol is None:
            return [m[1:] for m in self.volumes]
        return vol.listdir(name)

    def stat(self, path: str) -> tuple[int, ...]:
        vol, name = self.resolve(path)
        if vol is None:
            return (S_IFDIR, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        return vol.stat(name)

    def statvfs(self, path: str) -> tuple[int, ...]:
        vol, _ = self.resolve(path)
        if vol is None:
            return (0,) * 10
        return vol.statvfs()

    def chdir(self, path: str) -> None:
        vol, name = self.resolve(path)
        if vol is not None and not vol.is_dir(name):
            raise oserror(errno.ENOENT)
        self.cwd = "/" if vol is None else (vol.mount + name).rstrip("/") or "/"

    def rename(self, old: str, new: str) -> None:
        v1, n1 = self.resolve(old)
        v2, n2 = self.resolve(new)
        if v1 is None or v1 is not v2:
            raise oserror(errno.EXDEV)
        v1.rename(n1, n2)

    def call(self, op: str, path: str) -> object:
        vol, name = self.resolve(path)
        if vol is None or name == "/":
            raise oserror(errno.EPERM)
        return getattr(vol, op)(name)


class VFile:
    """An open file: reads see the committed bytes, writes commit at flush/close."""

    def __init__(self, vfs: VFS, path: str, mode: str = "r") -> None:
        self.mode, self.pos, self.closed = mode, 0, False
        vol, name = vfs.resolve(path)
        if vol is None or name == "/":
            raise oserror(errno.EISDIR)
        self.vol, self.name = vol, name
        if "w" in mode:
            vol.write(name, b"")
            self.buf = bytearray()
        elif "a" in mode:
            self.buf = bytearray(vol.read(name) if name in vol.files else b"")
            vol.write(name, bytes(self.buf))
            self.pos = len(self.buf)
        else:
            self.buf = bytearray(vol.read(name))
        self.writable = any(c in mode for c in "wa+")

    def read(self, n: int = -1):
        end = len(self.buf) if n is None or n < 0 else self.pos + n
        out = bytes(self.buf[self.pos : end])
        self.pos += len(out)
        return out if "b" in self.mode else out.decode()

    def write(self, data) -> int:
        if not self.writable:
            raise oserror(errno.EBADF)
        data = data.encode() if isinstance(data, str) else bytes(data)
        end = self.pos + len(data)
        self.vol.check_space(self.name, max(end, len(self.buf)))
        self.buf[self.pos : end] = data
        self.pos = end
        return len(data)

    def seek(self, pos: int, whence: int = 0) -> int:
        base = (0, self.pos, len(self.buf))[whence]
        self.pos = max(0, base + pos)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        if self.writable and not self.closed:
            self.vol.write(self.name, bytes(self.buf))

    def close(self) -> None:
        self.flush()
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_vfs(board, options) -> VFS:
    """The board's mounts, kept on the board object across resets (RAM volumes)."""
    flash = getattr(board, "flash", None)
    data = getattr(flash, "data", None)
    keep = getattr(board, "maixpy_volumes", None)
    if keep is None:
        keep = board.maixpy_volumes = {}
    vols = []
    if data is not None and len(data) >= SPIFFS_START + SPIFFS_SIZE:
        vols.append(Volume("/flash", SPIFFS_SIZE, flat=True, store=FlashStore(data)))
    else:
        vols.append(keep.setdefault("/flash", Volume("/flash", SPIFFS_SIZE, flat=True)))
    if options.sd_dir is not None:
        vols.append(Volume("/sd", options.sd_size, flat=False, store=DirStore(options.sd_dir)))
    elif options.sd_size:
        vols.append(keep.setdefault("/sd", Volume("/sd", options.sd_size, flat=False)))
    return VFS(vols, stat=options.stat)
