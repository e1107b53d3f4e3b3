"""The virtual board's mask ROM: ISP on UARTHS, reset wiring, flash boot (sim-core)."""

from __future__ import annotations

import hashlib
import struct

import pytest
import serial
from support.simwire import reply

from kflashpy.errors import InputError
from kflashpy.isp.frames import build_request, legacy_short_request
from kflashpy.isp.slip import encode
from kflashpy.sim import BoardConfig, VirtualBoard
from kflashpy.sim.memory import SRAM_BASE

if "kflashpy.sim" not in serial.protocol_handler_packages:
    serial.protocol_handler_packages.append("kflashpy.sim")


def open_port(query: str = "board=maix-bit") -> serial.SerialBase:
    return serial.serial_for_url(f"sim://?{query}", baudrate=115200, timeout=0.2)


def settle(port: serial.SerialBase) -> bytes:
    """Let 0.1 s of virtual time pass the way a host does: by reading with a timeout."""
    port.timeout = 0.1
    return port.read(4096)


def isp_reset_dan(port: serial.SerialBase) -> None:
    """kflash's 'dan' sequence (RTS = RESET, DTR = IO16)."""
    port.dtr, port.rts = False, False
    settle(port)
    port.rts = True
    settle(port)
    port.rts = False
    port.dtr = True
    settle(port)
    port.reset_input_buffer()


def request(port: serial.SerialBase, packet: bytes) -> bytes | None:
    port.write(encode(packet))
    return reply(port, 0.5)


@pytest.fixture
def isp() -> serial.SerialBase:
    port = open_port()
    isp_reset_dan(port)
    assert port.sim_board.stage == "isp"
    yield port
    port.close()


def test_legacy_greeting_and_full_nop(isp: serial.SerialBase) -> None:
    assert request(isp, legacy_short_request(0xC2)) == b"\xc2\xe0"
    assert request(isp, build_request(0xC2)) == b"\xc2\xe0"


def test_memory_write_lands_in_sram(isp: serial.SerialBase) -> None:
    data = bytes(range(256)) * 4
    assert request(isp, build_request(0xC3, 0x8000_1000, data)) == b"\xc3\xe0"
    assert isp.sim_board.sram.read(0x8000_1000, 1024) == data
    # the uncached alias addresses the same cells
    assert request(isp, build_request(0xC3, 0x4000_2000, b"\x5a" * 16)) == b"\xc3\xe0"
    assert isp.sim_board.sram.read(0x8000_2000, 16) == b"\x5a" * 16


@pytest.mark.parametrize(
    ("packet", "status"),
    [
        (build_request(0xC1), 0xE3),  # echo: not implemented by the ROM
        (build_request(0xC4, SRAM_BASE, data_len=16), 0xE3),  # memory read: refused
        (build_request(0xD2), 0xE3),  # a stage-2 opcode
        (build_request(0x1C3, SRAM_BASE, b"x"), 0xE3),  # 16-bit opcode, high byte set
        (build_request(0xC3, 0x805F_8000, b"\0" * 16), 0xE1),  # the ROM's own area
        (build_request(0xC3, 0x805F_7FF8, b"\0" * 16), 0xE1),  # straddles it
        (build_request(0xC3, 0x8800_0000, b"\0" * 16), 0xE1),  # the mask ROM
        (build_request(0xC3, 0x5000_0000, b"\0" * 4), 0xE1),  # a peripheral
        (build_request(0xC3, SRAM_BASE, b"\0" * 1025), 0xE1),  # more than 1 KiB
        (build_request(0xC3, SRAM_BASE, b"\0" * 8, data_len=16), 0xE1),  # length field lies
        (legacy_short_request(0xC3), 0xE1),  # short frame for a data command
    ],
    ids=[
        "echo",
        "read",
        "stage2-op",
        "op-high-byte",
        "rom-area",
        "straddle",
        "mask-rom",
        "peripheral",
        "too-long",
        "length-lies",
        "short-frame",
    ],
)
def test_rom_refuses(isp: serial.SerialBase, packet: bytes, status: int) -> None:
    before = bytes(isp.sim_board.sram.data[:64])
    answer = request(isp, packet)
    assert answer == bytes((packet[0], status))
    assert bytes(isp.sim_board.sram.data[:64]) == before


def test_bad_crc_is_e2_and_nothing_written(isp: serial.SerialBase) -> None:
    packet = bytearray(build_request(0xC3, 0x8000_0100, b"\x11" * 32))
    packet[4] ^= 1
    assert request(isp, bytes(packet)) == b"\xc3\xe2"
    assert isp.sim_board.sram.read(0x8000_0100, 32) == bytes(32)


def test_baud_change_and_mismatch(isp: serial.SerialBase) -> None:
    assert request(isp, build_request(0xC6, 0, struct.pack("<I", 1_500_000))) == b"\xc6\xe0"
    # host still at 115200: the ROM now listens at 26 MHz/17 = 1.53 Mbaud -> garbage
    assert request(isp, legacy_short_request(0xC2)) is None
    assert isp.sim_board.status()["garbled_in"] > 0
    isp.baudrate = 1_500_000
    assert request(isp, legacy_short_request(0xC2)) == b"\xc2\xe0"


def test_host_at_wrong_baud_gets_no_answer() -> None:
    port = open_port()
    port.baudrate = 9600
    isp_reset_dan(port)
    assert request(port, legacy_short_request(0xC2)) is None


def test_boot_runs_uploaded_program(isp: serial.SerialBase) -> None:
    # j . (a tight loop): the board leaves ISP, the core runs, no reply is sent
    assert request(isp, build_request(0xC3, SRAM_BASE, b"\x6f\x00\x00\x00")) == b"\xc3\xe0"
    isp.write(encode(build_request(0xC5, SRAM_BASE)))
    assert reply(isp, 0.05) is None
    board = isp.sim_board
    assert board.stage == "core"
    assert board.status()["core"]["pc"] == SRAM_BASE


def test_read_timeout_advances_virtual_time_only() -> None:
    port = open_port()
    board = port.sim_board
    port.timeout = 1.5
    t0 = board.now
    assert port.read(1) == b""  # reset held by RTS (pyserial asserts it on open)
    assert board.now == pytest.approx(t0 + 1.5)
    assert board.stage == "reset"


def boot_image(payload: bytes, flag: int = 0) -> bytes:
    head = bytes((flag,)) + struct.pack("<I", len(payload)) + payload
    return head + hashlib.sha256(head).digest()


def flash_board(tmp_path, image: bytes, extra: str = "") -> serial.SerialBase:  # type: ignore[no-untyped-def]
    path = tmp_path / "board.img"
    path.write_bytes(image + b"\xff" * (16 * 1024 * 1024 - len(image)))
    return open_port(f"board=maix-bit&flash={path}&personality=silent{extra}")


def run_firmware(port: serial.SerialBase) -> bytes:
    """Release RESET with IO16 high (kflash 'dan' boot sequence) and collect output."""
    port.dtr, port.rts = False, False
    settle(port)
    port.reset_input_buffer()
    port.rts = True
    settle(port)
    port.rts = False
    port.timeout = 0.3
    return port.read(4096)


def test_valid_image_boots_and_wrong_sequence_keeps_firmware(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = flash_board(tmp_path, boot_image(b"\x13" * 1000))
    out = run_firmware(port)
    board = port.sim_board
    assert board.stage == "firmware" and b"firmware booted: 1000 bytes" in out
    assert board.sram.read(SRAM_BASE, 1000) == b"\x13" * 1000
    # kd233 ISP sequence (DTR = RESET, RTS = IO16) on a board wired RTS = RESET: it
    # ends with RESET held; once the lines drop the firmware starts again, not the ROM
    port.dtr, port.rts = False, False
    settle(port)
    port.dtr, port.rts = True, False
    settle(port)
    port.rts, port.dtr = True, False
    settle(port)
    assert board.stage == "reset"
    port.rts = False
    settle(port)
    assert board.stage == "firmware"
    assert request(port, legacy_short_request(0xC2)) is None


def test_reset_cuts_a_long_boot_short(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The ROM copies a 1 MiB image for about 0.26 s; a reset into ISP meanwhile is
    answered at once, as on hardware, not after the boot."""
    port = flash_board(tmp_path, boot_image(bytes(range(256)) * 4096))
    board = port.sim_board
    port.dtr, port.rts = False, False
    port.timeout = 0.01
    port.read(1)
    assert board.stage == "booting"
    port.rts = True  # RESET
    port.dtr = True  # BOOT low
    port.read(1)
    port.rts = False
    port.read(1)
    assert board.stage == "isp" and board.now < 0.1
    assert request(port, legacy_short_request(0xC2)) == b"\xc2\xe0"
    port.dtr = False  # the same image boots in full when nothing interrupts it
    port.rts = True
    port.read(1)
    port.rts = False
    port.timeout = 0.3
    assert b"firmware booted" in port.read(4096) and board.stage == "firmware"


def test_corrupt_image_falls_back_to_isp(tmp_path) -> None:  # type: ignore[no-untyped-def]
    image = bytearray(boot_image(b"\x13" * 1000))
    image[100] ^= 0xFF
    port = flash_board(tmp_path, bytes(image))
    out = run_firmware(port)
    assert port.sim_board.stage == "isp"
    assert b"boot failed" in out
    assert port.sim_board.boot_result.reason == "SHA-256 mismatch"
    assert request(port, legacy_short_request(0xC2)) == b"\xc2\xe0"


def test_erased_flash_boots_into_isp() -> None:
    port = open_port()
    run_firmware(port)
    assert port.sim_board.stage == "isp"


def _encrypt(key: bytes, data: bytes) -> bytes:
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    data += bytes(-len(data) % 16)
    enc = Cipher(algorithms.AES(key), modes.CBC(bytes(16))).encryptor()
    return enc.update(data) + enc.finalize()


def test_encrypted_image_needs_the_otp_key(tmp_path) -> None:  # type: ignore[no-untyped-def]
    key = bytes(range(16))
    plain = b"K210 firmware!" * 20
    image = boot_image(_encrypt(key, plain), flag=1)
    port = flash_board(tmp_path, image, f"&otp_key={key.hex()}")
    run_firmware(port)
    assert port.sim_board.stage == "firmware"
    assert port.sim_board.sram.read(SRAM_BASE, len(plain)) == plain
    port.close()
    unkeyed = flash_board(tmp_path, image)
    run_firmware(unkeyed)
    assert unkeyed.sim_board.stage == "halted"


@pytest.mark.parametrize(
    ("board", "isp_lines", "expected"),
    [
        ("maix-bit", [(False, True), (True, False)], "isp"),  # dan: RTS reset, DTR boot
        ("maixduino", [(True, False), (False, True)], "isp"),  # kd233: DTR reset, RTS boot
        ("maix-go&wiring=cmsis-dap", [(True, True), (True, False)], "isp"),  # goD
        ("maixduino", [(False, True), (True, False)], "reset"),  # dan sequence, wrong wiring
        ("m5stickv", [(True, False), (False, True)], "isp"),  # from the layout data
    ],
)
def test_wirings(board: str, isp_lines: list[tuple[bool, bool]], expected: str) -> None:
    port = open_port(f"board={board}")
    port.dtr, port.rts = False, False
    settle(port)
    for dtr, rts in isp_lines:
        port.dtr, port.rts = dtr, rts
        settle(port)
    assert port.sim_board.stage == expected


def test_button_reset_and_bad_options() -> None:
    board = VirtualBoard(BoardConfig(board="no-autoreset"))
    board.set_dtr(True)
    board.set_rts(True)
    board.run_for(0.01)
    assert board.stage == "isp"  # lines do nothing; erased flash -> ISP
    board.reset_into_isp()
    board.run_for(0.01)
    assert board.stage == "isp"
    with pytest.raises(InputError):
        BoardConfig.from_url("sim://?board=maix-bit&bogus=1")
    with pytest.raises(InputError):
        VirtualBoard(BoardConfig(board="nonexistent"))
    with pytest.raises(InputError):
        BoardConfig.from_url("sim://?otp_key=1234")
