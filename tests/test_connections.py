"""Platform connections changed live: with no token in its environment, a gateway connects its
Telegram bot once an admin names where the token is (over HTTP), answers in it, disconnects
when it is turned off and connects again when it is turned on, says why a refused token does
not run, and logs every change; a token itself is never taken."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakes.telegram import FakeTelegram
from gateway_proc import Gateway, free_port
from telegram_rig import reply_in
from test_http import ROOT, Server, bearer, serving
from typer.testing import CliRunner

from gateway.cli import app as cli_app
from gateway.platforms import PlatformSupervisor


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


async def connections(server: Server) -> dict[str, dict[str, object]]:
    status, body = await server.call("GET", "/v1/connections", headers=ROOT)
    assert status == 200, body
    return {c["platform"]: c for c in body["connections"]}


async def test_a_telegram_bot_is_connected_turned_off_and_on_without_a_restart(
    tmp_path: Path, fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREW_BOT_TOKEN", fake.token)
    monkeypatch.setenv("WRONG_BOT_TOKEN", "42:not-the-token")
    async with serving(tmp_path, telegram_api_url=fake.url) as server:
        supervisor = PlatformSupervisor(server.runtime, server.runtime.connections)
        try:
            await supervisor.apply()
            assert supervisor.running == {}
            listed = await connections(server)
            assert listed["telegram"]["source"] == "not configured"
            assert listed["telegram"]["state"] == "not connected"

            ann = fake.user(41, "Ann")
            change = {"token": "env:CREW_BOT_TOKEN"}
            status, _ = await server.call(
                "PUT", "/v1/connections/telegram", json_body=change, headers=bearer("ann")
            )
            assert status == 403
            status, body = await server.call(
                "PUT", "/v1/connections/telegram", json_body=change, headers=ROOT
            )
            assert status == 200 and body["source"] == "env:CREW_BOT_TOKEN", body
            await supervisor.apply()  # what the change started here, finished
            assert "telegram" in supervisor.running
            assert (await connections(server))["telegram"]["state"] == "connected"
            fake.inject_message(fake.private_chat(41, "Ann"), ann, "hello")
            await reply_in(fake, 41, "echo: hello")

            off = {"token": "env:CREW_BOT_TOKEN", "enabled": False}
            status, body = await server.call(
                "PUT", "/v1/connections/telegram", json_body=off, headers=ROOT
            )
            assert status == 200 and body["source"] == "off"
            await supervisor.apply()
            assert supervisor.running == {}
            assert (await connections(server))["telegram"]["state"] == "not connected"

            status, _ = await server.call(
                "PUT", "/v1/connections/telegram", json_body=change, headers=ROOT
            )
            await supervisor.apply()
            fake.inject_message(fake.private_chat(41, "Ann"), ann, "again")
            await reply_in(fake, 41, "echo: again")

            wrong = {"token": "env:WRONG_BOT_TOKEN"}
            status, _ = await server.call(
                "PUT", "/v1/connections/telegram", json_body=wrong, headers=ROOT
            )
            await supervisor.apply()
            assert supervisor.running == {}
            state = (await connections(server))["telegram"]["state"]
            assert str(state).startswith("cannot start"), state
            assert "not-the-token" not in str(state)

            status, body = await server.call(
                "PUT", "/v1/connections/telegram", json_body={"token": fake.token}, headers=ROOT
            )
            assert status == 400 and "env:NAME or file:NAME" in body["error"]["message"]
            assert fake.token.split(":")[1] not in str(body)
            status, body = await server.call(
                "PUT", "/v1/connections/whatsapp", json_body=change, headers=ROOT
            )
            assert status == 404

            status, body = await server.call("GET", "/v1/changes?kind=connection", headers=ROOT)
            assert status == 200
            afters = [c["after"] for c in reversed(body["changes"])]
            assert afters == [
                {"token": "env:CREW_BOT_TOKEN", "enabled": True},
                {"token": "env:CREW_BOT_TOKEN", "enabled": False},
                {"token": "env:CREW_BOT_TOKEN", "enabled": True},
                {"token": "env:WRONG_BOT_TOKEN", "enabled": True},
            ]
            status, body = await server.call("DELETE", "/v1/connections/telegram", headers=ROOT)
            assert status == 200
            assert (await connections(server))["telegram"]["source"] == "not configured"
        finally:
            await supervisor.stop()


async def test_a_running_gateway_takes_a_connection_made_from_the_command_line(
    tmp_path: Path, fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`agenvoy run` with no Telegram token; `agenvoy connection set` (another process, on
    the same archive) names one; the gateway connects at its next check and answers."""
    home = tmp_path / "home"
    monkeypatch.setenv("AGENVOY_HOME", str(home))
    monkeypatch.setenv("CREW_BOT_TOKEN", fake.token)
    gateway = Gateway(
        home,
        free_port(),
        AGENVOY_TELEGRAM_API_URL=fake.url,
        AGENVOY_CONNECTION_CHECK_SECONDS="0.2",
        NO_PROXY="127.0.0.1,localhost",
    )
    await gateway.start()
    try:
        runner = CliRunner()
        set_it = ["connection", "set", "telegram", "env:CREW_BOT_TOKEN"]
        result = await asyncio.to_thread(runner.invoke, cli_app, set_it)
        assert result.exit_code == 0, result.output
        ann = fake.user(41, "Ann")
        fake.inject_message(fake.private_chat(41, "Ann"), ann, "hello")
        await reply_in(fake, 41, "echo: hello", within=30)
        result = await asyncio.to_thread(runner.invoke, cli_app, ["connection", "list"])
        assert "telegram  env:CREW_BOT_TOKEN (by terminal:" in result.output, result.output
        result = await asyncio.to_thread(
            runner.invoke, cli_app, ["connection", "set", "telegram", "12345:abcdef"]
        )
        assert result.exit_code == 2 and "env:NAME or file:NAME" in result.output
    finally:
        await gateway.stop()
