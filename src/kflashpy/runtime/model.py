"""The interpreter-independent part of a loaded model: tensor specs, options, checks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, UsageError
from .kpu import TieRules


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output: ``name``, NCHW ``shape`` and NumPy ``dtype``."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class LayerOutput:
    """One step's result for per-layer dumps: index, op name and a copy of its output."""

    index: int
    name: str
    array: np.ndarray


def tie_rules(options: dict) -> TieRules:
    """Build the KPU tie-breaking rules from ``run`` keyword options; reject unknown ones."""
    unknown = set(options) - {"segment", "rounding"}
    if unknown:
        raise UsageError(
            f"unknown run option(s): {', '.join(sorted(unknown))}",
            "options are segment ('>' or '>=') and rounding ('nncase' or 'sdk')",
        )
    return TieRules(options.get("segment", ">"), options.get("rounding", "nncase"))


class Model:
    """A loaded kmodel ready to run on the host.

    ``inputs``/``outputs`` describe the tensors; :meth:`run` takes one array per input
    and returns one per output (NCHW; uint8 or float32 as MaixPy returns them).
    Options: ``segment`` and ``rounding`` select the KPU tie-breaking rules
    (:class:`~kflashpy.runtime.kpu.TieRules`; defaults follow nncase >= 0.2).
    """

    version: int = 0
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]

    def run(self, inputs: Sequence[np.ndarray], **options: str) -> list[np.ndarray]:
        """Run the model once; returns the outputs in declaration order."""
        return self._execute(self._check_inputs(inputs), tie_rules(options), None)

    def run_layers(
        self, inputs: Sequence[np.ndarray], **options: str
    ) -> tuple[list[np.ndarray], list[LayerOutput]]:
        """Run once and also return every step's output (for debugging and bisecting)."""
        dump: list[LayerOutput] = []
        outs = self._execute(self._check_inputs(inputs), tie_rules(options), dump)
        return outs, dump

    def _execute(
        self, inputs: list[np.ndarray], rules: TieRules, dump: list[LayerOutput] | None
    ) -> list[np.ndarray]:
        raise NotImplementedError

    def _check_inputs(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(self.inputs):
            raise InputError(
                f"the model has {len(self.inputs)} input(s), {len(inputs)} given",
                "pass one array per model input",
            )
        out = []
        for spec, arr in zip(self.inputs, inputs, strict=True):
            arr = np.asarray(arr)
            if arr.size != spec.size:
                raise InputError(
                    f"input {spec.name!r}: {arr.shape} has {arr.size} elements, "
                    f"the model expects {spec.shape}",
                    "reshape or resize the input to the model's input shape",
                )
            if arr.dtype != spec.dtype:
                if spec.dtype == np.uint8 and arr.dtype.kind == "f":
                    raise InputError(
                        f"input {spec.name!r} is uint8 (raw KPU bytes), a {arr.dtype} array was given",
                        "quantise the input yourself or load an image with kflashpy.runtime.inputs",
                    )
                arr = arr.astype(spec.dtype)
            out.append(np.ascontiguousarray(arr.reshape(spec.shape)))
        return out
