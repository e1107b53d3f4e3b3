"""The web station: kflashpy in a browser page on the user's own machine (``kflashpy gui``).

:func:`start` binds a local HTTP server (Flask on Werkzeug's threaded server; why that
stack: docs/web.md) and returns a :class:`RunningStation` with the URL to open, which
carries the session token. The page is static HTML/JS/CSS shipped in the package; it
calls the JSON API of :mod:`.app`, which calls :mod:`.station` and the rest of the
library. Nothing about flashing or models is decided in JavaScript.
"""

from __future__ import annotations

import ipaddress
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    from .app import Station

__all__ = ["RunningStation", "parse_listen", "start"]

DEFAULT_HOST = "127.0.0.1"


def parse_listen(text: str | None) -> tuple[str, int]:
    """``HOST:PORT``, ``HOST`` or ``:PORT`` (port 0 or none: a free port)."""
    if not text:
        return DEFAULT_HOST, 0
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, ""
    host = host.strip("[]") or DEFAULT_HOST
    try:
        number = int(port) if port else 0
        if not 0 <= number < 65536:
            raise ValueError
    except ValueError:
        raise UsageError(
            f"--listen {text!r}: bad port", "write it as 127.0.0.1:8765 or :8765"
        ) from None
    return host, number


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class RunningStation:
    """A station serving in a background thread; :meth:`stop` ends it and cleans up."""

    url: str
    host: str
    port: int
    token: str
    _server: Any = field(repr=False)
    _thread: threading.Thread = field(repr=False)
    station: Station = field(repr=False)

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C raises KeyboardInterrupt here)."""
        while self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(5)
        self._server.server_close()
        self.station.close()


def start(listen: str | None = None) -> RunningStation:
    """Bind the station (``listen`` as :func:`parse_listen`) and serve in a thread."""
    from werkzeug.serving import WSGIRequestHandler, make_server

    class QuietHandler(WSGIRequestHandler):
        """No access log on the terminal (request URLs carry the session token)."""

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            return None

    from .app import Station, create_app

    host, port = parse_listen(listen)
    st = Station()
    try:
        server = make_server(
            host, port, create_app(st), threaded=True, request_handler=QuietHandler
        )
    except OSError as e:
        st.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {e.strerror or e}",
            "choose another port with --listen, or leave it out for a free one",
        ) from None
    port = server.server_port
    shown = f"[{host}]" if ":" in host else host
    names = {f"{shown}:{port}"}
    if is_loopback(host):
        names |= {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
    st.allow(names)
    thread = threading.Thread(target=server.serve_forever, name="kflashpy-web", daemon=True)
    thread.start()
    url = f"http://{shown}:{port}/?token={st.token}"
    return RunningStation(url, host, port, st.token, server, thread, st)
