"""The web console in a real headless browser (Chromium, driven by Playwright): signing in, a
Telegram chat appearing as its first message arrives, a reply streaming, a confirmation asked
in a Discord channel approved from the console and finished there, and the sign-in's defences.

Screenshots go to docs/ when AGENVOY_SCREENSHOTS=1 (how the docs' pictures are made)."""

from __future__ import annotations

import base64
import contextlib
import html
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest
from discord_rig import ANN, GENERAL, general_only, reply_in
from discord_rig import running as discord_running
from fakes.discord import FakeDiscord
from fakes.telegram import FakeTelegram
from support import wait_until
from telegram_rig import running as telegram_running
from test_http import USERS, bearer, serving, write_tokens

from adapters.http import start_http
from gateway.events import Inbound, Origin
from gateway.runtime import Runtime
from gateway.store.usage import DAY_MS, UsageRecord

DOCS = Path(__file__).parents[1] / "docs"
WAIT_MS = 15_000

pytestmark = pytest.mark.timeout(180)


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

        # A question the task asks shows up on the page as it is asked, answerable there.
        await page.get_by_label("Message").fill("!ask which colour?")
        await page.get_by_role("button", name="Send").click()
        await page.get_by_label("Answer", exact=True).fill("blue")
        await page.get_by_role("button", name="Answer").click()
        await page.locator(".message.assistant", has_text="answer: blue").wait_for(timeout=WAIT_MS)


@pytest.fixture
async def discord_fake() -> AsyncIterator[FakeDiscord]:
    async with general_only() as server:
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
        await rig.runtime.store.ensure("chat-abc", owner="http:ann")
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


async def test_search_usage_charts_and_health(browser: Any, tmp_path: Path) -> None:
    home = with_tokens(tmp_path / "home")
    async with (
        FakeTelegram() as fake,
        telegram_running(fake, home, admins="http:root") as rig,
        console(rig.runtime) as base,
    ):
        runtime = rig.runtime
        await runtime.store.ensure("chat-notes")
        fake.inject_message(fake.private_chat(31), fake.user(31, "Cy"), "the quarterly forecast")
        now = runtime.clock.now_ms()
        for days_ago, model, output in ((0, "gpt-a", 300), (3, "gpt-a", 100), (1, "claude-b", 50)):
            record = UsageRecord(
                "chat-notes",
                model,
                input=10,
                output=output,
                elapsed_ms=1000,
                send_at=now - days_ago * DAY_MS,
            )
            await runtime.store.usage.record(record)
        made = await runtime.router.submit(
            Inbound(
                Origin("http", sender_id="ann", sender_name="Ann"),
                "chat-notes",
                "/schedule every 1h post the forecast",
            )
        )
        assert made.command is not None and made.command.ok, made
        # A gateway admin: the sessions are nobody's, the usage everyone's.
        page = await sign_in(browser, base, "root")
        notes = page.locator('tr[data-session="chat-notes"]')
        assert "1 scheduled" in await notes.inner_text()
        await notes.get_by_role("link").click()
        schedules = await page.locator("table.schedules").inner_text()
        assert "every 1h" in schedules and "post the forecast" in schedules and "Ann" in schedules

        await page.get_by_role("link", name="Search").click()
        await page.get_by_label("Search for").fill("forecast")
        await page.get_by_role("button", name="Search").click()
        hit = page.locator(".results li.user", has_text="the quarterly forecast")
        await hit.wait_for(timeout=WAIT_MS)
        assert "tg-31" in await hit.inner_text()

        # By meaning: one session's messages, best first, with how alike they are.
        await page.get_by_label("the meaning").check()
        await page.get_by_role("button", name="Search").click()
        assert "name it" in await page.get_by_role("alert").inner_text()
        await page.get_by_label("In session").fill("tg-31")
        await page.get_by_label("Search for").fill("quarterly forecasts")
        await page.get_by_label("the meaning").check()

        assert runtime.memory is not None
        await runtime.memory.indexer.embed_due()  # what the background job of `agenvoy run` does
        await page.get_by_role("button", name="Search").click()
        await page.locator(".results li", has_text="similarity").first.wait_for(timeout=WAIT_MS)
        first = await page.locator(".results li").first.inner_text()
        assert "the quarterly forecast" in first and "similarity" in first

        await page.get_by_role("link", name="Usage").click()
        charts = page.locator('svg.chart[role="img"]')
        # One chart per model (the offline agent's replies count too), and the output speed.
        labels = {
            await charts.nth(i).get_attribute("aria-label") for i in range(await charts.count())
        }
        assert labels == {
            "Tokens per day of gpt-a",
            "Tokens per day of claude-b",
            "Tokens per day of offline",
            "Output tokens per second per day",
        }
        assert await page.locator('svg[aria-label="Tokens per day of gpt-a"] rect').count() == 4
        assert "300" in await page.locator("table.per-day").inner_text()
        await page.screenshot(**shoot("usage"))

        await page.get_by_role("link", name="Health").click()
        checks = await page.locator("table.health").inner_text()
        assert "database\tok" in checks and "telegram" in checks, checks


async def test_settings_and_cancel_follow_the_rule(browser: Any, tmp_path: Path) -> None:
    home = with_tokens(tmp_path / "home")
    async with (
        FakeTelegram() as fake,
        telegram_running(fake, home, admins="http:root") as rig,
        console(rig.runtime) as base,
    ):
        group = fake.group(-300, "ops")
        fake.inject_message(group, fake.user(41, "Di"), f"@{fake.bot_user['username']} !sleep 60")
        sid = "tg--300"

        async def started() -> bool:
            return rig.runtime.router.running_task(sid) is not None

        assert await wait_until(started, within=10)
        ann = await sign_in(browser, base, "ann")
        # Not a member of that chat: to her it does not exist, nor its running task.
        response = await ann.goto(f"{base}/ui/session/{sid}")
        assert response is not None and response.status == 404
        assert await ann.get_by_role("button", name="Cancel").count() == 0
        await ann.goto(f"{base}/ui/")
        assert await ann.locator(f'tr[data-session="{sid}"]').count() == 0

        root = await sign_in(browser, base, "root")
        await root.goto(f"{base}/ui/session/{sid}")
        await root.locator("summary", has_text="Settings").click()
        await root.get_by_label("Name").fill("ops room")
        await root.get_by_label("Model").fill("gpt-ops")
        await root.get_by_label("Reasoning").select_option("high")
        await root.get_by_role("button", name="Save").click()
        await root.get_by_text("model gpt-ops").wait_for(timeout=WAIT_MS)
        await root.get_by_role("heading", name="ops room").wait_for(timeout=WAIT_MS)
        row = await rig.runtime.store.get(sid)
        assert row is not None and (row.name, row.model, row.reasoning) == (
            "ops room",
            "gpt-ops",
            "high",
        )

        await root.get_by_role("button", name="Cancel").click()

        async def stopped() -> bool:
            return rig.runtime.router.running_task(sid) is None

        assert await wait_until(stopped, within=10)


PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


async def test_attachments_are_links_served_safely(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        files = [
            {"name": "dot.png", "mime": "image/png", "data": base64.b64encode(PNG).decode()},
            {
                "name": "page.png",
                "mime": "image/png",
                "data": base64.b64encode(b"<script>alert(1)</script>").decode(),
            },
        ]
        body = {"content": "two files", "persist": True, "attachments": files}
        status, sent = await srv.call("POST", "/v1/send", json_body=body, headers=bearer("ann"))
        assert status == 200, sent
        sid = sent["session_id"]
        workspace = srv.runtime.store.files(sid).dir / "workspace"
        (workspace / "attachments" / "escape.png").symlink_to(tmp_path / "home" / ".store")
        jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
        async with aiohttp.ClientSession(base_url=str(srv.url("")), cookie_jar=jar) as browser:
            async with browser.post("/ui/login", data={"token": "agv_test-ann"}) as resp:
                assert resp.status == 200 and resp.url.path == "/ui/"
            async with browser.get(f"/ui/session/{sid}") as resp:
                page = await resp.text()
            links = set(re.findall(r'class="attachment" href="([^"]+)"', page))
            assert len(links) == 2, page
            shown = {}
            for link in links:
                async with browser.get(html.unescape(link)) as resp:
                    assert resp.status == 200
                    shown[resp.content_type] = resp.headers["Content-Disposition"].split(";")[0]
                    assert resp.headers["X-Content-Type-Options"] == "nosniff"
            # The bytes decide: the page posing as a picture is only ever a download.
            assert shown == {"image/png": "inline", "application/octet-stream": "attachment"}
            for path, expected in (
                ("workspace/attachments/escape.png", 400),
                ("../chat.json", 400),
                ("workspace/../../chat.json", 400),
                ("workspace/attachments/none.png", 404),
            ):
                url = f"/ui/session/{sid}/file?path={quote(path)}"
                async with browser.get(url) as resp:
                    assert resp.status == expected, (path, resp.status)
        async with aiohttp.ClientSession(base_url=str(srv.url(""))) as stranger:
            url = f"/ui/session/{sid}/file?path=attachments"
            async with stranger.get(url, allow_redirects=False) as resp:
                assert resp.status == 303 and resp.headers["Location"] == "/ui/login"


async def test_every_console_response_forbids_sniffing_and_referrers(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
        async with aiohttp.ClientSession(base_url=str(srv.url("")), cookie_jar=jar) as browser:
            seen = []
            async with browser.get("/ui/", allow_redirects=False) as resp:
                seen.append((resp.status, resp.headers))  # not signed in: sent to sign in
            async with browser.get("/ui/login") as resp:
                seen.append((resp.status, resp.headers))
            async with browser.post("/ui/login", data={"token": "agv_test-bob"}) as resp:
                seen.append((resp.status, resp.headers))
            async with browser.get("/ui/session/cli-none") as resp:
                seen.append((resp.status, resp.headers))  # an error page
        assert [status for status, _ in seen] == [303, 200, 200, 404]
        for _, headers in seen:
            assert headers["X-Content-Type-Options"] == "nosniff"
            assert headers["Referrer-Policy"] == "same-origin"
