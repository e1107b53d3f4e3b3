"""MaixPy's KPU error codes and what usually causes them, and the errors the driver raises.

MaixPy reports model failures as ``ValueError: [MAIXPY]kpu: load error:2002, ...``
(``sipeed_kpu_err_t``, docs/compare.md "Errors from the board"). The message alone rarely tells a
user what to do; the table below adds the cause users actually hit, so a
traceback from the board becomes a one-line error with a hint.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import DeviceError


@dataclass(frozen=True)
class KpuCode:
    """One ``sipeed_kpu_err_t`` value: its name and the advice for it."""

    code: int
    name: str
    cause: str


#: code -> name and likely cause (docs/compare.md, "Errors from the board")
KPU_ERRORS: dict[int, KpuCode] = {
    c.code: c
    for c in (
        KpuCode(2001, "ERR_PARAM", "bad argument: load address 0 or an empty file name"),
        KpuCode(
            2002,
            "ERR_KMODEL_VERSION",
            "no kmodel where MaixPy looked: nothing (or erased flash) at the address, the "
            "wrong variant (kpu.load needs the plain model, load_flash the word-swapped one), "
            "a model shifted by a kfpkg sha256Prefix, or a V4 model on a V3-only firmware",
        ),
        KpuCode(2003, "ERR_KMODEL_FORMAT", "a layer header with body_size <= 0: truncated model"),
        KpuCode(2004, "ERR_DECRYPT", "an .smodel encrypted for another board's machine code"),
        KpuCode(2005, "ERR_READ_FILE", "the model file cannot be read (path, SD card mounted?)"),
        KpuCode(
            2006,
            "ERR_NO_MEM",
            "not enough heap for the model: use a minimum firmware, a smaller GC heap "
            "(Maix.utils.gc_heap_size), load_flash, or a smaller is_dual_buf batch",
        ),
        KpuCode(2007, "ERR_GET_CONV_LAYER", "the model's first layer is not a KPU conv layer"),
        KpuCode(2008, "ERR_RUN_MODEL", "the run failed: the model in memory is damaged"),
        KpuCode(2009, "ERR_MODELS_FULL", "5 models are loaded already: kpu.deinit() one first"),
        KpuCode(2010, "ERR_PERMITION", "the firmware refuses this model (permission)"),
        KpuCode(2011, "IDX_OUTRANGE", "an output index past the model's outputs"),
        KpuCode(
            2012,
            "SIZE_NOTMATCH",
            "kpu.set_outputs shape does not match the model output size (w*h*ch*4 bytes)",
        ),
        KpuCode(
            2013,
            "ERR_OUTPUTS_SET",
            "a V4 model was run before kpu.set_outputs() gave every output's shape",
        ),
        KpuCode(2014, "ERR_NOT_IMPLEMENT", "the firmware does not implement this operation"),
        KpuCode(
            2015,
            "ERR_UNKNOWN",
            "often a kmodel V5 (nncase >= 1.0), which MaixPy cannot run: compile with "
            "nncase 0.1 (V3) or 0.2 (V4)",
        ),
    )
}

_CODE_RE = re.compile(r"error:\s*(-?\d+)")
_LAST_LINE_RE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")


class ReplError(DeviceError):
    """Code run through the REPL raised an exception on the board.

    ``exc_type`` and ``exc_message`` come from the last traceback line, ``traceback``
    is the board's full text and ``stdout`` what the code printed before failing.
    """

    kind = "board-exception"

    def __init__(
        self,
        message: str,
        hint: str = "",
        *,
        traceback: str = "",
        stdout: bytes = b"",
        exc_type: str = "",
        exc_message: str = "",
    ) -> None:
        super().__init__(message, hint)
        self.traceback = traceback
        self.stdout = stdout
        self.exc_type = exc_type
        self.exc_message = exc_message


class KpuError(ReplError):
    """The board's KPU runtime refused a model or a run with a ``sipeed_kpu_err_t`` code."""

    kind = "kpu"

    def __init__(self, message: str, hint: str = "", *, code: int, **kw) -> None:
        super().__init__(message, hint, **kw)
        self.code = code


def kpu_code(text: str) -> int | None:
    """The ``sipeed_kpu_err_t`` code in a MaixPy error message, if it carries one."""
    if "kpu" not in text.lower():
        return None
    m = _CODE_RE.search(text)
    return int(m.group(1)) if m else None


def board_exception(traceback: str, stdout: bytes = b"", doing: str = "") -> ReplError:
    """Turn a board traceback into a :class:`ReplError` (or :class:`KpuError`) with a hint.

    ``doing`` names the step (``"loading the model"``) for the message.
    """
    lines = [ln for ln in traceback.replace("\r", "").split("\n") if ln.strip()]
    last = lines[-1].strip() if lines else "(empty traceback)"
    m = _LAST_LINE_RE.match(last)
    exc_type, exc_msg = (m.group(1), m.group(2) or "") if m else ("", last)
    where = f" while {doing}" if doing else ""
    kw: dict[str, Any] = {
        "traceback": traceback,
        "stdout": stdout,
        "exc_type": exc_type,
        "exc_message": exc_msg,
    }
    code = kpu_code(last)
    if code is not None:
        known = KPU_ERRORS.get(code)
        if known is not None:
            return KpuError(
                f"MaixPy KPU error {code} {known.name}{where}: {exc_msg}",
                f"likely cause: {known.cause}",
                code=code,
                **kw,
            )
        return KpuError(
            f"MaixPy KPU error {code}{where}: {exc_msg}",
            "negative or unknown codes come from pre-2020 firmware: update MaixPy",
            code=code,
            **kw,
        )
    hint = "the board's traceback is in the error details (rerun with -v to see it)"
    if exc_type == "ImportError":
        hint = "this MaixPy build lacks a module kflashpy needs: use a full (non-minimum) firmware"
    elif exc_type == "MemoryError":
        hint = "the GC heap is full: soft-reset the board or raise Maix.utils.gc_heap_size"
    elif exc_type == "OSError" and ("ENOENT" in exc_msg or "Errno 2]" in exc_msg):
        hint = "no such file on the board: check the path (/flash/..., /sd/...)"
    return ReplError(f"the board raised {last}{where}", hint, **kw)
