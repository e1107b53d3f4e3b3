"""README's set-up block vs what CI runs: .ci/run must run exactly those commands, in order.

The real proof (a clone in an empty temporary directory, a fresh virtualenv, every command
run) is `bash .ci/run` itself, which CI runs; a full install is too slow for the suite. Here
`.ci/run --dry-run` clones the committed HEAD and prints what it would run, and this test
compares that with the README, parsed here independently of .ci/readme_setup.py.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _readme_block() -> list[str]:
    """The README's set-up commands, read the plain way: the sh block after '## Set up'."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README's Set up section has no ```sh block"
    return [
        line.strip()
        for line in block.group(1).splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def _parser():
    spec = importlib.util.spec_from_file_location("readme_setup", ROOT / ".ci" / "readme_setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_setup_block_is_install_then_tests():
    commands = _readme_block()
    assert len(commands) >= 2
    assert "pip install -e ." in commands[0] and "kflashpy demo" in commands[0]
    assert 'pip install -e ".[dev]"' in commands[-1] and commands[-1].endswith("pytest")


def test_parser_reads_the_same_commands_as_a_plain_reading():
    assert _parser().setup_commands((ROOT / "README.md").read_text(encoding="utf-8")) == (
        _readme_block()
    )


def test_parser_joins_continuations_and_refuses_a_readme_without_commands():
    parse = _parser().setup_commands
    text = "# x\n\n## Set up\n\n```sh\n# c\npip install \\\n  -e .\n\npytest\n```\n## Next\n"
    assert parse(text) == ["pip install -e .", "pytest"]
    with pytest.raises(ValueError, match="Set up"):
        parse("# x\n## Set up\nno block here\n## Next\n```sh\nrm -rf /\n```\n")


def test_ci_runs_the_readme_commands_in_a_fresh_clone():
    if not shutil.which("git") or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    head_readme = subprocess.run(
        ["git", "show", "HEAD:README.md"], cwd=ROOT, capture_output=True, text=True
    )
    if head_readme.returncode or head_readme.stdout != (ROOT / "README.md").read_text("utf-8"):
        pytest.skip("README.md has uncommitted changes; .ci/run clones the committed HEAD")
    run = subprocess.run(
        ["bash", str(ROOT / ".ci" / "run"), "--dry-run"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    ran = [line.removeprefix("ci: would run: ") for line in run.stdout.splitlines()]
    ran = [line for line in ran if not line.startswith("ci: ")]
    assert ran == _readme_block()
    assert "alone in its directory" in run.stdout


def test_ci_script_runs_nothing_but_the_parsed_commands():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    for command in ("pytest", "ruff", "kflashpy demo", "pip install"):
        assert command not in code, f".ci/run spells {command!r} itself: take it from README"
    assert "git clone" in code and "mktemp -d" in code and "-m venv" in code
