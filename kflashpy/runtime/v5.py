"""Interpreter for kmodel V5 (nncase 1.x): the stackvm module and the K210 module.

A V5 model is a set of modules; the entry function (usually in the ``stackvm``
module) runs CPU work itself and hands KPU work to ``k210`` functions through the
``tensor.call`` instruction. Both are interpreted here, addressing byte buffers per
memory location as the nncase runtime does: ``input``/``output`` pools of the running
function, the module's ``.rdata`` and ``data`` pool, and the 2 MiB KPU RAM.

The stackvm instruction set is the nncase 1.9 one (opcode_t / tensor_function_t of
the 1.x branch): instructions are packed little-endian structs; tensor instructions
take buffer addresses from the evaluation stack and shapes/strides from numbered
shape registers set by ``stshape``. Only what K210 models from nncase 1.x use is
implemented; any other instruction raises NotImplementedOpError naming it.
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError, NotImplementedOpError
from ..model.v5 import KModelV5, MemoryRangeV5, V5Function, V5Module
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
    limit,
)
from .ops import nn

F32 = np.float32
#: nncase datatype_t -> NumPy dtype
DTYPES = {
    0: np.dtype("i1"), 1: np.dtype("<i2"), 2: np.dtype("<i4"), 3: np.dtype("<i8"),
    4: np.dtype("u1"), 5: np.dtype("<u2"), 6: np.dtype("<u4"), 7: np.dtype("<u8"),
    8: np.dtype("<f2"), 9: np.dtype("<f4"), 10: np.dtype("<f8"),
}  # fmt: skip
LOC_INPUT, LOC_OUTPUT, LOC_RDATA, LOC_DATA, LOC_SHARED, LOC_KPU = 0, 1, 2, 3, 4, 64

#: binary_op_t / unary_op_t / reduce_op_t of nncase 1.x
BINARY_OPS = {0: "add", 1: "sub", 2: "mul", 3: "div", 4: "mod", 5: "min", 6: "max", 7: "pow"}
UNARY_OPS = {
    0: "abs", 1: "acos", 2: "asin", 3: "ceil", 4: "cos", 5: "exp", 6: "floor", 7: "log",
    8: "neg", 9: "round", 10: "rsqrt", 11: "sin", 12: "sign", 13: "sqrt", 14: "square",
    15: "tanh", 16: "logical_not",
}  # fmt: skip
REDUCE_OPS = {0: "mean", 1: "min", 2: "max", 3: "sum"}


@dataclass
class Addr:
    """A stackvm pointer: a byte offset into one of the memory buffers (``ram``: the
    KPU RAM whose ``data`` ``buf`` is, so that accesses are noted for its reset)."""

    buf: np.ndarray
    offset: int
    ram: KpuRam | None = None

    def __add__(self, n: int) -> Addr:
        return Addr(self.buf, self.offset + int(n), self.ram)


def _view(addr: Addr, dtype: np.dtype, shape, strides) -> np.ndarray:
    """Strided typed view of a buffer (strides in elements, as nncase stores them)."""
    shape = tuple(int(s) for s in shape)
    strides = tuple(int(s) for s in strides)
    if len(strides) < len(shape):
        strides = (0,) * (len(shape) - len(strides)) + strides
    if shape and min(shape + strides) < 0:  # nncase's are unsigned
        raise ValueError(f"shape {shape} or strides {strides} has a negative entry")
    n = 1 + sum((d - 1) * s for d, s in zip(shape, strides, strict=True) if d > 0)
    end = addr.offset + n * dtype.itemsize
    if addr.offset < 0 or end > addr.buf.size:  # located by the op boundary
        raise ValueError(
            f"tensor of shape {shape} at byte {addr.offset} runs past its {addr.buf.size}-byte buffer"
        )
    if addr.ram is not None:
        addr.ram.touch(addr.offset, end)
    return np.ndarray(
        shape,
        dtype,
        buffer=addr.buf,
        offset=addr.offset,
        strides=tuple(s * dtype.itemsize for s in strides),
    )


@functools.cache
def _struct(fmt: str) -> struct.Struct:
    return struct.Struct("<" + fmt)


#: operand formats of the stackvm instructions the interpreter knows (others: none)
_OPERANDS = {0x02: "i", 0x05: "f", 0x17: "BBI", 0x31: "BB", 0x32: "BB", 0x5E: "H"}


def _decode(code: bytes, pc: int) -> tuple[int, tuple, int]:
    """(opcode, operands, pc of what follows) of the instruction at ``pc``; a tensor
    instruction's own fields follow its function number and are read by its handler."""
    r = _Reader(code, pc)
    (op,) = r.take("B")
    args = r.take(_OPERANDS[op]) if op in _OPERANDS else ()
    if op == 0x05:
        args = (F32(args[0]),)
    return op, args, r.pc


#: names of the base instructions the interpreter knows (for error messages)
_OPNAMES = {
    0x00: "nop", 0x02: "ldc.i4", 0x03: "ldc.i4.0", 0x04: "ldc.i4.1", 0x05: "ldc.r4",
    0x17: "lea.buffer", 0x2F: "dup", 0x30: "pop", 0x31: "stshape", 0x32: "stpaddings",
    0x59: "ret",
}  # fmt: skip


def _name(code: bytes, pc: int) -> str:
    """The name of the instruction at ``pc`` (``tensor.<function>`` for tensor ones)."""
    op = code[pc]
    if op == 0x5E and pc + 1 < len(code):
        handler = _TENSOR.get(code[pc + 1])
        return f"tensor.{handler.__name__[3:]}" if handler else f"tensor 0x{code[pc + 1]:02x}"
    return _OPNAMES.get(op, f"0x{op:02x}")


class _Reader:
    """Little-endian field reader over a function's code."""

    def __init__(self, code: bytes, pc: int = 0) -> None:
        self.code, self.pc = code, pc

    def take(self, fmt: str) -> tuple:
        st = _struct(fmt)
        if self.pc + st.size > len(self.code):
            raise FormatError(
                f"stackvm code ends inside an instruction at byte {self.pc}",
                "the model is truncated",
            )
        vals = st.unpack_from(self.code, self.pc)
        self.pc += st.size
        return vals


class V5Model(Model):
    """A V5 kmodel loaded for host execution (see module docstring)."""

    version = 5

    def __init__(self, parsed: KModelV5) -> None:
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
        self._codes: dict[tuple[int, int], bytes] = {}
        #: zeroed KPU RAMs kept between runs (one per concurrent run)
        self._rams: list[KpuRam] = []
        #: per function: pc -> decoded instruction (see _decode)
        self._decoded: dict[tuple[int, int], dict[int, tuple]] = {}
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
            for loc, pool in ((LOC_DATA, "data"), (LOC_SHARED, "shared")):
                check_size(mod.mempool(loc), where, f"{pool} pool", mod.offset)
            for f in mod.functions:
                fwhere = f"{where} function {f.index}"
                check_size(f.input_pool_size, fwhere, "input_pool_size", f.offset)
                check_size(f.output_pool_size, fwhere, "output_pool_size", f.offset)
        for kind, specs, ranges, pool in (
            ("input", self.inputs, entry.inputs, entry.input_pool_size),
            ("output", self.outputs, entry.outputs, entry.output_pool_size),
        ):
            for spec, mr in zip(specs, ranges, strict=True):
                nbytes = spec.size * spec.dtype.itemsize
                check_spec(spec, f"{self.name}: entry function", entry.offset)
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

    def _code(self, mod: V5Module, fn: V5Function) -> bytes:
        """A stackvm function's instructions (sliced out of ``.text`` once)."""
        key = (mod.index, fn.index)
        if key not in self._codes:
            text = mod.section(".text")
            if text is None or text.body is None:
                raise FormatError(
                    f"{self.name}: stackvm module has no .text", "the model is corrupt"
                )
            body = self.parsed.view(text.body)
            self._codes[key] = bytes(body[fn.entrypoint : fn.entrypoint + fn.text_size])
        return self._codes[key]

    def _dtype(self, code: int) -> np.dtype:
        dt = DTYPES.get(code)
        if dt is None:
            raise NotImplementedOpError(f"{self.name}: datatype {code}", "not used by K210 models")
        return dt

    def _execute(
        self, inputs: list[np.ndarray], rules: TieRules, dump: list[LayerOutput] | None
    ) -> list[np.ndarray]:
        mod = self.parsed.modules[self.parsed.entry_module]
        fn = self.parsed.entry
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
            raw = out_pool[mr.start : mr.start + spec.size * spec.dtype.itemsize]
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
            _StackVM(self, mod, fn, buffers).run()


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
            src = _view(self.addr(p["input"]), dt, p["shape"], p["in_strides"])
            dst = _view(self.addr(p["output"]), dt, p["shape"], p["out_strides"])
            dst[...] = src
            out = src
        return out


# --- the stackvm module ---------------------------------------------------------------


class _StackVM:
    def __init__(self, run: _Run, mod: V5Module, fn: V5Function, buffers: dict) -> None:
        self.run_, self.mod, self.fn, self.buffers = run, mod, fn, buffers
        self.code = run.model._code(mod, fn)
        self.stack: list = []
        self.shapes: dict[int, tuple[int, ...]] = {}
        self.paddings: dict[int, list[tuple[int, int, int]]] = {}
        #: byte (in the function) of the instruction running, for error messages
        self.pc = 0

    def fail(self, what: str, pc: int) -> NotImplementedOpError:
        return NotImplementedOpError(
            f"{self.run_.model.name}: stackvm {what} at byte {pc} of function {self.fn.index} "
            "is not implemented by the host runtime",
            "report it with the model attached",
        )

    def pop(self):
        if not self.stack:
            raise ValueError("the evaluation stack is empty (the instruction needs an operand)")
        return self.stack.pop()

    def pop_addr(self) -> Addr:
        v = self.pop()
        if not isinstance(v, Addr):
            raise ValueError(f"expected an address on the evaluation stack, found {v!r}")
        return v

    def pop_num(self):
        """A number (shape value, scalar operand) from the stack, never an address."""
        v = self.pop()
        if isinstance(v, Addr):
            raise ValueError("expected a number on the evaluation stack, found an address")
        return v

    def pop_int(self) -> int:
        return int(self.pop_num())

    def pop_padding(self) -> tuple[int, int, int]:
        interior, after, before = self.pop_int(), self.pop_int(), self.pop_int()
        return before, after, interior

    def shape(self, reg: int) -> tuple[int, ...]:
        """Shape register ``reg`` (set by an earlier stshape)."""
        value = self.shapes.get(reg)
        if value is None:
            raise ValueError(f"shape register {reg} is used before stshape sets it")
        return value

    def padding(self, reg: int) -> list[tuple[int, int, int]]:
        value = self.paddings.get(reg)
        if value is None:
            raise ValueError(f"padding register {reg} is used before stpaddings sets it")
        return value

    def run(self) -> None:
        try:
            self._interpret()
        except DAMAGE_ERRORS as e:
            text = self.mod.section(".text")
            where = (
                f"{self.run_.model.name}: stackvm function {self.fn.index} instruction "
                f"{_name(self.code, self.pc)} (byte {self.pc} of the function)"
            )
            raise damaged(where, text.body.offset + self.fn.entrypoint + self.pc, e) from e

    def _interpret(self) -> None:
        code, end = self.code, len(self.code)
        # instructions are decoded once per model (the code never changes)
        decoded = self.run_.model._decoded.setdefault((self.mod.index, self.fn.index), {})
        pc = 0
        while pc < end:
            self.pc = pc
            ent = decoded.get(pc)
            if ent is None:
                ent = decoded[pc] = _decode(code, pc)
            op, args, nxt = ent
            if op == 0x00:  # nop
                pass
            elif op in (0x02, 0x05):  # ldc.i4, ldc.r4
                self.stack.append(args[0])
            elif op in (0x03, 0x04):
                self.stack.append(op - 0x03)
            elif op == 0x17:  # lea.buffer location, subres, offset
                loc, _sub, off = args
                buf = self.buffers.get(loc)
                if buf is None:
                    raise self.fail(f"lea.buffer of location {loc}", pc)
                self.stack.append(Addr(buf, off, self.run_.kpu if loc == LOC_KPU else None))
            elif op == 0x2F:
                v = self.pop()
                self.stack += (v, v)
            elif op == 0x30:
                self.pop()
            elif op == 0x31:  # stshape rshape, rank
                reg, rank = args
                vals = [self.pop_int() for _ in range(rank)][::-1]
                self.shapes[reg] = tuple(vals)
            elif op == 0x32:  # stpaddings rpaddings, rank
                reg, rank = args
                pads = [self.pop_padding() for _ in range(rank)][::-1]
                self.paddings[reg] = pads
            elif op == 0x59:  # ret
                return
            elif op == 0x5E:
                (funct,) = args
                handler = _TENSOR.get(funct)
                if handler is None:
                    raise self.fail(f"tensor function 0x{funct:02x}", pc)
                r = _Reader(code, nxt)
                name, out = handler(self, r)
                self.run_.record(name, out)
                nxt = r.pc
            else:
                raise self.fail(f"opcode 0x{op:02x}", pc)
            pc = nxt

    # helpers for tensor instructions
    def view(self, addr: Addr, dt: int | np.dtype, rshape: int, rstride: int) -> np.ndarray:
        dtype = dt if isinstance(dt, np.dtype) else self.run_.model._dtype(dt)
        return _view(addr, dtype, self.shape(rshape), self.shape(rstride))

    def out(self, addr: Addr, value: np.ndarray, dt, rstride: int) -> np.ndarray:
        """Write ``value`` at ``addr`` with the strides in register ``rstride``."""
        dtype = dt if isinstance(dt, np.dtype) else self.run_.model._dtype(dt)
        target = _view(addr, dtype, value.shape, self.shape(rstride))
        target[...] = value
        return value


def _t_call(vm: _StackVM, r: _Reader):
    function_id, module_id, num_src, num_dst = r.take("IHBB")
    model = vm.run_.model
    if module_id >= len(model.parsed.modules):
        raise ValueError(f"module_id {module_id}: the model has {len(model.parsed.modules)}")
    mod = model.parsed.modules[module_id]
    if function_id >= len(mod.functions):
        raise ValueError(f"function_id {function_id}: module {module_id} has {len(mod.functions)}")
    if mod.type != "k210":  # nncase's stackvm calls K210 functions (and a loop never ends)
        raise ValueError(f"module_id {module_id} is a {mod.type} module, not a k210 one")
    fn = mod.functions[function_id]

    def pop_tensor():
        rstride, rshape, dt = vm.pop_int(), vm.pop_int(), vm.pop_int()
        addr = vm.pop_addr()
        return _view(addr, model._dtype(dt), vm.shape(rshape), vm.shape(rstride))

    outs = [pop_tensor() for _ in range(num_dst)][::-1]
    ins = [pop_tensor() for _ in range(num_src)][::-1]
    in_pool = np.zeros(max(fn.input_pool_size, 1), np.uint8)
    out_pool = np.zeros(max(fn.output_pool_size, 1), np.uint8)
    for mr, t in zip(fn.inputs, ins, strict=True):
        raw = np.ascontiguousarray(t).view(np.uint8).reshape(-1)
        in_pool[mr.start : mr.start + raw.size] = raw
    vm.run_.call(mod, fn, in_pool, out_pool)
    for mr, t in zip(fn.outputs, outs, strict=True):
        n = t.size * t.dtype.itemsize
        t[...] = out_pool[mr.start : mr.start + n].view(t.dtype).reshape(t.shape)
    return f"call {mod.type}.{function_id}", outs[0] if outs else np.zeros(0)


def _t_dequantize(vm: _StackVM, r: _Reader):
    """y = q*scale + bias in float32 (scale and bias popped from the stack)."""
    in_dt, out_dt, rshape, rs_in, rs_out = r.take("BBBBB")
    bias, scale = F32(vm.pop_num()), F32(vm.pop_num())
    output, inp = vm.pop_addr(), vm.pop_addr()
    q = vm.view(inp, in_dt, rshape, rs_in)
    y = (q.astype(F32) * scale).astype(F32) + bias
    return "dequantize", vm.out(output, y.astype(vm.run_.model._dtype(out_dt)), out_dt, rs_out)


def _t_quantize(vm: _StackVM, r: _Reader):
    """q = saturate(round_half_even(x*scale + bias)) (nncase 1.x quantize)."""
    in_dt, out_dt, rshape, rs_in, rs_out = r.take("BBBBB")
    bias, scale = F32(vm.pop_num()), F32(vm.pop_num())
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, in_dt, rshape, rs_in).astype(F32)
    dt = vm.run_.model._dtype(out_dt)
    info = np.iinfo(dt)
    q = np.clip(np.rint((x * scale).astype(F32) + bias), info.min, info.max).astype(dt)
    return "quantize", vm.out(output, q, out_dt, rs_out)


def _t_copy(vm: _StackVM, r: _Reader):
    dt, rshape, rs_in, rs_out = r.take("BBBB")
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, dt, rshape, rs_in).copy()
    return "copy", vm.out(output, x, dt, rs_out)


def _t_convert(vm: _StackVM, r: _Reader):
    in_dt, out_dt, rshape, rs_in, rs_out = r.take("BBBBB")
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, in_dt, rshape, rs_in)
    return "convert", vm.out(output, x.astype(vm.run_.model._dtype(out_dt)), out_dt, rs_out)


def _t_pad(vm: _StackVM, r: _Reader):
    dt, rshape, rs_in, rs_out, rpad, mode = r.take("BBBBBB")
    value = vm.pop_num()
    output, inp = vm.pop_addr(), vm.pop_addr()
    if mode != 0:
        raise vm.fail(f"tensor.pad mode {mode}", r.pc)
    x = vm.view(inp, dt, rshape, rs_in)
    pads = vm.padding(rpad)
    if any(p[2] for p in pads):
        raise vm.fail("tensor.pad with interior padding", r.pc)
    limit(
        [d + max(0, b) + max(0, a) for d, (b, a, _) in zip(x.shape, pads, strict=False)],
        "padded output",
    )
    crop = tuple(slice(max(0, -b), x.shape[i] - max(0, -a)) for i, (b, a, _) in enumerate(pads))
    y = np.pad(x[crop], [(max(0, b), max(0, a)) for b, a, _ in pads], constant_values=value)
    return "pad", vm.out(output, y, dt, rs_out)


def _t_conv2d(vm: _StackVM, r: _Reader):
    dt, rs, rss, rk, rks, rbs, rds, groups, sh, sw, dh, dw, lo, hi = r.take("B6B5H2f")
    pw, ph = vm.pop_padding(), vm.pop_padding()
    output, bias, weights, inp = vm.pop_addr(), vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, dt, rs, rss)
    w = vm.view(weights, dt, rk, rks)
    b = _view(bias, np.dtype("<f4"), (w.shape[0],), vm.shape(rbs)[-1:])
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    oh = (h + ph[0] + ph[1] - ((kh - 1) * dh + 1)) // sh + 1
    ow = (wd + pw[0] + pw[1] - ((kw - 1) * dw + 1)) // sw + 1
    limit((n, w.shape[0], oh, ow), "output")
    y = nn.conv2d_nchw(x, w, b, groups, (sh, sw), (ph[0], ph[1], pw[0], pw[1]), (dh, dw), (oh, ow))
    return "conv2d", vm.out(output, np.clip(y, F32(lo), F32(hi)).astype(F32), dt, rds)


def _t_matmul(vm: _StackVM, r: _Reader):
    ra, ras, rb, rbs, rd, rds, lo, hi = r.take("6B2f")
    output, bias, b_addr, a_addr = vm.pop_addr(), vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    a = vm.view(a_addr, np.dtype("<f4"), ra, ras)
    b = vm.view(b_addr, np.dtype("<f4"), rb, rbs)
    limit((*a.shape[:-1], b.shape[-1]), "output")
    bias = _view(bias, np.dtype("<f4"), (b.shape[-1],), (1,))
    y = np.clip((a @ b).astype(F32) + bias, F32(lo), F32(hi)).astype(F32)
    return "matmul", vm.out(output, y, np.dtype("<f4"), rds)


def _t_binary(vm: _StackVM, r: _Reader):
    dt, ra, ras, rb, rbs, rd, rds, op, lo, hi = r.take("B6BB2f")
    output, b_addr, a_addr = vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    a = vm.view(a_addr, dt, ra, ras).astype(F32)
    b = vm.view(b_addr, dt, rb, rbs).astype(F32)
    name = BINARY_OPS.get(op)
    if name is None or name == "mod":
        raise vm.fail(f"binary op {op}", r.pc)
    limit(vm.shape(rd), "output")
    y = np.broadcast_to(nn.broadcast_binary(name, a, b), vm.shape(rd))
    return f"binary.{name}", vm.out(output, np.clip(y, F32(lo), F32(hi)).astype(F32), dt, rds)


def _t_unary(vm: _StackVM, r: _Reader):
    dt, rs, rss, rds, op = r.take("BBBBB")
    output, inp = vm.pop_addr(), vm.pop_addr()
    name = UNARY_OPS.get(op)
    if name not in nn.UNARY:
        raise vm.fail(f"unary op {op}", r.pc)
    with np.errstate(all="ignore"):
        y = nn.UNARY[name](vm.view(inp, dt, rs, rss).astype(F32)).astype(F32)
    return f"unary.{name}", vm.out(output, y, dt, rds)


def _t_sigmoid(vm: _StackVM, r: _Reader):
    dt, rs, rss, rds = r.take("BBBB")
    output, inp = vm.pop_addr(), vm.pop_addr()
    return "sigmoid", vm.out(output, nn.logistic(vm.view(inp, dt, rs, rss)), dt, rds)


def _t_softmax(vm: _StackVM, r: _Reader):
    dt, rs, rss, rds, axis, beta = r.take("BBBBif")
    output, inp = vm.pop_addr(), vm.pop_addr()
    return "softmax", vm.out(
        output, nn.softmax(vm.view(inp, dt, rs, rss), axis=axis, beta=beta), dt, rds
    )


def _t_transpose(vm: _StackVM, r: _Reader):
    dt, rs, rss, rds, rperm = r.take("BBBBB")
    output, inp = vm.pop_addr(), vm.pop_addr()
    y = np.ascontiguousarray(vm.view(inp, dt, rs, rss).transpose(vm.shape(rperm)))
    return "transpose", vm.out(output, y, dt, rds)


def _t_slice(vm: _StackVM, r: _Reader):
    dt, rs, rss, rds, rb, re, rst = r.take("7B")
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, dt, rs, rss)
    sl = tuple(
        slice(b, e, s) for b, e, s in zip(vm.shape(rb), vm.shape(re), vm.shape(rst), strict=True)
    )
    return "slice", vm.out(output, np.ascontiguousarray(x[sl]), dt, rds)


def _t_reduce_window2d(vm: _StackVM, r: _Reader):
    dt, op, rs, rss, rds, fh, fw, sh, sw, dh, dw, lo, hi = r.take("BBBBB6H2f")
    pw, ph = vm.pop_padding(), vm.pop_padding()
    output = vm.pop_addr()
    init = vm.pop_num()
    inp = vm.pop_addr()
    if dh != 1 or dw != 1:
        raise vm.fail("reduce_window2d with dilation", r.pc)
    x = vm.view(inp, dt, rs, rss)
    h, w = x.shape[2:]
    oh = (h + ph[0] + ph[1] - fh) // sh + 1
    ow = (w + pw[0] + pw[1] - fw) // sw + 1
    limit((*x.shape[:2], oh, ow), "output")
    mode = REDUCE_OPS.get(op, "?")
    y = nn.pool2d(x.astype(F32), (fh, fw), (sh, sw), (ph[0], ph[1], pw[0], pw[1]), (oh, ow), mode,
                  init=None if mode == "mean" else float(init))  # fmt: skip
    return f"reduce_window2d.{mode}", vm.out(
        output, np.clip(y, F32(lo), F32(hi)).astype(F32), dt, rds
    )


def _t_reduce(vm: _StackVM, r: _Reader):
    dt, rs, rss, rds, op, raxis, keep = r.take("BBBBBB?")
    init = F32(vm.pop_num())
    output, inp = vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, dt, rs, rss).astype(F32)
    axes = tuple(int(a) for a in vm.shape(raxis))
    mode = REDUCE_OPS.get(op)
    if mode in ("sum", "mean"):
        y = x.sum(axis=axes, keepdims=True, dtype=F32) + init
        if mode == "mean":
            y = y / F32(np.prod([x.shape[a] for a in axes]))
    elif mode == "max":
        y = np.maximum(x.max(axis=axes, keepdims=True), init)
    elif mode == "min":
        y = np.minimum(x.min(axis=axes, keepdims=True), init)
    else:
        raise vm.fail(f"reduce op {op}", r.pc)
    if not keep:
        y = y.squeeze(axis=axes)
    return f"reduce.{mode}", vm.out(output, y.astype(F32), dt, rds)


def _t_resize(vm: _StackVM, r: _Reader):
    dt, rs, rss, rds, align, half, mode = r.take("BBBB??B")
    output, inp = vm.pop_addr(), vm.pop_addr()
    out_w, out_h = vm.pop_int(), vm.pop_int()
    if half:
        raise vm.fail("resize_image with half_pixel_centers", r.pc)
    x = vm.view(inp, dt, rs, rss)
    limit((*x.shape[:2], out_h, out_w), "output")
    y = (
        nn.resize_nearest(x, out_h, out_w)
        if mode == 1
        else nn.resize_bilinear(x, out_h, out_w, align)
    )
    return "resize_image", vm.out(output, np.ascontiguousarray(y), dt, rds)


def _t_gather(vm: _StackVM, r: _Reader):
    dt, rs, rd, rss, rds, rind, axis = r.take("7B")
    indices, output, inp = vm.pop_addr(), vm.pop_addr(), vm.pop_addr()
    x = vm.view(inp, dt, rs, rss)
    idx = _view(indices, np.dtype("<i4"), vm.shape(rind), _dense_strides(vm.shape(rind)))
    limit((*x.shape[:axis], *idx.shape, *x.shape[axis + 1 :]), "output")
    return "gather", vm.out(output, np.take(x, idx.astype(np.int64), axis=axis), dt, rds)


def _dense_strides(shape) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= int(d)
    return tuple(reversed(strides))


_TENSOR = {
    0x01: _t_binary, 0x03: _t_call, 0x06: _t_conv2d, 0x08: _t_convert,
    0x09: _t_copy, 0x0B: _t_dequantize, 0x0C: _t_gather, 0x11: _t_matmul,
    0x13: _t_pad, 0x14: _t_quantize, 0x17: _t_reduce, 0x1A: _t_reduce_window2d,
    0x1B: _t_resize, 0x1D: _t_sigmoid, 0x1E: _t_slice, 0x1F: _t_softmax,
    0x24: _t_transpose, 0x26: _t_unary,
}  # fmt: skip
