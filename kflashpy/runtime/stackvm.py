"""Interpreter for the stackvm module of V5 kmodels (nncase 1.x CPU code).

Instructions are decoded once per model with the numbering of the nncase release
that wrote the file (:mod:`kflashpy.model.stackvm`), so every handler reads its
operands by the names nncase's headers give them. Tensor instructions take buffer
addresses from the evaluation stack and shapes/strides from numbered shape registers
set by ``stshape``; scalar instructions work on the stack as nncase's runtime does
(integers as C ``intptr_t``, reals as ``float``). The tensor kernels are in
:mod:`.stackvm_tensor`. Anything without a handler raises
:class:`~kflashpy.errors.NotImplementedOpError` naming the instruction and release.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import NotImplementedOpError
from ..model.stackvm import Instruction, isa
from .kpu import KpuRam
from .model import DAMAGE_ERRORS, damaged

F32 = np.float32
#: nncase datatype_t -> NumPy dtype (bfloat16, 11, has no NumPy type)
DTYPES: dict[int, np.dtype] = {
    0: np.dtype("i1"), 1: np.dtype("<i2"), 2: np.dtype("<i4"), 3: np.dtype("<i8"),
    4: np.dtype("u1"), 5: np.dtype("<u2"), 6: np.dtype("<u4"), 7: np.dtype("<u8"),
    8: np.dtype("<f2"), 9: np.dtype("<f4"), 10: np.dtype("<f8"),
}  # fmt: skip
LOC_RDATA, LOC_KPU = 2, 64
#: ldind/stind/ldelem/stelem suffix -> the C type they move (intptr_t: 64-bit host)
_SCALAR: dict[str, np.dtype] = {
    "i1": np.dtype("i1"), "i2": np.dtype("<i2"), "i4": np.dtype("<i4"), "i": np.dtype("<i8"),
    "u1": np.dtype("u1"), "u2": np.dtype("<u2"), "u4": np.dtype("<u4"), "u": np.dtype("<u8"),
    "r4": np.dtype("<f4"),
}  # fmt: skip
#: instructions nncase's own 1.x runtime refuses (its handlers return not_supported)
_REFUSED_BY_NNCASE = {"ldarg", "ldarg.0", "ldarg.1", "ldarg.2", "ldarg.3", "ldarg.4",
                      "ldarg.5", "call", "ecall", "throw", "break"}  # fmt: skip


@dataclass
class Addr:
    """A stackvm pointer: a byte offset into one of the memory buffers (``ram``: the
    KPU RAM whose ``data`` ``buf`` is, so that accesses are noted for its reset)."""

    buf: np.ndarray
    offset: int
    ram: KpuRam | None = None

    def __add__(self, n: int) -> Addr:
        return Addr(self.buf, self.offset + int(n), self.ram)


def strided(addr: Addr, dtype: np.dtype, shape, strides) -> np.ndarray:
    """Strided typed view of a buffer (strides in elements, as nncase stores them)."""
    shape = tuple(int(s) for s in shape)
    strides = tuple(int(s) for s in strides)
    if len(strides) < len(shape):
        strides = (0,) * (len(shape) - len(strides)) + strides
    strides = strides[len(strides) - len(shape) :] if shape else ()
    if shape and min(shape + strides) < 0:  # nncase's are unsigned
        raise ValueError(f"shape {shape} or strides {strides} has a negative entry")
    n = 1 + sum((d - 1) * s for d, s in zip(shape, strides, strict=True) if d > 0)
    if 0 in shape:
        n = 0
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


def _c_int(value: int) -> int:
    """Wrap to a 64-bit signed integer (the host ``intptr_t`` of the simulator)."""
    return (int(value) + (1 << 63)) % (1 << 64) - (1 << 63)


class StackVM:
    """One call of a stackvm function (see the module docstring).

    ``run`` is the model run (its ``call`` runs a K210 function, ``record`` notes a
    step's output, ``kpu`` is the KPU RAM); ``program`` the decoded instructions;
    ``buffers`` maps memory locations to byte arrays; ``where`` names the function
    and ``text_offset`` is its code's position in the file, both for errors.
    """

    def __init__(
        self, run, program: list[Instruction], buffers: dict, release: str, where: str,
        text_offset: int, tensor: dict,
    ) -> None:  # fmt: skip
        # tensor: the tensor functions' handlers by name (stackvm_tensor.TENSOR), given by
        # the caller because they are written against this interpreter
        self.run_, self.program, self.buffers, self.tensor = run, program, buffers, tensor
        self.release, self.where, self.text_offset = release, where, text_offset
        self.stack: list = []
        self.shapes: dict[int, tuple[int, ...]] = {}
        self.paddings: dict[int, list[tuple[int, int, int]]] = {}
        self.ins: Instruction | None = None

    def fail(self, what: str) -> NotImplementedOpError:
        ins = self.ins
        at = f" at byte {ins.pc} of" if ins else " in"
        return NotImplementedOpError(
            f"{self.where}: {what}{at} the function (file written by nncase {self.release}) "
            "is not supported by the host runtime",
            "report it with the model attached",
        )

    # --- the evaluation stack ---------------------------------------------------------
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
        """(before, after, interior); nncase 1.0 pushes no interior."""
        interior = self.pop_int() if isa(self.release).padding_values == 3 else 0
        after, before = self.pop_int(), self.pop_int()
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

    def dtype(self, code: int) -> np.dtype:
        dt = DTYPES.get(code)
        if dt is None:
            raise self.fail(f"datatype {code} (bfloat16)")
        return dt

    # --- tensor helpers -----------------------------------------------------------------
    def view(self, addr: Addr, dt, rshape: int, rstride: int) -> np.ndarray:
        dtype = dt if isinstance(dt, np.dtype) else self.dtype(dt)
        return strided(addr, dtype, self.shape(rshape), self.shape(rstride))

    def out(self, addr: Addr, value: np.ndarray, dt, rstride: int) -> np.ndarray:
        """Write ``value`` at ``addr`` with the strides in register ``rstride``."""
        dtype = dt if isinstance(dt, np.dtype) else self.dtype(dt)
        target = strided(addr, dtype, value.shape, self.shape(rstride))
        target[...] = value
        return value

    # --- the interpreter ----------------------------------------------------------------
    def run(self) -> None:
        try:
            self._interpret()
        except DAMAGE_ERRORS as e:
            ins = self.ins
            assert ins is not None  # damage is only found while running an instruction
            where = f"{self.where} instruction {ins.name} (byte {ins.pc} of the function)"
            raise damaged(where, self.text_offset + ins.pc, e) from e

    def _interpret(self) -> None:
        program = self.program
        index = {ins.pc: i for i, ins in enumerate(program)}
        i, n = 0, len(program)
        while i < n:
            ins = self.ins = program[i]
            name, f = ins.name, ins.fields
            i += 1
            if name.startswith("tensor."):
                handler = self.tensor.get(name[7:])
                if handler is None:
                    raise self.fail(f"{name} (tensor function {f['funct']:#04x})")
                self.run_.record(*handler(self, f))
            elif name == "ret":
                return
            elif name.startswith("br"):
                taken = name == "br" or (bool(self._truth()) == (name == "br.true"))
                if taken:
                    target = index.get(ins.next_pc + f["target"])
                    if target is None:
                        raise ValueError(
                            f"branch to byte {ins.next_pc + f['target']}, not an instruction"
                        )
                    i = target
            else:
                self._scalar(name, f)

    def _truth(self) -> int:
        v = self.pop()
        return v.offset + 1 if isinstance(v, Addr) else v

    def _scalar(self, name: str, f: dict) -> None:
        """Every non-tensor, non-branch instruction."""
        push = self.stack.append
        if name == "nop":
            return
        if name in ("ldc.i4", "ldc.r4"):
            push(F32(f["imm"]) if name == "ldc.r4" else f["imm"])
        elif name in ("ldc.i4.0", "ldc.i4.1", "ldnull"):
            push(1 if name == "ldc.i4.1" else 0)
        elif name == "lea.buffer":
            loc = f["location"]
            buf = self.buffers.get(loc)
            if buf is None:
                raise self.fail(f"lea.buffer of memory location {loc}")
            push(Addr(buf, f["offset"], self.run_.kpu if loc == LOC_KPU else None))
        elif name == "dup":
            v = self.pop()
            self.stack += (v, v)
        elif name == "pop":
            self.pop()
        elif name == "stshape":
            self.shapes[f["rshape"]] = tuple(self.pop_int() for _ in range(f["rank"]))[::-1]
        elif name == "stpaddings":
            pads = [self.pop_padding() for _ in range(f["rank"])][::-1]
            self.paddings[f["rpaddings"]] = pads
        elif name.startswith(("ldind.", "stind.", "ldelem.", "stelem.")):
            self._memory(name)
        elif name in _ARITH or name in _COMPARE:
            self._binary(name)
        elif name in ("neg", "not"):
            v = self.pop_num()
            push(-v if name == "neg" else _c_int(~int(v)))
        elif name.startswith("conv."):
            self._convert(name[5:])
        elif name in _REFUSED_BY_NNCASE:
            raise self.fail(f"{name} (nncase's own runtime refuses it too)")
        else:  # lea.gp (the only other opcode)
            raise self.fail(
                f"{name} (general register {f['gpid']}: nothing in nncase 1.x sets these "
                "registers, so the address it pushes is undefined)"
            )

    def _memory(self, name: str) -> None:
        kind, suffix = name.split(".")
        bf16 = suffix == "br2"
        dtype = np.dtype("<u2") if bf16 else _SCALAR[suffix]
        value = self.pop_num() if kind.startswith("st") else None
        index = self.pop_int() if kind.endswith("elem") else 0
        addr = self.pop_addr() + index * dtype.itemsize
        cell = strided(addr, dtype, (), ())
        if value is None:
            loaded = _from_bfloat16(int(cell)) if bf16 else cell
            self.stack.append(F32(loaded) if bf16 or dtype.kind == "f" else int(cell))
        elif bf16:
            cell[...] = _round_to_bfloat16(_as_real(value))
        elif dtype.kind == "f":
            cell[...] = _as_real(value)
        elif isinstance(value, np.floating):
            # nncase stores the union's integer: a real's float bits fill its low half,
            # the high half is undefined
            if dtype.itemsize == 8:
                raise self.fail(f"{name} of a real value (its upper 32 bits are undefined)")
            cell[...] = _wrap(int(np.array([value], F32).view("<u4")[0]), dtype)
        else:
            cell[...] = _wrap(int(value), dtype)

    def _binary(self, name: str) -> None:
        b, a = self.pop(), self.pop()
        if isinstance(a, Addr):  # pointer arithmetic: an address plus/minus a byte count
            if name not in ("add", "sub") or isinstance(b, Addr):
                raise self.fail(f"{name} of an address")
            self.stack.append(a + (b if name == "add" else -b))
            return
        if isinstance(b, Addr):
            raise self.fail(f"{name} of an address")
        real = isinstance(a, np.floating)
        unsigned = name.endswith(".u")
        op = name[:-2] if unsigned else name
        if op in _COMPARE:
            if not real and unsigned:
                a, b = int(a) % (1 << 64), int(b) % (1 << 64)
            self.stack.append(int(_COMPARE[op](a, b)))
            return
        if op in ("and", "or", "xor", "shl", "shr"):
            a, b = int(a), int(b)
            if op == "shr" and not unsigned:
                self.stack.append(_c_int(a >> (b & 63)))
            else:
                ua, ub = a % (1 << 64), b % (1 << 64)
                self.stack.append(_c_int(_ARITH[op](ua, ub)))
            return
        if real:
            with np.errstate(all="ignore"):
                self.stack.append(F32(_ARITH[op](F32(a), F32(b))))
            return
        a, b = int(a), int(b)
        if unsigned:
            a, b = a % (1 << 64), b % (1 << 64)
        if op in ("div", "rem") and b == 0:
            raise ValueError(f"{name}: integer division by zero")
        self.stack.append(_c_int(_ARITH[op](a, b)))

    def _convert(self, suffix: str) -> None:
        v = self.pop_num()
        if suffix == "r4":
            self.stack.append(F32(v))
            return
        if suffix == "br2":  # (bfloat16)x truncates the float, then is pushed as a float
            self.stack.append(_from_bfloat16(_truncate_to_bfloat16(F32(v))))
            return
        dtype = _SCALAR[suffix]
        if isinstance(v, np.floating):
            if not np.isfinite(v):
                raise ValueError(f"conv.{suffix} of {v}")
            v = int(v)  # C truncates toward zero
        self.stack.append(_wrap(int(v), dtype))


_BF16_NAN = 0x7FC0


def _as_real(value) -> np.float32:
    """A stack entry read as a float, as nncase's ``as_r`` reads its union: an integer
    entry gives the float whose bits are its low 32 bits."""
    if isinstance(value, np.floating):
        return F32(value)
    return np.array([int(value) & 0xFFFFFFFF], "<u4").view(F32)[0]


def _from_bfloat16(raw: int) -> np.float32:
    return np.array([raw << 16], "<u4").view(F32)[0]


def _truncate_to_bfloat16(v: np.float32) -> int:
    """nncase's bfloat16(float): the upper 16 bits (a NaN becomes the quiet NaN)."""
    return _BF16_NAN if np.isnan(v) else int(np.array([v], F32).view("<u4")[0]) >> 16


def _round_to_bfloat16(v: np.float32) -> int:
    """nncase's round_to_bfloat16: round to nearest, ties to even, on the bits."""
    if np.isnan(v):
        return _BF16_NAN
    bits = int(np.array([v], F32).view("<u4")[0])
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFFFFFF) >> 16


def _wrap(v: int, dtype: np.dtype) -> int:
    bits = dtype.itemsize * 8
    v %= 1 << bits
    return v - (1 << bits) if dtype.kind == "i" and v >= 1 << (bits - 1) else v


def _c_div(a, b):
    """C integer division (toward zero); float division for reals."""
    if isinstance(a, int):
        q = abs(a) // abs(b)
        return q if (a >= 0) == (b >= 0) else -q
    return a / b


#: nncase 1.x's ``rem`` and ``rem.u`` divide (their handlers apply ``/``), so they
#: are reproduced as division, like the runtime they model
_ARITH = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": _c_div, "rem": _c_div, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b, "shl": lambda a, b: a << (b & 63), "shr": lambda a, b: a >> (b & 63),
}  # fmt: skip
_ARITH.update({k + ".u": v for k, v in list(_ARITH.items()) if k in ("div", "rem", "shr")})
_COMPARE = {
    "clt": lambda a, b: a < b, "cle": lambda a, b: a <= b, "ceq": lambda a, b: a == b,
    "cge": lambda a, b: a >= b, "cgt": lambda a, b: a > b, "cne": lambda a, b: a != b,
}  # fmt: skip
_COMPARE.update({k + ".u": v for k, v in list(_COMPARE.items()) if k not in ("ceq", "cne")})
