"""What the web station does, as plain library functions (no HTTP in here).

The HTTP layer (:mod:`kflashpy.web.app`) only parses requests and renders results; every
decision is made here or deeper in the library, so a script can drive a station the
same way the page does. Parts:

* :class:`Workspace`: the files a session uploaded, kept in memory under generated ids
  with per-file and total size limits, plus one private temporary directory for the few
  things that must be files (images for the runtime, packages, virtual boards' flash).
  No name or path from a request is ever used on disk.
* :func:`list_ports`: serial ports of known USB bridges with the boards they suggest,
  and the session's virtual boards (``sim://`` with a flash file in the temp dir).
* :func:`plan_from_spec`: a JSON plan (file ids, addresses, packages, board, layout) ->
  a checked :class:`~kflashpy.image.plan.FlashPlan`.
* :func:`burn_boards`: burn one plan to several boards in parallel, with per-board
  progress, read-back verification and cancel. It is the single call site of the
  per-board burn, so a library-level parallel runner can replace its body.
* :func:`run_on_host`: run a kmodel on an uploaded image; top-k for classifiers, YOLO v2
  boxes drawn on the image for region outputs.
* :func:`compare_on_board`: the same model on a MaixPy board (through its REPL) and on
  the host, output by output (:func:`kflashpy.compare`).
"""

from __future__ import annotations

import base64
import io
import itertools
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, UsageError
from ..image.content import detect_content
from ..image.kfpkg import read_kfpkg
from ..image.plan import FlashItem, FlashPlan, items_from_kfpkg, plan_flash
from ..progress import Progress
from ..target.boards import get_board, load_boards
from ..units import parse_int

__all__ = [
    "BoardEvent",
    "PortBusy",
    "PortLocks",
    "Workspace",
    "burn_boards",
    "compare_on_board",
    "image_preview",
    "kfpkg_bytes",
    "merged_image",
    "list_ports",
    "plan_from_spec",
    "run_on_host",
]

#: a single upload; the largest K210 flash is 16 MiB, plus room for a package's zip
MAX_FILE = 24 * 1024 * 1024
#: everything a session keeps in memory
MAX_TOTAL = 128 * 1024 * 1024


@dataclass
class StoredFile:
    id: str
    name: str
    data: bytes = field(repr=False)

    def describe(self) -> dict[str, Any]:
        info = detect_content(self.data, self.name)
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "size": len(self.data),
            "content": info.to_dict(),
        }
        if info.kind == "kfpkg":
            pkg = read_kfpkg(self.data)
            out["entries"] = [
                {"name": e.name, "address": e.address, "size": len(e.data)} for e in pkg.entries
            ]
        return out


class Workspace:
    """Uploaded and produced files of one station, and its private temporary directory."""

    def __init__(self, max_file: int = MAX_FILE, max_total: int = MAX_TOTAL) -> None:
        self.max_file = max_file
        self.max_total = max_total
        self._files: dict[str, StoredFile] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.tmp = Path(tempfile.mkdtemp(prefix="kflashpy-web-"))
        self.virtual: dict[str, str] = {}  # url -> board id

    def close(self) -> None:
        """Forget the files and remove the temporary directory."""
        self._files.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def add(self, name: str, data: bytes) -> StoredFile:
        """Keep ``data`` under a new id; ``name`` is a label only (never a path on disk)."""
        if len(data) > self.max_file:
            raise InputError(
                f"{name}: {len(data):,} bytes is over the {self.max_file:,}-byte upload limit",
                "a K210 flash holds 16 MiB at most; check the file",
            )
        label = name.replace("\\", "/").rsplit("/", 1)[-1][:120] or "file"
        with self._lock:
            used = sum(len(f.data) for f in self._files.values())
            if used + len(data) > self.max_total:
                raise InputError(
                    f"{label}: the station already holds {used:,} bytes of files",
                    "remove files you no longer need",
                )
            f = StoredFile(f"f{next(self._ids)}", label, bytes(data))
            self._files[f.id] = f
        return f

    def get(self, file_id: str) -> StoredFile:
        try:
            return self._files[file_id]
        except KeyError:
            raise InputError(f"no file {file_id!r} in this session", "upload it again") from None

    def remove(self, file_id: str) -> None:
        self.get(file_id)
        with self._lock:
            self._files.pop(file_id, None)

    def scratch(self, suffix: str = "") -> Path:
        """A fresh file name inside the temporary directory (suffix: letters only)."""
        safe = "".join(c for c in suffix.lower() if c.isalnum())[:8]
        return self.tmp / f"scratch-{next(self._ids)}{'.' + safe if safe else ''}"

    def add_virtual(self, board: str) -> str:
        """A virtual board whose flash persists in the temp dir (so it can be verified)."""
        b = get_board(board)
        n = len(self.virtual) + 1
        url = f"sim://?board={b.id}&flash={self.tmp / f'virtual-{n}.img'}"
        self.virtual[url] = b.id
        return url


def list_ports(ws: Workspace) -> dict[str, Any]:
    """Detected serial ports (with the boards their USB bridge suggests) and virtual boards."""
    from ..isp.ports import candidates, suggested_boards

    ports: list[dict[str, Any]] = []
    for c in candidates():
        ports.append(
            {
                "port": c.device,
                "label": c.device,
                "bridge": c.bridge,
                "usb": f"{c.vid:04X}:{c.pid:04X}",
                "serial": c.serial_number,
                "boards": suggested_boards(c),
                "virtual": False,
            }
        )
    for n, (url, board) in enumerate(ws.virtual.items(), 1):
        ports.append(
            {
                "port": url,
                "label": f"virtual {board} #{n}",
                "bridge": "virtual K210 (sim://)",
                "boards": [board],
                "virtual": True,
            }
        )
    return {
        "ports": ports,
        "boards": [
            {"id": b.id, "name": b.name, "flash_size": b.flash_size} for b in load_boards().values()
        ],
    }


def plan_from_spec(ws: Workspace, spec: dict[str, Any]) -> FlashPlan:
    """A checked plan from the page's JSON: ``{"items": [{"file", "address", "prefix",
    "loader"}], "packages": [file ids], "board", "layout"}``."""
    items: list[FlashItem] = []
    for n, it in enumerate(spec.get("items") or []):
        if not isinstance(it, dict) or "file" not in it:
            raise UsageError(f"plan item {n + 1}: expected {{file, address}}")
        f = ws.get(str(it["file"]))
        if detect_content(f.data, f.name).kind == "kfpkg":
            items += items_from_kfpkg(_NamedPackage(f))
            continue
        address = parse_int(it.get("address", ""), f"address of {f.name}")
        prefix = it.get("prefix")
        if prefix not in (None, True, False):
            raise UsageError(f"{f.name}: prefix must be true, false or null, not {prefix!r}")
        loader = it.get("loader") or None
        items.append(FlashItem(address, f.data, f.name, prefix=prefix, loader=loader))
    if not items:
        raise UsageError("the plan is empty", "add files with an address, or a kfpkg")
    return plan_flash(items, board=spec.get("board") or None, layout=spec.get("layout") or None)


class _NamedPackage:
    """A package read from an upload, named after the upload (for item labels)."""

    def __init__(self, f: StoredFile) -> None:
        pkg = read_kfpkg(f.data)
        self.entries = pkg.entries
        self.path = f.name


def kfpkg_bytes(ws: Workspace, plan: FlashPlan, *, force: bool = False) -> bytes:
    """The plan as a portable kfpkg (refused on layout errors unless ``force``)."""
    from ..image.api import pack

    out = ws.scratch("kfpkg")
    try:
        pack(out, [r.item for r in plan.writes], board=plan.board, layout=plan.layout, force=force)
        return out.read_bytes()
    finally:
        out.unlink(missing_ok=True)


def merged_image(plan: FlashPlan, *, force: bool = False) -> bytes:
    """The plan as one flat flash image from address 0 (what ``kflashpy merge`` writes:
    gaps 0xFF), refused on layout errors unless ``force``."""
    from ..image.flatten import flatten

    plan.raise_on_errors(force)
    return flatten(plan)


# --- burning ----------------------------------------------------------------------------


class PortBusy(UsageError):
    """An operation is already running on a port."""


class PortLocks:
    """One operation per port at a time: :meth:`claim` refuses a busy port."""

    def __init__(self) -> None:
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    def claim(self, ports: Iterable[str]) -> None:
        ports = list(ports)
        with self._lock:
            busy = [p for p in ports if p in self._busy]
            if busy:
                raise PortBusy(
                    f"{', '.join(busy)}: an operation is already running on this port",
                    "wait for it to finish or cancel it",
                )
            self._busy.update(ports)

    def release(self, ports: Iterable[str]) -> None:
        with self._lock:
            self._busy.difference_update(ports)

    def busy(self) -> set[str]:
        with self._lock:
            return set(self._busy)


@dataclass(frozen=True)
class BoardEvent:
    """What one board did: ``kind`` is "progress", "log", "done" or "failed"."""

    port: str
    kind: str
    data: dict[str, Any]


def burn_boards(
    plan: FlashPlan,
    ports: Sequence[str],
    *,
    board: str | None = None,
    verify: bool = True,
    cancel: threading.Event | None = None,
    on_event: Callable[[BoardEvent], None] = lambda ev: None,
) -> dict[str, dict[str, Any]]:
    """Burn ``plan`` to every port at once; per port the result dict or the error.

    The boards run on the library's multi-board runner (:mod:`kflashpy.isp.parallel`: a
    worker per board, each port claimed once); ``on_event`` receives every board's
    progress and its outcome (called from those workers). ``verify`` hashes each region
    on the board after the burn, before it reboots. Setting ``cancel`` stops every board
    at its next progress step.
    """
    from ..isp import parallel
    from ..isp.api import burn_plan_on
    from ..isp.connect import ConnectOptions
    from ..isp.flashops import verify_on

    def work(dev, progress, row) -> dict[str, Any]:
        result = burn_plan_on(dev, plan, reboot=False, progress=progress).to_dict()
        if verify:
            on_event(BoardEvent(row.port, "log", {"message": "verifying (on-board SHA-256)"}))
            check = verify_on(dev, plan.writes, progress=progress)
            result["verify"] = {
                "ok": check.ok,
                "regions": [
                    {"label": r.label, "address": r.address, "ok": r.ok} for r in check.regions
                ],
            }
        if result.get("verify", {}).get("ok", True):
            result["rebooted"] = dev.reboot()
        return result

    def update(row, ev: Progress | None) -> None:
        if ev is not None:
            on_event(BoardEvent(row.port, "progress", _progress_dict(ev)))
        elif row.error:
            on_event(BoardEvent(row.port, "failed", {"error": row.error}))
        else:
            ok = row.result.get("verify", {}).get("ok", True)
            on_event(BoardEvent(row.port, "done" if ok else "failed", row.result))

    run = parallel.run_on_boards(
        ports, work, on_update=update, stop=cancel, connection=ConnectOptions(board=board)
    )
    return {row.port: {"error": row.error} if row.error else row.result for row in run.boards}


def _progress_dict(ev: Progress) -> dict[str, Any]:
    return {
        "stage": ev.stage,
        "done": ev.done,
        "total": ev.total,
        "label": ev.label,
        "message": ev.message,
    }


# --- models -----------------------------------------------------------------------------


def run_on_host(
    ws: Workspace,
    model: StoredFile,
    image: StoredFile,
    *,
    top: int = 5,
    yolo: bool | None = None,
    threshold: float = 0.5,
    nms: float = 0.2,
    resize: bool = False,
) -> dict[str, Any]:
    """Run ``model`` on ``image``: output summaries, top-k, and YOLO boxes when asked.

    ``yolo=None`` decodes output 0 as a VOC YOLO v2 region map when its channel count
    fits the 20-class example's anchors (5 anchors x 25). The boxes come back drawn on
    the image (``boxes_png``, base64 PNG) and as relative coordinates.
    """
    from .. import runtime
    from ..runtime import inputs as rt_inputs
    from ..runtime import yolo as rt_yolo

    m = runtime.load(model.data)
    if len(m.inputs) != 1:
        raise UsageError(
            f"{model.name} has {len(m.inputs)} inputs; the station runs single-input models",
            "use `kflashpy run` with one --input per model input",
        )
    path = ws.scratch(Path(image.name).suffix.lstrip("."))
    path.write_bytes(image.data)
    try:
        x = rt_inputs.load_input(path, m.inputs[0].shape, m.inputs[0].dtype, resize=resize)
        outs = m.run([x])
        result: dict[str, Any] = {"model": model.name, "version": m.version, "outputs": []}
        for spec, arr in zip(m.outputs, outs, strict=True):
            flat = np.squeeze(arr).astype(np.float64)
            entry: dict[str, Any] = {"name": spec.name, "shape": list(arr.shape)}
            if top and flat.ndim == 1 and 1 < flat.size <= 1000:
                order = np.argsort(-flat, kind="stable")[:top]
                entry["top"] = [{"index": int(i), "value": float(flat[i])} for i in order]
            result["outputs"].append(entry)
        anchors = rt_yolo.VOC_ANCHORS
        n_anchor = len(anchors) // 2
        fits = outs[0].ndim >= 3 and outs[0].shape[-3] == n_anchor * (5 + 20)
        if yolo or (yolo is None and fits):
            boxes = rt_yolo.decode_region(outs[0], anchors, threshold=threshold, nms=nms)
            names = rt_yolo.VOC_CLASSES
            result["detections"] = [
                {"class": names[b.cls], "score": round(b.score, 4),
                 "x": b.x, "y": b.y, "w": b.w, "h": b.h}
                for b in boxes
            ]  # fmt: skip
            png = ws.scratch("png")
            try:
                rt_yolo.draw_boxes(path, boxes, names, png)
                result["boxes_png"] = base64.b64encode(png.read_bytes()).decode()
            finally:
                png.unlink(missing_ok=True)
        return result
    finally:
        path.unlink(missing_ok=True)


def compare_on_board(
    ws: Workspace,
    model: StoredFile,
    port: str,
    *,
    address: int,
    load_flash: bool = False,
    image: StoredFile | None = None,
) -> dict[str, Any]:
    """Compare ``model`` (burned at ``address`` on the MaixPy board at ``port``) with the
    host runtime on ``image`` (or random input when none): the compare report as a dict."""
    from ..maixpy.compare import LoadSpec, compare
    from ..maixpy.repl import open_repl

    spec = LoadSpec(addr=address, load_flash=load_flash)
    path = ws.scratch(Path(image.name).suffix.lstrip(".")) if image is not None else None
    try:
        if path is not None and image is not None:
            path.write_bytes(image.data)
        with open_repl(port) as repl:
            report = compare(
                repl, model.data, spec, str(path) if path else "random:1", model_name=model.name
            )
        return report.to_dict()
    finally:
        if path is not None:
            path.unlink(missing_ok=True)


def image_preview(image: StoredFile) -> str:
    """The uploaded image as a base64 PNG (browsers do not all show BMP)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(image.data)) as im:
            buf = io.BytesIO()
            im.convert("RGB").save(buf, format="PNG")
    except (UnidentifiedImageError, OSError) as e:
        raise InputError(f"{image.name}: not an image ({e})", "give a BMP, PNG or JPEG") from None
    return base64.b64encode(buf.getvalue()).decode()
