"""Link, reset sequences, ports, stubs and SRAM images, without a board."""

import errno
import os
import struct
from types import SimpleNamespace

import pytest
import serial

from kflashpy.errors import FormatError, InputError, NoResponseError, PortError
from kflashpy.isp import ports, reset, slip, stubs
from kflashpy.isp.frames import FlashOp, build_response
from kflashpy.isp.link import Link
from kflashpy.isp.ramimage import load_ram_image, parse_elf
from kflashpy.isp.stage2 import CAP_ERASE, CAP_WRITE, KflashStage2, scaled_timeout
from kflashpy.target import boards

# --- link ----------------------------------------------------------------------------


def _loop_link():
    port = serial.serial_for_url("loop://", timeout=0)
    return port, Link(port)


def test_recv_skips_debug_text_noise_and_foreign_frames():
    port, link = _loop_link()
    port.write(
        b"MaixPy banner\r\n"
        + slip.encode(build_response(FlashOp.DEBUG_INFO, 0xE0, b"[DEBUG] hello"))
        + slip.encode(build_response(0xC3, 0xE0))  # wrong op
        + slip.encode(build_response(FlashOp.FLASH_WRITE, 0xE0, b"x"))  # extra bytes
        + slip.encode(build_response(FlashOp.FLASH_WRITE, 0xE2))
    )
    resp = link.recv(FlashOp.FLASH_WRITE, 0.5)
    assert (resp.op, resp.status) == (0xD4, 0xE2)
    assert link.debug_text == ["[DEBUG] hello"]
    assert len(link.stats.unexpected) == 2


def test_recv_times_out_with_a_diagnosis():
    _, link = _loop_link()
    with pytest.raises(NoResponseError) as e:
        link.recv(FlashOp.NOP, 0.05)
    assert "nothing came back at all" in e.value.hint


def test_diagnosis_recognises_text_from_running_firmware():
    port, link = _loop_link()
    port.write(b"[MaixPy] init end\r\n>>> ")
    with pytest.raises(NoResponseError) as e:
        link.recv(FlashOp.NOP, 0.05)
    assert "running its firmware" in e.value.hint and "MaixPy" in e.value.hint


def test_scaled_timeout_grows_with_size_and_has_a_floor():
    assert scaled_timeout(0, 40) == 3.0
    assert scaled_timeout(1 << 20, 40, 115200) > scaled_timeout(1 << 16, 40, 115200) > 3.0


def test_kflash_chunks_end_on_64k_boundaries():
    s2 = KflashStage2(None, "kflash-1.1.6")  # type: ignore[arg-type]
    chunks = s2._chunks(0x30F000, bytes(0x25000))
    assert [(a, len(d)) for a, d in chunks] == [
        (0x30F000, 0x1000),
        (0x310000, 0x10000),
        (0x320000, 0x10000),
        (0x330000, 0x4000),
    ]
    generic = KflashStage2(None, "kflash-compatible")  # type: ignore[arg-type]
    assert CAP_WRITE in generic.capabilities and CAP_ERASE not in generic.capabilities
    (only,) = generic._chunks(0x1000, b"\x01" * 10)
    assert only == (0x1000, b"\x01" * 10 + b"\xff" * 4086)  # padded with erased bytes
    with pytest.raises(InputError, match="4 KiB-aligned"):
        generic._chunks(0x1001, b"x")


# --- reset sequences ------------------------------------------------------------------


def test_parse_sequence_and_errors():
    steps = reset.parse_sequence("D0 R0 W0.1|R1,W0.1 R0 D1")
    assert reset.format_sequence(steps) == "D0 R0 W0.1 R1 W0.1 R0 D1"
    with pytest.raises(InputError, match="'X1'"):
        reset.parse_sequence("D0 X1")
    with pytest.raises(InputError, match="longer than 10 s"):
        reset.parse_sequence("W11")


def test_board_wirings_come_from_the_layout_data():
    dan = reset.plans_for(boards.get_board("maix-bit"))
    assert [p.name for p in dan] == ["dan"]
    # dan: RTS pulses RESET, then DTR (BOOT) is asserted after RTS is released
    assert reset.format_sequence(dan[0].enter_isp) == "D0 R0 W0.1 D0 R1 W0.1 R0 D1 W0.1"
    auto = reset.plans_for(boards.get_board("auto"))
    assert [p.name for p in auto][:3] == ["dan", "kd233", "go-cmsis-dap"]
    custom = reset.plans_for(boards.get_board("maix-bit"), "R1 W0.2 R0")
    assert custom[0].name == "custom" and custom[0].run == dan[0].run
    assert reset.plans_for(boards.get_board("maix-bit"), "none")[0].run == ()


def test_quick_reset_round_comes_first_and_keeps_custom_timing():
    from kflashpy.isp.connect import _attempts
    from kflashpy.isp.rom import GREETING_TIMEOUT, QUICK_GREETING_TIMEOUT

    (plan,) = reset.plans_for(boards.get_board("maix-bit"))
    tries = list(_attempts([plan]))
    first_steps, first_timeout = tries[0][1], tries[0][2]
    assert [s.line for s in first_steps] == [s.line for s in plan.enter_isp]
    assert max(s.wait for s in first_steps) == reset.QUICK_HOLD
    assert first_timeout == QUICK_GREETING_TIMEOUT
    assert all(t[1] == plan.enter_isp and t[2] == GREETING_TIMEOUT for t in tries[1:])
    assert len(tries) > 2
    custom = reset.plans_for(boards.get_board("maix-bit"), "R1 W0.2 R0")
    assert custom[0].quick_isp is None
    assert all(t[1] == custom[0].enter_isp for t in _attempts(custom))


def test_a_board_answers_the_quick_reset():
    """On the virtual board the ROM answers the first, quick reset: it greets within
    50 ms of opening the port instead of kflash's 300 ms."""
    from kflashpy.isp.connect import open_device

    dev = open_device("sim://?board=maix-bit", board="maix-bit")
    try:
        assert dev.port.sim_board.now < 0.05
    finally:
        dev.close()


def test_apply_drives_lines_and_waits():
    port = serial.serial_for_url("loop://")
    waited = []
    assert reset.apply(port, reset.parse_sequence("D1 R1 W0.25 R0"), waited.append)
    assert (port.dtr, port.rts, waited) == (True, False, [0.25])


@pytest.mark.skipif(os.name != "posix", reason="pty")
def test_apply_on_a_port_without_control_lines_reports_it():
    master, slave = os.openpty()
    try:
        port = serial.Serial(os.ttyname(slave))
        try:
            port.dtr = True
        except OSError as e:
            assert e.errno in (errno.ENOTTY, errno.EINVAL)
        else:
            pytest.skip("this pty accepts DTR")
        assert reset.apply(port, reset.parse_sequence("D1 W0.01"), lambda s: None) is False
        port.close()
    finally:
        os.close(master)
        os.close(slave)


# --- ports ----------------------------------------------------------------------------


def _info(device, vid, pid, location=None, sn=None):
    return SimpleNamespace(device=device, vid=vid, pid=pid, location=location, serial_number=sn)


def test_choose_port_by_board_usb_ids_and_dual_ftdi(monkeypatch):
    fake = [
        _info("/dev/ttyUSB0", 0x0403, 0x6010, "1-1:1.0", "A1"),
        _info("/dev/ttyUSB1", 0x0403, 0x6010, "1-1:1.1", "A1"),
        _info("/dev/ttyS0", None, None),
    ]
    monkeypatch.setattr(ports.list_ports, "comports", lambda: fake)
    go, why = ports.choose_port(boards.get_board("maix-go"))  # UART on interface 1
    assert go.device == "/dev/ttyUSB1" and "Maix Go" in why
    bit, _ = ports.choose_port(boards.get_board("maix-bit"))  # CH552: interface 0
    assert bit.device == "/dev/ttyUSB0"
    with pytest.raises(PortError, match="several possible ports"):
        ports.choose_port(boards.get_board("generic"))
    # without interface numbers, the second port of a dual bridge is the UART
    fake[:] = [_info("/dev/ttyUSB0", 0x0403, 0x6010), _info("/dev/ttyUSB1", 0x0403, 0x6010)]
    assert ports.choose_port(boards.get_board("maix-go"))[0].device == "/dev/ttyUSB1"


def test_no_port_found_says_what_to_do(monkeypatch):
    monkeypatch.setattr(ports.list_ports, "comports", lambda: [])
    with pytest.raises(PortError) as e:
        ports.choose_port(None)
    assert "--port" in e.value.hint or "driver" in e.value.hint


def test_open_errors_are_port_errors_with_hints():
    with pytest.raises(PortError) as e:
        ports.open_port("/dev/ttyNO_SUCH_PORT")
    assert "does not exist" in e.value.hint
    with pytest.raises(PortError):
        ports.open_port("nosuchscheme://x")


def test_open_releases_dtr_and_rts_before_opening():
    port = ports.open_port("loop://")
    assert (port.dtr, port.rts) == (False, False)
    port.close()


# --- stubs ----------------------------------------------------------------------------


def test_kflash_stub_is_read_from_the_installed_package():
    prog = stubs.load_stub("kflash")
    assert prog.sha256 == stubs.KFLASH_116_SHA256 and len(prog.image) == 16512
    client = prog.make_client(Link(serial.serial_for_url("loop://")))
    assert client.name == "kflash-1.1.6" and CAP_ERASE in client.capabilities


def test_stub_file_and_errors(tmp_path):
    f = tmp_path / "isp.bin"
    f.write_bytes(b"\x13" * 1000)
    prog = stubs.load_stub(str(f))
    assert prog.make_client(None).name == "kflash-compatible"
    with pytest.raises(InputError, match="neither a known stub"):
        stubs.load_stub(str(tmp_path / "missing.bin"))


# --- SRAM images ----------------------------------------------------------------------


def _elf64(segments, entry):
    """A minimal RISC-V ELF64 with PT_LOAD segments [(vaddr, bytes, memsz)]."""
    phoff = 64
    data_off = phoff + 56 * len(segments)
    hdr = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    hdr += struct.pack(
        "<HHIQQQIHHHHHH", 2, 243, 1, entry, phoff, 0, 0, 64, 56, len(segments), 0, 0, 0
    )
    phs, body = b"", b""
    for vaddr, blob, memsz in segments:
        phs += struct.pack(
            "<IIQQQQQQ", 1, 7, data_off + len(body), vaddr, vaddr, len(blob), memsz, 8
        )
        body += blob
    return hdr + phs + body


def test_elf_segments_masked_to_32_bits_and_bss_skipped(tmp_path):
    elf = _elf64(
        [(0xFFFFFFFF80000000, b"\x11" * 100, 100), (0xFFFFFFFF80001000, b"", 4096)],
        0xFFFFFFFF80000000,
    )
    img = parse_elf("app.elf", elf)
    assert img.segments == ((0x80000000, b"\x11" * 100),) and img.entry == 0x80000000
    p = tmp_path / "app.elf"
    p.write_bytes(elf)
    assert load_ram_image(p) == img


def test_elf_outside_sram_and_raw_binaries(tmp_path):
    with pytest.raises(FormatError, match="outside the K210's 6 MiB SRAM"):
        parse_elf("x.elf", _elf64([(0x10000000, b"\x01", 1)], 0x10000000))
    raw = tmp_path / "app.bin"
    raw.write_bytes(b"\x01" * 10)
    img = load_ram_image(raw)
    assert img.segments == ((0x80000000, b"\x01" * 10),) and img.entry == 0x80000000
    good = _elf64([(0x80000000, b"\x01" * 8, 8)], 0x80000000)
    with pytest.raises(FormatError, match="truncated"):
        parse_elf("cut.elf", good[:80])
    with pytest.raises(FormatError, match="little-endian"):
        parse_elf("be.elf", good[:5] + b"\x02" + good[6:])
