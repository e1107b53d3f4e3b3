"""pyserial URL handler ``sim://``: a virtual K210 board in the same process.

``serial.serial_for_url("sim://?board=maix-bit&flash=board.img")`` finds this module when
``"kflashpy.sim"`` is in ``serial.protocol_handler_packages``. The port behaves like a
USB-serial adapter wired to a K210: DTR/RTS drive RESET and IO16 through the board's
wiring, the baud rate is the host UART's rate (a mismatch with the board's UART gives
garbage), and time is virtual: ``read()`` with a timeout runs the board until enough bytes
arrived or the timeout passed *in virtual seconds*; host sleeps do not advance it.
The board is ``port.sim_board`` (:class:`~kflashpy.sim.board.VirtualBoard`).
URL options: see :class:`~kflashpy.sim.config.BoardConfig` and docs/simulator.md.
"""

from __future__ import annotations

from serial.serialutil import PortNotOpenError, SerialBase, SerialException

from .board import VirtualBoard
from .config import BoardConfig

_MAX_STEP = 2e-3  # longest board step while waiting for a byte that is not yet on the wire
_BLOCKING_LIMIT = 3600.0  # a read without timeout gives up after an hour of virtual time


class Serial(SerialBase):
    """A serial port connected to a :class:`VirtualBoard`."""

    is_open: bool  # set by SerialBase.__init__ and open()/close()

    BAUDRATES = SerialBase.BAUDRATES + (
        750000,
        1000000,
        1500000,
        2000000,
        3000000,
        4000000,
        4500000,
    )

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.sim_board: VirtualBoard | None = None
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ open/close
    def open(self) -> None:
        if self.is_open:
            raise SerialException("Port is already open.")
        if self._port is None:
            raise SerialException("Port must be configured before it can be used.")
        self.sim_board = VirtualBoard(BoardConfig.from_url(self._port))
        self.is_open = True
        self._reconfigure_port()
        if not self._dsrdtr:
            self._update_dtr_state()
        if not self._rtscts:
            self._update_rts_state()

    def close(self) -> None:
        if self.is_open and self.sim_board is not None:
            # a closing port releases DTR and RTS, as the OS does
            self.sim_board.set_dtr(False)
            self.sim_board.set_rts(False)
            self.sim_board.close()
        self.is_open = False

    def _board(self) -> VirtualBoard:
        if not self.is_open or self.sim_board is None:
            raise PortNotOpenError()
        if self.sim_board.faults.disconnected:
            raise SerialException("virtual board disconnected (fault injection)")
        return self.sim_board

    def _reconfigure_port(self) -> None:
        if self.sim_board is not None and self.is_open:
            self.sim_board.set_host_baud(self._baudrate)

    def _update_dtr_state(self) -> None:
        if self.sim_board is not None and self.is_open:
            self.sim_board.set_dtr(bool(self._dtr_state))

    def _update_rts_state(self) -> None:
        if self.sim_board is not None and self.is_open:
            self.sim_board.set_rts(bool(self._rts_state))

    def _update_break_state(self) -> None:
        """A break is not modelled: the K210 ROM and stubs do not react to it."""

    # ------------------------------------------------------------------ data
    @property
    def in_waiting(self) -> int:
        return self._board().host_available()

    @property
    def out_waiting(self) -> int:
        board = self._board()
        return board.to_board.unsent(board.now)

    def write(self, data: bytes) -> int:  # type: ignore[override]
        board = self._board()
        data = bytes(data)
        board.host_write(data)
        return len(data)

    def read(self, size: int = 1) -> bytes:
        """Read up to ``size`` bytes, running the board for at most ``timeout`` virtual s."""
        board = self._board()
        timeout = self._timeout
        if timeout is None:
            timeout = _BLOCKING_LIMIT
        deadline = board.now + timeout
        while board.host_available() < size and board.now < deadline:
            board.run_until_time(min(deadline, self._next_stop(board, size)))
            if board.faults.disconnected:
                break
        return board.host_read(size)

    @staticmethod
    def _next_stop(board: VirtualBoard, size: int) -> float:
        """When to look again: the arrival of the byte we wait for, if it is on the wire."""
        missing = size - board.host_available()
        arrival = board.to_host.arrival_of(missing)
        if arrival is not None:
            return arrival
        return board.now + _MAX_STEP

    def reset_input_buffer(self) -> None:
        self._board().host_discard_input()

    def reset_output_buffer(self) -> None:
        """Drop what was written but has not started on the line yet (a real port drops
        its driver's buffer; a byte already going out still arrives)."""
        board = self._board()
        board.to_board.drop_unsent(board.now)

    @property
    def cts(self) -> bool:
        return False

    @property
    def dsr(self) -> bool:
        return False

    @property
    def ri(self) -> bool:
        return False

    @property
    def cd(self) -> bool:
        return False
