"""The web console in a real headless browser (Chromium, driven by Playwright): signing in, a
Telegram chat appearing as its first message arrives, a reply streaming, a confirmation asked
in a Discord channel approved from the console and finished there, and the sign-in's defences.

Screenshots go to docs/ when AGENVOY_SCREENSHOTS=1 (how the README's pictures are made)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from discord_rig import ANN, GENERAL, GUILD, reply_in
from discord_rig import running as discord_running
from fakes.discord import FakeDiscord, point_discord_py_at, text_channel
from fakes.telegram import FakeTelegram
from support import skip_or_fail
from telegram_rig import running as telegram_running
from test_http import USERS, write_tokens

from adapters.http import start_http
from gateway.runtime import Runtime

DOCS = Path(__file__).parents[1] / "docs"
WAIT_MS = 15_000

pytestmark = pytest.mark.timeout(180)


def chromium_path() -> str:
    found = os.environ.get("AGENVOY_CHROMIUM") or shutil.which("chromium")
    if not found:
        skip_or_fail("no Chromium to drive (Debian: apt-get install chromium)")
    return found


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    executable = chromium_path()
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        skip_or_fail("playwright is not installed")
    async with async_playwright() as driver:
        launched = await driver.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


@contextlib.asynccontextmanager
async def console(runtime: Runtime) -> AsyncIterator[str]:
    """The API (and so the console) of `runtime` on a loopback port; yields its base URL."""
    runner = await start_http(runtime, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def shoot(name: str) -> dict[str, Any]:
    if os.environ.get("AGENVOY_SCREENSHOTS") == "1":
        return {"path": str(DOCS / f"console-{name}.png"), "full_page": True}
    return {}


async def sign_in(browser: Any, base: str, user: str = "root", **context: Any) -> Any:
    page = await (await browser.new_context(**context)).new_page()
    await page.goto(f"{base}/ui/")
    assert page.url == f"{base}/ui/login"  # not signed in: sent to the form
    await page.get_by_label("API token").fill(f"agv_test-{user}")
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{base}/ui/")
    return page


def with_tokens(home: Path) -> Path:
    write_tokens(home / ".store", USERS)
    return home


async def test_a_telegram_chat_appears_and_a_reply_streams(browser: Any, tmp_path: Path) -> None:
    home = with_tokens(tmp_path / "home")
    async with (
        FakeTelegram() as fake,
        telegram_running(fake, home, admins="http:root") as rig,
        console(rig.runtime) as base,
    ):
        page = await sign_in(browser, base)
        row = page.locator('tr[data-session="tg--100"]')
        assert await row.count() == 0
        group, ann = fake.group(-100, "team"), fake.user(11, "Ann")
        fake.inject_message(group, ann, f"@{fake.bot_user['username']} hello console")
        # The list keeps itself current: the chat shows up without a reload.
        await row.wait_for(timeout=WAIT_MS)
        await page.screenshot(**shoot("sessions"))
        await row.get_by_role("link").click()
        await page.wait_for_url(f"{base}/ui/session/tg--100")
        await page.get_by_text("echo: hello console").wait_for(timeout=WAIT_MS)

        await page.get_by_label("Message").fill("!sleep 3")
        await page.get_by_role("button", name="Send").click()
        # The text arrives piece by piece in the live part, then the reply in the conversation.
        await page.locator("#live .streaming").wait_for(timeout=WAIT_MS)
        await page.locator(".message.assistant", has_text="slept 3s").wait_for(timeout=WAIT_MS)
        await page.screenshot(**shoot("session"))
        stored = [m.content for m in await rig.runtime.store.recent_messages("tg--100")]
        assert stored[-2:] == ["!sleep 3", "slept 3s"]


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        server.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[ANN])
        with point_discord_py_at(server):
            yield server


async def test_a_discord_confirmation_is_approved_from_the_console(
    browser: Any, discord_fake: FakeDiscord, tmp_path: Path
) -> None:
    fake = discord_fake
    home = with_tokens(tmp_path / "home")
    async with discord_running(fake, home, admins="http:root") as rig, console(rig.runtime) as base:
        page = await sign_in(browser, base)
        await page.goto(f"{base}/ui/approvals")
        await page.get_by_text("Nothing is waiting for you.").wait_for()
        fake.inject_message(GENERAL, ANN, "!confirm deploy", mentions_bot=True)
        card = page.locator("article.prompt", has_text="demo_action")
        await card.wait_for(timeout=WAIT_MS)
        assert "deploy" in await card.inner_text()
        await page.screenshot(**shoot("approvals"))
        await card.get_by_role("button", name="Approve").click()
        await page.get_by_text("Nothing is waiting for you.").wait_for(timeout=WAIT_MS)
        # The task finishes where it started: in the Discord channel.
        await reply_in(fake, GENERAL, "approved: deploy")


async def test_sign_in_defences(browser: Any, tmp_path: Path) -> None:
    home = with_tokens(tmp_path / "home")
    async with (
        FakeTelegram() as fake,
        telegram_running(fake, home) as rig,
        console(rig.runtime) as base,
    ):
        context = await browser.new_context()
        page = await context.new_page()
        await page.goto(f"{base}/ui/login")
        await page.get_by_label("API token").fill("agv_not-a-token")
        await page.get_by_role("button", name="Sign in").click()
        await page.get_by_role("alert").wait_for()
        assert "not valid" in await page.get_by_role("alert").inner_text()
        assert await context.cookies() == []

        page = await sign_in(browser, base, "ann")
        (cookie,) = await page.context.cookies()
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/ui"
        await rig.runtime.store.ensure("chat-abc")
        # A form without the page's CSRF token, as a forged one would be, changes nothing.
        jar = {cookie["name"]: cookie["value"]}
        async with aiohttp.ClientSession(cookies=jar) as client:
            forged = {"content": "posted from elsewhere"}
            async with client.post(f"{base}/ui/session/chat-abc/send", data=forged) as resp:
                assert resp.status == 403 and "forged" in await resp.text()
            foreign = {"Origin": "https://evil.example"}
            async with client.get(f"{base}/ui/", headers=foreign) as resp:
                assert resp.status == 200  # reading is same-origin only by the browser's rules
            async with client.get(f"{base}/v1/sessions") as resp:
                assert resp.status == 401  # the console's cookie is not an API credential
        assert await rig.runtime.store.recent_messages("chat-abc") == []

        # At phone width nothing runs off the side.
        phone = await sign_in(browser, base, "ann", viewport={"width": 375, "height": 740})
        await phone.goto(f"{base}/ui/session/chat-abc")
        width = await phone.evaluate("document.documentElement.scrollWidth")
        assert width <= 375, width
