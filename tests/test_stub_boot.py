"""kflashpy's bootstrap on the virtual K210: LOAD, the flasher's upload by DMA.

The bootstrap goes through the real ROM path; the tests then speak its protocol frame by
frame (docs/flasher-protocol.md, "2. Start-up"): a payload damaged, cut short, longer
than announced or announced wrongly ends in a clean error reply, after which the
bootstrap answers greetings and takes the next LOAD.
"""

from __future__ import annotations

import random
import struct

import pytest
import serial
from support.simwire import enter_isp

from kflashpy.isp.frames import FlashOp, Status, crc32
from kflashpy.isp.kfpy_stage2 import BOOT_MTIME_HZ, KfpyOp, KfpyStage2
from kflashpy.isp.link import Link
from kflashpy.isp.rom import Rom
from kflashpy.stub import load

serial.protocol_handler_packages.append("kflashpy.sim")

BAUD = 1_500_000
AT = 0x8030_0000  # free SRAM, clear of the bootstrap and its DMA buffer
ST_BAD_LEN = 0xE1
WAIT = 0.05  # the board's wait for a payload in these tests


@pytest.fixture
def boot():
    """A KfpyStage2 client on a board running the bootstrap at BAUD (flasher not loaded)."""
    port = serial.serial_for_url("sim://?board=maix-bit", baudrate=115200)
    enter_isp(port)
    link = Link(port)
    rom = Rom(link)
    assert rom.greet()
    image = load().boot
    rom.write_memory(image.load_address, image.with_param(BAUD))
    rom.boot(image.entry)
    link.set_baud(BAUD)
    link.wait(0.003)
    s2 = KfpyStage2(link, bootstrap=True)
    s2.greet()
    yield s2
    port.close()


def _load(s2, payload: bytes, wire: bytes | None = None, *, size=None, crc=None):
    """Send a LOAD request for ``payload`` followed by ``wire`` (the payload by default)
    and return the board's first reply."""
    size = len(payload) if size is None else size
    crc = crc32(payload) if crc is None else crc
    header = struct.pack("<III", size, crc, int(WAIT * BOOT_MTIME_HZ))
    s2.link.send(KfpyOp.LOAD, AT, header, tail=payload if wire is None else wire)
    return s2.link.recv(KfpyOp.LOAD, 0.01, extra_len=None)


def _verdict(s2, payload_len: int):
    """The status of the reply that follows the payload."""
    resp = s2.link.recv(KfpyOp.LOAD, 1.0, extra_len=None)
    assert resp.extra[:8] == struct.pack("<II", AT, payload_len)
    return resp.status


def _sram(s2, n: int) -> bytes:
    return s2.link.port.sim_board.sram.read(AT, n)


def test_load_places_the_payload_and_answers_at_once(boot):
    payload = random.Random(1).randbytes(5000)
    start = boot.link.now()
    ready = _load(boot, payload)
    assert ready.status == Status.OK and len(ready.extra) == 4  # no payload, its CRC
    assert _verdict(boot, len(payload)) == Status.OK
    assert boot.link.now() - start < (5000 + 40) * 10 / BAUD + 0.005
    assert _sram(boot, len(payload)) == payload


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(lambda p: p[:1000] + p[1001:], id="a byte lost"),
        pytest.param(lambda p: p[:2500], id="host stops mid-payload"),
    ],
)
def test_a_short_payload_ends_at_the_wait_with_bad_crc(boot, wire):
    payload = random.Random(2).randbytes(5000)
    start = boot.link.now()
    assert _load(boot, payload, wire(payload)).status == Status.OK
    assert _verdict(boot, len(payload)) == Status.BAD_DATA_CHECKSUM
    assert WAIT < boot.link.now() - start < WAIT + 0.005  # the board's wait, not longer
    boot.greet(attempts=1)  # the channel is stopped: frames are frames again
    assert _load(boot, payload).status == Status.OK  # and the next LOAD gets through
    assert _verdict(boot, len(payload)) == Status.OK
    assert _sram(boot, len(payload)) == payload


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(lambda p: p[:1000] + b"\x55" + p[1000:], id="an extra byte"),
        pytest.param(lambda p: p[:1000] + bytes([p[1000] ^ 4]) + p[1001:], id="a damaged byte"),
    ],
)
def test_a_wrong_payload_fails_its_crc_at_once(boot, wire):
    payload = random.Random(3).randbytes(3000)
    start = boot.link.now()
    assert _load(boot, payload, wire(payload)).status == Status.OK
    assert _verdict(boot, len(payload)) == Status.BAD_DATA_CHECKSUM
    assert boot.link.now() - start < WAIT
    boot.greet(attempts=2)  # an extra byte ends up in a garbage frame first


def test_a_load_announced_wrongly_is_refused_and_its_payload_read_as_frames(boot):
    payload = random.Random(4).randbytes(3000)
    for size in (0, 32768 + 1):  # nothing armed: the payload is taken for frames
        assert _load(boot, payload, size=size).status == ST_BAD_LEN
        boot.link.barrier(FlashOp.NOP, 0.1)  # the payload's "frames" answered first
    assert _load(boot, payload, crc=crc32(payload) ^ 1).status == Status.OK
    assert _verdict(boot, len(payload)) == Status.BAD_DATA_CHECKSUM
    assert _load(boot, payload).status == Status.OK
    assert _verdict(boot, len(payload)) == Status.OK


def test_the_upload_costs_the_emulator_little(boot):
    """The flasher's 17 KiB come by DMA while the core sleeps in wfi: a few hundred
    register accesses and slices (the polled bootstrap made ~20,600 and ~6,400 at
    1.5 Mbaud: an RFL read every 8 characters and an RBR read a byte)."""
    core = boot.link.port.sim_board.core
    mmio, slices = core._mmio_count, core.slices
    boot._ensure_flasher()
    assert core._mmio_count - mmio < 600
    assert core.slices - slices < 600
    boot.flash_init()
