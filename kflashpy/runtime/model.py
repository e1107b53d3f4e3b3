"""The interpreter-independent part of a loaded model: tensor specs, options, checks."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError, InputError, UsageError
from .kpu import TieRules


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output: ``name``, NCHW ``shape`` and NumPy ``dtype``."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def size(self) -> int:
        return math.prod(self.shape)


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


#: What NumPy and the interpreters raise when a damaged model's fields do not fit
#: together (a shape against a buffer size, an axis, a table index): an op that raises
#: one of these is reported as a corrupt model naming the op. TypeError, AttributeError
#: and the rest are left alone, so that a bug in the runtime still surfaces as one.
DAMAGE_ERRORS = (ValueError, IndexError, KeyError, ZeroDivisionError, OverflowError)

#: the largest memory pool, tensor or op result a model may ask for: the K210 has
#: 8 MiB of SRAM, so anything above this is a damaged count (and would only exhaust
#: the host's memory)
MAX_BYTES = 16 << 20

DAMAGED_HINT = "the kmodel is damaged or was not written by nncase: re-export or re-download it"


def damaged(where: str, offset: int, e: Exception) -> FormatError:
    """FormatError for an op whose fields do not fit together (``e``: what NumPy said)."""
    return FormatError(f"{where} at byte {offset:#x}: inconsistent fields ({e})", DAMAGED_HINT)


def check_size(nbytes: int, where: str, field: str, offset: int) -> None:
    """Refuse a memory pool, tensor or result larger than :data:`MAX_BYTES`."""
    if not 0 <= nbytes <= MAX_BYTES:
        raise FormatError(
            f"{where} at byte {offset:#x}: {field} needs {nbytes} bytes, more than the K210's memory",
            DAMAGED_HINT,
        )


def check_spec(spec: TensorSpec, where: str, offset: int) -> None:
    """Refuse an input/output shape with a negative dimension or too many bytes (callers
    allocate arrays of the specs' shapes)."""
    if any(d < 0 for d in spec.shape):
        raise FormatError(
            f"{where} at byte {offset:#x}: {spec.name} shape {spec.shape} has a negative dimension",
            DAMAGED_HINT,
        )
    check_size(spec.size * spec.dtype.itemsize, where, f"{spec.name} shape {spec.shape}", offset)


def limit(shape: Sequence[int], what: str) -> None:
    """Refuse (ValueError, located by the op boundary) a result whose shape comes from
    the model's fields and would be larger than :data:`MAX_BYTES` of float32."""
    n = math.prod(int(d) for d in shape)
    if not 0 <= n * 4 <= MAX_BYTES:
        raise ValueError(f"{what} of shape {tuple(int(d) for d in shape)} is too large")


#: a KPU layer with this many multiply-accumulates makes a run cap BLAS at one thread:
#: OpenBLAS splits a GEMM over its threads from 2**18 multiply-adds on (65536 x its
#: default GEMM_MULTITHREAD_THRESHOLD of 4); below that it stays on one thread anyway
BLAS_CAP_MACS = 1 << 18


@functools.cache
def _blas_pools():
    """The BLAS thread pools NumPy loaded (inspecting the process costs ~10 ms: once)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas")


def single_thread_blas(enabled: bool = True):
    """Context that runs BLAS on one thread, restoring its setting afterwards.

    The runtime's matrix products are many and small (a few MFLOP each): on a machine
    whose cores are busy, OpenBLAS's worker threads spin and wait for each other, and
    a YOLO frame took 10x longer with the default thread count than with one. The
    cap applies only around the runtime's own calls, through threadpoolctl (which
    scikit-learn uses for the same purpose); it is process-wide while it lasts, so
    BLAS work on other Python threads during a run is capped too. Costs ~30 us, so
    models whose layers are all below :data:`BLAS_CAP_MACS` skip it.
    """
    return _blas_pools().limit(limits=1) if enabled else contextlib.nullcontext()


class Model:
    """A loaded kmodel ready to run on the host.

    ``inputs``/``outputs`` describe the tensors; :meth:`run` takes one array per input
    and returns one per output (NCHW; uint8 or float32 as MaixPy returns them).
    Options: ``segment`` and ``rounding`` select the KPU tie-breaking rules
    (:class:`~kflashpy.runtime.kpu.TieRules`; defaults follow nncase >= 0.2).
    """

    version: int = 0
    #: facts about how the file is run (V5: the nncase release that wrote it, a model
    #: with no KPU part); ``run`` prints them
    notes: list[str] = []
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    #: the model's KPU layers (key: the interpreter's layer id)
    _convs: dict

    @functools.cached_property
    def _cap_blas(self) -> bool:
        """Whether a run caps BLAS threads (see :func:`single_thread_blas`)."""
        return max((layer.macs for layer in self._convs.values()), default=0) >= BLAS_CAP_MACS

    def run(self, inputs: Sequence[np.ndarray], **options: str) -> list[np.ndarray]:
        """Run the model once; returns the outputs in declaration order."""
        checked, rules = self._check_inputs(inputs), tie_rules(options)
        with single_thread_blas(self._cap_blas):
            return self._execute(checked, rules, None)

    def run_layers(
        self, inputs: Sequence[np.ndarray], **options: str
    ) -> tuple[list[np.ndarray], list[LayerOutput]]:
        """Run once and also return every step's output (for debugging and bisecting)."""
        dump: list[LayerOutput] = []
        checked, rules = self._check_inputs(inputs), tie_rules(options)
        with single_thread_blas(self._cap_blas):
            outs = self._execute(checked, rules, dump)
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
