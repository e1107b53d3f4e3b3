"""The MaixPy raw-REPL driver against the virtual board's MaixPy personality (sim://)."""

from __future__ import annotations

import ast
import base64
import hashlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.maixpy import FLASH_SIZE, connect, make_flash, sim_url

from kflashpy.errors import NoResponseError, PortError, UsageError
from kflashpy.isp.ports import open_port
from kflashpy.maixpy import board as onboard
from kflashpy.maixpy import fs
from kflashpy.maixpy.errors import KpuError, ReplError, board_exception
from kflashpy.maixpy.repl import (
    CONTROL_BYTES,
    MaixPyRepl,
    NoFirmwareError,
    chunks,
    encode_code,
    normalize_output,
    py_bytes,
    py_str,
)


@pytest.fixture
def flash(tmp_path):
    return make_flash(tmp_path, {0x200000: bytes(range(256)) * 64})


# --- pure helpers (property tests) ----------------------------------------------------------


@given(st.binary(max_size=5000), st.integers(1, 3000))
def test_chunks_are_bounded_and_reassemble(data, size):
    parts = chunks(data, size)
    assert b"".join(parts) == data
    assert all(1 <= len(p) <= size for p in parts)
    assert len(parts) == -(-len(data) // size)


def test_chunks_rejects_zero_size():
    with pytest.raises(UsageError):
        chunks(b"abc", 0)


@given(st.binary(max_size=2000))
def test_py_bytes_is_safe_ascii_and_decodes(data):
    expr = py_bytes(data)
    raw = expr.encode("ascii")
    assert not CONTROL_BYTES & set(raw)
    call = ast.parse(expr, mode="eval").body
    assert isinstance(call, ast.Call) and call.func.attr == "a2b_base64"
    assert base64.b64decode(call.args[0].value) == data


@given(st.text(max_size=200))
def test_py_str_round_trips_any_text(text):
    lit = py_str(text)
    assert lit.isascii() and not CONTROL_BYTES & set(lit.encode())
    assert ast.literal_eval(lit) == text


@given(st.text(max_size=300))
def test_encode_code_refuses_exactly_the_control_bytes(code):
    data = code.encode("utf-8")
    if CONTROL_BYTES & set(data):
        with pytest.raises(UsageError, match="control byte"):
            encode_code(code)
    else:
        assert encode_code(code) == data


def test_normalize_output():
    assert normalize_output(b"a\r\nb\r\n") == b"a\nb\n"


def test_board_exception_maps_kpu_codes_and_plain_errors():
    tb = (
        'Traceback (most recent call last):\r\n  File "<stdin>", line 2, in <module>\r\n'
        "ValueError: [MAIXPY]kpu: load error:2006, ERR_NO_MEM\r\n"
    )
    e = board_exception(tb, doing="loading the model")
    assert isinstance(e, KpuError) and e.code == 2006
    assert "ERR_NO_MEM" in e.message and "heap" in e.hint
    plain = board_exception("Traceback...\nNameError: name 'x' isn't defined\n")
    assert type(plain) is ReplError and plain.exc_type == "NameError"
    old = board_exception("ValueError: [MAIXPY]kpu: load error:-2\n")
    assert isinstance(old, KpuError) and old.code == -2 and "update" in old.hint


# --- against the virtual board ---------------------------------------------------------------


def test_exec_eval_and_board_traceback(flash):
    repl = connect(sim_url(flash))
    assert repl.exec_raw("print('a')\nprint(1+2)") == b"a\n3\n"
    assert repl.eval("[1, 'x', b'\\x00']") == [1, "x", b"\x00"]
    with pytest.raises(ReplError) as info:
        repl.exec_raw("x = 1\nraise OSError(5)")
    assert info.value.exc_type == "OSError"
    # the REPL is still usable after a board exception
    assert repl.exec_raw("print(x)") == b"1\n"
    repl.exit_raw()
    assert not repl.in_raw


def test_large_code_goes_through_in_chunks(flash):
    repl = connect(sim_url(flash))
    body = "s = '" + "k" * 9000 + "'\nprint(len(s))"
    assert repl.exec_raw(body) == b"9000\n"


def test_unthrottled_burst_overflows_a_slow_board_and_chunking_fixes_it(flash):
    """A board slower than the line drops bytes past its 2 KiB ring unless paced."""
    url = sim_url(flash, maixpy_rx_us="150")
    code = "s = '" + "k" * 6000 + "'\nprint(len(s))"
    burst = connect(url, chunk_size=1 << 20, chunk_pause=0.0)
    try:
        out = burst.exec_raw(code)
    except (ReplError, NoResponseError):
        out = b"error"
    assert out != b"6000\n"
    burst.port.close()
    paced = connect(url, chunk_size=256, chunk_pause=0.04)
    assert paced.exec_raw(code) == b"6000\n"


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=3000))
def test_files_round_trip_with_hash_check(flash, data):
    repl = connect(sim_url(flash))
    fs.write_file(repl, "/flash/blob.bin", data)
    assert fs.read_file(repl, "/flash/blob.bin") == data
    assert fs.sha256(repl, "/flash/blob.bin") == hashlib.sha256(data).digest()


def test_flash_read_hash_and_info(flash):
    repl = connect(sim_url(flash))
    region = bytes(range(256)) * 64
    assert onboard.flash_sha256(repl, 0x200000, len(region)) == hashlib.sha256(region).digest()
    assert onboard.flash_read(repl, 0x200000 + 100, 5000) == region[100:5100]
    res = onboard.verify_region(repl, 0x200000, region)
    assert res.match
    assert not onboard.verify_region(repl, 0x200001, region).match
    info = onboard.board_info(repl)
    assert info.platform == "MaixPy" and info.kmodel_v4 and info.gc_free > 0


def test_v3_only_firmware_reports_no_v4(flash):
    repl = connect(sim_url(flash, maixpy_v4="0"))
    assert not onboard.board_info(repl).kmodel_v4


def test_looping_boot_py_is_interrupted_with_ctrl_c(flash):
    repl = connect(sim_url(flash, maixpy_boot="loop"))
    assert b"app: running" in bytes(repl.boot_log)
    assert repl.exec_raw("print('clean')") == b"clean\n"


def test_boot_py_that_swallows_ctrl_c_needs_reset(flash):
    url = sim_url(flash, maixpy_boot="trap")
    port = open_port(url)
    repl = MaixPyRepl(port, timeout=2.0)
    with pytest.raises(NoResponseError) as info:
        repl.connect()
    assert "--reset" in info.value.hint
    # reset + Ctrl-C in _boot.py's window gets a clean REPL on the same port
    repl.connect(reset=True)
    assert repl.exec_raw("print(2*21)") == b"42\n"
    # MaixPy's soft reset re-runs boot.py: the driver must still get its prompt back
    repl.exec_raw("y = 5")
    repl.soft_reset()
    with pytest.raises(ReplError, match="NameError"):
        repl.exec_raw("print(y)")
    assert repl.exec_raw("print('after soft reset')") == b"after soft reset\n"


class _UserPressesReset(MaixPyRepl):
    """The user presses RESET right when kflashpy starts waiting for it."""

    def catch_boot_window(self, wait: float = 10.0) -> None:
        self.port.sim_board.reset_to_run()
        super().catch_boot_window(wait)


def test_wait_reset_catches_a_manual_reset(flash):
    repl = _UserPressesReset(open_port(sim_url(flash, maixpy_boot="trap")), timeout=1.0)
    with pytest.raises(NoResponseError):
        repl.connect()
    repl.connect(wait_reset=5.0)
    assert repl.exec_raw("print('ok')") == b"ok\n"


def test_dropped_connection_is_a_clear_error_then_reconnect_works(flash):
    url = sim_url(flash, disconnect="2500")
    repl = connect(url, timeout=2.0)
    with pytest.raises((PortError, NoResponseError)) as info:
        repl.exec_raw("print('" + "x" * 3000 + "')")
    assert info.value.hint
    # a new connection to the board recovers
    again = connect(sim_url(flash), timeout=2.0)
    assert again.exec_raw("print('back')") == b"back\n"


def test_silent_port_times_out_instead_of_hanging(tmp_path):
    # a board whose ROM printed nothing we know: the driver gives up, naming the prompt
    flash = make_flash(tmp_path)
    port = open_port(sim_url(flash, personality="silent"))
    repl = MaixPyRepl(port, timeout=0.5)
    with pytest.raises(NoResponseError, match="raw REPL"):
        repl.connect()
    with pytest.raises(NoResponseError, match="init end"):
        repl.connect(reset=True, boot_wait=1.0)


def test_a_board_without_firmware_is_named_as_such(tmp_path):
    """Erased flash: the ROM's 'boot failed' line, not a looping boot.py, is the cause."""
    blank = tmp_path / "blank.img"
    blank.write_bytes(b"\xff" * FLASH_SIZE)
    repl = MaixPyRepl(open_port(f"sim://?flash={blank}&flash_size=4M"), timeout=0.5)
    with pytest.raises(NoFirmwareError, match="no firmware.*boot failed") as info:
        repl.connect()
    assert "burn MaixPy" in info.value.hint and "boot.py" not in info.value.hint
    with pytest.raises(NoFirmwareError):
        repl.connect(reset=True, boot_wait=1.0)


def test_friendly_repl_runs_a_line_and_raw_mode_comes_back(flash):
    repl = connect(sim_url(flash))
    repl.exit_raw()
    repl._write(b"6*7\r")
    assert b"42" in repl.read_until(b">>> ", 1.0, "friendly prompt")
    repl.enter_raw()
    assert repl.exec_raw("print('raw again')") == b"raw again\n"


def test_bad_personality_option_is_an_input_error(flash):
    from kflashpy.errors import InputError

    with pytest.raises(InputError, match="maixpy_dev"):
        connect(sim_url(flash, maixpy_dev="flip:x"))
    with pytest.raises(InputError, match="unknown MaixPy personality option"):
        connect(sim_url(flash, maixpy_colour="red"))
    with pytest.raises(InputError, match="maixpy_rx_us"):
        connect(sim_url(flash, maixpy_rx_us="0"))


@pytest.mark.parametrize("direction", ["to_board", "to_host"])
def test_corrupted_transfers_never_pass_silently(flash, direction):
    """Flipped bits on the line make put/get fail loudly (hash check), never return junk."""
    from kflashpy.errors import KflashError

    data = bytes(range(256)) * 8
    good = connect(sim_url(flash))
    fs.write_file(good, "/flash/ref.bin", data)
    repl = connect(sim_url(flash, corrupt="2e-3", dir=direction, seed="5"), timeout=1.0)
    failures = 0
    for _ in range(3):
        try:
            assert fs.read_file(repl, "/flash/ref.bin") == data
            fs.write_file(repl, "/flash/copy.bin", data)
        except KflashError:
            failures += 1
            repl.in_raw = False  # re-synchronise on the next call
    assert failures


def test_hard_reset_on_a_port_without_modem_lines_says_to_press_reset(sim_board_url):
    """The REPL's reset goes through the one reset engine: ENOTTY is a clear error."""
    import errno

    from kflashpy.isp import reset

    port = open_port(sim_board_url)

    class NoLines(type(port)):
        def _set(self, value):  # a pty: the ioctl fails with ENOTTY
            raise OSError(errno.ENOTTY, "Inappropriate ioctl for device")

        dtr = property(lambda self: False, _set)
        rts = property(lambda self: False, _set)

    port.__class__ = NoLines
    repl = MaixPyRepl(port, timeout=1.0)
    with pytest.raises(PortError, match="cannot drive DTR/RTS") as info:
        repl.hard_reset(reset.run_sequence("maix-bit"), 1.0)
    assert "--wait-reset" in info.value.hint
