"""Docstrings and docs cite only documents that are in the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITED = re.compile(r"[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b")
#: paths inside third-party repositories that fixture notes name as sources
FOREIGN = ("examples/iris/",)


def _sources() -> list[Path]:
    files = [*ROOT.joinpath("kflashpy").rglob("*.py"), *ROOT.joinpath("docs").glob("*.md")]
    files += [*ROOT.joinpath("tests").glob("*.py"), *ROOT.joinpath("benchmarks").glob("*.py")]
    files += [ROOT / "README.md", ROOT / "firmware_layouts" / "SCHEMA.md"]
    files += list(ROOT.joinpath("firmware_layouts").glob("*.toml"))
    return [f for f in files if f != Path(__file__).resolve()]  # this file cites on purpose


def _exists(name: str, near: Path) -> bool:
    bases = (ROOT, ROOT / "docs", ROOT / "firmware_layouts", near.parent)
    return any((base / name).is_file() for base in bases)


def test_every_cited_document_is_in_the_repository():
    missing = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _sources()
        for name in CITED.findall(path.read_text(encoding="utf-8"))
        if not name.startswith(FOREIGN) and not _exists(name, path)
    ]
    assert missing == []


def test_the_check_sees_an_outside_reference(tmp_path):
    note = tmp_path / "x.py"
    note.write_text('"""As kflash_protocol.md §4 says."""\n')
    names = CITED.findall(note.read_text())
    assert names == ["kflash_protocol.md"] and not _exists(names[0], note)
