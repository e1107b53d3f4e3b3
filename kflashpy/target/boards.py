"""Boards and firmware layouts, loaded from the TOML data in :mod:`kflashpy.firmware_layouts`.

Board facts (flash size, USB bridge, DTR/RTS reset wiring, baud limits) and firmware
facts (reserved regions, which kmodel versions load, typical sizes) are data, not code,
so a new board is a TOML table, not a patch. The burn pipeline reads the reset wiring
from :class:`Board`; the layout checker reads regions and kmodel support from
:class:`Firmware`. ``firmware_layouts/SCHEMA.md`` documents every key.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import FormatError, InputError
from ..units import parse_int
from . import k210

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = [
    "Board",
    "Firmware",
    "Region",
    "ResetStep",
    "UsbId",
    "Wiring",
    "get_board",
    "get_firmware",
    "load_boards",
    "load_firmware_file",
    "load_firmwares",
]

DATA_PACKAGE = "kflashpy.firmware_layouts"
DEFAULT_FLASH_SIZE = k210.FLASH_MAX_SIZE


@dataclass(frozen=True)
class ResetStep:
    """Set DTR and RTS (``first`` is set first), then wait ``hold`` seconds.

    ``True`` means the line is asserted (pyserial ``setDTR(True)``), which is TTL low on
    the usual USB-UART bridges.
    """

    dtr: bool
    rts: bool
    hold: float
    first: str = "dtr"


@dataclass(frozen=True)
class Wiring:
    """How DTR/RTS reach RESET and BOOT (IO16), with the sequences that use them."""

    name: str
    description: str
    reset_line: str
    boot_line: str
    kflash_name: str
    isp: tuple[ResetStep, ...]
    run: tuple[ResetStep, ...]


@dataclass(frozen=True)
class UsbId:
    """A USB-UART bridge a board may enumerate as (a hint for port auto-pick)."""

    vid: int
    pid: int | None = None
    #: which interface of a multi-port bridge carries the K210 UART (None: the only one)
    interface: int | None = None
    bridge: str = ""


@dataclass(frozen=True)
class Board:
    """A K210 board profile."""

    id: str
    name: str
    aliases: tuple[str, ...]
    flash_size: int
    flash_chip: str
    #: ``None`` for boards whose wiring is detected by trying ``auto_wirings`` in turn
    wiring: Wiring | None
    auto_wirings: tuple[Wiring, ...]
    usb: tuple[UsbId, ...]
    max_baud: int
    default_baud: int
    #: ROM fast-mode baud correction for FT2232-style bridges (1.0 = none)
    rom_baud_factor: float = 1.0
    module: str = ""
    notes: str = ""

    @property
    def reset_isp(self) -> tuple[ResetStep, ...]:
        """The enter-ISP sequence (empty when the wiring must be detected)."""
        return self.wiring.isp if self.wiring else ()

    @property
    def reset_run(self) -> tuple[ResetStep, ...]:
        """The reset-and-run sequence (empty when the wiring must be detected)."""
        return self.wiring.run if self.wiring else ()


@dataclass(frozen=True)
class Region:
    """A named flash range of a firmware layout."""

    name: str
    start: int
    size: int
    kind: str
    #: True when nothing else may be written there (e.g. the SPIFFS file system)
    reserved: bool
    note: str = ""

    @property
    def end(self) -> int:
        return self.start + self.size


@dataclass(frozen=True)
class Firmware:
    """A firmware family/variant and the flash layout it assumes."""

    id: str
    name: str
    family: str
    aliases: tuple[str, ...]
    #: kmodel versions this firmware can load (empty: unknown / depends on the app)
    kmodel_versions: tuple[int, ...]
    #: whether it has ``kpu.load_flash`` (reads word-swapped models)
    load_flash: bool
    typical_size: int
    max_size: int
    typical_free_heap: int | None
    regions: tuple[Region, ...]
    #: recommended range for models and data, ``(start, end)``
    model_zone: tuple[int, int] | None
    size_samples: tuple[tuple[int, str], ...] = ()
    notes: str = ""

    @property
    def reserved_regions(self) -> tuple[Region, ...]:
        return tuple(r for r in self.regions if r.reserved)

    @property
    def firmware_region(self) -> Region | None:
        return next((r for r in self.regions if r.kind == "firmware"), None)


def _read_toml(name: str) -> dict[str, Any]:
    text = resources.files(DATA_PACKAGE).joinpath(name).read_text(encoding="utf-8")
    return tomllib.loads(text)


def _num(value: Any, what: str) -> int:
    try:
        return parse_int(value, what)
    except InputError as e:
        raise FormatError(e.message, e.hint) from None


def _steps(raw: list[dict[str, Any]], what: str) -> tuple[ResetStep, ...]:
    try:
        return tuple(
            ResetStep(bool(s["dtr"]), bool(s["rts"]), float(s["hold"]), str(s.get("first", "dtr")))
            for s in raw
        )
    except (KeyError, TypeError, ValueError) as e:
        raise FormatError(
            f"{what}: bad reset step ({e})", "see firmware_layouts/SCHEMA.md"
        ) from None


def _wirings(doc: dict[str, Any]) -> dict[str, Wiring]:
    out = {}
    for name, w in doc.get("wirings", {}).items():
        out[name] = Wiring(
            name=name,
            description=w.get("description", ""),
            reset_line=w["reset_line"],
            boot_line=w["boot_line"],
            kflash_name=w.get("kflash_name", name),
            isp=_steps(w["isp"], f"wiring {name} isp"),
            run=_steps(w["run"], f"wiring {name} run"),
        )
    return out


def _board(bid: str, b: dict[str, Any], wirings: dict[str, Wiring]) -> Board:
    def wiring(name: str) -> Wiring:
        if name not in wirings:
            raise FormatError(f"board {bid}: unknown wiring {name!r}", f"known: {sorted(wirings)}")
        return wirings[name]

    auto = b["wiring"] == "auto"
    auto_names = list(b.get("auto_wirings", ()))
    if len(set(auto_names)) != len(auto_names):
        raise FormatError(
            f"board {bid}: auto_wirings lists a wiring twice ({auto_names})",
            "list each wiring once: connect repeats the whole list in rounds "
            "(firmware_layouts/SCHEMA.md)",
        )
    return Board(
        id=bid,
        name=b["name"],
        aliases=tuple(b.get("aliases", ())),
        flash_size=_num(b.get("flash_size", DEFAULT_FLASH_SIZE), f"board {bid} flash_size"),
        flash_chip=b.get("flash_chip", "unknown"),
        wiring=None if auto else wiring(b["wiring"]),
        auto_wirings=tuple(wiring(n) for n in auto_names),
        usb=tuple(
            UsbId(u["vid"], u.get("pid"), u.get("interface"), u.get("bridge", ""))
            for u in b.get("usb", ())
        ),
        max_baud=int(b["max_baud"]),
        default_baud=int(b["default_baud"]),
        rom_baud_factor=float(b.get("rom_baud_factor", 1.0)),
        module=b.get("module", ""),
        notes=b.get("notes", ""),
    )


@lru_cache(maxsize=1)
def load_boards() -> dict[str, Board]:
    """All board profiles by id (``maix-bit``, ``maix-dock``, ``generic``...)."""
    doc = _read_toml("boards.toml")
    wirings = _wirings(doc)
    try:
        return {bid: _board(bid, b, wirings) for bid, b in doc["boards"].items()}
    except KeyError as e:
        raise FormatError(
            f"boards.toml: missing key {e}", "see firmware_layouts/SCHEMA.md"
        ) from None


def _lookup(table: dict[str, Any], name: str, what: str, cmd: str):
    key = name.strip()
    if key in table:
        return table[key]
    low = key.lower()
    for item in table.values():
        if low == item.id.lower() or low in (a.lower() for a in item.aliases):
            return item
    raise InputError(f"unknown {what} {name!r}", f"`kflashpy {cmd}` lists them: {', '.join(table)}")


def get_board(name: str | None) -> Board:
    """A board by id or alias (kflash names such as ``dan``, ``goE`` work); None = generic."""
    return _lookup(load_boards(), name or "generic", "board", "boards")


def _resolve(fid: str, raw: dict[str, dict[str, Any]], seen: tuple[str, ...] = ()) -> dict:
    entry = raw[fid]
    base = entry.get("extends")
    if base is None:
        return dict(entry)
    if base not in raw or base in seen:
        raise FormatError(f"firmware {fid}: cannot extend {base!r}", "fix the `extends` key")
    merged = _resolve(base, raw, (*seen, fid))
    merged.pop("aliases", None)
    merged.update(entry)
    return merged


def _region(r: dict[str, Any], fid: str) -> Region:
    name = r.get("name", "?")
    return Region(
        name=name,
        start=_num(r["start"], f"firmware {fid} region {name} start"),
        size=_num(r["size"], f"firmware {fid} region {name} size"),
        kind=r.get("kind", "data"),
        reserved=bool(r.get("reserved", False)),
        note=r.get("note", ""),
    )


def _firmware(fid: str, f: dict[str, Any]) -> Firmware:
    zone = f.get("model_zone")
    heap = f.get("typical_free_heap")
    return Firmware(
        id=fid,
        name=f.get("name", fid),
        family=f.get("family", fid),
        aliases=tuple(f.get("aliases", ())),
        kmodel_versions=tuple(int(v) for v in f.get("kmodel_versions", ())),
        load_flash=bool(f.get("load_flash", False)),
        typical_size=_num(f.get("typical_size", 0), f"firmware {fid} typical_size"),
        max_size=_num(f.get("max_size", 0), f"firmware {fid} max_size"),
        typical_free_heap=None if heap is None else _num(heap, f"firmware {fid} heap"),
        regions=tuple(_region(r, fid) for r in f.get("regions", ())),
        model_zone=None
        if zone is None
        else (_num(zone["start"], f"{fid} model_zone"), _num(zone["end"], f"{fid} model_zone")),
        size_samples=tuple((int(s["size"]), s.get("what", "")) for s in f.get("size_samples", ())),
        notes=f.get("notes", ""),
    )


def _firmwares_from(doc: dict[str, Any], origin: str) -> dict[str, Firmware]:
    raw = doc.get("firmwares")
    if not isinstance(raw, dict) or not raw:
        raise FormatError(f"{origin}: no [firmwares.<id>] tables", "see firmware_layouts/SCHEMA.md")
    try:
        return {fid: _firmware(fid, _resolve(fid, raw)) for fid in raw}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise FormatError(
            f"{origin}: malformed firmware entry ({type(e).__name__}: {e})",
            "see firmware_layouts/SCHEMA.md",
        ) from None


@lru_cache(maxsize=1)
def load_firmwares() -> dict[str, Firmware]:
    """All built-in firmware layouts by id (``maixpy``, ``maixpy-minimum``, ``kboot``...)."""
    return _firmwares_from(_read_toml("firmwares.toml"), "firmwares.toml")


def load_firmware_file(path: str | Path) -> dict[str, Firmware]:
    """Firmware layouts from a user TOML file with the same schema as the built-in one."""
    try:
        doc = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(
            f"{path}: cannot read: {e.strerror or e}", "check the path of the --layout file"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise FormatError(
            f"{path}: not valid TOML: {e}", "see firmware_layouts/SCHEMA.md"
        ) from None
    return _firmwares_from(doc, str(path))


def get_firmware(name: str) -> Firmware:
    """A firmware layout by id or alias, or the first one of a ``.toml`` file path."""
    if name.lower().endswith(".toml"):
        return next(iter(load_firmware_file(name).values()))
    return _lookup(load_firmwares(), name, "firmware layout", "boards --firmwares")
