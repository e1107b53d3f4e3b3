"""Interpreter for kmodel V5 (nncase 1.x): the stackvm module and the K210 module.

A V5 model is a set of modules; the entry function (usually in the ``stackvm``
module) runs CPU work itself and hands KPU work to ``k210`` functions through the
``tensor.call`` instruction. Both are interpreted here, addressing byte buffers per
memory location as the nncase runtime does: ``input``/``output`` pools of the running
function, the module's ``.rdata`` and ``data`` pool, and the 2 MiB KPU RAM.

The stackvm numbering changed between nncase 1.x releases and files do not record
their release: the code is decoded with the numbering of the release that wrote it,
told from the code itself (:func:`kflashpy.model.stackvm.guess_release`) or named by
the caller. A file is called damaged only when no release's numbering reads it; an
instruction without a handler is refused at load, naming it and the release.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import FormatError, NotImplementedOpError, UsageError
from ..model.stackvm import (
    RELEASES,
    Instruction,
    ReleaseGuess,
    decode,
    guess_release,
)
from ..model.v5 import (
    KModelV5,
    MemoryRangeV5,
    V5Function,
    V5Module,
    placement_note,
    stackvm_codes,
)
from .kpu import (
    KPU_RAM_SIZE,
    KPU_ROW,
    ConvLayer,
    KpuRam,
    TieRules,
    batches,
    check_batches,
    fmap_rows,
    run_conv_in_ram,
)
from .model import (
    DAMAGE_ERRORS,
    DAMAGED_HINT,
    LayerOutput,
    Model,
    TensorSpec,
    check_size,
    check_spec,
    damaged,
)
from .stackvm import DTYPES, Addr, StackVM, strided
from .stackvm_rare import RARE
from .stackvm_tensor import TENSOR as _COMMON

#: every tensor function with a handler
TENSOR = {**_COMMON, **RARE}

LOC_INPUT, LOC_OUTPUT, LOC_RDATA, LOC_DATA, LOC_SHARED, LOC_KPU = 0, 1, 2, 3, 4, 64


class V5Model(Model):
    """A V5 kmodel loaded for host execution (see module docstring)."""

    version = 5

    def __init__(self, parsed: KModelV5, nncase_release: str | None = None) -> None:
        self.parsed = parsed
        self.name = parsed.source
        fn = parsed.entry
        if fn is None:
            raise FormatError(f"{self.name}: no entry function", "the model is corrupt")
        self.inputs = [
            TensorSpec(f"input{i}", tuple(s), self._dtype(mr.datatype))
            for i, (mr, s) in enumerate(zip(fn.inputs, fn.input_shapes, strict=True))
        ]
        self.outputs = [
            TensorSpec(f"output{i}", tuple(s), self._dtype(mr.datatype))
            for i, (mr, s) in enumerate(zip(fn.outputs, fn.output_shapes, strict=True))
        ]
        self._rdata = {}
        #: zeroed KPU RAMs kept between runs (one per concurrent run)
        self._rams: list[KpuRam] = []
        #: which nncase release wrote the file (and how sure that is)
        if nncase_release is not None and nncase_release not in RELEASES:
            raise UsageError(
                f"nncase release {nncase_release!r} is not a 1.x release",
                f"name one of {', '.join(RELEASES)}",
            )
        self.release: ReleaseGuess = guess_release(
            [code for _, _, code in stackvm_codes(parsed)], nncase_release
        )
        #: per stackvm function: its decoded instructions
        self._programs: dict[tuple[int, int], list[Instruction]] = self._decode_all()
        self.notes = [f"written by {self.release.describe()}"]
        self.notes += filter(None, [placement_note(parsed)])
        self._convs: dict[tuple[int, int, int], ConvLayer] = {}
        self._check_memory(fn)
        for mod in parsed.modules:
            sec = mod.section(".rdata")
            self._rdata[mod.index] = (
                np.frombuffer(parsed.view(sec.body), np.uint8).copy()
                if sec and sec.body
                else np.zeros(0, np.uint8)
            )
            if mod.type not in ("stackvm", "k210"):
                raise NotImplementedOpError(
                    f"{self.name}: module {mod.index} has type {mod.type!r}",
                    "the host runtime runs stackvm and k210 modules (K210 models)",
                )
            for fn_ in mod.functions if mod.type == "k210" else ():
                self._check_ranges(mod, fn_)
                for op in fn_.ops or ():
                    if op.opcode == 2:
                        self._convs[(mod.index, fn_.index, op.index)] = ConvLayer.from_tables(
                            op.kpu,
                            np.frombuffer(parsed.view(op.arrays["weights"]), np.uint8),
                            parsed.view(op.arrays["bn"]),
                            parsed.view(op.arrays["act"]),
                            f"{self.name}: k210 function {fn_.index} op {op.index}",
                        )

    def _check_memory(self, entry: V5Function) -> None:
        """Pools within the K210's memory; the entry's tensors inside their pools."""
        for mod in self.parsed.modules:
            where = f"{self.name}: module {mod.index} ({mod.type})"
            for loc, pool_name in ((LOC_DATA, "data"), (LOC_SHARED, "shared")):
                check_size(mod.mempool(loc), where, f"{pool_name} pool", mod.offset)
            for f in mod.functions:
                fwhere = f"{where} function {f.index}"
                check_size(f.input_pool_size, fwhere, "input_pool_size", f.offset)
                check_size(f.output_pool_size, fwhere, "output_pool_size", f.offset)
        pools = {LOC_INPUT: entry.input_pool_size, LOC_OUTPUT: entry.output_pool_size}
        for kind, specs, ranges in (
            ("input", self.inputs, entry.inputs),
            ("output", self.outputs, entry.outputs),
        ):
            for spec, mr in zip(specs, ranges, strict=True):
                nbytes = spec.size * spec.dtype.itemsize
                check_spec(spec, f"{self.name}: entry function", entry.offset)
                if mr.location not in pools or (kind == "input" and mr.location != LOC_INPUT):
                    raise FormatError(
                        f"{self.name}: entry function at byte {entry.offset:#x}: {spec.name} "
                        f"is in memory location {mr.location}, not an input/output pool",
                        DAMAGED_HINT,
                    )
                pool = pools[mr.location]  # an output may alias the input (a reshape)
                kind = {LOC_INPUT: "input", LOC_OUTPUT: "output"}[mr.location]
                if mr.start + nbytes > max(pool, 1):
                    raise FormatError(
                        f"{self.name}: entry function at byte {entry.offset:#x}: {spec.name} "
                        f"{spec.shape} ({nbytes} bytes at {mr.start}) does not fit its "
                        f"{pool}-byte {kind} pool",
                        DAMAGED_HINT,
                    )

    def _check_ranges(self, mod: V5Module, fn: V5Function) -> None:
        """Every memory range a K210 op names lies inside the buffer it addresses."""
        sizes = {
            LOC_INPUT: fn.input_pool_size, LOC_OUTPUT: fn.output_pool_size,
            LOC_RDATA: self._rdata[mod.index].size, LOC_DATA: mod.mempool(LOC_DATA),
            LOC_SHARED: mod.mempool(LOC_SHARED), LOC_KPU: KPU_RAM_SIZE,
        }  # fmt: skip
        for op in fn.ops or ():
            where = f"{self.name}: k210 function {fn.index} op {op.index} ({op.name}) at byte {op.offset:#x}"
            if op.opcode in (0, 1):  # upload reads its main-memory input, download writes
                mr = op.params["input" if op.opcode == 0 else "output"]
                shape = tuple(op.params["in_shape"])
                if min(shape) < 0 or math.prod(shape) > mr.size:
                    raise FormatError(
                        f"{where}: field in_shape {shape} needs {math.prod(shape)} bytes, field "
                        f"{'input' if op.opcode == 0 else 'output'} holds {mr.size}",
                        DAMAGED_HINT,
                    )
            for key, mr in op.params.items():
                if isinstance(mr, MemoryRangeV5) and mr.start + mr.size > sizes.get(
                    mr.location, -1
                ):
                    raise FormatError(
                        f"{where}: field {key} ({mr.size} bytes at {mr.start:#x} of "
                        f"location {mr.location}) is outside its "
                        f"{max(sizes.get(mr.location, 0), 0)}-byte buffer",
                        DAMAGED_HINT,
                    )

    def _decode_all(self) -> dict[tuple[int, int], list[Instruction]]:
        """Decode every stackvm function with the release's numbering; refuse a file no
        release reads (damaged) and instructions the host runtime has no handler for."""
        guess, programs = self.release, {}
        codes = stackvm_codes(self.parsed)
        if guess.release is None:
            newest = guess.reasons[RELEASES[-1]]
            mod, fn, _ = codes[newest.function]
            at = mod.section(".text").body.offset + fn.entrypoint + newest.pc
            others = "; ".join(f"{r}: {e.message}" for r, e in guess.reasons.items())
            raise FormatError(
                f"{self.name}: stackvm function {fn.index} at byte {at:#x}: the code is "
                f"inconsistent with every nncase 1.x release (read as nncase "
                f"{RELEASES[-1]}: {newest.message}) [all releases: {others}]",
                DAMAGED_HINT,
            )
        if guess.named and guess.release in guess.reasons:
            why = guess.reasons[guess.release]
            raise FormatError(
                f"{self.name}: stackvm function {codes[why.function][1].index} does not fit "
                f"the numbering of nncase {guess.release}: {why.message}",
                "name the release that wrote the file (nncase_release=, --nncase-release), "
                f"or omit it to detect it (candidates: {', '.join(guess.candidates) or 'none'})",
            )
        missing: dict[str, None] = {}
        for mod, fn, code in codes:
            program = decode(code, guess.release)  # a candidate or the named one: decodes
            programs[(mod.index, fn.index)] = program
            for ins in program:
                if ins.name.startswith("tensor.") and ins.name[7:] not in TENSOR:
                    missing[f"{ins.name} (function {ins.fields['funct']:#04x})"] = None
        if missing:
            raise NotImplementedOpError(
                f"{self.name}: written by {guess.describe()}; the host runtime does not "
                f"support {', '.join(missing)} yet",
                "run it with nncase's own simulator; the list of supported functions is "
                "in docs/runtime.md",
            )
        return programs

    def _dtype(self, code: int) -> np.dtype:
        dt = DTYPES.get(code)
        if dt is None:
            raise NotImplementedOpError(
                f"{self.name}: datatype {code} (bfloat16)", "not used by K210 models"
            )
        return dt

    def _execute(
        self, inputs: list[np.ndarray], rules: TieRules, dump: list[LayerOutput] | None
    ) -> list[np.ndarray]:
        mod = self.parsed.modules[self.parsed.entry_module]
        fn = self.parsed.entry
        assert fn is not None  # __init__ refused a model without one
        in_pool = np.zeros(max(fn.input_pool_size, 1), np.uint8)
        out_pool = np.zeros(max(fn.output_pool_size, 1), np.uint8)
        for mr, arr in zip(fn.inputs, inputs, strict=True):
            raw = np.ascontiguousarray(arr).view(np.uint8).reshape(-1)
            in_pool[mr.start : mr.start + raw.size] = raw
        try:  # a KPU RAM from an earlier run (reset to zeros) or a new one
            ram = self._rams.pop()
        except IndexError:
            ram = KpuRam()
        try:
            _Run(self, rules, dump, ram).call(mod, fn, in_pool, out_pool)
        finally:
            ram.reset()
            self._rams.append(ram)
        outs = []
        for spec, mr in zip(self.outputs, fn.outputs, strict=True):
            pool = in_pool if mr.location == LOC_INPUT else out_pool  # see _check_memory
            raw = pool[mr.start : mr.start + spec.size * spec.dtype.itemsize]
            outs.append(
                raw.view(spec.dtype).astype(spec.dtype.newbyteorder("=")).reshape(spec.shape)
            )
        return outs


class _Run:
    """State of one model run: KPU RAM, module data pools, the per-layer dump."""

    def __init__(
        self, model: V5Model, rules: TieRules, dump: list[LayerOutput] | None, kpu: KpuRam
    ) -> None:
        self.model, self.rules, self.dump = model, rules, dump
        self.kpu = kpu
        self.data = {
            m.index: np.zeros(max(m.mempool(LOC_DATA), 1), np.uint8) for m in model.parsed.modules
        }
        self.shared = {
            m.index: np.zeros(max(m.mempool(LOC_SHARED), 1), np.uint8) for m in model.parsed.modules
        }
        self.step = 0

    def record(self, name: str, arr: np.ndarray) -> None:
        if self.dump is not None:
            self.dump.append(LayerOutput(self.step, name, np.array(arr)))
        self.step += 1

    def call(
        self, mod: V5Module, fn: V5Function, in_pool: np.ndarray, out_pool: np.ndarray
    ) -> None:
        buffers = {
            LOC_INPUT: in_pool,
            LOC_OUTPUT: out_pool,
            LOC_RDATA: self.model._rdata[mod.index],
            LOC_DATA: self.data[mod.index],
            LOC_SHARED: self.shared[mod.index],
            LOC_KPU: self.kpu.data,
        }
        if mod.type == "k210":
            _K210Function(self, mod, fn, buffers).run()
        else:
            text = mod.section(".text")  # absent: no code (as stackvm_codes reads it)
            base = text.body.offset if text is not None and text.body is not None else 0
            assert self.model.release.release is not None  # else _decode_all refused the file
            StackVM(
                self,
                self.model._programs[(mod.index, fn.index)],
                buffers,
                self.model.release.release,
                f"{self.model.name}: stackvm function {fn.index}",
                base + fn.entrypoint,
                TENSOR,
            ).run()


# --- the K210 module ---------------------------------------------------------------


class _K210Function:
    def __init__(self, run: _Run, mod: V5Module, fn: V5Function, buffers: dict) -> None:
        self.run_, self.mod, self.fn, self.buffers = run, mod, fn, buffers

    def buf(self, mr) -> np.ndarray:
        b = self.buffers.get(mr.location)
        if b is None:
            raise ValueError(f"memory location {mr.location} is not one of a K210 function's")
        return b

    def store(self, mr, arr: np.ndarray) -> None:
        """Write an array's bytes at a memory range's start."""
        flat = arr.reshape(-1).view(np.uint8)
        self.buf(mr)[mr.start : mr.start + flat.size] = flat
        if mr.location == LOC_KPU:
            self.run_.kpu.touch(mr.start, mr.start + flat.size)

    def addr(self, mr) -> Addr:
        ram = self.run_.kpu if mr.location == LOC_KPU else None
        return Addr(self.buf(mr), mr.start, ram)

    def run(self) -> None:
        for op in self.fn.ops or ():
            try:
                out = self.execute(op)
            except DAMAGE_ERRORS as e:
                where = f"{self.run_.model.name}: k210 function {self.fn.index} op {op.index} ({op.name})"
                raise damaged(where, op.offset, e) from e
            self.run_.record(f"k210.{op.name}", out)

    def execute(self, op) -> np.ndarray:
        """Run one K210 op; returns its output for the per-layer dump."""
        p = op.params
        if op.opcode == 0:  # kpu_upload: main NCHW u8 -> KPU rows
            n, c, h, w = p["in_shape"]
            check_batches(n, fmap_rows(c, h, w), "in_shape")
            src = self.buf(p["input"])[p["input"].start :][: n * c * h * w].reshape(n, c, h, w)
            for b in range(n):
                self.run_.kpu.write_map(
                    p["output"].start // KPU_ROW + b * fmap_rows(c, h, w), src[b]
                )
            out = src
        elif op.opcode == 1:  # kpu_download: KPU rows -> main NCHW u8
            n, c, h, w = p["in_shape"]
            check_batches(n, fmap_rows(c, h, w), "in_shape")
            row = p["input"].start // KPU_ROW
            out = batches(
                self.run_.kpu.read_map(row + b * fmap_rows(c, h, w), c, h, w) for b in range(n)
            )
            self.store(p["output"], out)
        elif op.opcode == 2:
            layer = self.run_.model._convs[(self.mod.index, self.fn.index, op.index)]
            check_batches(p["batches"], fmap_rows(*layer.in_shape), "batches")
            out = batches(
                run_conv_in_ram(self.run_.kpu, layer, self.run_.rules, b)
                for b in range(max(1, p["batches"]))
            )
            mm = p["main_mem_output"]
            if mm.size:
                self.store(mm, out)
        else:  # copy with shapes and element strides
            dt = DTYPES.get(p["input"].datatype, np.dtype("u1"))
            src = strided(self.addr(p["input"]), dt, p["shape"], p["in_strides"])
            dst = strided(self.addr(p["output"]), dt, p["shape"], p["out_strides"])
            dst[...] = src
            out = src
        return out
