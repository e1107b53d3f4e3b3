"""Finding and opening the serial port a K210 board sits behind.

Any pyserial URL works (``/dev/ttyUSB0``, ``COM3``, ``socket://``, ``rfc2217://``,
``sim://`` for the virtual board). Ports are opened with DTR and RTS released, so that
opening alone never resets the board or pulls its BOOT pin (those lines are the
reset/boot wiring on every K210 board). Without ``--port``, the USB-serial bridges
K210 boards use are recognised by USB VID/PID.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

import serial
from serial.tools import list_ports

from ..errors import PortError
from ..target import boards

#: pyserial looks up ``<package>.protocol_<scheme>`` for URL schemes; the virtual board's
#: handler lives in this package (named as a string: isp never imports the simulator)
SIM_HANDLER_PACKAGE = "kflashpy.sim"

#: USB bridges found on K210 boards: VID -> (name, {PID: model})
KNOWN_BRIDGES: dict[int, tuple[str, dict[int, str]]] = {
    0x1A86: ("WCH", {0x7523: "CH340", 0x5523: "CH341", 0x55D4: "CH552/CH9102", 0x7522: "CH340K"}),
    0x0403: ("FTDI", {0x6001: "FT232R", 0x6010: "FT2232", 0x6014: "FT232H", 0x6015: "FT-X"}),
    0x10C4: ("SiLabs", {0xEA60: "CP210x"}),
    0x067B: ("Prolific", {0x2303: "PL2303"}),
    0xC251: ("OpenEC/CMSIS-DAP", {}),
    0x0D28: ("CMSIS-DAP", {0x0204: "DAPLink"}),
}

#: FTDI dual-port chips (real FT2232, or CH552/OpenEC firmware emulating one): which
#: interface carries the K210 UART depends on the board (its profile says)
FTDI_DUAL_PIDS = frozenset({0x6010})


@dataclass(frozen=True)
class Candidate:
    """A port that looks like a K210 board's serial bridge."""

    device: str
    bridge: str  # "WCH CH340", "FTDI FT2232 (interface 1)", ...
    vid: int
    pid: int
    interface: int | None
    serial_number: str | None

    def describe(self) -> str:
        sn = f", serial {self.serial_number}" if self.serial_number else ""
        return f"{self.device} ({self.bridge}, {self.vid:04X}:{self.pid:04X}{sn})"


def _interface_number(info) -> int | None:
    """USB interface number of a port (from pyserial's location, e.g. '1-1.2:1.1')."""
    m = re.search(r":\d+\.(\d+)$", info.location or "")
    return int(m.group(1)) if m else None


def candidates() -> list[Candidate]:
    """USB serial ports whose bridge K210 boards use, sorted by device name."""
    found: list[Candidate] = []
    for info in list_ports.comports():
        if info.vid is None or info.vid not in KNOWN_BRIDGES:
            continue
        vendor, models = KNOWN_BRIDGES[info.vid]
        pid = info.pid or 0
        iface = _interface_number(info)
        bridge = f"{vendor} {models.get(pid, f'PID {pid:04X}')}"
        if iface is not None and pid in FTDI_DUAL_PIDS:
            bridge += f" (interface {iface})"
        found.append(Candidate(info.device, bridge, info.vid, pid, iface, info.serial_number))
    return sorted(found, key=lambda c: c.device)


def _matches(c: Candidate, usb: boards.UsbId) -> bool:
    return (
        c.vid == usb.vid
        and (usb.pid is None or c.pid == usb.pid)
        and (usb.interface is None or c.interface is None or c.interface == usb.interface)
    )


def suggested_boards(c: Candidate) -> list[str]:
    """Ids of the board profiles whose USB ids match this port (the auto-pick's rule)."""
    return [b.id for b in boards.load_boards().values() if any(_matches(c, u) for u in b.usb)]


def choose_port(board: boards.Board | None = None) -> tuple[Candidate, str]:
    """Pick the port when none was given; returns it with the reason, or explains why not.

    Ports matching the board profile's USB ids come first. On a dual-port bridge the
    profile's interface number picks the UART half; when the OS does not report
    interface numbers, the two halves are told apart by device-name order.
    """
    found = candidates()
    if not found:
        raise PortError(
            "no serial port of a known USB bridge (WCH, FTDI, SiLabs, Prolific, CMSIS-DAP) found",
            _no_port_hint(),
        )
    usb = board.usb if board else ()
    matching = [c for c in found if any(_matches(c, u) for u in usb)]
    reason = f"USB id of a {board.name}" if matching and board else "a known USB-serial bridge"
    pool = matching or found
    if len(pool) == 2 and all(c.pid in FTDI_DUAL_PIDS and c.interface is None for c in pool):
        want = next((u.interface for u in usb if u.interface is not None), 1)
        return pool[min(want, 1)], f"{reason}, interface {want} of the dual-port bridge"
    if len(pool) > 1:
        listing = ", ".join(c.describe() for c in pool)
        raise PortError(
            f"several possible ports: {listing}",
            "choose one with --port (or KFLASHPY_PORT), or name the board with --board",
        )
    return pool[0], reason


def _no_port_hint() -> str:
    if sys.platform.startswith("linux"):
        return (
            "plug the board in and check `dmesg` for a ttyUSB/ttyACM device; "
            "or give the port with --port"
        )
    if sys.platform == "darwin":
        return (
            "plug the board in; CH340/CH9102 bridges may need the WCH driver on older macOS; "
            "or give the port with --port /dev/cu.usbserial-..."
        )
    return (
        "plug the board in and install the driver for its USB bridge (CH340/CH9102: WCH, "
        "CP210x: SiLabs); check Device Manager for the COM number and pass --port COMn"
    )


def open_port(url: str, baud: int = 115200) -> serial.SerialBase:
    """Open ``url`` without touching DTR/RTS; map failures to :class:`PortError` with hints."""
    if SIM_HANDLER_PACKAGE not in serial.protocol_handler_packages:
        serial.protocol_handler_packages.append(SIM_HANDLER_PACKAGE)
    is_url = "://" in url
    try:
        port = serial.serial_for_url(url, do_not_open=True)
        port.timeout = 0.1
        port.write_timeout = 10
        port.dtr = False  # released before open: opening must not reset the board
        port.rts = False
        if not is_url and os.name == "posix":
            port.exclusive = True
        port.open()
        port.baudrate = baud  # after open: some CH341 drivers ignore a rate set before
    except ValueError as e:
        raise PortError(f"cannot open {url}: {e}", "check the port name or URL") from e
    except (serial.SerialException, OSError) as e:
        raise PortError(f"cannot open {url}: {_short(e)}", _open_hint(url, str(e))) from e
    return port


def _short(e: Exception) -> str:
    text = str(e)
    return text.split(": ", 1)[1] if text.startswith("could not open port") else text


def _open_hint(url: str, text: str) -> str:
    low = text.lower()
    if "errno 2" in low or "no such file" in low or "filenotfound" in low:
        return "the port does not exist: check the name, or omit --port to auto-detect"
    if "errno 13" in low or "permission denied" in low:
        return (
            "no permission: add yourself to the dialout (Debian/Ubuntu) or uucp (Arch) group "
            "and log in again, e.g. `sudo usermod -aG dialout $USER`"
        )
    if "access is denied" in low or "busy" in low or "exclusively lock" in low or "errno 16" in low:
        return "the port is in use: close serial monitors, IDEs or other flashing tools"
    if "://" in url:
        return "check the URL (see the pyserial URL handlers: socket://, rfc2217://, sim://)"
    return "unplug and replug the board; check its USB driver"
