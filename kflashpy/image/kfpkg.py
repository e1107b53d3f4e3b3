"""kfpkg packages: a zip with ``flash-list.json`` and the files it lists, at the root.

Writing: the portable dialect every known reader accepts (kflash.py's regex loader,
kflash_gui's strict JSON, K-Flash's version check): ``"version": "0.1.0"``, decimal
integer addresses, JSON indented one key per line with ``address`` first (kflash.py
quotes whatever follows ``"address": `` up to the last comma on that line), flat file
names at the zip root, fixed timestamps so the same inputs give the same bytes.

Reading: every producer's quirks are accepted — hex literals (invalid JSON, from
hand-written manifests), quoted addresses, a missing version or kflash_gui's empty key
in its place, ktool's ``swap`` and K-Flash's ``reverse4Bytes``. Hostile archives fail
with a :class:`FormatError` before anything is written: names that escape the output
directory, duplicate names, listed-but-missing files, encrypted members and zip bombs
(limits on member count and on the expanded size, judged against the largest K210 flash:
an erase image of the whole flash is all 0xFF and compresses a thousandfold, yet is
legitimate). Any manifest value — huge integers, deep nesting, wrong types — is a
:class:`FormatError` naming the field. Members the manifest does not list are reported
as warnings.
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import FormatError, InputError
from ..fileio import write_atomic
from ..units import fmt_addr, parse_int

__all__ = [
    "MANIFEST",
    "Kfpkg",
    "KfpkgEntry",
    "KfpkgLimits",
    "build_manifest",
    "check_member_name",
    "parse_manifest",
    "read_kfpkg",
    "unpack_kfpkg",
    "write_kfpkg",
]

MANIFEST = "flash-list.json"
PORTABLE_VERSION = "0.1.0"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_MiB = 1024 * 1024
#: what the stdlib zip reader raises on damaged or hostile archives (found by fuzzing)
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    OSError,
    ValueError,
    KeyError,
    IndexError,
    OverflowError,
    RuntimeError,
)
#: hand-written manifests: "address": 0x00A00000 (or 0o/0b literals), not valid JSON;
#: read by quoting the literal, so its size never matters before the address check
#: the note for a manifest with hex address literals: normal in Kendryte SDK packages
HEX_LITERALS = "hex address literals (not valid JSON; accepted)"
_LITERAL_ADDRESS = re.compile(r'("address"\s*:\s*)(0[xXoObB][0-9a-fA-F_]+)')
#: longest JSON number read as a number (a 32-bit address has 10 digits); longer ones
#: stay text, so a 5,000-digit value costs nothing and is refused by the field check
_MAX_DIGITS = 40


class _LongNumber(str):
    """A JSON number too long to be any manifest value (kept as its text)."""


def _json_number(text: str) -> int | _LongNumber:
    return int(text) if len(text) <= _MAX_DIGITS else _LongNumber(text)


def _json_float(text: str) -> float | _LongNumber:
    return float(text) if len(text) <= _MAX_DIGITS else _LongNumber(text)


def _show(value: Any) -> str:
    """A manifest value for a message: its repr, cut short if long."""
    if isinstance(value, _LongNumber):
        return f"a number of {len(value)} characters ({value[:12]}...)"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


@dataclass(frozen=True)
class KfpkgLimits:
    """Bounds that keep a hostile archive from exhausting memory or disk."""

    max_members: int = 256
    #: one member: the largest K210 flash (no compression-ratio limit: a full-flash
    #: 0xFF image is legitimate, and memory is bounded by the expanded sizes alone)
    max_entry: int = 16 * _MiB
    #: all members together: the largest flash four times over, room for members the
    #: manifest does not list
    max_total: int = 64 * _MiB
    max_manifest: int = 1 * _MiB


@dataclass(frozen=True)
class KfpkgEntry:
    """One file of a package and where it goes."""

    address: int
    name: str
    sha256_prefix: bool
    data: bytes = field(repr=False)
    #: ktool's ``swap``: reverse the bytes of every 32-bit word before writing
    swap: bool = False
    #: K-Flash's ``reverse4Bytes`` (same transform after padding to 64 bytes)
    reverse4: bool = False


@dataclass
class Kfpkg:
    """A package read into memory."""

    path: str
    entries: list[KfpkgEntry]
    #: the manifest's version; ``None`` when missing; ``""`` for kflash_gui's empty key
    version: str | None
    manifest_text: str
    #: members not listed in the manifest, in archive order
    unlisted: list[str]
    warnings: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "version": self.version,
            "files": [
                {
                    "address": e.address,
                    "address_hex": fmt_addr(e.address),
                    "bin": e.name,
                    "size": len(e.data),
                    "sha256Prefix": e.sha256_prefix,
                    "swap": e.swap,
                    "reverse4Bytes": e.reverse4,
                }
                for e in self.entries
            ],
            "unlisted": self.unlisted,
            "warnings": self.warnings,
        }


def check_member_name(name: str, where: str) -> str:
    """Return ``name`` normalised if it stays inside the package root, else raise.

    Rejects absolute names, drive letters, backslashes, ``..`` and empty components:
    the zip-slip family that would make an extractor write outside its directory.
    """
    bad = (
        not name
        or "\\" in name
        or "\x00" in name
        or name.startswith("/")
        or re.match(r"^[A-Za-z]:", name) is not None
    )
    parts = PurePosixPath(name).parts if not bad else ()
    if bad or any(p in ("..", ".") for p in parts) or not parts:
        raise FormatError(
            f"{where}: unsafe file name {name!r} (absolute, '..', backslash or empty)",
            "a kfpkg holds plain relative names at the zip root; the package may be hostile",
        )
    return "/".join(parts)


_ADDRESS_HINT = 'write the flash address as a number (3145728) or a string ("0x300000")'
_MANIFEST_HINT = 'flash-list.json must be {"version": "0.1.0", "files": [...]}'
_ENTRY_HINT = 'each file is {"address": 3145728, "bin": "model.kmodel", "sha256Prefix": false}'


def _address(raw: Any, where: str) -> int:
    if isinstance(raw, _LongNumber) or (isinstance(raw, str) and len(raw) > _MAX_DIGITS):
        raise FormatError(f"{where}: address {_show(raw)} is beyond 32 bits", _ADDRESS_HINT)
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise FormatError(f"{where}: address {_show(raw)} is not a number", _ADDRESS_HINT)
    try:
        value = parse_int(raw, f"{where}: address")
    except InputError as e:
        raise FormatError(e.message, e.hint or _ADDRESS_HINT) from None
    if value > 0xFFFFFFFF:
        raise FormatError(f"{where}: address {_show(raw)} is beyond 32 bits", _ADDRESS_HINT)
    return value


def _flag(f: dict[str, Any], keys: tuple[str, ...], where: str, required: bool) -> bool:
    lowered = {k.lower(): v for k, v in f.items() if isinstance(k, str)}
    for k in keys:
        if k.lower() in lowered:
            v = lowered[k.lower()]
            if not isinstance(v, bool):
                raise FormatError(
                    f"{where}: {k} must be true or false, got {_show(v)}", "write true or false"
                )
            return v
    if required:
        raise FormatError(
            f"{where}: no {keys[0]} key",
            "every file needs sha256Prefix: true for firmware, false for models and data",
        )
    return False


def parse_manifest(text: str, origin: str = MANIFEST) -> tuple[str | None, list[dict], list[str]]:
    """Parse a flash-list.json from any producer into ``(version, files, warnings)``.

    Each returned file is ``{"address": int, "bin": str, "sha256Prefix": bool,
    "swap": bool, "reverse4Bytes": bool}``.
    """
    warnings: list[str] = []
    try:
        doc = json.loads(text, parse_int=_json_number, parse_float=_json_float)
    except json.JSONDecodeError:
        fixed = _LITERAL_ADDRESS.sub(lambda m: f'{m.group(1)}"{m.group(2)}"', text)
        try:
            doc = json.loads(fixed, parse_int=_json_number, parse_float=_json_float)
        except json.JSONDecodeError as e:
            raise FormatError(
                f"{origin}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}",
                _MANIFEST_HINT,
            ) from None
        except RecursionError:
            raise FormatError(f"{origin}: JSON nested too deeply", _MANIFEST_HINT) from None
        if fixed != text:
            warnings.append(f"{origin}: {HEX_LITERALS}")
    except RecursionError:
        raise FormatError(f"{origin}: JSON nested too deeply", _MANIFEST_HINT) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise FormatError(
            f'{origin}: no "files" list at the top level',
            _MANIFEST_HINT,
        )
    version = doc.get("version")
    if version is None and "" in doc:
        version = ""
        warnings.append(f'{origin}: empty key in place of "version" (kflash_gui quirk)')
    elif version is None:
        warnings.append(f"{origin}: no version (K-Flash would refuse this package)")
    if version is not None and not isinstance(version, str):
        version = str(version)
    files = []
    for i, f in enumerate(doc["files"]):
        where = f"{origin} files[{i}]"
        if not isinstance(f, dict):
            kind = "int" if isinstance(f, _LongNumber) else type(f).__name__
            raise FormatError(f"{where}: expected an object, got {kind}", _ENTRY_HINT)
        if "address" not in f:
            raise FormatError(f"{where}: no address", _ENTRY_HINT)
        name = f.get("bin")
        if not isinstance(name, str) or not name:
            raise FormatError(f'{where}: "bin" must be a file name', _ENTRY_HINT)
        files.append(
            {
                "address": _address(f["address"], where),
                "bin": check_member_name(name, where),
                "sha256Prefix": _flag(f, ("sha256Prefix",), where, True),
                "swap": _flag(f, ("swap",), where, False),
                "reverse4Bytes": _flag(f, ("reverse4Bytes",), where, False),
            }
        )
    return version, files, warnings


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int, where: str) -> bytes:
    try:
        with zf.open(info) as f:
            data = f.read(limit + 1)
    except _ZIP_ERRORS as e:
        raise FormatError(
            f"{where}: damaged member {info.filename!r}: {e}", "the archive is damaged; repack it"
        ) from None
    except NotImplementedError as e:
        raise FormatError(
            f"{where}: member {info.filename!r} uses an unsupported compression ({e})",
            "repack it with DEFLATE or no compression",
        ) from None
    if len(data) > limit or len(data) != info.file_size:
        raise FormatError(
            f"{where}: member {info.filename!r} inflates beyond its declared or allowed size",
            "the archive is damaged or a zip bomb",
        )
    return data


def _check_sizes(infos: list[zipfile.ZipInfo], limits: KfpkgLimits, where: str) -> None:
    if len(infos) > limits.max_members:
        raise FormatError(
            f"{where}: {len(infos)} members (limit {limits.max_members})",
            "a kfpkg holds a few files; the archive may be hostile",
        )
    total = 0
    for info in infos:
        if info.flag_bits & 0x1:
            raise FormatError(
                f"{where}: member {info.filename!r} is encrypted", "repack it without a password"
            )
        if info.file_size > limits.max_entry:
            raise FormatError(
                f"{where}: member {info.filename!r} inflates to {info.file_size} bytes "
                f"(limit {limits.max_entry})",
                "no K210 flash is that large; the archive may be a zip bomb",
            )
        total += info.file_size
    if total > limits.max_total:
        raise FormatError(
            f"{where}: members inflate to {total} bytes (limit {limits.max_total})",
            "no K210 flash is that large; the archive may be a zip bomb",
        )


def read_kfpkg(source: str | os.PathLike[str] | bytes, limits: KfpkgLimits | None = None) -> Kfpkg:
    """Read and validate a package (path or bytes) into memory."""
    limits = limits or KfpkgLimits()
    where = "kfpkg" if isinstance(source, bytes) else os.fspath(source)
    try:
        zf = zipfile.ZipFile(io.BytesIO(source) if isinstance(source, bytes) else source)
    except FileNotFoundError:
        raise InputError(f"{where}: no such file", "check the path") from None
    except (IsADirectoryError, NotADirectoryError, PermissionError) as e:
        raise InputError(f"{where}: cannot read: {e.strerror or e}", "check the path") from None
    except (*_ZIP_ERRORS, NotImplementedError) as e:
        raise FormatError(
            f"{where}: not a readable zip archive ({e})", "a .kfpkg is a zip with flash-list.json"
        ) from None
    with zf:
        infos = [i for i in zf.infolist() if not i.filename.endswith("/")]
        _check_sizes(infos, limits, where)
        by_name: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = check_member_name(info.filename, where)
            if name in by_name:
                raise FormatError(
                    f"{where}: member name {name!r} appears twice",
                    "a reader would take either copy; the package is ambiguous",
                )
            by_name[name] = info
        if MANIFEST not in by_name:
            nested = [n for n in by_name if n.endswith("/" + MANIFEST)]
            raise FormatError(
                f"{where}: no {MANIFEST} at the zip root"
                + (f" (found {nested[0]})" if nested else ""),
                "zip the files themselves, not the folder that holds them",
            )
        raw = _read_member(zf, by_name[MANIFEST], limits.max_manifest, where)
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise FormatError(
                f"{where}: {MANIFEST} is not UTF-8 text", "save flash-list.json as UTF-8"
            ) from None
        version, files, warnings = parse_manifest(text, f"{where}: {MANIFEST}")
        missing = [f["bin"] for f in files if f["bin"] not in by_name]
        if missing:
            raise FormatError(
                f"{where}: {MANIFEST} lists {', '.join(map(repr, missing))} but the archive "
                "does not contain it",
                "add the file to the package or remove it from flash-list.json",
            )
        cache: dict[str, bytes] = {}
        entries = []
        for f in files:
            name = f["bin"]
            if name not in cache:
                cache[name] = _read_member(zf, by_name[name], limits.max_entry, where)
            entries.append(
                KfpkgEntry(
                    f["address"],
                    name,
                    f["sha256Prefix"],
                    cache[name],
                    f["swap"],
                    f["reverse4Bytes"],
                )
            )
        listed = {f["bin"] for f in files} | {MANIFEST}
        unlisted = [n for n in by_name if n not in listed]
        warnings += [f"{where}: member {n!r} is not listed in {MANIFEST}" for n in unlisted]
    return Kfpkg(where, entries, version, text, unlisted, warnings)


def build_manifest(entries: Iterable[KfpkgEntry], version: str = PORTABLE_VERSION) -> str:
    """The portable flash-list.json text for ``entries`` (see the module docstring)."""
    files = []
    for e in entries:
        f: dict[str, Any] = {"address": e.address, "bin": e.name, "sha256Prefix": e.sha256_prefix}
        if e.swap:
            f["swap"] = True
        if e.reverse4:
            f["reverse4Bytes"] = True
        files.append(f)
    return json.dumps({"version": version, "files": files}, indent=4) + "\n"


def write_kfpkg(path: str | os.PathLike[str], entries: Iterable[KfpkgEntry]) -> Path:
    """Write a portable package; each distinct name is stored once. Returns the path."""
    entries = list(entries)
    if not entries:
        raise InputError("nothing to pack", "give ADDR FILE pairs")
    stored: dict[str, bytes] = {}
    for e in entries:
        name = check_member_name(e.name, "pack")
        if name != e.name or "/" in name or name == MANIFEST:
            raise InputError(
                f"pack: {e.name!r} cannot be a member name (flat names only, not {MANIFEST})",
                "rename the file",
            )
        if not 0 <= e.address <= 0xFFFFFFFF:  # not even --force can make this readable
            raise InputError(
                f"pack: {e.name} at 0x{e.address:X}: the address does not fit in 32 bits",
                "K210 flash addresses are below 0x1000000 (16 MiB); check the address",
            )
        if stored.setdefault(name, e.data) != e.data:
            raise InputError(
                f"pack: two different files are both named {name!r}",
                "rename one of them; a kfpkg stores files by name",
            )
    manifest = build_manifest(entries).encode()
    out = Path(path)

    def write(f) -> None:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in [(MANIFEST, manifest), *stored.items()]:
                info = zipfile.ZipInfo(name, _FIXED_TIME)
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                zf.writestr(info, data)

    return write_atomic(out, write)


def unpack_kfpkg(pkg: Kfpkg, outdir: str | os.PathLike[str], *, force: bool = False) -> list[Path]:
    """Write the package's files and manifest into ``outdir``; nothing outside it.

    Refuses to overwrite existing files unless ``force``. Every name was validated when
    the package was read; the resolved target is checked again before writing.
    """
    root = Path(outdir)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(
            f"{root}: cannot create the output directory: {e.strerror or e}",
            "check the path and the permissions",
        ) from None
    base = root.resolve()
    files = {MANIFEST: pkg.manifest_text.encode("utf-8")}
    files.update({e.name: e.data for e in pkg.entries})
    targets = []
    for name in files:
        target = (base / name).resolve()
        if base not in target.parents:
            raise FormatError(
                f"{pkg.path}: {name!r} would be written outside {root}",
                "the package may be hostile; do not use it",
            )
        if target.exists() and not force:
            raise InputError(f"{target}: already exists", "use --force to overwrite")
        targets.append((target, files[name]))
    written = []
    for target, data in targets:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(
                f"{target.parent}: cannot create: {e.strerror or e}",
                "check the path and the permissions",
            ) from None
        written.append(write_atomic(target, data))
    return written
