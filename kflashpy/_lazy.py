"""Lazy exports: the one style of every package face in kflashpy.

A package lists its public names and the module defining each (``EXPORTS``), says them
again under ``if TYPE_CHECKING:`` as plain imports (so type checkers and editors see the
real types), and sets ``__all__ = sorted(EXPORTS)``. Importing the package imports none of
the modules: a name's module is imported the first time the name is used, so that
``import kflashpy.isp`` costs nothing and ``kflashpy.burn`` still works. A test checks that
the ``TYPE_CHECKING`` imports and ``EXPORTS`` agree and that every name resolves.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, exports: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` exporting ``{name: module}``.

    ``module`` is absolute (``kflashpy.isp.api``) or relative to the package (``.api``).
    A resolved name is cached in ``namespace`` (the package's globals).
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
