"""Parsing and formatting of flash addresses and sizes.

Users write addresses the way their tools and forum posts do: ``0x300000``,
``3145728``, ``3M``, ``64k``, ``0x10_0000``. One parser serves the CLI, kfpkg
manifests and layout files so the same spelling means the same thing everywhere.
"""

from __future__ import annotations

import re

from .errors import InputError

_SUFFIX = {"": 1, "k": 1024, "m": 1024 * 1024, "g": 1024 * 1024 * 1024}
_NUMBER = re.compile(
    r"^\s*(?P<num>0[xX][0-9a-fA-F_]+|0[bB][01_]+|0[oO][0-7_]+|\d[\d_]*(?:\.\d+)?)"
    r"\s*(?P<suffix>[kKmMgG]?)(?:i?[bB])?\s*$"
)


def parse_int(text: str | int, what: str = "value") -> int:
    """Parse an address or size; ``what`` names the field in the error message.

    Accepts decimal, ``0x`` hex, ``0b``/``0o``, ``_`` separators and the binary
    suffixes ``k``, ``M``, ``G`` (optionally followed by ``B``/``iB``): ``3M`` is
    3 MiB = 3145728, because flash sizes are powers of two. A decimal fraction is
    allowed before a suffix when it names whole bytes, as sizes are printed:
    ``1.5M`` = 1572864.
    """
    if isinstance(text, bool):
        raise InputError(f"{what}: expected a number, got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        m = _NUMBER.match(str(text))
        if not m:
            raise InputError(
                f"{what}: cannot read {text!r} as a number",
                "write it as 0x300000, 3145728, 3M or 64k",
            )
        num, scale = m.group("num").replace("_", ""), _SUFFIX[m.group("suffix").lower()]
        if len(num) > 40:  # no address or size is this long; int() would refuse 4300+
            raise InputError(
                f"{what}: a number of {len(num)} characters is too large",
                "write it as 0x300000, 3145728, 3M or 64k",
            )
        if "." in num:
            whole, frac = num.split(".")
            value, rest = divmod(int(whole + frac) * scale, 10 ** len(frac))
            if rest:
                raise InputError(
                    f"{what}: {text!r} is not a whole number of bytes",
                    "write it in bytes or with a coarser fraction, e.g. 1.5M",
                )
        else:
            value = int(num, 0) * scale
    if value < 0:
        raise InputError(f"{what}: {text!r} is negative")
    return value


def fmt_addr(value: int) -> str:
    """Format a flash address the way K210 docs write them (``0x00300000``)."""
    return f"0x{value:08X}"


def fmt_size(n: int) -> str:
    """Human size: exact bytes plus a binary-prefixed approximation."""
    if n < 1024:
        return f"{n} B"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            v = n / div
            text = f"{v:.0f}" if v == int(v) else f"{v:.2f}"
            return f"{n:,} B ({text} {unit})"
    raise AssertionError("unreachable")
