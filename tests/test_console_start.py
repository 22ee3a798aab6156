"""The console's Getting started page in a real headless browser (Chromium, driven by
Playwright): with nothing configured, a gateway admin finds a notice on the sessions list that
leads to it, and every step says "not set"; with bot tokens set, it says "set", each platform's
state as this instance found it, the Discord application the fake Discord names and its invite
link, and never a token; a viewer who is not a gateway admin gets 403 and no link."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fakes.discord import FakeDiscord
from fakes.discord.gateway import INTENT_MEMBERS, INTENT_PRESENCES
from test_console import WAIT_MS, console, sign_in
from test_http import USERS, write_tokens

from adapters.discord.invite import invite_url
from adapters.web.start import model_step
from gateway.runtime import Runtime
from gateway.settings import Settings

pytestmark = pytest.mark.timeout(120)

APPLICATION = 5150
TELEGRAM_TOKEN = "424242:AAstart-page-telegram-token-value"
STEPS = ("model", "telegram", "discord")


@pytest.fixture
async def discord() -> AsyncIterator[FakeDiscord]:
    """A Discord application with the Message Content intent off, as a new one is."""
    async with FakeDiscord(
        application_id=APPLICATION, enabled_intents=INTENT_MEMBERS | INTENT_PRESENCES
    ) as fake:
        yield fake


async def started(home: Path, **settings: Any) -> Runtime:
    """A runtime whose console admits `root` (a gateway admin) and `ann` (not one). Its
    adapters are not started: a platform's state is what the test records."""
    made = Settings(home=home, admins="http:root", _env_file=None, **settings)
    write_tokens(made.store_dir, USERS)
    return await Runtime.start(made)


@pytest.fixture
async def unconfigured(tmp_path: Path) -> AsyncIterator[Runtime]:
    # Given as arguments, which win over any AGENVOY_* variable of the test's environment.
    runtime = await started(
        tmp_path / "home", agent="offline", telegram_token=None, discord_token=None
    )
    try:
        yield runtime
    finally:
        await runtime.close()


@pytest.fixture
async def configured(
    tmp_path: Path, discord: FakeDiscord, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Runtime]:
    # Set in the environment, as `agenvoy run` reads them (with .env).
    monkeypatch.setenv("AGENVOY_AGENT", "offline")
    monkeypatch.setenv("AGENVOY_TELEGRAM_TOKEN", TELEGRAM_TOKEN)
    monkeypatch.setenv("AGENVOY_DISCORD_TOKEN", discord.token)
    monkeypatch.setenv("AGENVOY_DISCORD_API_URL", discord.api_base)
    runtime = await started(tmp_path / "home")
    try:
        yield runtime
    finally:
        await runtime.close()


async def step(page: Any, name: str) -> str:
    return str(await page.locator(f'section[data-step="{name}"]').inner_text())


async def cell(page: Any, name: str, row: str) -> str:
    """What step `name`'s table says on the row headed `row`."""
    found = page.locator(
        f'section[data-step="{name}"] tr', has=page.get_by_role("rowheader", name=row)
    )
    return " ".join(str(await found.locator("td").inner_text()).split())


async def open_start(page: Any, base: str) -> None:
    """Through the navigation, as an admin finds the page on any other."""
    link = page.get_by_role("navigation", name="Console").get_by_role(
        "link", name="Getting started"
    )
    await link.click()
    await page.wait_for_url(f"{base}/ui/start")
    assert await link.get_attribute("aria-current") == "page"


async def test_with_nothing_configured_the_sessions_list_leads_an_admin_to_the_steps(
    browser: Any, unconfigured: Runtime
) -> None:
    async with console(unconfigured) as base:
        page = await sign_in(browser, base)
        notice = page.locator("#first-run")
        assert "Nothing is configured yet" in await notice.inner_text()
        await notice.get_by_role("link").click()
        await page.wait_for_url(f"{base}/ui/start")
        await page.get_by_role("heading", name="Getting started").wait_for(timeout=WAIT_MS)

        for name in STEPS:
            assert "not set" in await step(page, name), name
        model = await step(page, "model")
        assert "offline: answers without a model or a network" in model
        assert "agenvoy setup" in model and "claude-code" in model
        telegram = await step(page, "telegram")
        assert "@BotFather" in telegram and "/newbot" in telegram
        assert "AGENVOY_TELEGRAM_TOKEN" in telegram
        assert "Connection" not in telegram  # no token: nothing to connect
        discord = await step(page, "discord")
        assert "AGENVOY_DISCORD_TOKEN" in discord
        assert "turn on Message Content Intent" in discord
        assert await page.locator("#invite").count() == 0
        read_on = await page.get_by_role("region", name="Read on").inner_text()
        assert "docs/setup.md" in read_on and "docs/discord.md" in read_on
        # Plain text: the console serves no docs.
        assert await page.locator('a[href*="docs/"]').count() == 0


async def test_with_tokens_set_it_says_set_shows_the_invite_and_never_a_token(
    browser: Any, configured: Runtime, discord: FakeDiscord
) -> None:
    # What the Telegram adapter records when it cannot connect: the error quotes the URL,
    # which holds the token.
    configured.platforms.down(
        "telegram", f"NetworkError: https://api.telegram.org/bot{TELEGRAM_TOKEN}/getMe"
    )
    async with console(configured) as base:
        page = await sign_in(browser, base)
        # Platforms are configured: the sessions list does not point here.
        assert await page.locator("#first-run").count() == 0
        await open_start(page, base)

        telegram = await step(page, "telegram")
        assert await cell(page, "telegram", "Bot token") == "set"
        assert "not set" not in telegram
        connection = await cell(page, "telegram", "Connection")
        assert connection.startswith("not connected since"), connection
        assert connection.endswith("https://api.telegram.org/bot(token)/getMe"), connection
        assert "@BotFather" not in telegram  # the steps to make a bot are done

        shown = await step(page, "discord")
        assert await cell(page, "discord", "Bot token") == "set"
        assert "not set" not in shown
        assert (await cell(page, "discord", "Connection")).startswith("not connected yet")
        assert (await cell(page, "discord", "Application")).endswith(f"(id {APPLICATION})")
        # The fake application has the Message Content intent off: the page says where.
        intent = await cell(page, "discord", "Message Content intent")
        assert intent.startswith("not enabled"), intent
        portal = f"https://discord.com/developers/applications/{APPLICATION}/bot"
        assert await page.get_by_role("link", name=portal).count() == 1
        invite = page.locator("#invite")
        assert await invite.get_attribute("href") == invite_url(APPLICATION)
        assert await invite.inner_text() == invite_url(APPLICATION)

        html = await page.content()
        assert TELEGRAM_TOKEN not in html and discord.token not in html
        assert "not set" in await step(page, "model")  # still the offline agent

        # Connected now: the page says so; Discord was asked once, the answer kept.
        configured.platforms.up("telegram")
        await page.reload()
        assert (await cell(page, "telegram", "Connection")).startswith("connected since")
        assert await page.locator("#invite").get_attribute("href") == invite_url(APPLICATION)
        asked = [call for call in discord.calls if call[2] == "/oauth2/applications/@me"]
        assert len(asked) == 1, discord.calls
        assert discord.token not in await page.content()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_a_discord_that_cannot_be_asked_leaves_the_invite_out_and_says_why(
    browser: Any, tmp_path: Path
) -> None:
    unreachable = f"http://127.0.0.1:{closed_port()}/api/v10"
    token = "discord-token-that-no-page-may-show"
    runtime = await started(
        tmp_path / "home", discord_token=token, discord_api_url=unreachable, telegram_token=None
    )
    try:
        async with console(runtime) as base:
            page = await sign_in(browser, base)
            await open_start(page, base)
            shown = await step(page, "discord")
            application = await cell(page, "discord", "Application")
            assert application.startswith("not known: Discord could not be asked"), application
            assert await page.locator("#invite").count() == 0
            assert "agenvoy discord invite" in shown
            assert token not in await page.content()
    finally:
        await runtime.close()


async def test_a_viewer_who_is_not_a_gateway_admin_is_refused(
    browser: Any, unconfigured: Runtime
) -> None:
    async with console(unconfigured) as base:
        page = await sign_in(browser, base, "ann")
        assert await page.get_by_role("link", name="Getting started").count() == 0
        assert await page.locator("#first-run").count() == 0
        response = await page.goto(f"{base}/ui/start")
        assert response is not None and response.status == 403
        assert "only gateway admins" in await page.get_by_role("alert").inner_text()
        assert "Getting started" not in await page.title()


def test_a_key_written_as_a_reference_is_named_and_said_not_to_resolve(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("AGENVOY_AGENT=openai\nAGENVOY_OPENAI_API_KEY=${START_PAGE_KEY}\n")
    unresolved = Settings(home=tmp_path, agent="openai", openai_api_key=None, _env_file=None)
    step = model_step(unresolved, env_file, environ={})
    assert (step.agent, step.key_variable) == ("openai", "AGENVOY_OPENAI_API_KEY")
    assert (step.reference, step.key_set, step.done) == ("START_PAGE_KEY", False, False)

    resolved = Settings(home=tmp_path, agent="openai", openai_api_key="k" * 20, _env_file=None)
    step = model_step(resolved, env_file, environ={})
    assert (step.reference, step.key_set, step.done) == ("START_PAGE_KEY", True, True)

    # A variable of the environment wins over the file: its reference is not the key's.
    step = model_step(resolved, env_file, environ={"AGENVOY_OPENAI_API_KEY": "x"})
    assert (step.reference, step.key_set) == ("", True)

    # An endpoint that takes no key (Ollama) is ready without one.
    env_file.write_text("AGENVOY_AGENT=openai\n")
    assert model_step(unresolved, env_file, environ={}).done

    claude = Settings(home=tmp_path, agent="claude", anthropic_api_key=None, _env_file=None)
    step = model_step(claude, env_file, environ={})
    assert (step.key_variable, step.key_set, step.done) == (
        "AGENVOY_ANTHROPIC_API_KEY",
        False,
        False,
    )


async def test_a_live_connection_counts_as_set_and_names_its_reference(
    browser: Any,
    unconfigured: Runtime,
    discord: FakeDiscord,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No token in the environment; Discord connected live by reference: the page names the
    reference, asks Discord for that token's application, and never shows the token."""
    monkeypatch.setenv("GUILD_BOT_TOKEN", discord.token)
    unconfigured.settings.discord_api_url = discord.api_base
    await unconfigured.connections.put("discord", "env:GUILD_BOT_TOKEN", True, by="http:root")
    async with console(unconfigured) as base:
        page = await sign_in(browser, base)
        await page.goto(f"{base}/ui/start")
        shown = await step(page, "discord")
        assert "env:GUILD_BOT_TOKEN" in shown, shown
        assert await cell(page, "discord", "Bot token (env:GUILD_BOT_TOKEN)") == "set"
        assert (await cell(page, "discord", "Application")).endswith(f"(id {APPLICATION})")
        assert await cell(page, "telegram", "Bot token (AGENVOY_TELEGRAM_TOKEN)") == "not set"
        assert discord.token not in await page.content()
