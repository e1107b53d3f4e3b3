"""Host reference runtime: run K210 kmodels (V3, V4, V5) on the host with NumPy.

The KPU arithmetic is bit-exact with the hardware model in docs/runtime.md, "KPU arithmetic" (see
:mod:`.kpu`); CPU ops follow the runtime that executes them on the board, quirks
included. Usage::

    from kflashpy import runtime
    from kflashpy.runtime import inputs
    model = runtime.load("yolo.kmodel")
    x = inputs.from_image("dog.bmp", model.inputs[0].shape)
    (y,) = model.run([x])

Undocumented KPU tie-breaking is selectable per run (``segment=">="``,
``rounding="sdk"``); docs/runtime.md lists the open questions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .kpu import TieRules
    from .loader import load
    from .model import LayerOutput, Model, TensorSpec

#: public name -> the module defining it, imported on first use (kflashpy/_lazy.py)
EXPORTS: dict[str, str] = {
    "load": ".loader",
    "LayerOutput": ".model",
    "Model": ".model",
    "TensorSpec": ".model",
    "TieRules": ".kpu",
}

__all__ = ["LayerOutput", "Model", "TensorSpec", "TieRules", "load"]

__getattr__, __dir__ = lazy_exports(__name__, EXPORTS, globals())
