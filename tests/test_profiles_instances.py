"""A profile change made on one gateway instance (or by `agenvoy profile set`, which writes the
archive directly) applies to the next task of another instance on the same database, without a
restart; the agent built for the older version is closed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakes.openai import FakeOpenAI
from fakes.openai.replies import Text
from typer.testing import CliRunner

from gateway.cli import app as cli_app
from gateway.events import Inbound, Origin
from gateway.profiles.service import Profiles
from gateway.runtime import Runtime
from gateway.settings import Settings

KEY_VARIABLE = "AGENVOY_TEST_PROFILE_KEY"
ME = Origin("terminal", sender_id="me", sender_name="me")


@pytest.fixture
async def pair(
    tmp_path: Path, database_url: str, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Runtime, Runtime]]:
    monkeypatch.setenv(KEY_VARIABLE, model.api_key)
    one = await Runtime.start(
        Settings(home=tmp_path / "a", database_url=database_url, _env_file=None)
    )
    two = await Runtime.start(
        Settings(home=tmp_path / "b", database_url=database_url, _env_file=None)
    )
    try:
        yield one, two
    finally:
        await two.close()
        await one.close()


def profiles_of(runtime: Runtime) -> Profiles:
    assert runtime.profiles is not None
    return runtime.profiles


async def answered_by(runtime: Runtime, model: FakeOpenAI, session_id: str, text: str) -> str:
    model.script(Text(f"answer to {text}"))
    submission = await runtime.router.submit(Inbound(ME, session_id, text))
    state = await runtime.router.wait(submission.task_hash, 10)
    assert state.reply == f"answer to {text}", (state.status, state.error)
    return str(model.requests[-1]["model"])


async def test_a_change_on_one_instance_applies_to_the_next_task_of_another(
    pair: tuple[Runtime, Runtime], model: FakeOpenAI
) -> None:
    serving, changing = pair
    team = {"agent": "openai", "base_url": model.url, "key": f"env:{KEY_VARIABLE}"}
    await profiles_of(changing).set("team", {**team, "model": "model-1"}, by="test")
    await profiles_of(changing).bind("prefix:cli", "team", by="test")
    assert await answered_by(serving, model, "cli-one", "first") == "model-1"
    await profiles_of(changing).set("team", {"model": "model-2"}, by="test")
    assert await answered_by(serving, model, "cli-one", "second") == "model-2"
    await profiles_of(changing).unbind("prefix:cli")
    submission = await serving.router.submit(Inbound(ME, "cli-one", "third"))
    assert (await serving.router.wait(submission.task_hash, 10)).reply == "echo: third"


async def test_a_change_by_the_cli_reaches_a_running_gateway(
    tmp_path: Path, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, model.api_key)
    home = tmp_path / "home"
    monkeypatch.setenv("AGENVOY_HOME", str(home))
    runtime = await Runtime.start(Settings(home=home, _env_file=None))
    try:

        def cli(*args: str) -> str:
            result = CliRunner().invoke(cli_app, list(args))
            assert result.exit_code == 0, result.output
            return result.output

        made = await asyncio.to_thread(
            cli,
            "profile",
            "set",
            "team",
            "agent=openai",
            "model=model-cli",
            f"base_url={model.url}",
            f"key=env:{KEY_VARIABLE}",
        )
        assert "version 1 (created)" in made
        await asyncio.to_thread(cli, "bind", "prefix:cli", "team")
        assert await answered_by(runtime, model, "cli-two", "hello") == "model-cli"
        shown = await asyncio.to_thread(cli, "bindings")
        assert "prefix:cli" in shown and "team" in shown
        await asyncio.to_thread(cli, "profile", "set", "team", "model=model-cli-2")
        assert await answered_by(runtime, model, "cli-two", "again") == "model-cli-2"
        await asyncio.to_thread(cli, "profile", "rollback", "team", "1")
        history = await asyncio.to_thread(cli, "profile", "history", "team")
        assert "rollback to version 1" in history and "terminal:" in history
        refused = await asyncio.to_thread(
            CliRunner().invoke,
            cli_app,
            ["profile", "set", "team", "key=sk-" + "abcdefghijklmnop" + "-not-a-real-key"],
        )
        assert refused.exit_code == 2 and "key: this looks like a key" in refused.output
        assert "abcdefghijklmnop" not in refused.output
    finally:
        await runtime.close()
