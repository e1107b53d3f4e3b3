"""Print the commands of README.md's "Set up" block, one per line, in order.

`.ci/run` runs exactly these in a fresh clone, and tests/test_readme_setup.py checks that
it does, so the README's set-up instructions and what CI proves cannot drift apart.
A command is a non-blank, non-comment line of the first ``sh`` block under the
``## Set up`` heading; a line ending in a backslash continues on the next one.
"""

from __future__ import annotations

import sys
from pathlib import Path

HEADING = "## Set up"


def setup_commands(readme: str) -> list[str]:
    """The shell commands of the README's set-up block (raises ValueError if it has none)."""
    lines = readme.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == HEADING)
    except StopIteration:
        raise ValueError(f"README has no {HEADING!r} heading") from None
    commands: list[str] = []
    in_block, pending = False, ""
    for line in lines[start + 1 :]:
        stripped = line.strip()
        if not in_block:
            if stripped.startswith("## "):
                break
            in_block = stripped in ("```sh", "```bash", "```shell")
            continue
        if stripped.startswith("```"):
            break
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        commands.append(pending + stripped)
        pending = ""
    if not commands:
        raise ValueError(f"README's {HEADING!r} section has no sh block with commands")
    return commands


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent / "README.md"
    print("\n".join(setup_commands(path.read_text(encoding="utf-8"))))
