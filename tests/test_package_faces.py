"""Every package face has one style (kflashpy/_lazy.py): ``EXPORTS`` maps each public name
to its module, ``__all__`` lists the same names, a ``TYPE_CHECKING`` block imports them for
type checkers, and each name resolves to the object (never to a same-named submodule)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import kflashpy

FACES = [
    "kflashpy",
    *(f"kflashpy.{n}" for n in ("target", "image", "model", "runtime", "isp", "maixpy", "sim")),
]


def _typed_imports(package: str) -> dict[str, str]:
    """name -> module of the imports under ``if TYPE_CHECKING:`` in ``package``'s face."""
    module = importlib.import_module(package)
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                source = "." * imp.level + (imp.module or "")
                found.update({alias.name: source for alias in imp.names})
    return found


@pytest.mark.parametrize("package", FACES)
def test_a_face_lists_each_name_once_typed_and_lazy(package):
    face = importlib.import_module(package)
    assert face.__all__ == sorted(face.EXPORTS)
    assert _typed_imports(package) == face.EXPORTS


def test_every_exported_name_resolves_to_its_object():
    for info in pkgutil.walk_packages(kflashpy.__path__, "kflashpy."):
        if info.name.startswith(
            ("kflashpy.cli", "kflashpy.web", "kflashpy.__main__", "kflashpy.model.board")
        ):
            continue
        importlib.import_module(info.name)  # every submodule bound on its package
    for package in FACES:
        face = importlib.import_module(package)
        for name in face.__all__:
            value = getattr(face, name)
            assert not isinstance(value, type(kflashpy)), f"{package}.{name} is a module"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        kflashpy.nope  # noqa: B018


def test_importing_a_face_imports_none_of_its_modules():
    code = "import sys, kflashpy.isp, kflashpy.image, kflashpy.sim\n" + (
        "print(sorted(m for m in sys.modules if m.count('.') > 1 and m.startswith('kflashpy.')"
        " and m.split('.')[1] in ('isp', 'image', 'sim')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
