"""The link that adds the bot to a server: the permissions it asks for are the ones the
adapter uses, the gateway logs it when the bot connects, and `agenvoy discord invite` prints
it — both against the fake Discord."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import discord
from discord_rig import GENERAL, GUILD, running
from fakes.discord import FakeDiscord, point_discord_py_at, text_channel
from structlog.testing import capture_logs
from typer.testing import CliRunner, Result

from adapters.discord.invite import INVITE_PERMISSIONS, PERMISSIONS_USED, invite_url
from gateway.cli import app as cli_app
from gateway.logs import configure_logging

APPLICATION = 4242
# What the bot must never be handed: a prompt injection could otherwise make it use them.
ELEVATED = {"administrator", "manage_guild", "manage_channels", "manage_messages", "manage_roles"}


def test_the_permission_integer_is_the_named_permissions() -> None:
    named = discord.Permissions(**dict.fromkeys(PERMISSIONS_USED, True))
    assert named.value == INVITE_PERMISSIONS
    # One bit each (discord.py knows `view_channel` by its other name too, `read_messages`).
    assert bin(INVITE_PERMISSIONS).count("1") == len(PERMISSIONS_USED)
    granted = discord.Permissions(INVITE_PERMISSIONS)
    assert [name for name in sorted(ELEVATED) if getattr(granted, name)] == []


def test_the_invite_link_names_the_application_scopes_and_permissions() -> None:
    url = urlsplit(invite_url(APPLICATION))
    assert (url.scheme, url.netloc, url.path) == ("https", "discord.com", "/oauth2/authorize")
    query = parse_qs(url.query)
    assert query == {
        "client_id": [str(APPLICATION)],
        "scope": ["bot applications.commands"],
        "permissions": [str(INVITE_PERMISSIONS)],
    }


async def test_the_gateway_logs_the_invite_link_when_the_bot_connects(tmp_path: Path) -> None:
    async with FakeDiscord(application_id=APPLICATION) as fake:
        fake.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")])
        configure_logging("INFO")  # the tests log warnings only; the link is info
        try:
            with capture_logs() as logs, point_discord_py_at(fake):
                async with running(fake, tmp_path):
                    pass
        finally:
            configure_logging("WARNING")
    links = [entry["url"] for entry in logs if entry["event"] == "discord invite link"]
    assert links == [invite_url(APPLICATION)]


async def invite(env: dict[str, Any], home: Path) -> Result:
    env = {"AGENVOY_HOME": str(home), **env}
    return await asyncio.to_thread(CliRunner().invoke, cli_app, ["discord", "invite"], env=env)


async def test_agenvoy_discord_invite_asks_discord_which_application(tmp_path: Path) -> None:
    async with FakeDiscord(application_id=APPLICATION) as fake:
        pointed = {"AGENVOY_DISCORD_API_URL": fake.api_base}
        printed = await invite({**pointed, "AGENVOY_DISCORD_TOKEN": fake.token}, tmp_path)
        assert printed.exit_code == 0, printed.output
        assert printed.stdout.strip() == invite_url(APPLICATION)

        refused = await invite({**pointed, "AGENVOY_DISCORD_TOKEN": "not.the.token"}, tmp_path)
        assert refused.exit_code == 1
        assert "Discord refused the token" in refused.stderr

    unset = await invite({"AGENVOY_DISCORD_TOKEN": ""}, tmp_path)
    assert unset.exit_code == 2
    assert "AGENVOY_DISCORD_TOKEN is not set" in unset.stderr
