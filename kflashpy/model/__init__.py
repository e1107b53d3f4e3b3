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

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .detect import KmodelSignature, detect, detect_path, swap_words
    from .dispatch import KModel, parse
    from .v3 import KModelV3, parse_v3
    from .v4 import KModelV4, parse_v4
    from .v5 import KModelV5, parse_v5

#: public name -> the module defining it, imported on first use (kflashpy/_lazy.py)
EXPORTS: dict[str, str] = {
    "KmodelSignature": ".detect",
    "detect": ".detect",
    "detect_path": ".detect",
    "swap_words": ".detect",
    "KModel": ".dispatch",
    "parse": ".dispatch",
    "KModelV3": ".v3",
    "parse_v3": ".v3",
    "KModelV4": ".v4",
    "parse_v4": ".v4",
    "KModelV5": ".v5",
    "parse_v5": ".v5",
}

__all__ = [
    "KModel",
    "KModelV3",
    "KModelV4",
    "KModelV5",
    "KmodelSignature",
    "detect",
    "detect_path",
    "parse",
    "parse_v3",
    "parse_v4",
    "parse_v5",
    "swap_words",
]

__getattr__, __dir__ = lazy_exports(__name__, EXPORTS, globals())

# detection is cheap and ``detect`` is also its module's name: bind the detection names now,
# or importing ``kflashpy.model.detect`` later would leave the module where the function is
from .detect import KmodelSignature, detect, detect_path, swap_words  # noqa: E402
