"""Long operations of the web station (burns) as jobs whose events a page can follow.

A :class:`Job` runs in a background thread and appends :class:`~.station.BoardEvent`\\ s
to its log; any number of readers follow the log from the start (the page's
server-sent-event stream, the API tests) without losing events. Progress events of one
board are thinned to one per percent so a 16 MiB burn does not send a million lines.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .station import BoardEvent

__all__ = ["Job", "JobTable"]


class Job:
    """One background operation over a set of ports."""

    def __init__(self, job_id: str, ports: list[str]) -> None:
        self.id = job_id
        self.ports = ports
        self.cancel = threading.Event()
        self.events: list[dict[str, Any]] = []
        self.results: dict[str, Any] = {}
        self.finished = False
        self.started = time.monotonic()
        self._cond = threading.Condition()
        self._last: dict[str, tuple[str, int]] = {}
        self.thread: threading.Thread | None = None

    def emit(self, ev: BoardEvent) -> None:
        """Record an event (progress thinned per board and stage)."""
        if ev.kind == "progress":
            total = ev.data.get("total") or 0
            step = (ev.data["stage"], ev.data["done"] * 100 // total if total else -1)
            if self._last.get(ev.port) == step and ev.data["done"] != total:
                return
            self._last[ev.port] = step
        self._append({"port": ev.port, "kind": ev.kind, **ev.data})

    def _append(self, event: dict[str, Any]) -> None:
        with self._cond:
            event["seq"] = len(self.events)
            event["t"] = round(time.monotonic() - self.started, 3)
            self.events.append(event)
            self._cond.notify_all()

    def finish(self, results: dict[str, Any]) -> None:
        with self._cond:
            self.results = results
            self.finished = True
        self._append({"port": "", "kind": "end", "ok": self.ok})

    @property
    def ok(self) -> bool:
        return (
            bool(self.results)
            and all("error" not in r for r in self.results.values())
            and all(r.get("verify", {}).get("ok", True) for r in self.results.values())
        )

    def follow(self, start: int = 0, keepalive: float = 10.0) -> Iterator[dict[str, Any] | None]:
        """Every event from ``start`` on, then stop after the end; ``None`` = keep-alive."""
        n = start
        while True:
            with self._cond:
                if n >= len(self.events):
                    self._cond.wait(keepalive)
                batch = self.events[n:]
            if not batch:
                yield None
                continue
            for ev in batch:
                yield ev
                if ev["kind"] == "end":
                    return
            n += len(batch)

    def snapshot(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ports": self.ports,
            "finished": self.finished,
            "ok": self.ok if self.finished else None,
            "results": self.results,
            "events": len(self.events),
        }


class JobTable:
    """The jobs of one station, by id."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}
        self._ids = itertools.count(1)

    def start(
        self, ports: list[str], work: Callable[[Job], dict[str, Any]], done: Callable[[], None]
    ) -> Job:
        """Run ``work(job)`` in a thread; ``done`` runs after it, whatever happens."""
        job = Job(f"j{next(self._ids)}", ports)
        self._jobs[job.id] = job

        def run() -> None:
            try:
                results = work(job)
            except Exception as e:  # a bug: the page must still see the job end
                results = {p: {"error": {"kind": "internal", "message": str(e)}} for p in ports}
            finally:
                done()
            job.finish(results)

        job.thread = threading.Thread(target=run, name=f"kflashpy-web-{job.id}", daemon=True)
        job.thread.start()
        return job

    def get(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def cancel_all(self, wait: float = 10.0) -> None:
        """Cancel every job and give each up to ``wait`` seconds to stop (boards are left
        at a step boundary, not in the middle of a frame)."""
        for job in self._jobs.values():
            job.cancel.set()
        for job in self._jobs.values():
            if job.thread is not None:
                job.thread.join(wait)
