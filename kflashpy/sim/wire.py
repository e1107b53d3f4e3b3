"""One direction of the serial line between the host and the board, in virtual time.

A byte occupies 10 bit times on the wire (8N1: start bit, 8 data bits, stop bit), so a
sender at ``baud`` puts one byte out every ``10 / baud`` seconds, back to back. The
receiver samples the line at its own rate: when the two rates differ by more than
:data:`BAUD_TOLERANCE` the receiver does not see the bytes that were sent but framing
garbage, roughly ``rate_ratio`` bytes per byte sent, as a real UART does.

Bytes are kept as segments (start time, byte time, bytes) so that a 64 KiB frame costs one
list entry, not 65 536.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass

BITS_PER_BYTE = 10
# Total clock mismatch an 8N1 receiver tolerates before the stop bit is sampled in the
# wrong place (half a bit over ten bits, shared by both ends, with margin).
BAUD_TOLERANCE = 0.035


def baud_mismatch(sender: float, receiver: float) -> bool:
    """True when a receiver at ``receiver`` baud cannot decode a sender at ``sender``."""
    if sender <= 0 or receiver <= 0:
        return True
    return abs(receiver / sender - 1.0) > BAUD_TOLERANCE


@dataclass(slots=True)
class _Segment:
    t0: float  # when the first byte started
    dt: float  # seconds per byte
    baud: float
    data: bytes
    pos: int = 0  # bytes already delivered

    def arrival(self, index: int) -> float:
        """Virtual time at which byte ``index`` has been completely received."""
        return self.t0 + (index + 1) * self.dt

    def started(self, now: float) -> int:
        """How many of its bytes have started on the line (or been delivered) by ``now``."""
        return max(self.pos, min(len(self.data), math.ceil((now - self.t0) / self.dt - 1e-9)))


class Wire:
    """Bytes in flight in one direction, delivered to a receiver at its own baud rate."""

    def __init__(self, seed: int = 0) -> None:
        self._segments: deque[_Segment] = deque()
        self._free_at = 0.0
        # Arrival time of the next undelivered byte (inf when nothing is in flight) and
        # how many are queued, kept up to date because the core checks them on every
        # UART register read and every slice.
        self.next_at = math.inf
        self._pending = 0
        self._rng = random.Random(seed)
        self.bytes_sent = 0
        self.bytes_garbled = 0

    def send(self, data: bytes, now: float, baud: float) -> float:
        """Queue ``data`` to go out at ``baud`` once the line is free; return the end time."""
        # no max() call (docs/simulator.md, "Cheaper device accesses"): once per byte
        # the flasher or a stub writes to its UART
        t0 = now if now >= self._free_at else self._free_at
        if not data:
            return t0
        dt = BITS_PER_BYTE / baud
        self._segments.append(_Segment(t0, dt, float(baud), bytes(data)))
        self._free_at = t0 + dt * len(data)
        self.bytes_sent += len(data)
        self._pending += len(data)
        self._update_next()
        return self._free_at

    @property
    def idle_at(self) -> float:
        """When the last queued byte has left the sender."""
        return self._free_at

    def _update_next(self) -> None:
        if self._segments:
            seg = self._segments[0]
            self.next_at = seg.arrival(seg.pos)
        else:
            self.next_at = math.inf

    def arrival_of(self, count: int) -> float | None:
        """Arrival time of the ``count``-th undelivered byte (1-based), None if not queued."""
        for seg in self._segments:
            left = len(seg.data) - seg.pos
            if count <= left:  # seg.arrival(seg.pos + count - 1) inlined: every slice asks
                return seg.t0 + (seg.pos + count) * seg.dt
            count -= left
        return None

    def arrivals(self, count: int, skip: int = 0) -> list[float]:
        """Arrival times of the ``count`` undelivered bytes after the next ``skip`` (fewer
        if fewer are queued), in one pass over the segments."""
        out: list[float] = []
        for seg in self._segments:
            start = seg.pos + skip
            skip = max(0, start - len(seg.data))
            t0, dt = seg.t0, seg.dt  # _Segment.arrival inlined: a wfi wake asks this
            out += [
                t0 + (i + 1) * dt
                for i in range(start, min(len(seg.data), start + count - len(out)))
            ]
            if len(out) >= count:
                break
        return out

    def pending(self) -> int:
        """Bytes queued and not yet delivered (whether or not they have arrived)."""
        return self._pending

    def unsent(self, now: float) -> int:
        """Queued bytes whose transmission has not started by ``now`` (the adapter's
        output buffer, in a real port's terms)."""
        return sum(len(seg.data) - seg.started(now) for seg in self._segments)

    def drop_unsent(self, now: float) -> int:
        """Drop the queued bytes whose transmission has not started by ``now``, as a
        port's output flush does; a byte already on the line still arrives. Returns how
        many were dropped."""
        dropped, kept = 0, deque[_Segment]()
        for seg in self._segments:
            started = seg.started(now)
            dropped += len(seg.data) - started
            if started > seg.pos:
                seg.data = seg.data[:started]
                kept.append(seg)
        self._segments = kept
        self._pending -= dropped
        self.bytes_sent -= dropped
        self._free_at = (
            kept[-1].t0 + kept[-1].dt * len(kept[-1].data) if kept else min(self._free_at, now)
        )
        self._update_next()
        return dropped

    def clear(self) -> None:
        """Drop everything in flight (the far end was reset or the port flushed)."""
        self._segments.clear()
        self._pending = 0
        self.next_at = math.inf

    def receive(
        self, until: float, receiver_baud: float, limit: int | None = None
    ) -> list[tuple[float, bytes]]:
        """Deliver the bytes that have arrived by ``until``.

        Returns ``(arrival time of the last byte, bytes)`` chunks as the receiver decodes
        them (garbage when the rates do not match). ``limit`` caps how many sent bytes
        are taken; the rest stay in flight.
        """
        out: list[tuple[float, bytes]] = []
        budget = limit if limit is not None else -1
        segments = self._segments
        # a polled receiver calls this once per byte or so: Segment.arrival is inlined
        while segments and budget != 0:
            seg = segments[0]
            pos, t0, dt, data = seg.pos, seg.t0, seg.dt, seg.data
            if t0 + (pos + 1) * dt > until:
                break
            # at least byte ``pos``, which the test above saw arrive: at 60 s and 1.5 Mbaud
            # one ulp of ``until`` is 2e-9 byte times, so the quotient can fall short of
            # ``pos + 1`` where the sum did not, and the loop would never end
            end = int((until - t0) / dt + 1e-9)  # arrived: at least pos + 1, at most all
            if end > len(data):
                end = len(data)
            if end <= pos:
                end = pos + 1
            if 0 < budget < end - pos:
                end = pos + budget
            chunk = data[pos:end]
            t_last = t0 + end * dt
            self._pending -= end - pos
            seg.pos = end
            if budget > 0:
                budget -= len(chunk)
            if end >= len(data):
                segments.popleft()
            # equal rates (every burn) decode cleanly: no call to compare them
            if seg.baud != receiver_baud and baud_mismatch(seg.baud, receiver_baud):
                chunk = self._garble(chunk, receiver_baud / seg.baud)
                self.bytes_garbled += len(chunk)
            if chunk:
                out.append((t_last, chunk))
        # _update_next inlined (an armed UART DMA channel receives at every sync)
        if segments:
            seg = segments[0]
            self.next_at = seg.t0 + (seg.pos + 1) * seg.dt
        else:
            self.next_at = math.inf
        return out

    def _garble(self, chunk: bytes, ratio: float) -> bytes:
        """What a receiver at the wrong rate decodes from ``chunk``: unrelated bytes."""
        count = int(len(chunk) * ratio + self._rng.random())
        return bytes(self._rng.getrandbits(8) for _ in range(count))
