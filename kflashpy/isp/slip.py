"""SLIP framing as the K210 ISP protocol uses it (both stages, both directions).

Every frame is sent as ``C0 <escaped payload> C0``; inside it ``C0`` becomes
``DB DC`` and ``DB`` becomes ``DB DD``. The decoder is incremental and forgiving in the
way a noisy line needs: bytes outside a frame are dropped, empty frames (``C0 C0``)
are skipped, and a frame with a bad escape is discarded (counted in
:attr:`SlipDecoder.bad_frames`) instead of delivered half-right.
"""

from __future__ import annotations

END = 0xC0
ESC = 0xDB
ESC_END = 0xDC
ESC_ESC = 0xDD

_ESCAPE = {END: bytes((ESC, ESC_END)), ESC: bytes((ESC, ESC_ESC))}


def encode(payload: bytes) -> bytes:
    """Return ``payload`` as one SLIP frame with delimiters on both ends."""
    body = payload.replace(b"\xdb", b"\xdb\xdd").replace(b"\xc0", b"\xdb\xdc")
    return b"\xc0" + body + b"\xc0"


class SlipDecoder:
    """Incremental SLIP decoder: feed bytes, collect complete frames.

    ``in_frame`` starts False: whatever arrives before the first ``C0`` is line noise
    (or a user firmware talking) and is counted in :attr:`noise_bytes`.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._in_frame = False
        self._escaped = False
        self._broken = False
        self.noise_bytes = 0
        self.bad_frames = 0

    def reset(self) -> None:
        """Forget any partial frame (e.g. after a baud change)."""
        self._buf.clear()
        self._in_frame = self._escaped = self._broken = False

    @property
    def in_frame(self) -> bool:
        """True while a frame has started and not yet ended."""
        return self._in_frame and bool(self._buf or self._escaped)

    def feed(self, data: bytes) -> list[bytes]:
        """Consume ``data``; return the frames it completed (possibly none)."""
        frames: list[bytes] = []
        for b in data:
            if b == END:
                if self._in_frame and self._buf and not self._broken and not self._escaped:
                    frames.append(bytes(self._buf))
                elif self._in_frame and (self._broken or self._escaped):
                    self.bad_frames += 1
                self._buf.clear()
                self._in_frame = True
                self._escaped = self._broken = False
            elif not self._in_frame:
                self.noise_bytes += 1
            elif self._escaped:
                self._escaped = False
                if b == ESC_END:
                    self._buf.append(END)
                elif b == ESC_ESC:
                    self._buf.append(ESC)
                else:
                    self._broken = True
            elif b == ESC:
                self._escaped = True
            else:
                self._buf.append(b)
        return frames
