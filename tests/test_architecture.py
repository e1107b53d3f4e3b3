"""The import rules of docs/ARCHITECTURE.md ("Which way things flow"), checked on the source.

Imports are read with :mod:`ast` (every ``import`` in a module, at any depth, type-only ones
included), folded to *units*: a subpackage of ``kflashpy`` (``isp``, ``sim``...) or a
ground-floor module (``errors``, ``units``, ``fileio``, ``keys``, ``progress``, ``_lazy``).
The rules:

1. ``target``, ``image``, ``model`` and ``runtime`` never import ``isp``, ``maixpy``,
   ``sim``, ``web`` or ``cli``;
2. the ground floor imports only the ground floor; ``target`` only the ground floor;
3. ``isp`` and ``maixpy`` never import ``sim``;
4. no import cycle between units, nor between modules (type-only imports count: a
   simulated part types its board with a protocol, :mod:`kflashpy.sim.parts`).

The checker is tested on a synthetic back import too, so a rule that stopped biting would
show.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "kflashpy"

GROUND = frozenset({"errors", "units", "fileio", "keys", "progress", "_lazy"})
PURE = frozenset({"target", "image", "model", "runtime"})
SIDES = frozenset({"isp", "maixpy", "sim", "web", "cli"})


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, is_package: bool = False) -> set[str]:
    """Every module ``source`` (the text of ``module``) imports, relative ones resolved;
    ``from a import b`` yields both ``a`` and ``a.b`` (``b`` may be a submodule)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


def unit_of(module: str, units: Iterable[str]) -> str | None:
    """The unit a ``kflashpy.*`` module belongs to (None outside the package)."""
    parts = module.split(".")
    if parts[0] != "kflashpy" or len(parts) < 2 or parts[1] not in units:
        return None
    return parts[1]


def package_units(root: Path = PACKAGE) -> set[str]:
    units = {p.name for p in root.iterdir() if (p / "__init__.py").exists()}
    units |= {p.stem for p in root.glob("*.py") if p.name != "__init__.py"}
    return units


def unit_graph(sources: Mapping[str, tuple[str, bool]], units: set[str]) -> dict[str, set[str]]:
    """unit -> the other units it imports, from ``{module: (source, is_package)}``."""
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        here = unit_of(module, units)
        if here is None:
            continue
        for imported in imports_of(source, module, is_package):
            there = unit_of(imported, units)
            if there is not None and there != here:
                graph.setdefault(here, set()).add(there)
    return graph


def read_package(root: Path = PACKAGE) -> dict[str, tuple[str, bool]]:
    return {
        module_name(p, root): (p.read_text(encoding="utf-8"), p.name == "__init__.py")
        for p in sorted(root.rglob("*.py"))
    }


def _cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def violations(graph: Mapping[str, set[str]]) -> list[str]:
    """Every broken rule of docs/ARCHITECTURE.md, one line each."""
    out: list[str] = []
    for unit, deps in sorted(graph.items()):
        for dep in sorted(deps):
            if unit in PURE and dep in SIDES:
                out.append(f"{unit} imports {dep}: {unit} must stay pure (no port, no sim, no CLI)")
            if unit in GROUND and dep not in GROUND:
                out.append(f"{unit} imports {dep}: the ground floor imports nothing above it")
            if unit == "target" and dep not in GROUND:
                out.append(f"target imports {dep}: target imports only the ground floor")
            if unit in ("isp", "maixpy") and dep == "sim":
                out.append(f"{unit} imports sim: the virtual board is reached only through a port")
    cycle = _cycle(graph)
    if cycle:
        out.append("import cycle: " + " -> ".join(cycle))
    return out


# --- the rules hold on the package -------------------------------------------------------------


def test_the_package_follows_the_import_rules():
    graph = unit_graph(read_package(), package_units())
    assert {"target", "image", "isp", "sim", "cli"} <= set(graph), "the checker saw no imports"
    assert violations(graph) == []


def module_graph(sources: Mapping[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the package modules it imports (a module's own parent packages left out:
    importing ``kflashpy.isp.reset`` runs ``kflashpy/isp/__init__.py`` first anyway)."""
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        for imported in imports_of(source, module, is_package):
            if imported in sources and imported != module and not module.startswith(imported + "."):
                graph.setdefault(module, set()).add(imported)
    return graph


def test_no_module_imports_itself_in_a_circle():
    assert _cycle(module_graph(read_package())) is None


def test_a_type_only_circle_between_modules_is_caught():
    sources = read_package()
    source, is_package = sources["kflashpy.sim.rom"]
    extra = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .board import VirtualBoard\n"
    )
    sources["kflashpy.sim.rom"] = (source + extra, is_package)
    assert _cycle(module_graph(sources)) is not None


# --- the checker bites ---------------------------------------------------------------------------


def _with(module: str, source: str, is_package: bool = False) -> dict[str, set[str]]:
    sources = read_package()
    sources[module] = (sources.get(module, ("", is_package))[0] + "\n" + source, is_package)
    return unit_graph(sources, package_units())


def test_a_synthetic_back_import_is_caught():
    # image reaching up into the serial side, relative and inside a function
    graph = _with("kflashpy.image.plan", "def f():\n    from ..isp import connect\n")
    assert any(v.startswith("image imports isp") for v in violations(graph))
    # the ground floor reaching into target
    graph = _with("kflashpy.units", "from kflashpy.target import k210\n")
    assert any(v.startswith("units imports target") for v in violations(graph))
    # target reaching into image
    graph = _with("kflashpy.target.boards", "from ..image import content\n")
    assert any(v.startswith("target imports image") for v in violations(graph))
    # the client importing the simulator
    graph = _with("kflashpy.isp.connect", "import kflashpy.sim.board\n")
    assert "isp imports sim: the virtual board is reached only through a port" in violations(graph)


def test_a_cycle_between_subpackages_is_caught():
    # sim -> isp exists (frame constants); isp -> sim closes a circle
    graph = _with("kflashpy.isp.frames", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                  "    from ..sim import board\n")  # fmt: skip
    found = violations(graph)
    assert any(v.startswith("import cycle:") and "isp" in v and "sim" in v for v in found)


def test_relative_imports_resolve_from_modules_and_packages():
    assert "kflashpy.isp.reset" in imports_of("from . import reset", "kflashpy.isp.connect")
    assert "kflashpy.isp.reset" in imports_of("from . import reset", "kflashpy.isp", True)
    assert "kflashpy.target.k210" in imports_of("from ..target import k210", "kflashpy.sim.core")


# --- the serial side stays light -----------------------------------------------------------------


def test_importing_the_serial_side_loads_no_numpy_nor_kmodel_parsers():
    """``python -X importtime -c "import kflashpy.isp"`` (and the reset engine, the
    connection and the burn API) must not load NumPy or the kmodel parsers."""
    code = (
        "import sys, kflashpy.isp, kflashpy.isp.reset, kflashpy.isp.connect, kflashpy.isp.api\n"
        "bad = sorted(m for m in sys.modules if m == 'numpy' or m.startswith("
        "('kflashpy.model.v', 'kflashpy.model.dispatch', 'kflashpy.runtime')))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == ""
    assert not any(line.rstrip().endswith("| numpy") for line in out.stderr.splitlines())
