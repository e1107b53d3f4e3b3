"""What ``kflashpy model info`` reports: structure, memory needs, and where a model loads.

Everything here returns plain JSON-able dicts (the CLI renders them as text or puts
them in the ``--json`` envelope). Memory estimates follow the MaixPy loader facts in
docs/kmodel.md ("RAM needed"):

* ``kpu.load``: the whole model (header + declared bodies) + main working memory.
* ``kpu.load_flash``: main memory + one (single buffer) or two (dual buffer) layer
  buffers of ``largest body + 256`` bytes + a 4352-byte header buffer + 192-byte context.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from ..errors import FormatError
from ._binary import Op
from .detect import KmodelSignature, detect
from .dispatch import KModel, parse, unswap
from .kpu_args import KPU_RAM_SIZE, KpuLayerArgs
from .stackvm import guess_release
from .v3 import ACTIVATIONS, KModelV3
from .v4 import BINARY_OPS, REDUCE_OPS, UNARY_OPS, KModelV4
from .v5 import K210Op, KModelV5, placement_note, stackvm_codes

__all__ = [
    "LOAD_FLASH_HEADER_BUFFER",
    "LOAD_FLASH_CONTEXT",
    "LOAD_FLASH_MAX_HEADER",
    "ram_estimates",
    "layer_rows",
    "firmware_verdicts",
    "model_info",
]

#: header buffer kpu.load_flash allocates (and reads the header into): 4352 bytes
LOAD_FLASH_HEADER_BUFFER = 4352
#: bytes of the first flash read: everything before the first body must fit
LOAD_FLASH_MAX_HEADER = 4096
LOAD_FLASH_CONTEXT = 192
#: each load_flash layer buffer is the largest body + this (keeps file_offset % 256)
LOAD_FLASH_BUFFER_SLACK = 256
PRODUCERS = {
    1: "Kendryte model compiler (pre-nncase, 2018)",
    3: "nncase v0.1 (ncc -o k210model) or Sipeed Maix-EMC",
    4: "nncase v0.2.x (ncc compile -t k210)",
    5: "nncase v1.x (Python wheel / ncc 1.x)",
}


def _chw(shape3: tuple[int, int, int]) -> tuple[int, ...]:
    """V3 shapes are stored (width, height, channels); show them as (C, H, W)."""
    w, h, c = shape3
    return (c, h, w)


def _fused(rng: tuple[float, float] | None) -> str:
    if rng is None:
        return ""
    lo, hi = rng
    big = 3.0e38
    if lo <= -big and hi >= big:
        return "none"
    if lo == 0 and hi >= big:
        return "relu"
    if lo == 0 and hi == 6:
        return "relu6"
    return f"clamp[{lo:g},{hi:g}]"


def _kpu_cells(args: KpuLayerArgs) -> dict[str, Any]:
    """Columns shared by every KPU convolution, whatever the container version."""
    (src, in_b), (dst, out_b) = args.kpu_ram_ranges()
    kernel = f"{args.kernel_size}x{args.kernel_size}" if args.kernel_size else "?"
    return {
        "device": "KPU",
        "in_shape": list(args.in_shape),
        "out_shape": list(args.out_shape),
        "kernel": kernel + (" dw" if args.depthwise else ""),
        "pool": args.pool_name,
        "activation": "table",
        "kpu_ram_end": max(src + in_b, dst + out_b),
    }


def _v3_shapes(op: Op) -> tuple[Any, Any]:
    p = op.params
    t = op.opcode
    if t in (8, 9):
        return _chw(p["in_shape"]), _chw(p["out_shape"])
    if t in (22, 23):
        c, h, w = _chw(p["in_shape"])
        return (c, h, w), (c, p["out_height"], p["out_width"])
    if t in (20, 21):
        c, h, w = _chw(p["shape"])
        return (c, h, w), (c * h * w,)
    if t == 18:
        return (p["in_channels"],), (p["out_channels"],)
    if t == 24:
        return (p["channels"], p["channel_size"]), (p["channels"], p["channel_size"])
    if t == 5:
        return (p["channels"], p["kernel_size"]), (p["channels"],)
    if t == 10241:
        return (p["channels"],), (p["channels"], 4, 4)
    if t == 10242:
        return (p["channels"], 4, 4), (p["channels"],)
    if t == 10243:
        chw = (p["channels"], p["height"], p["width"])
        return chw, chw
    if t in (16, 17):
        return None, (sum(size for _start, size in p["inputs"]),)
    n = p.get("count", p.get("channels"))
    return ((n,), (n,)) if n is not None else (None, None)


def _v3_row(op: Op) -> dict[str, Any]:
    row: dict[str, Any] = {"device": "CPU", "kernel": "", "pool": "", "activation": ""}
    if op.kpu is not None:
        row.update(_kpu_cells(op.kpu))
        row["main_mem_out"] = bool(op.params["flags"] & 1)
    elif op.params:
        ins, outs = _v3_shapes(op)
        row["in_shape"] = list(ins) if ins else None
        row["out_shape"] = list(outs) if outs else None
        if "act" in op.params:
            row["activation"] = ACTIVATIONS.get(op.params["act"], str(op.params["act"]))
        if op.opcode in (8, 9):
            row["kernel"] = f"{op.kernel_height}x{op.kernel_width}"
            row["pool"] = f"{'max' if op.opcode == 8 else 'avg'} s{op.stride_height}"
        if op.opcode == 10241:
            row["device"] = "CPU->KPU"
            row["kpu_ram_end"] = op.kpu_mem_out_address * 64 + 64 * 4 * -(-op.channels // 4)
        if op.opcode == 10243:
            row["device"] = "CPU->KPU"
    else:
        row["note"] = "body layout not documented; not decoded"
    return row


def _v4_row(op: Op) -> dict[str, Any]:
    row: dict[str, Any] = {"device": "CPU", "kernel": "", "pool": "", "activation": ""}
    p = op.params
    if op.kpu is not None:
        row.update(_kpu_cells(op.kpu))
        row["main_mem_out"] = p["main_mem_output"].size != 0
        return row
    ins = p.get("in_shape") or p.get("in_a_shape")
    outs = p.get("out_shape")
    if "a_rows" in p:  # matmul: (rows, cols) x (cols, b_cols)
        ins, outs = (p["a_rows"], p["a_cols"]), (p["a_rows"], p["b_cols"])
    out_mr = p.get("output")
    if outs is None and out_mr is not None:
        outs = (out_mr.size // (4 if out_mr.datatype == 0 else 1),)
    row["in_shape"] = list(ins) if ins else None
    row["out_shape"] = list(outs) if outs else None
    row["activation"] = _fused(p.get("fused_activation"))
    if "filter_h" in p:
        row["kernel"] = f"{p['filter_h']}x{p['filter_w']} s{p['stride_h']}"
    for key, names in (("binary_op", BINARY_OPS), ("unary_op", UNARY_OPS), ("reduce_op", REDUCE_OPS)):  # fmt: skip
        if key in p:
            row["detail"] = names.get(p[key], str(p[key]))
    if op.opcode == 0x2001 and out_mr is not None:
        row["device"] = "CPU->KPU"
        row["kpu_ram_end"] = out_mr.start + out_mr.size
    return row


def _v5_row(op: K210Op) -> dict[str, Any]:
    row: dict[str, Any] = {"device": "KPU", "kernel": "", "pool": "", "activation": ""}
    if op.kpu is not None:
        row.update(_kpu_cells(op.kpu))
        row["main_mem_out"] = op.params["main_mem_output"].size != 0
        return row
    shape = op.params.get("in_shape") or op.params.get("shape")
    row["in_shape"] = row["out_shape"] = list(shape) if shape is not None else None
    for key in ("input", "output"):
        mr = op.params[key]
        if mr.location == 64:
            row["kpu_ram_end"] = mr.start + mr.size
    row["device"] = {0: "CPU->KPU", 1: "KPU->CPU"}.get(op.opcode, "CPU")
    return row


def layer_rows(model: KModel) -> list[dict[str, Any]]:
    """One row per layer (V3), node (V4) or K210 op / module function (V5).

    Keys: index, op, device (KPU / CPU / CPU->KPU / KPU->CPU), in_shape, out_shape,
    kernel, pool, activation, body_size, kpu_ram_end (highest KPU RAM byte touched),
    and for V5 the module/function it belongs to.
    """
    rows: list[dict[str, Any]] = []
    if isinstance(model, KModelV5):
        for mod in model.modules:
            for fn in mod.functions:
                if fn.ops is None:
                    rows.append({"index": len(rows), "op": f"{mod.type} function {fn.index}",
                                 "device": "CPU", "module": mod.type, "body_size": fn.text_size,
                                 "note": "bytecode not decoded"})  # fmt: skip
                    continue
                for op in fn.ops:
                    row = {"index": len(rows), "op": op.name, "module": mod.type,
                           "function": fn.index, **_v5_row(op), "body_size": op.size}  # fmt: skip
                    rows.append(row)
        return rows
    ops, fmt = (model.layers, _v3_row) if isinstance(model, KModelV3) else (model.nodes, _v4_row)
    for layer in ops:
        rows.append(
            {"index": layer.index, "op": layer.name, **fmt(layer), "body_size": layer.body_size}
        )
    return rows


def ram_estimates(main_mem: int, model_size: int, max_body: int) -> dict[str, int]:
    """Heap needed by ``kpu.load`` and ``kpu.load_flash`` (single / dual buffer)."""
    buf = max_body + LOAD_FLASH_BUFFER_SLACK
    fixed = LOAD_FLASH_HEADER_BUFFER + LOAD_FLASH_CONTEXT
    return {
        "kpu_load": model_size + main_mem,
        "load_flash_single": main_mem + buf + fixed,
        "load_flash_dual": main_mem + 2 * buf + fixed,
    }


def _memory(model: KModel, rows: list[dict[str, Any]], file_size: int) -> dict[str, Any]:
    kpu_peak = max((r.get("kpu_ram_end", 0) for r in rows), default=0)
    if isinstance(model, KModelV5):
        main = sum(m.mempool(3) for m in model.modules)
        pools = model.entry
        io = (pools.input_pool_size + pools.output_pool_size) if pools else 0
        largest = max((m.size for m in model.modules), default=0)
        mem = {"main_mem": main + io, "header_end": model.header_size, "largest_body": largest}
        mem.update(ram_estimates(main + io, model.model_size, largest))
        # load_flash has no V5 path: do not advertise its numbers
        mem.pop("load_flash_single")
        mem.pop("load_flash_dual")
    else:
        main = model.main_mem_usage if isinstance(model, KModelV3) else model.main_mem
        mem = {"main_mem": main, "header_end": model.header_end, "largest_body": model.max_body}
        mem.update(ram_estimates(main, model.model_size, model.max_body))
    mem.update(
        model_size=model.model_size,
        file_size=file_size,
        kpu_ram_peak=kpu_peak,
        kpu_ram_limit=KPU_RAM_SIZE,
    )
    return mem


def _verdict(fw: Any, version: int, mem: dict[str, Any], opaque: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"firmware": fw.id, "name": fw.name}
    if opaque:
        ok = fw.family == "maixpy"
        return {**out, "loads": "unknown" if ok else "no",
                "why": "MaixHub encrypted model: loads only on MaixPy, with the key of the "
                       "board it was made for" if ok else "only MaixPy decrypts MaixHub models"}  # fmt: skip
    if not fw.kmodel_versions:
        return {**out, "loads": "unknown", "why": "depends on the application's runtime"}
    if version not in fw.kmodel_versions:
        supported = "/".join(f"V{v}" for v in fw.kmodel_versions)
        why = f"V{version} model; this firmware loads {supported} only"
        if version == 5 and fw.family == "maixpy":
            why += " (MaixPy has no nncase 1.x runtime; use CanMV or the SDK's lib/nncase/v1)"
        return {**out, "loads": "no", "why": why}
    if mem["kpu_ram_peak"] > KPU_RAM_SIZE:
        return {**out, "loads": "no", "why": "a layer uses more than the 2 MiB of KPU RAM"}
    heap = fw.typical_free_heap
    if heap is None:
        return {**out, "loads": "yes", "why": f"V{version} supported (free heap not known)"}
    if mem["kpu_load"] <= heap:
        return {**out, "loads": "yes",
                "why": f"kpu.load needs ~{_kib(mem['kpu_load'])} of ~{_kib(heap)} free heap"}  # fmt: skip
    single = mem.get("load_flash_single")
    if fw.load_flash and single is not None and single <= heap:
        return {**out, "loads": "load_flash",
                "why": f"kpu.load needs ~{_kib(mem['kpu_load'])} > ~{_kib(heap)} free heap; "
                       f"kpu.load_flash single buffer needs ~{_kib(single)}"}  # fmt: skip
    return {**out, "loads": "no",
            "why": f"needs ~{_kib(min(mem['kpu_load'], single or mem['kpu_load']))} "
                   f"> ~{_kib(heap)} typical free heap"}  # fmt: skip


def _kib(n: int) -> str:
    return f"{math.ceil(n / 1024)} KiB"


def firmware_verdicts(
    version: int, mem: dict[str, Any], opaque: str | None = None, firmwares: Any = None
) -> list[dict[str, Any]]:
    """Per firmware from ``firmware_layouts/``: loads ("yes", "load_flash", "no",
    "unknown") and why."""
    if firmwares is None:
        from ..target.boards import load_firmwares

        firmwares = load_firmwares()
    return [_verdict(fw, version, mem, opaque) for fw in firmwares.values()]


def _io(tensors: list) -> list[dict[str, Any]]:
    return [
        {"name": t.name, "shape": list(t.shape), "dtype": t.dtype, "memory": t.memory,
         "start": t.start, "size": t.size}
        for t in tensors
    ]  # fmt: skip


def model_info(
    data: bytes, source: str = "kmodel", firmwares: Any = None, nncase_release: str | None = None
) -> dict[str, Any]:
    """The whole ``model info`` report as a JSON-able dict (see docs/kmodel.md).

    For a V5 file, ``nncase_release`` names the nncase release that wrote it instead
    of telling it from the stackvm code (``format.nncase_release`` says which, and how
    sure)."""
    sig: KmodelSignature | None = detect(data, source)
    base = {"file": source, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    if sig is None:
        raise FormatError(
            f"{source}: not a kmodel (first bytes {bytes(data[:8]).hex(' ')})",
            "expected a V3 (03 00 00 00) or V4/V5 (LDMK) kmodel file",
        )
    notes: list[str] = []
    if sig.opaque:
        mem = {"file_size": len(data)}
        return {**base, "format": {"kind": sig.opaque, "version": None, "opaque": True},
                "notes": ["MaixHub encrypted model: opaque, not parsed or preprocessed"],
                "firmwares": firmware_verdicts(0, mem, sig.opaque, firmwares)}  # fmt: skip
    if sig.version not in (3, 4, 5):  # recognised, but no K210 parser/loader for it
        why = ("kmodel V1 (pre-nncase compiler): recognised, not parsed" if sig.version == 1
               else f"kmodel V{sig.version}: not a K210 format")  # fmt: skip
        mem = {"file_size": len(data), "kpu_ram_peak": 0, "kpu_load": len(data)}
        return {**base, "format": {"kind": "kmodel", "version": sig.version,
                                   "swapped": sig.swapped, "producer": PRODUCERS.get(sig.version, "unknown")},
                "notes": [why], "firmwares": firmware_verdicts(sig.version, mem, None, firmwares)}  # fmt: skip
    plain = data
    if sig.swapped:
        notes.append("file is in the kpu.load_flash word-swapped form (described unswapped)")
        plain = unswap(data)
    model = parse(plain, source)
    rows = layer_rows(model)
    mem = _memory(model, rows, len(data))
    fmt: dict[str, Any] = {"kind": "kmodel", "version": sig.version, "swapped": sig.swapped,
                           "producer": PRODUCERS.get(sig.version, "unknown")}  # fmt: skip
    if isinstance(model, KModelV3):
        fmt.update(flags=model.flags, weights_bits=8 if model.eight_bit else 16)
        inputs, outputs = model.inputs, model.output_tensors()
        notes.append("V3 stores no input table: the input is derived from the first layer")
    elif isinstance(model, KModelV4):
        fmt.update(flags=model.flags, target=model.target_name, constants=model.constants_size)
        inputs, outputs = model.input_tensors(), model.output_tensors()
    else:
        fmt.update(modules=[m.type for m in model.modules], alignment=model.alignment)
        guess = guess_release([code for _, _, code in stackvm_codes(model)], nncase_release)
        fmt.update(nncase_release=guess.describe(), nncase_candidates=list(guess.candidates))
        inputs, outputs = model.input_tensors(), model.output_tensors()
        notes += filter(None, [placement_note(model)])
    if mem["header_end"] > LOAD_FLASH_MAX_HEADER and sig.version in (3, 4):
        notes.append(
            f"header ends at {mem['header_end']} > 4096: kpu.load_flash reads only 4096 bytes"
        )
    if mem["kpu_ram_peak"] > KPU_RAM_SIZE:
        notes.append(f"KPU RAM use {mem['kpu_ram_peak']} exceeds the 2 MiB limit")
    return {
        **base,
        "format": fmt,
        "inputs": _io(inputs),
        "outputs": _io(outputs),
        "layers": rows,
        "memory": mem,
        "notes": notes,
        "firmwares": firmware_verdicts(sig.version, mem, None, firmwares),
    }
