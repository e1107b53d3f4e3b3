"""Shared fixtures and options of the test suite.

* Paths of the test data: ``support.paths`` (``FIXTURES``, ``KMODELS``), constants because
  parametrized tests need them at import time.
* The virtual board: ``sim_flash`` (a 4 MiB flash image that boots 'MaixPy'),
  ``sim_board_url`` (the ``sim://`` URL of a board on it). Plain helpers that build such
  images and URLs live in ``tests/support/`` (test modules never import each other).
* Real boards, opt-in: ``pytest --port /dev/ttyUSB0 [--board maix-bit] -m hardware``.
  Tests marked ``hardware`` are skipped unless ``--port`` is given; they get the values
  through the ``hw_port`` and ``hw_board`` fixtures.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.maixpy import make_flash, sim_url


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kflashpy", "real K210 boards (tests marked 'hardware')")
    group.addoption("--port", default=None, help="serial port of a real board, e.g. /dev/ttyUSB0")
    group.addoption("--board", default=None, help="the board's id or alias (-B), e.g. maix-bit")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--port"):
        return
    skip = pytest.mark.skip(reason="needs a real board: run with --port PORT [--board BOARD]")
    for item in items:
        if "hardware" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def hw_port(request: pytest.FixtureRequest) -> str:
    """The real board's port (``--port``)."""
    port = request.config.getoption("--port")
    if not port:
        pytest.skip("needs a real board: run with --port PORT")
    return str(port)


@pytest.fixture(scope="session")
def hw_board(request: pytest.FixtureRequest) -> str | None:
    """The real board's id (``--board``), None to use the generic profile."""
    return request.config.getoption("--board")


@pytest.fixture(autouse=True)
def _state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytes a burn keeps for a rerun (isp/kept.py) go to a temporary directory, never to
    the user's state directory."""
    monkeypatch.setenv("KFLASHPY_STATE_DIR", str(tmp_path_factory.mktemp("state")))


@pytest.fixture
def sim_flash(tmp_path: Path) -> str:
    """A 4 MiB flash image with a boot image at 0: the virtual board boots 'MaixPy'."""
    return make_flash(tmp_path)


@pytest.fixture
def sim_board_url(sim_flash: str) -> str:
    """The ``sim://`` URL of a virtual Maix Bit on :func:`sim_flash`."""
    return sim_url(sim_flash)
