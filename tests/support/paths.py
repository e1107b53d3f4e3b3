"""Where the test data lives (origin and licence: tests/fixtures/kmodels/README.md)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
KMODELS = FIXTURES / "kmodels"
