"""Getting from a port name to a board in ISP mode with a flasher running.

:func:`connect` is the context manager scripts use::

    import kflashpy
    with kflashpy.connect("/dev/ttyUSB0", board="maix-bit", baud=1500000) as dev:
        dev.stage2.write(0x300000, model_bytes)
        dev.reboot()

It opens the port (auto-detected when ``None``), resets the board into the mask-ROM ISP
with the board's wiring (or each known wiring in turn for ``board=None``/``"auto"``),
greets the ROM, uploads the stage-2 flasher, raises the baud rate and initialises the
flash. Each step that fails says why and what to try.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import serial

from ..errors import NoResponseError
from ..progress import Progress, ProgressFn, report
from ..target import boards
from . import reset, timeouts
from .link import Link, TraceFn
from .ports import choose_port, open_port
from .ramimage import RamImage
from .rom import GREETING_TIMEOUT, QUICK_GREETING_TIMEOUT, ROM_BAUD, Rom
from .stage2 import CAP_BAUD, CAP_REBOOT, Stage2, StubProgram
from .stubs import load_stub

#: greetings per reset attempt, and reset rounds (each round tries every candidate wiring)
GREETINGS_PER_RESET = 2
RESET_ROUNDS = 3


@dataclass
class Device:
    """A board in ISP mode on an open port (see :func:`connect`)."""

    port: serial.SerialBase
    link: Link
    board: boards.Board
    port_name: str
    #: why this port was used ("given" or the auto-detection reason)
    port_reason: str
    #: the reset plan that got the ROM to answer (``.name`` is the wiring)
    reset_plan: reset.ResetPlan | None = None
    stub: StubProgram | None = None
    stage2: Stage2 | None = None
    #: things the user should know (auto choices, fallbacks), in order
    notes: list[str] = field(default_factory=list)

    @property
    def baud(self) -> int:
        return int(self.port.baudrate)

    def require_stage2(self) -> Stage2:
        if self.stage2 is None:
            raise NoResponseError("no flasher is running on the board", "connect with a stub")
        return self.stage2

    def reboot(self) -> str:
        """Start the flashed program; returns how ("command", "reset lines" or "manual").

        BOOT is released first, so the ROM boots from flash rather than into ISP again.
        """
        reset.apply(self.port, reset.parse_sequence("D0 R0 W0.01"), self.link.wait)
        if self.stage2 is not None and self.stage2.has(CAP_REBOOT):
            self.stage2.reboot()
            return "command"
        if self.reset_plan is not None and self.reset_plan.run:
            reset.apply(self.port, self.reset_plan.run, self.link.wait)
            return "reset lines"
        self.notes.append("this board cannot be reset from the port: press its RESET button")
        return "manual"

    def close(self) -> None:
        with contextlib.suppress(serial.SerialException, OSError):
            self.port.close()


def resolve_board(board: str | boards.Board | None) -> boards.Board:
    """A board profile by name/alias (None or "auto": detect the wiring)."""
    if isinstance(board, boards.Board):
        return board
    return boards.get_board(board)


def open_device(
    port: str | None = None,
    *,
    board: str | boards.Board | None = None,
    reset_sequence: str | None = None,
    trace: TraceFn | None = None,
) -> Device:
    """Open the port and bring the board into the mask-ROM ISP (greeting answered)."""
    timeouts.check()  # a bad KFLASHPY_TIMEOUT_* fails here, before the port opens
    profile = resolve_board(board)
    plans = reset.plans_for(profile, reset_sequence)  # validates a custom sequence early
    if port:
        name, reason = port, "given"
    else:
        cand, reason = choose_port(profile)
        name = cand.device
        reason = f"auto-detected: {cand.describe()} ({reason})"
    ser = open_port(name, ROM_BAUD)
    dev = Device(ser, Link(ser, trace), profile, name, reason)
    if reason != "given":
        dev.notes.append(f"using {reason}")
    try:
        enter_isp(dev, plans)
    except BaseException:
        dev.close()
        raise
    return dev


def _attempts(
    plans: list[reset.ResetPlan],
) -> Iterator[tuple[reset.ResetPlan, tuple[reset.Step, ...], float]]:
    """(plan, steps, greeting timeout) to try in order: a quick round of every plan
    (short holds, short greeting wait), then rounds with the full sequences."""
    for plan in plans:
        if plan.quick_isp is not None:
            yield plan, plan.quick_isp, QUICK_GREETING_TIMEOUT
    for _ in range(RESET_ROUNDS if len(plans) > 1 else RESET_ROUNDS + 2):
        for plan in plans:
            yield plan, plan.enter_isp, GREETING_TIMEOUT


def enter_isp(dev: Device, plans: list[reset.ResetPlan]) -> None:
    """Reset into ISP with each plan in turn until the ROM answers its greeting."""
    rom = Rom(dev.link)
    no_lines = False
    for plan, steps, timeout in _attempts(plans):
        dev.link.discard_input()
        if not reset.apply(dev.port, steps, dev.link.wait):
            no_lines = True
        if any(rom.greet(timeout) for _ in range(GREETINGS_PER_RESET)):
            dev.reset_plan = plan
            if len(plans) > 1:
                dev.notes.append(f"the board answered with the {plan.name!r} reset wiring")
            return
    tried = ", ".join(dict.fromkeys(p.name for p in plans))
    hint = dev.link.diagnose()
    if no_lines:
        hint = (
            "this port cannot drive DTR/RTS, so the board was not reset: hold BOOT, "
            "press RESET, release BOOT, then retry; " + hint
        )
    raise NoResponseError(
        f"the K210 boot ROM did not answer on {dev.port_name} (reset wiring tried: {tried})",
        hint,
    )


def start_stage2(
    dev: Device,
    stub: str | StubProgram | None = None,
    *,
    baud: int | None = None,
    rom_baud: int | None = None,
    progress: ProgressFn | None = None,
) -> Stage2:
    """Upload and start the flasher, move to ``baud`` and initialise the flash."""
    program = stub if isinstance(stub, StubProgram) else load_stub(stub)
    rom = Rom(dev.link)
    if rom_baud:
        _rom_fast(dev, rom, rom_baud)
    rom.write_memory(program.load_address, program.image, progress, f"flasher {program.name}")
    rom.boot(program.entry)
    dev.link.set_baud(ROM_BAUD)  # every flasher starts at the ROM's default rate
    dev.link.wait(program.start_wait)
    s2 = program.make_client(dev.link)
    s2.greet()
    dev.stub, dev.stage2 = program, s2
    baud = baud or dev.board.default_baud
    if baud != ROM_BAUD:
        if baud > dev.board.max_baud:
            dev.notes.append(
                f"{baud} baud is above the {dev.board.max_baud} known to work on a "
                f"{dev.board.name}; lower -b if the transfer fails"
            )
        if s2.has(CAP_BAUD):
            report(progress, Progress("connect", message=f"switching to {baud} baud"))
            s2.set_baud(baud)
        else:
            dev.notes.append(f"the flasher {s2.name!r} cannot change baud: staying at {ROM_BAUD}")
    s2.flash_init()
    return s2


def _rom_fast(dev: Device, rom: Rom, rom_baud: int) -> None:
    if rom.set_baud(rom_baud, dev.board.rom_baud_factor):
        dev.notes.append(f"boot ROM switched to {rom_baud} baud")
    else:
        dev.notes.append(f"the boot ROM did not follow {rom_baud} baud: uploading at {ROM_BAUD}")


def load_ram(
    dev: Device,
    image: RamImage,
    *,
    rom_baud: int | None = None,
    progress: ProgressFn | None = None,
) -> None:
    """Write a program into SRAM through the ROM and jump to its entry point."""
    rom = Rom(dev.link)
    if rom_baud:
        _rom_fast(dev, rom, rom_baud)
    for n, (address, data) in enumerate(image.segments):
        rom.write_memory(address, data, progress, f"segment {n} @0x{address:08X}")
    reset.apply(dev.port, reset.parse_sequence("D0 R0"), dev.link.wait)  # release BOOT
    rom.boot(image.entry)


@contextmanager
def connect(
    port: str | None = None,
    *,
    board: str | boards.Board | None = None,
    baud: int | None = None,
    stub: str | StubProgram | None = None,
    reset_sequence: str | None = None,
    rom_baud: int | None = None,
    progress: ProgressFn | None = None,
    trace: TraceFn | None = None,
) -> Iterator[Device]:
    """Connect to a board and start a flasher; closes the port on exit.

    Args:
        port: device or pyserial URL (``/dev/ttyUSB0``, ``COM3``, ``sim://...``);
            ``None`` auto-detects a known USB bridge.
        board: board id or alias (``maix-bit``, ``dan``, ``goE``...); ``None``/``"auto"``
            tries the known reset wirings.
        baud: transfer rate after the flasher starts (default: the board's).
        stub: flasher name (``"kflash"``), a file path, or a :class:`StubProgram`.
        reset_sequence: custom DTR/RTS sequence (``"D0 R0 W0.1 R1 W0.1 R0 D1 W0.1"``),
            or ``"none"`` to reset by hand.
        rom_baud: ask the boot ROM for this rate before uploading the flasher.

    Raises:
        PortError, NoResponseError, ProtocolError: with a hint on what to try.
    """
    dev = open_device(port, board=board, reset_sequence=reset_sequence, trace=trace)
    try:
        report(progress, Progress("connect", message=f"connected to {dev.port_name}"))
        for note in dev.notes:  # auto choices (port, wiring): say them as they happen
            report(progress, Progress("connect", message=note))
        start_stage2(dev, stub, baud=baud, rom_baud=rom_baud, progress=progress)
        yield dev
    finally:
        dev.close()


@dataclass
class ConnectOptions:
    """How to reach a board: the one connection parameter of every one-call operation
    (:func:`kflashpy.burn`, ``erase``, ``load_ram``, ``reboot``, ``read_flash``...).

    Fields as :func:`connect` documents them. Those operations also take a plain port
    name or None (auto-detect) where a ``ConnectOptions`` is expected.
    """

    port: str | None = None
    board: str | boards.Board | None = None
    baud: int | None = None
    stub: str | StubProgram | None = None
    reset_sequence: str | None = None
    rom_baud: int | None = None
    trace: TraceFn | None = field(default=None, repr=False)

    @classmethod
    def of(cls, connection: Connection) -> ConnectOptions:
        """``connection`` as options (a port name or None becomes ``ConnectOptions(port)``)."""
        return connection if isinstance(connection, ConnectOptions) else cls(port=connection)

    def connect(
        self, progress: ProgressFn | None = None
    ) -> contextlib.AbstractContextManager[Device]:
        """:func:`connect` with these options: ISP entry, then the flasher running."""
        return connect(
            self.port,
            board=self.board,
            baud=self.baud,
            stub=self.stub,
            reset_sequence=self.reset_sequence,
            rom_baud=self.rom_baud,
            progress=progress,
            trace=self.trace,
        )

    def open_device(self) -> Device:
        """:func:`open_device` with these options: the board in ISP mode, no flasher."""
        return open_device(
            self.port, board=self.board, reset_sequence=self.reset_sequence, trace=self.trace
        )


#: what the one-call operations accept as their connection
Connection = ConnectOptions | str | None
