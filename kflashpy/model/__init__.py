"""kmodel files: recognise, parse, describe, prepare for ``kpu.load_flash``, seal.

* :mod:`.detect` — cheap header recognition (V1/V3/V4/V5, word-swapped, MaixHub opaque).
* :mod:`.v3`, :mod:`.v4`, :mod:`.v5` — strict, bounded parsers into dataclasses; the
  host runtime consumes them (:func:`parse`, ``parse_v3``, ``parse_v4``, ``parse_v5``).
* :mod:`.kpu_args` — the 96-byte KPU layer-argument block decoded into named fields.
* :mod:`.info`, :mod:`.prep`, :mod:`.seal` — ``model info``, ``prep-flash``, sealing.

Importing this package is cheap (detection only); the parsers, which need NumPy, are
loaded on first use. This package never imports the serial, simulator or CLI layers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .detect import KmodelSignature, detect, detect_path, swap_words

if TYPE_CHECKING:
    from .dispatch import KModel, parse
    from .v3 import KModelV3, parse_v3
    from .v4 import KModelV4, parse_v4
    from .v5 import KModelV5, parse_v5

__all__ = [
    "KmodelSignature",
    "detect",
    "detect_path",
    "swap_words",
    "parse",
    "KModel",
    "parse_v3",
    "KModelV3",
    "parse_v4",
    "KModelV4",
    "parse_v5",
    "KModelV5",
]

_LAZY = {
    "parse": "dispatch",
    "KModel": "dispatch",
    "parse_v3": "v3",
    "KModelV3": "v3",
    "parse_v4": "v4",
    "KModelV4": "v4",
    "parse_v5": "v5",
    "KModelV5": "v5",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
