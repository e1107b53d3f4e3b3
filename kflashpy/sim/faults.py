"""Seeded, deterministic fault injection on the serial line of the virtual board.

A :class:`FaultPlan` says what goes wrong: a rate of corrupted bytes (one bit
flipped) and of dropped bytes on either direction, a disconnect after a number of
bytes, a power cut at a virtual time. A :class:`FaultInjector` applies the line
faults to the byte streams; the board applies the power cut itself (it calls
``flash.power_cut(now)`` and stops once ``now >= plan.power_cut_at``).

Determinism: each direction has its own random stream, and the positions of the
faults are drawn as distances between events (geometric gaps), so which bytes are
hit depends only on the seed and on the byte's index in its direction, never on
how the data was split into writes and reads nor on the other direction's
traffic. The same URL therefore reproduces the same failure.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlencode

from ..errors import InputError
from ..units import parse_int

#: accepted ``dir=`` values -> canonical direction set
DIRECTIONS: dict[str, frozenset[str]] = {
    "both": frozenset({"to_board", "to_host"}),
    "board": frozenset({"to_board"}),
    "to_board": frozenset({"to_board"}),
    "host": frozenset({"to_host"}),
    "to_host": frozenset({"to_host"}),
}

#: URL query keys this module reads (the board ignores them, we ignore the others)
QUERY_KEYS = ("corrupt", "drop", "dir", "disconnect", "power_cut", "seed")


@dataclass(frozen=True)
class FaultPlan:
    """What goes wrong, and when. The default plan injects nothing."""

    corrupt_rate: float = 0.0
    drop_rate: float = 0.0
    direction: str = "both"
    #: close the line after this many bytes (both directions counted together)
    disconnect_after: int | None = None
    #: virtual time (s) at which the board loses power
    power_cut_at: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name, rate in (("corrupt", self.corrupt_rate), ("drop", self.drop_rate)):
            if not 0.0 <= rate <= 1.0:
                raise InputError(
                    f"fault rate {name}={rate} is outside 0..1",
                    hint=f"give a probability per byte, e.g. {name}=1e-4",
                )
        if self.direction not in DIRECTIONS:
            raise InputError(
                f"fault direction dir={self.direction!r} is not known",
                hint="use dir=both, dir=board (host to board) or dir=host (board to host)",
            )
        if self.disconnect_after is not None and self.disconnect_after < 0:
            raise InputError(f"disconnect={self.disconnect_after} is negative")
        if self.power_cut_at is not None and not (
            math.isfinite(self.power_cut_at) and self.power_cut_at >= 0
        ):
            raise InputError(
                f"power_cut={self.power_cut_at} is not a time",
                hint="give virtual seconds after board start, e.g. power_cut=2.5",
            )

    @property
    def active(self) -> bool:
        """True when the plan injects anything at all."""
        return bool(
            self.corrupt_rate
            or self.drop_rate
            or self.disconnect_after is not None
            or self.power_cut_at is not None
        )

    def applies_to(self, direction: str) -> bool:
        return direction in DIRECTIONS[self.direction]

    @classmethod
    def from_query(cls, query: Mapping[str, str | list[str]]) -> FaultPlan:
        """Build a plan from URL query parameters (``urllib.parse.parse_qs`` output or a
        plain dict); keys other than :data:`QUERY_KEYS` are left to the board."""

        def get(key: str) -> str | None:
            value = query.get(key)
            if isinstance(value, list):
                value = value[-1] if value else None
            return value

        def number(key: str, convert):  # type: ignore[no-untyped-def]
            text = get(key)
            if text is None or text == "":
                return None
            try:
                return convert(text)
            except (ValueError, InputError):
                raise InputError(
                    f"sim:// parameter {key}={text!r} is not a number",
                    hint="see `kflashpy sim --help` or docs/simulator.md for the fault parameters",
                ) from None

        def count(text: str) -> int:
            return parse_int(text, "disconnect")

        return cls(
            corrupt_rate=number("corrupt", float) or 0.0,
            drop_rate=number("drop", float) or 0.0,
            direction=get("dir") or "both",
            disconnect_after=number("disconnect", count),
            power_cut_at=number("power_cut", float),
            seed=number("seed", count) or 0,
        )

    def to_query(self) -> str:
        """The URL query string that reproduces this plan (empty for no faults)."""
        params: dict[str, str] = {}
        if self.corrupt_rate:
            params["corrupt"] = repr(self.corrupt_rate)
        if self.drop_rate:
            params["drop"] = repr(self.drop_rate)
        if (self.corrupt_rate or self.drop_rate) and self.direction != "both":
            params["dir"] = self.direction
        if self.disconnect_after is not None:
            params["disconnect"] = str(self.disconnect_after)
        if self.power_cut_at is not None:
            params["power_cut"] = repr(self.power_cut_at)
        if self.active and self.seed:
            params["seed"] = str(self.seed)
        return urlencode(params)


class _EventStream:
    """Absolute byte indices of the events of a Bernoulli process of rate ``p``."""

    def __init__(self, rng: random.Random, p: float) -> None:
        self._rng = rng
        self._p = p
        self.next = self._gap(-1)

    def _gap(self, after: int) -> int:
        if self._p <= 0.0:
            return 1 << 62
        if self._p >= 1.0:
            return after + 1
        u = self._rng.random()
        return after + 1 + int(math.log1p(-u) / math.log1p(-self._p))

    def take(self) -> int:
        """Consume the next event; return its index."""
        index = self.next
        self.next = self._gap(index)
        return index


@dataclass
class _Direction:
    corrupt: _EventStream
    drop: _EventStream
    flips: random.Random
    position: int = 0  # bytes of this direction seen so far
    corrupted: int = 0
    dropped: int = 0


@dataclass
class FaultInjector:
    """Apply a :class:`FaultPlan` to the two byte streams of the serial line."""

    plan: FaultPlan = field(default_factory=FaultPlan)

    def __post_init__(self) -> None:
        self._dirs: dict[str, _Direction] = {}
        for name in ("to_board", "to_host"):
            on = self.plan.applies_to(name)
            rng = random.Random(f"{self.plan.seed}:{name}")
            self._dirs[name] = _Direction(
                corrupt=_EventStream(
                    random.Random(rng.getrandbits(64)), self.plan.corrupt_rate * on
                ),
                drop=_EventStream(random.Random(rng.getrandbits(64)), self.plan.drop_rate * on),
                flips=random.Random(rng.getrandbits(64)),
            )
        self.transferred = 0

    @property
    def disconnected(self) -> bool:
        """True once ``disconnect_after`` bytes went over the line: nothing passes any more."""
        limit = self.plan.disconnect_after
        return limit is not None and self.transferred >= limit

    def power_cut_due(self, now: float) -> bool:
        """True when the plan's power cut time has been reached."""
        return self.plan.power_cut_at is not None and now >= self.plan.power_cut_at

    def to_board(self, data: bytes) -> bytes:
        """Bytes the board receives when the host sends ``data``."""
        return self._apply("to_board", data)

    def to_host(self, data: bytes) -> bytes:
        """Bytes the host receives when the board sends ``data``."""
        return self._apply("to_host", data)

    def stats(self) -> dict[str, int | bool]:
        """Counters for the status line and tests."""
        out: dict[str, int | bool] = {"disconnected": self.disconnected}
        for name, d in self._dirs.items():
            out[f"{name}_bytes"] = d.position
            out[f"{name}_corrupted"] = d.corrupted
            out[f"{name}_dropped"] = d.dropped
        return out

    def _apply(self, name: str, data: bytes) -> bytes:
        limit = self.plan.disconnect_after
        if limit is not None:
            room = max(0, limit - self.transferred)
            data = data[:room]
        self.transferred += len(data)
        d = self._dirs[name]
        start, end = d.position, d.position + len(data)
        d.position = end
        if d.corrupt.next >= end and d.drop.next >= end:
            return bytes(data)
        buf = bytearray(data)
        while d.corrupt.next < end:
            i = d.corrupt.take() - start
            buf[i] ^= 1 << d.flips.randrange(8)
            d.corrupted += 1
        drops = []
        while d.drop.next < end:
            drops.append(d.drop.take() - start)
        for i in reversed(drops):
            del buf[i]
        d.dropped += len(drops)
        return bytes(buf)
