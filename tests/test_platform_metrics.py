"""Per-platform metrics on /metrics, through the real front-ends: messages in and out, refusals,
open prompts, and the outbox backlog while a platform refuses replies and after it is back.
Label values are platform names and fixed words, never ids."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from discord_rig import ANN as DISCORD_ANN
from discord_rig import GENERAL, custom_ids, general_only, prompt_in
from discord_rig import reply_in as discord_reply_in
from discord_rig import running as discord_running
from fakes.telegram import FakeTelegram
from support import wait_until
from telegram_rig import reply_in as telegram_reply_in
from telegram_rig import running as telegram_running
from test_http import ANN, Samples, Server, parse_metrics, sample, scrape, serving

from adapters.http import start_http
from adapters.http.app import CONTEXT_KEY
from adapters.http.metrics import HttpMetrics
from gateway.runtime import Runtime
from gateway.store.errors import DatabaseUnavailable
from gateway.store.outbox import Backlog

PLATFORM_FAMILIES = (
    "agenvoy_platform_messages_in_total",
    "agenvoy_platform_messages_refused_total",
    "agenvoy_platform_messages_out_total",
    "agenvoy_platform_delivery_failures_total",
    "agenvoy_platform_rate_limited_total",
    "agenvoy_platform_prompts_open",
    "agenvoy_platform_outbox_pending",
    "agenvoy_platform_outbox_retrying",
    "agenvoy_platform_outbox_oldest_seconds",
)
# Every label value these families may carry: a fixed set, so no id can ever be one.
ALLOWED = {
    "platform": {"telegram", "discord", "http", "terminal", "schedule", "other"},
    "kind": {"task", "command", "context", "reply", "prompt", "error", "notice", "event"},
    "reason": {
        "duplicate",
        "too_long",
        "unstorable",
        "invalid",
        "banned",
        "not_allowed",
        "session_quota",
        "rate_limited",
        "budget_exceeded",
        "quota",
        "too_many_tasks",
        "queue_full",
        "unavailable",
        "storage_full",
        "error",
    },
    "outcome": {"retried", "refused", "expired", "lost"},
}


def bounded(samples: Samples) -> None:
    """Every per-platform sample's labels are from `ALLOWED`."""
    seen = 0
    for name, labels in samples:
        if name.startswith("agenvoy_platform_"):
            seen += 1
            for key, value in labels:
                assert value in ALLOWED[key], (name, key, value)
    assert seen, "no per-platform samples"


def count(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 for a series not shown (nothing counted for it yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


class Scraper:
    """/metrics of an API served beside a chat adapter (a rig's runtime)."""

    def __init__(self, client: aiohttp.ClientSession) -> None:
        self.client = client

    async def __call__(self) -> Samples:
        async with self.client.get("/metrics") as resp:
            assert resp.status == 200
            return parse_metrics(await resp.text())


@contextlib.asynccontextmanager
async def api_of(runtime: Runtime) -> AsyncIterator[Scraper]:
    runner = await start_http(runtime, "127.0.0.1", 0)
    try:
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with aiohttp.ClientSession(base_url=base) as client:
            yield Scraper(client)
    finally:
        await runner.cleanup()


def metrics_of(server: Server) -> HttpMetrics:
    return server.runner.app[CONTEXT_KEY].metrics


# -- HTTP ------------------------------------------------------------------------------------------


async def test_http_messages_in_and_out_refusals_and_an_open_prompt(tmp_path: Path) -> None:
    async with serving(tmp_path, max_message_chars=100) as server:
        before = await scrape(server)
        assert sample(before, "agenvoy_platform_outbox_up") == 1
        for text in ("one", "two"):
            status, body = await server.call("POST", "/v1/send", json_body={"content": text})
            assert (status, body["text"]) == (200, f"echo: {text}")
        status, _ = await server.call("POST", "/v1/send", json_body={"content": "x" * 101})
        assert status == 413
        samples = await scrape(server)
        bounded(samples)
        inbound = "agenvoy_platform_messages_in_total"
        outbound = "agenvoy_platform_messages_out_total"
        assert sample(samples, inbound, platform="http", kind="task") == 2
        assert sample(samples, outbound, platform="http", kind="reply") == 2
        refused = "agenvoy_platform_messages_refused_total"
        assert sample(samples, refused, platform="http", reason="too_long") == 1
        # Pulled by its clients: nothing of HTTP waits in the outbox.
        assert count(samples, "agenvoy_platform_outbox_pending", platform="http") == 0

        # A confirmation waiting for its answer is an open prompt of its platform, until
        # answered.
        status, body = await server.call(
            "POST", "/v1/send", json_body={"content": "!confirm x"}, headers=ANN
        )
        assert status == 202 and body["pending"]["kind"] == "confirm"
        sid, task = body["session_id"], body["task_hash"]
        samples = await scrape(server)
        assert sample(samples, "agenvoy_platform_prompts_open", platform="http") == 1

        # The prompt is counted as it goes out, which the answer saying it waits may precede
        # by a moment on a loaded machine.
        async def prompt_counted() -> bool:
            found = await scrape(server)
            return count(found, outbound, platform="http", kind="prompt") == 1

        assert await wait_until(prompt_counted)
        status, _ = await server.call(
            "POST", f"/v1/session/{sid}/pending/{task}", json_body={"approve": True}, headers=ANN
        )
        assert status == 200
        path = f"/v1/session/{sid}/task/{task}?wait=10"
        status, view = await server.call("GET", path, headers=ANN)
        assert (status, view["text"]) == (200, "approved: x")
        samples = await scrape(server)
        bounded(samples)
        assert count(samples, "agenvoy_platform_prompts_open", platform="http") == 0
        assert sample(samples, inbound, platform="http", kind="task") == 3


async def test_metrics_are_served_while_the_archive_fails_or_hangs(tmp_path: Path) -> None:
    """The backlog is the one part read from the archive: when that read fails or does not
    answer in time, the scrape still answers at once, with the rest, and says so."""
    async with serving(tmp_path) as server:
        status, _ = await server.call("POST", "/v1/send", json_body={"content": "hi"})
        assert status == 200
        outbox = server.runtime.store.outbox
        collector = metrics_of(server).platforms
        assert collector is not None
        collector.timeout = 0.2

        async def unavailable() -> list[Backlog]:
            raise DatabaseUnavailable("the database cannot be reached")

        never: asyncio.Future[list[Backlog]] = asyncio.get_running_loop().create_future()

        async def hanging() -> list[Backlog]:
            return await never

        for broken in (unavailable, hanging):
            outbox.backlog = broken  # type: ignore[method-assign]
            started = asyncio.get_running_loop().time()
            samples = await scrape(server)
            assert asyncio.get_running_loop().time() - started < 5
            assert sample(samples, "agenvoy_platform_outbox_up") == 0
            assert not any(name == "agenvoy_platform_outbox_pending" for name, _ in samples)
            inbound = "agenvoy_platform_messages_in_total"
            assert sample(samples, inbound, platform="http", kind="task") == 1
            assert sample(samples, "agenvoy_tasks_running") == 0
        never.set_result([Backlog("telegram", 3, 1, 0)])
        del outbox.backlog  # the store's own read again
        samples = await scrape(server)
        assert sample(samples, "agenvoy_platform_outbox_up") == 1


# -- Telegram --------------------------------------------------------------------------------------


def is_reply(params: dict[str, Any]) -> bool:
    return str(params.get("text", "")).startswith("echo:")


async def test_telegram_counts_and_a_backlog_that_rises_and_falls(tmp_path: Path) -> None:
    async with FakeTelegram() as fake, telegram_running(fake, tmp_path / "home") as rig:
        # Tries in the background come at most 0.2 s apart: the backlog drains soon after
        # Telegram takes replies again.
        rig.runtime.engine.courier.retry_cap = 0.2
        async with api_of(rig.runtime) as scraped:
            # One 429 first: python-telegram-bot waits it out and sends again; it is counted.
            fake.fail_next("sendMessage", 429, times=1, when=is_reply, retry_after=1)
            fake.inject_message(fake.private_chat(71), fake.user(71, "Ann"), "hello")
            await telegram_reply_in(fake, 71, "echo: hello")
            samples = await scraped()
            bounded(samples)
            inbound = "agenvoy_platform_messages_in_total"
            outbound = "agenvoy_platform_messages_out_total"
            assert sample(samples, inbound, platform="telegram", kind="task") == 1
            assert sample(samples, "agenvoy_platform_rate_limited_total", platform="telegram") == 1
            assert await wait_until(lambda: replies(scraped, "telegram", at_least=1)), (
                "the reply is counted once delivered"
            )

            # Telegram answers 502 to every reply for now: the reply waits in the outbox.
            down = True
            fake.fail_next(
                "sendMessage",
                502,
                "Bad Gateway",
                times=1_000_000,
                when=lambda p: down and is_reply(p),
            )
            fake.inject_message(fake.private_chat(72), fake.user(72, "Bob"), "are you there?")

            async def backlog(pending: int, retrying: int) -> bool:
                samples = await scraped()
                return (
                    count(samples, "agenvoy_platform_outbox_pending", platform="telegram"),
                    count(samples, "agenvoy_platform_outbox_retrying", platform="telegram"),
                ) == (pending, retrying)

            # Waiting, and failed at least once (in backoff).
            assert await wait_until(lambda: backlog(1, 1), 10)
            samples = await scraped()
            bounded(samples)
            oldest = "agenvoy_platform_outbox_oldest_seconds"
            assert 0 <= sample(samples, oldest, platform="telegram") < 60
            failures = "agenvoy_platform_delivery_failures_total"
            assert sample(samples, failures, platform="telegram", outcome="retried") >= 1
            assert sample(samples, inbound, platform="telegram", kind="task") == 2
            assert count(samples, outbound, platform="telegram", kind="reply") == 1

            down = False  # Telegram is back: the reply goes out, the backlog empties
            await telegram_reply_in(fake, 72, "echo: are you there?")
            assert await wait_until(lambda: backlog(0, 0), 10)
            assert await wait_until(lambda: replies(scraped, "telegram", at_least=2))
            samples = await scraped()
            bounded(samples)
            assert sample(samples, outbound, platform="telegram", kind="reply") == 2
            assert count(samples, failures, platform="telegram", outcome="refused") == 0


async def replies(scraped: Scraper, platform: str, *, at_least: int) -> bool:
    samples = await scraped()
    out = count(samples, "agenvoy_platform_messages_out_total", platform=platform, kind="reply")
    return out >= at_least


# -- Discord ---------------------------------------------------------------------------------------


async def test_discord_counts_and_an_open_confirmation(tmp_path: Path) -> None:
    async with (
        general_only() as fake,
        discord_running(fake, tmp_path / "home") as rig,
        api_of(rig.runtime) as scraped,
    ):
        # One 429 first: discord.py waits it out and sends again; it is counted.
        fake.fail_next(
            "POST /channels/{id}/messages",
            429,
            retry_after=0.2,
            when=lambda body: str(body.get("content", "")).startswith("echo:"),
        )
        fake.inject_message(GENERAL, DISCORD_ANN, "chatter, not for the bot")
        fake.inject_message(GENERAL, DISCORD_ANN, "hello", mentions_bot=True)
        await discord_reply_in(fake, GENERAL, "echo: hello")
        assert await wait_until(lambda: replies(scraped, "discord", at_least=1))
        samples = await scraped()
        bounded(samples)
        inbound = "agenvoy_platform_messages_in_total"
        assert sample(samples, inbound, platform="discord", kind="task") == 1
        assert sample(samples, inbound, platform="discord", kind="context") == 1
        assert count(samples, inbound, platform="telegram", kind="task") == 0
        assert sample(samples, "agenvoy_platform_rate_limited_total", platform="discord") == 1

        fake.inject_message(GENERAL, DISCORD_ANN, "!confirm x", mentions_bot=True)
        prompt = await prompt_in(fake, GENERAL)

        async def open_prompts(expected: int) -> bool:
            samples = await scraped()
            shown = count(samples, "agenvoy_platform_prompts_open", platform="discord")
            return shown == expected

        assert await wait_until(lambda: open_prompts(1), 10)
        samples = await scraped()
        bounded(samples)
        outbound = "agenvoy_platform_messages_out_total"
        assert sample(samples, outbound, platform="discord", kind="prompt") == 1
        approve = next(cid for cid in custom_ids(prompt) if cid.endswith(":y"))
        fake.inject_component(DISCORD_ANN, prompt, approve)
        await discord_reply_in(fake, GENERAL, "approved: x")
        assert await wait_until(lambda: open_prompts(0), 10)
        assert await wait_until(lambda: replies(scraped, "discord", at_least=2))
        assert sample(await scraped(), inbound, platform="discord", kind="task") == 2
