"""Progress reporting from library code to whoever renders it.

Library functions never print. Long operations accept ``progress: ProgressFn | None``
and call it with :class:`Progress` events; the CLI turns them into tqdm bars on a
terminal or a few plain lines in a log, and tests can record them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """One step of a long operation.

    ``stage`` is a short stable name (``"connect"``, ``"upload-stub"``, ``"write"``,
    ``"verify"``...), ``label`` names the thing being worked on (a file, a region),
    ``done``/``total`` count bytes or steps (``total`` 0 when unknown), and
    ``message`` is a human sentence for log lines.
    """

    stage: str
    done: int = 0
    total: int = 0
    label: str = ""
    message: str = ""


ProgressFn = Callable[[Progress], None]


def report(progress: ProgressFn | None, event: Progress) -> None:
    """Send ``event`` to ``progress`` if there is a listener."""
    if progress is not None:
        progress(event)
