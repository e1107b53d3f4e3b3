"""Read, verify and identify flash through a flasher that can (kflashpy's own by default).

These need read-back, which no kflash-family flasher has; the default flasher here is
therefore ``"kflashpy"`` whatever the burn default is. Each function opens the port,
does its job and closes it::

    import kflashpy.isp.flashops as ops
    ops.read_flash(0x300000, 0x10000, output="model.bin", connection="sim://?board=maix-bit")
    result = ops.verify_flash([(0x300000, "model.kmodel")], connection="/dev/ttyUSB0")
    print(result.ok, [r.label for r in result.mismatches])
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError, VerifyError
from ..fileio import write_atomic
from ..image.plan import AS_IS, PlannedRegion, as_burned
from ..progress import ProgressFn
from ..units import fmt_addr
from .connect import Connection, ConnectOptions, Device
from .stage2 import CAP_HASH, CAP_IDENTIFY, CAP_READ, Stage2

#: JEDEC manufacturer bytes of the flash chips found on K210 boards
MANUFACTURERS = {0xEF: "Winbond", 0xC8: "GigaDevice", 0x20: "Micron/XMC", 0x85: "Puya"}


def _check_range(address: int, size: int, flash_size: int | None) -> None:
    if address < 0 or size <= 0:
        raise InputError(
            f"flash range {fmt_addr(address)} + {size} B is empty or negative",
            "give --addr and a positive --size",
        )
    if flash_size and address + size > flash_size:
        raise InputError(
            f"flash range {fmt_addr(address)} + 0x{size:X} ends beyond the "
            f"{flash_size >> 20} MiB flash",
            f"keep addr + size <= 0x{flash_size:X} (see kflashpy flash-id)",
        )


def _flash_size(s2: Stage2) -> int | None:
    return s2.identify().size if s2.has(CAP_IDENTIFY) else None


@dataclass
class ReadResult:
    port: str
    address: int
    size: int
    sha256: str
    seconds: float
    output: str | None
    data: bytes = field(repr=False, default=b"")

    def to_dict(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "address": self.address,
            "address_hex": fmt_addr(self.address),
            "size": self.size,
            "sha256": self.sha256,
            "seconds": round(self.seconds, 4),
            "output": self.output,
        }


def read_flash(
    address: int,
    size: int | None,
    *,
    output: str | os.PathLike[str] | None = None,
    connection: Connection = None,
    progress: ProgressFn | None = None,
) -> ReadResult:
    """Read ``size`` bytes at ``address``; the board's SHA-256 of the range checks them.

    ``size=None`` reads to the end of the flash (its size as the chip reports it).
    """
    with ConnectOptions.of(connection).connect(progress) as dev:
        return read_on(dev, address, size, output=output, progress=progress)


def read_on(
    dev: Device,
    address: int,
    size: int | None,
    *,
    output: str | os.PathLike[str] | None = None,
    progress: ProgressFn | None = None,
) -> ReadResult:
    """:func:`read_flash` on an already connected device."""
    s2 = dev.require_stage2()
    s2._require(CAP_READ, "read flash")
    flash_size = _flash_size(s2)
    if size is None:
        if not flash_size:
            raise InputError(
                "this flasher cannot tell the flash size, so 'all' has no end",
                "give --size in bytes (see kflashpy flash-id)",
            )
        size = flash_size - address
    _check_range(address, size, flash_size)
    start = dev.link.now()
    data = s2.read(address, size, progress)
    seconds = dev.link.now() - start
    if output is not None:
        write_atomic(output, data)  # never half a file; the permissions open() would give
    return ReadResult(
        dev.port_name,
        address,
        size,
        hashlib.sha256(data).hexdigest(),
        seconds,
        os.fspath(output) if output is not None else None,
        data,
    )


@dataclass
class VerifyRegion:
    label: str
    address: int
    size: int
    expected: str
    found: str
    method: str  # "sha256" (on board) or "read-back"
    #: what the file was compared as: itself, or the boot image burn wraps it into
    compared: str = AS_IS

    @property
    def ok(self) -> bool:
        return self.expected == self.found

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "address": self.address,
            "address_hex": fmt_addr(self.address),
            "size": self.size,
            "ok": self.ok,
            "expected_sha256": self.expected,
            "found_sha256": self.found,
            "method": self.method,
            "compared": self.compared,
        }


@dataclass
class VerifyResult:
    port: str
    regions: list[VerifyRegion]
    seconds: float

    @property
    def mismatches(self) -> list[VerifyRegion]:
        return [r for r in self.regions if not r.ok]

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_dict(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "ok": self.ok,
            "seconds": round(self.seconds, 4),
            "regions": [r.to_dict() for r in self.regions],
        }


def mismatch_error(result: VerifyResult) -> VerifyError:
    """The error that names the regions a verify found different."""
    return VerifyError(
        "flash differs from "
        + ", ".join(f"{r.label} at {fmt_addr(r.address)}" for r in result.mismatches),
        "burn those files again (kflashpy burn ADDR FILE ...)",
    )


def _source(address: int, source: str | os.PathLike[str] | bytes) -> tuple[str, bytes]:
    if isinstance(source, bytes):
        return f"<{len(source)} bytes>", source
    path = Path(source)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror})", "check the file name") from e
    if not data:
        raise InputError(f"{path}: the file is empty", "nothing to compare at this address")
    return str(path), data


def verify_flash(
    files: Sequence[tuple[int, str | os.PathLike[str] | bytes]],
    *,
    connection: Connection = None,
    progress: ProgressFn | None = None,
) -> VerifyResult:
    """Compare flash with files, region by region (on-board SHA-256, else read-back).

    Each file is compared with what ``burn`` writes for it at that address
    (:func:`~kflashpy.image.plan.as_burned`: a raw firmware at 0 becomes a boot image),
    so a burn followed by a verify agrees. Mismatches are reported in the result
    (``.ok``, ``.mismatches``), not raised.
    """
    items = verify_items(files)
    with ConnectOptions.of(connection).connect(progress) as dev:
        return verify_on(dev, items, progress=progress)


def verify_items(
    files: Sequence[tuple[int, str | os.PathLike[str] | bytes]],
) -> list[PlannedRegion]:
    """What burn writes for each file to verify, read before any port opens."""
    items = []
    for address, src in files:
        label, data = _source(address, src)
        items.append(as_burned(address, data, label))
    if not items:
        raise InputError("nothing to verify", "give ADDR FILE pairs")
    return items


def verify_on(
    dev: Device,
    items: Sequence[PlannedRegion],
    *,
    progress: ProgressFn | None = None,
) -> VerifyResult:
    """:func:`verify_flash` on an already connected device: each region's bytes as burn
    writes them (``items`` from :func:`verify_items`, or a plan's ``writes``)."""
    s2 = dev.require_stage2()
    if not s2.has(CAP_HASH):
        s2._require(CAP_READ, "verify flash")
    flash_size = _flash_size(s2)
    start = dev.link.now()
    regions = []
    for planned in items:
        address, label, data = planned.address, planned.label, planned.write
        _check_range(address, len(data), flash_size)
        if s2.has(CAP_HASH):
            found, method = s2.sha256(address, len(data)), "sha256"
        else:
            found = hashlib.sha256(s2.read(address, len(data), progress)).digest()
            method = "read-back"
        want = hashlib.sha256(data).hexdigest()
        regions.append(
            VerifyRegion(label, address, len(data), want, found.hex(), method, planned.written_as)
        )
    return VerifyResult(dev.port_name, regions, dev.link.now() - start)


@dataclass
class FlashIdResult:
    port: str
    flasher: str
    jedec_id: int
    manufacturer: str
    size: int
    unique_id: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "flasher": self.flasher,
            "jedec_id": f"0x{self.jedec_id:06X}",
            "manufacturer": self.manufacturer,
            "size": self.size,
            "unique_id": self.unique_id,
            **self.details,
        }


def flash_id(*, connection: Connection = None, progress: ProgressFn | None = None) -> FlashIdResult:
    """JEDEC id, size and unique id of the flash chip, and what the flasher reports."""
    with ConnectOptions.of(connection).connect(progress) as dev:
        return flash_id_on(dev)


def flash_id_on(dev: Device) -> FlashIdResult:
    """:func:`flash_id` on an already connected device."""
    s2 = dev.require_stage2()
    info = s2.identify()
    details: dict[str, Any] = {}
    extra = getattr(s2, "info", None)
    if extra is not None:
        details = {
            "cpu_hz": extra.cpu_hz,
            "uart_clock_hz": extra.apb0_hz,
            "spi_clock_hz": extra.sclk_hz,
            "baud": extra.baud,
            "protocol": extra.protocol,
            "sha256": "engine" if extra.sha_engine else "software",
        }
    return FlashIdResult(
        dev.port_name,
        s2.name,
        info.jedec_id,
        MANUFACTURERS.get(info.jedec_id >> 16, "unknown"),
        info.size,
        info.unique_id.hex(),
        details,
    )
