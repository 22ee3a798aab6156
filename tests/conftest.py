from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.settings import Settings


def service_required() -> bool:
    """CI sets AGENVOY_REQUIRE_SERVICES=1 so a missing PostgreSQL/Redis fails instead of skipping."""
    return os.environ.get("AGENVOY_REQUIRE_SERVICES", "") not in ("", "0", "false")


def skip_or_fail(reason: str) -> None:
    if service_required():
        pytest.fail(f"required service unavailable: {reason}")
    pytest.skip(reason)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", _env_file=None)  # type: ignore[call-arg]
