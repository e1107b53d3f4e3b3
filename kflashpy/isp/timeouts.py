"""Every timeout of the serial side, by name, in one table (docs/burning.md, "Timeouts").

The values are seconds of port time (the virtual board's clock on ``sim://``). The
kflashpy flasher client still stretches them by the slowness it measures at start-up
(``KfpyStage2.slowness``); on top of that a user with a slow adapter or a network serial
link can override them from the environment, read when this module is first imported:

* ``KFLASHPY_TIMEOUT_SCALE=3`` multiplies every timeout by 3;
* ``KFLASHPY_TIMEOUT_<NAME>=<seconds>`` sets one (``KFLASHPY_TIMEOUT_CHIP_ERASE=400``);
  the scale applies to it too.

A malformed value leaves the defaults in place and makes the next connection fail with an
:class:`~kflashpy.errors.InputError` naming the variable (:func:`check`), so the CLI reports
it like any other bad input instead of failing while it loads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from ..errors import InputError

#: name -> (default seconds, what it bounds)
DEFAULTS: dict[str, tuple[float, str]] = {
    # mask ROM (stage 1)
    "rom_greeting": (0.5, "the ROM's answer to a greeting after a reset"),
    "rom_quick_greeting": (0.05, "the same after a quick reset (the ROM answers in ~2 ms)"),
    "rom_write": (1.0, "the ROM's answer to a 1 KiB memory write (~90 ms on the wire)"),
    # stage-2 flashers, both families
    "reply": (3.0, "a flasher's answer to an ordinary request; the floor of sized timeouts"),
    "stage2_greeting": (0.3, "a kflash-family flasher's answer to a greeting"),
    "erase_per_mb": (40.0, "erase time per MiB (16 MiB NOR, worst case)"),
    "block_rewrite": (10.0, "a kflash flasher rewriting a 64 KiB block for one write frame"),
    "chip_erase": (200.0, "a whole-chip erase"),
    "flash_init": (10.0, "flash init (may write the status register and wait for it)"),
    # kflashpy's own flasher
    "command": (1.0, "a short kflashpy-flasher command (baud, start, identify, barrier)"),
    "boot_payload": (0.05, "the bootstrap's wait for a LOAD payload beyond its wire time"),
    "ack": (1.5, "a write frame's acknowledgement, plus wire and flash time"),
    "flash_per_frame": (0.6, "erasing and programming one 64 KiB frame, with margin"),
    "hash_per_mb": (1.0, "reading and hashing one MiB on the board, with margin"),
}

ENV_PREFIX = "KFLASHPY_TIMEOUT_"


def _seconds(env: Mapping[str, str], key: str) -> float | None:
    raw = env.get(key)
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InputError(
            f"{key}={raw!r} is not a number of seconds (or a scale) above 0",
            f"unset {key}, or give e.g. {key}=2",
        )
    return value


def load(env: Mapping[str, str] = os.environ) -> dict[str, float]:
    """The timeout table with the environment's overrides applied; raises
    :class:`InputError` for an unknown name or a value that is not a positive number."""
    unknown = sorted(
        k
        for k in env
        if k.startswith(ENV_PREFIX) and k[len(ENV_PREFIX) :].lower() not in (*DEFAULTS, "scale")
    )
    if unknown:
        names = ", ".join(ENV_PREFIX + n.upper() for n in DEFAULTS)
        raise InputError(f"unknown timeout {unknown[0]}", f"known: {ENV_PREFIX}SCALE, {names}")
    scale = _seconds(env, ENV_PREFIX + "SCALE") or 1.0
    table = {}
    for name, (default, _what) in DEFAULTS.items():
        table[name] = (_seconds(env, ENV_PREFIX + name.upper()) or default) * scale
    return table


def _load_at_import() -> tuple[dict[str, float], InputError | None]:
    try:
        return load(), None
    except InputError as e:
        return {name: default for name, (default, _what) in DEFAULTS.items()}, e


#: the table in effect, and what was wrong with the environment (see :func:`check`)
TIMEOUTS, _PROBLEM = _load_at_import()


def check() -> None:
    """Raise the environment's timeout error, if any (called before every connection)."""
    if _PROBLEM is not None:
        raise _PROBLEM
