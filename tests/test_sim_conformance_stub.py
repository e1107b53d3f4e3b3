"""Conformance (a): the stub shipped in the PyPI ``kflash`` 1.1.6 package, unmodified,
runs on the virtual board and answers greeting, baud change, flash init, erase and write.

The stub is read from the installed package at test time (never stored in the repo).
The host side here is a deliberately small, independent frame exchange (not the
project's ISP client) so that a client bug cannot hide a simulator bug.
"""

from __future__ import annotations

import hashlib
import struct

import pytest
import serial

from kflashpy.isp.frames import build_request, legacy_short_request
from kflashpy.isp.slip import SlipDecoder, encode
from kflashpy.isp.stubs import KFLASH_116_SHA256, kflash_package_stub  # noqa: E402

STUB_ADDRESS = 0x80000000


class Host:
    """Send SLIP frames and wait for replies over an in-process sim:// port."""

    def __init__(self, port: serial.SerialBase) -> None:
        self.port = port
        self.decoder = SlipDecoder()
        self.pending: list[bytes] = []

    def send(self, packet: bytes) -> None:
        self.port.write(encode(packet))

    def reply(self, op: int, timeout: float = 5.0) -> int:
        """Status byte of the next reply to ``op`` (0xD1 debug text frames are skipped)."""
        board = self.port.sim_board
        deadline = board.now + timeout
        while board.now < deadline:
            while self.pending:
                frame = self.pending.pop(0)
                if len(frame) >= 2 and frame[0] == op:
                    return frame[1]
            self.pending += self.decoder.feed(self.port.read(64))
        raise AssertionError(f"no reply to {op:#x} within {timeout} virtual s")

    def request(
        self, op: int, address: int = 0, data: bytes = b"", timeout: float = 5.0, **kw: int
    ) -> int:
        self.send(build_request(op, address, data, **kw))
        return self.reply(op, timeout)


@pytest.fixture(scope="module")
def stub() -> bytes:
    image = kflash_package_stub()
    assert hashlib.sha256(image).hexdigest() == KFLASH_116_SHA256
    return image


@pytest.fixture
def host(stub: bytes) -> Host:
    serial.protocol_handler_packages.append("kflashpy.sim")
    try:
        port = serial.serial_for_url(
            "sim://?board=maix-bit&flash_size=4M", baudrate=115200, do_not_open=True
        )
    finally:
        serial.protocol_handler_packages.remove("kflashpy.sim")
    port.dtr = port.rts = False  # released: RTS drives RESET on this board's wiring
    port.open()
    port.timeout = 0.05
    board = port.sim_board
    board.reset_into_isp()
    assert board.run_until(lambda: board.stage == "isp", 0.1)
    h = Host(port)
    h.send(legacy_short_request(0xC2))
    assert h.reply(0xC2) == 0xE0
    for offset in range(0, len(stub), 1024):
        assert h.request(0xC3, STUB_ADDRESS + offset, stub[offset : offset + 1024]) in (0, 0xE0)
    h.send(build_request(0xC5, STUB_ADDRESS))  # no reply: the ROM jumps
    port.read(1)  # let the stub start (0.05 virtual s)
    yield h
    port.close()


def test_stub_greets_inits_erases_and_writes(host: Host) -> None:
    board = host.port.sim_board
    host.send(legacy_short_request(0xD2))
    assert host.reply(0xD2) == 0xE0
    assert board.stage == "core"
    assert host.request(0xD7, 1) == 0xE0  # flash init (kflash's default chip number)
    # SR writes done by the stub's init left the chip unprotected and the QE bit set
    assert board.flash.protected_range() == (0, 0)

    payload = hashlib.shake_256(b"conformance").digest(5000)
    around = hashlib.shake_256(b"old contents").digest(0x10000)
    board.flash.preload(0x10000, around)
    erases = board.flash.stats.erases
    assert host.request(0xD4, 0x10000 + 100, payload, timeout=30) == 0xE0
    assert board.flash.read(0x10000 + 100, len(payload)) == payload
    # the 1.1.6 stub read-modify-writes the 64 KiB block: the rest is kept
    assert board.flash.read(0x10000, 100) == around[:100]
    assert board.flash.read(0x10000 + 5100, 0x10000 - 5100) == around[5100:]
    assert board.flash.stats.erases == erases + 1 and board.flash.stats.programs >= 2048


def test_stub_erase_status_and_baud(host: Host) -> None:
    board = host.port.sim_board
    host.send(legacy_short_request(0xD2))
    assert host.reply(0xD2) == 0xE0
    # baud change: the stub answers at the new rate, then greets again
    host.send(build_request(0xD6, 0, struct.pack("<I", 1500000)))
    host.port.read(1)
    host.port.baudrate = 1500000
    host.send(legacy_short_request(0xD2))
    assert host.reply(0xD2) == 0xE0
    assert host.request(0xD7, 1) == 0xE0
    board.flash.preload(0x20000, b"\x00" * 4096)
    # non-blocking erase of one sector, then poll the status until done
    assert host.request(0xD8, 0x20000, data_len=4096) == 0xE0
    for _ in range(100):
        host.send(legacy_short_request(0xD9))
        if host.reply(0xD9) == 0xE0:
            break
        host.port.read(1)
    assert board.flash.read(0x20000, 4096) == b"\xff" * 4096
