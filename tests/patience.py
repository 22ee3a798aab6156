"""How long the tests wait for what they expect to happen, as a multiple of what each wait
names. A deadline in a test is a liveness bound, not a claim about speed: in parallel
workers, two per core, a subprocess or a fake server's answer may take several times as long
as alone, so the bounds stretch there (AGENVOY_TEST_PATIENCE overrides the factor). A test
that claims speed measures it instead of waiting."""

from __future__ import annotations

import os


def _factor() -> float:
    chosen = os.environ.get("AGENVOY_TEST_PATIENCE", "")
    if chosen:
        return float(chosen)
    return 3.0 if os.environ.get("PYTEST_XDIST_WORKER") else 1.0


FACTOR = _factor()


def patient(seconds: float) -> float:
    """`seconds`, stretched by the factor in force."""
    return seconds * FACTOR
