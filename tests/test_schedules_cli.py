"""`agenvoy sessions` counts the schedules of each session, in a home a runtime wrote."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from clock import FakeClock
from test_schedules import ADMINS, ANN, command
from typer.testing import CliRunner

from gateway.cli import app as cli_app
from gateway.runtime import Runtime
from gateway.settings import Settings


async def start(home: Path, clock: FakeClock) -> Runtime:
    return await Runtime.start(Settings(home=home, admins=ADMINS, _env_file=None), clock=clock)


async def test_agenvoy_sessions_shows_how_many_schedules_a_session_has(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    runtime = await start(home, clock)
    try:
        await command(runtime, ANN, "cli-busy", "/schedule every 1h a")
        await command(runtime, ANN, "cli-busy", "/schedule @daily b")
        await command(runtime, ANN, "cli-idle", "/status")
        await runtime.store.ensure("cli-idle")
    finally:
        await runtime.close()
    monkeypatch.setenv("AGENVOY_HOME", str(home))
    result = await asyncio.to_thread(CliRunner().invoke, cli_app, ["sessions"])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines() if "msgs" in line}
    assert lines["cli-busy"].endswith("0 msgs  2 scheduled")
    assert lines["cli-idle"].endswith("0 msgs")
