"""A chat platform that cannot be reached when the gateway starts: the gateway serves anyway,
`/healthz` and the console show the platform down with the reason, and it connects once the
platform answers (the fake Telegram and the fake Discord started after the gateway)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from discord_rig import ANN, GENERAL, GUILD
from discord_rig import reply_in as discord_reply_in
from fakes.discord import FakeDiscord, text_channel
from fakes.telegram import FakeTelegram
from gateway_proc import free_port
from support import wait_until
from telegram_rig import reply_in as telegram_reply_in

from gateway.app import serve
from gateway.settings import Settings


@contextlib.asynccontextmanager
async def gateway(settings: Settings) -> AsyncIterator[asyncio.Task[None]]:
    """`serve` in this process, stopped as `agenvoy run` is on SIGTERM."""
    stop = asyncio.Event()
    task = asyncio.create_task(serve(settings, stop=stop))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def platforms(http: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    async with http.get(f"{base}/healthz") as resp:
        assert resp.status == 200  # a platform down leaves the instance ready
        found: dict[str, Any] = (await resp.json())["platforms"]
        return found


async def test_telegram_and_discord_unreachable_at_start_connect_once_they_answer(
    tmp_path: Path,
) -> None:
    telegram, discord = FakeTelegram(), FakeDiscord()
    telegram.listen_port, discord.listen_port, http_port = free_port(), free_port(), free_port()
    discord.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[ANN])
    settings = Settings(
        home=tmp_path / "home",
        http_port=http_port,
        telegram_token=telegram.token,
        telegram_api_url=f"http://127.0.0.1:{telegram.listen_port}",
        discord_token=discord.token,
        discord_api_url=f"http://127.0.0.1:{discord.listen_port}/api/v10",
        discord_gateway_url=f"ws://127.0.0.1:{discord.listen_port}/gateway/",
        platform_retry_max_seconds=0.2,
        _env_file=None,
    )
    base = f"http://127.0.0.1:{http_port}"
    async with gateway(settings) as running, aiohttp.ClientSession() as http:

        async def both_down() -> bool:
            if running.done():
                running.result()  # the gateway died: say why
            with contextlib.suppress(aiohttp.ClientConnectionError):
                states = await platforms(http, base)
                return {n: s["state"] for n, s in states.items()} == {
                    "discord": "down",
                    "telegram": "down",
                }
            return False

        assert await wait_until(both_down, 20)
        down = await platforms(http, base)
        assert all("onnect" in down[name]["reason"] for name in down), down
        async with http.get(f"{base}/ui/health") as resp:
            page = await resp.text()
        assert resp.status == 200 and "down: " in page, page
        # The HTTP API serves meanwhile.
        async with http.post(f"{base}/v1/send", json={"content": "still here"}) as resp:
            assert resp.status == 200 and (await resp.json())["text"] == "echo: still here"

        async with telegram, discord:

            async def both_connected() -> bool:
                states = await platforms(http, base)
                return all(state["state"] == "connected" for state in states.values())

            # A Discord message reaches only a bot on the gateway: sent once it is connected.
            assert await wait_until(both_connected, 20)
            chat = telegram.private_chat(11)
            telegram.inject_message(chat, telegram.user(11, "Ann"), "hello telegram")
            await telegram_reply_in(telegram, 11, "echo: hello telegram")
            discord.inject_message(GENERAL, ANN, "hello discord", mentions_bot=True)
            await discord_reply_in(discord, GENERAL, "echo: hello discord")
