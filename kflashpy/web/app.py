"""The web station's HTTP layer (Flask): parse requests, call :mod:`.station`, render JSON.

Safety (docs/web.md): the server binds 127.0.0.1 unless told otherwise; every request
must name an allowed ``Host`` (a DNS-rebinding page cannot reach it), requests from a
browser page of another origin are refused (``Origin`` / ``Sec-Fetch-Site``), every
API call and the page itself need the session token printed by ``kflashpy gui``;
uploads are size-limited and kept in memory; only one operation runs on a port at a time.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from flask import Flask, Response, jsonify, request, send_file
from werkzeug.exceptions import HTTPException

from ..errors import EXIT_DEVICE, KflashError, UsageError
from ..image.flashmap import flash_map_svg
from ..isp.api import check_burnable
from ..target.boards import load_firmwares
from ..units import parse_int
from . import station
from .jobs import JobTable

__all__ = ["Station", "create_app"]

TOKEN_HEADER = "X-Kflashpy-Token"


@dataclass
class Station:
    """Everything one running station owns: token, allowed hosts, files, jobs, port locks."""

    hosts: set[str] = field(default_factory=set)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    workspace: station.Workspace = field(default_factory=station.Workspace)
    jobs: JobTable = field(default_factory=JobTable)
    locks: station.PortLocks = field(default_factory=station.PortLocks)

    def allow(self, hosts: Iterable[str]) -> None:
        """Accept these ``Host`` values (``host:port``), and their origins."""
        self.hosts.update(hosts)

    @property
    def origins(self) -> set[str]:
        return {f"http://{h}" for h in self.hosts}

    def close(self) -> None:
        self.jobs.cancel_all()
        self.workspace.close()


def _error(status: int, kind: str, message: str, hint: str = "") -> Response:
    resp = jsonify({"error": {"kind": kind, "message": message, "hint": hint}})
    resp.status_code = status
    return resp


def _json_body() -> dict[str, Any]:
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise UsageError("expected a JSON object in the request body")
    return body


def create_app(st: Station) -> Flask:
    """The Flask application of station ``st``."""
    app = Flask(__name__, static_folder=None)
    app.config["MAX_CONTENT_LENGTH"] = st.workspace.max_file + 64 * 1024
    ws = st.workspace

    @app.before_request
    def guard() -> Response | None:
        if request.host not in st.hosts:
            return _error(403, "forbidden", f"host {request.host!r} is not served here")
        origin = request.headers.get("Origin")
        if origin is not None and origin not in st.origins:
            return _error(403, "forbidden", f"requests from {origin} are refused")
        if request.headers.get("Sec-Fetch-Site") == "cross-site":
            return _error(403, "forbidden", "cross-site requests are refused")
        if request.path.startswith("/static/"):
            return None
        given = request.headers.get(TOKEN_HEADER) or request.args.get("token") or ""
        if not hmac.compare_digest(given.encode(), st.token.encode()):
            return _error(
                401, "token", "missing or wrong session token", "open the URL kflashpy gui printed"
            )
        return None

    @app.after_request
    def headers(resp: Response) -> Response:
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["Referrer-Policy"] = "no-referrer"
        resp.headers["Cache-Control"] = "no-store"
        return resp

    @app.errorhandler(KflashError)
    def kflash_error(e: KflashError) -> Response:
        status = 409 if isinstance(e, station.PortBusy) else 400
        if e.exit_code == EXIT_DEVICE:
            status = 502
        return _error(status, e.kind, e.message, e.hint)

    @app.errorhandler(HTTPException)
    def http_error(e: HTTPException) -> Response:
        if e.code == 413:
            return _error(
                413, "too-large", f"upload over the {ws.max_file:,}-byte limit", "check the file"
            )
        return _error(e.code or 500, "http", e.description or str(e))

    # --- the page -----------------------------------------------------------------------

    @app.get("/")
    def index() -> Response:
        html = resources.files(__package__).joinpath("static/index.html").read_text("utf-8")
        return Response(html, mimetype="text/html")

    @app.get("/static/<name>")
    def static_file(name: str) -> Response:
        types = {"js": "text/javascript", "css": "text/css"}
        kind = name.rsplit(".", 1)[-1]
        if kind not in types or "/" in name or name.startswith("."):
            return _error(404, "http", "no such file")
        res = resources.files(__package__).joinpath("static").joinpath(name)
        if not res.is_file():
            return _error(404, "http", "no such file")
        return Response(res.read_text("utf-8"), mimetype=types[kind])

    # --- boards ---------------------------------------------------------------------------

    @app.get("/api/meta")
    def meta() -> Response:
        fws = load_firmwares()
        return jsonify(
            {
                "layouts": [{"id": f.id, "name": f.name} for f in fws.values()],
                "limits": {"file": ws.max_file, "total": ws.max_total},
                **station.list_ports(ws),
            }
        )

    @app.get("/api/ports")
    def ports() -> Response:
        return jsonify({**station.list_ports(ws), "busy": sorted(st.locks.busy())})

    @app.post("/api/virtual")
    def add_virtual() -> Response:
        board = str(_json_body().get("board") or "maix-bit")
        return jsonify({"port": ws.add_virtual(board)})

    # --- files ----------------------------------------------------------------------------

    @app.post("/api/files")
    def upload() -> Response:
        up = request.files.get("file")
        if up is None:
            raise UsageError("no file in the upload (multipart field 'file')")
        f = ws.add(up.filename or "file", up.read(ws.max_file + 1))
        try:
            return jsonify(f.describe())
        except KflashError:  # a damaged package: not kept
            ws.remove(f.id)
            raise

    @app.delete("/api/files/<file_id>")
    def delete_file(file_id: str) -> Response:
        ws.remove(file_id)
        return jsonify({"removed": file_id})

    @app.get("/api/files/<file_id>/download")
    def download(file_id: str) -> Response:
        f = ws.get(file_id)
        return _attachment(f.data, f.name)

    # --- plan -----------------------------------------------------------------------------

    @app.post("/api/plan")
    def plan() -> Response:
        p = station.plan_from_spec(ws, _json_body())
        return jsonify({"plan": p.to_dict(), "svg": flash_map_svg(p)})

    @app.post("/api/plan/kfpkg")
    def plan_kfpkg() -> Response:
        body = _json_body()
        p = station.plan_from_spec(ws, body)
        data = station.kfpkg_bytes(ws, p, force=bool(body.get("force")))
        return _attachment(data, str(body.get("name") or "plan.kfpkg"))

    @app.post("/api/plan/image")
    def plan_image() -> Response:
        body = _json_body()
        p = station.plan_from_spec(ws, body)
        data = station.merged_image(p, force=bool(body.get("force")))
        return _attachment(data, str(body.get("name") or "flash.bin"))

    # --- burn -----------------------------------------------------------------------------

    @app.post("/api/burn")
    def burn() -> Response:
        body = _json_body()
        ports = _known_ports([str(p) for p in body.get("ports") or []])
        p = station.plan_from_spec(ws, body)
        check_burnable(p, force=bool(body.get("force")))
        st.locks.claim(ports)
        board = body.get("board") or None

        def work(job) -> dict[str, Any]:
            return station.burn_boards(
                p, ports, board=board, verify=bool(body.get("verify", True)),
                cancel=job.cancel, on_event=job.emit,
            )  # fmt: skip

        job = st.jobs.start(ports, work, lambda: st.locks.release(ports))
        return jsonify({"job": job.id, "ports": ports})

    @app.get("/api/jobs/<job_id>")
    def job_status(job_id: str) -> Response:
        return jsonify(_job(job_id).snapshot())

    @app.post("/api/jobs/<job_id>/cancel")
    def job_cancel(job_id: str) -> Response:
        job = _job(job_id)
        job.cancel.set()
        return jsonify({"cancelling": job.id})

    @app.get("/api/jobs/<job_id>/events")
    def job_events(job_id: str) -> Response:
        job = _job(job_id)
        # a reconnecting EventSource says what it has seen: no event is shown twice
        seen = request.headers.get("Last-Event-ID", "")
        start = int(seen) + 1 if seen.isdigit() else 0

        def stream():
            for ev in job.follow(start):
                if ev is None:
                    yield ": keep-alive\n\n"
                else:
                    yield f"id: {ev['seq']}\nevent: {ev['kind']}\ndata: {json.dumps(ev)}\n\n"

        return Response(stream(), mimetype="text/event-stream")

    def _known_ports(ports: list[str]) -> list[str]:
        """Only ports the station lists (never a URL naming a file of the request's choice)."""
        if not ports or not all(ports):
            raise UsageError("no board chosen", "pick one or more boards (Boards tab)")
        known = {p["port"] for p in station.list_ports(ws)["ports"]}
        unknown = [p for p in ports if p not in known]
        if unknown:
            raise UsageError(
                f"{', '.join(unknown)}: not a port of this station",
                "pick boards from the Boards list (add virtual boards there)",
            )
        return ports

    def _job(job_id: str):
        job = st.jobs.get(job_id)
        if job is None:
            raise UsageError(f"no job {job_id!r}")
        return job

    # --- models ---------------------------------------------------------------------------

    @app.post("/api/model/info")
    def model_info() -> Response:
        from ..model.info import model_info as info

        f = ws.get(str(_json_body().get("file")))
        return jsonify(info(f.data, f.name))

    @app.post("/api/model/prep")
    def model_prep() -> Response:
        from ..model.prep import prep_flash

        body = _json_body()
        f = ws.get(str(body.get("file")))
        prep = prep_flash(f.data, f.name)
        stem = f.name.rsplit(".", 1)[0]
        out = ws.add(f"{stem}.flash.kmodel", prep.data)
        address = body.get("address")
        call = prep.call(parse_int(address, "model address")) if address not in (None, "") else None
        return jsonify({"file": out.id, "name": out.name, "prep": prep.to_dict(), "call": call})

    @app.post("/api/model/seal")
    def model_seal() -> Response:
        from ..model.seal import key_id, new_key, seal_bytes

        body = _json_body()
        f = ws.get(str(body.get("file")))
        key_hex = str(body.get("key_hex") or "").strip()
        generated = not key_hex
        try:
            key = new_key() if generated else bytes.fromhex(key_hex.removeprefix("0x"))
        except ValueError:
            raise UsageError(
                "the seal key is not hex", "give 64 hex digits, or leave it empty"
            ) from None
        out = ws.add(f"{f.name}.sealed", seal_bytes(f.data, key, name=f.name))
        return jsonify(
            {
                "file": out.id,
                "name": out.name,
                "key_id": key_id(key).hex(),
                "key_hex": key.hex() if generated else None,
            }
        )

    @app.post("/api/model/compare")
    def model_compare() -> Response:
        body = _json_body()
        model = ws.get(str(body.get("model")))
        image = ws.get(str(body["image"])) if body.get("image") else None
        port = _known_ports([str(body.get("port") or "")])[0]
        address = parse_int(body.get("address", ""), "model address")
        st.locks.claim([port])
        try:
            report = station.compare_on_board(
                ws, model, port, address=address, load_flash=bool(body.get("load_flash")),
                image=image,
            )  # fmt: skip
        finally:
            st.locks.release([port])
        return jsonify(report)

    @app.post("/api/model/run")
    def model_run() -> Response:
        body = _json_body()
        model = ws.get(str(body.get("model")))
        image = ws.get(str(body.get("image")))
        yolo = body.get("yolo")
        result = station.run_on_host(
            ws, model, image, top=int(_number(body, "top", 5, 0, 1000)),
            yolo=None if yolo in (None, "auto") else bool(yolo),
            threshold=_number(body, "threshold", 0.5, 0, 1), resize=bool(body.get("resize")),
        )  # fmt: skip
        result["image_png"] = station.image_preview(image)
        return jsonify(result)

    return app


def _number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    """A number field of a request, within ``[lo, hi]`` (a clear 400 otherwise)."""
    value = body.get(key, default)
    try:
        number = float(value)
        if isinstance(value, bool) or not lo <= number <= hi:
            raise ValueError
    except (TypeError, ValueError):
        raise UsageError(f"{key}: {value!r} is not a number from {lo:g} to {hi:g}") from None
    return number


def _attachment(data: bytes, name: str) -> Response:
    import io

    safe = "".join(c for c in name if c.isalnum() or c in "._-") or "download"
    return send_file(io.BytesIO(data), as_attachment=True, download_name=safe,
                     mimetype="application/octet-stream")  # fmt: skip
