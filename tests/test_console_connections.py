"""The console's platform connections page through the real app, with aiohttp clients as
browsers (the console's cookie, its forms' CSRF token): a gateway admin names where Telegram's
token is and sees the reference listed, as the API lists it, with the token itself nowhere on
the page; a token pasted into the form is refused and not shown back; the platform is given back
to the environment; a webhook gateway's Telegram offers no form. A viewer who is not a gateway
admin, or a form without the page's token, changes nothing."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest
from test_console_knowledge import post, tag
from test_console_signin import browsing, csrf, page
from test_http import ROOT, Server, serving

pytestmark = pytest.mark.timeout(60)

PAGE: Final = "/ui/connections"
SECRET: Final = "777000:the-secret-bot-token-value"
# Shaped like a bot token, built from pieces so that no token-like string sits in the source.
PASTED: Final = "123456789:" + "AAHk3jQv9xZp2LmN" + "8rT4wYb6cD1eF0gHiJ"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(tmp_path) as srv:
        yield srv


async def listed(server: Server) -> dict[str, dict[str, object]]:
    """What /v1/connections says, by platform."""
    status, body = await server.call("GET", "/v1/connections", headers=ROOT)
    assert status == 200, body
    return {c["platform"]: c for c in body["connections"]}


def cell(text: str, platform: str, name: str) -> str:
    """A cell of a platform's row in the page's table, as read."""
    row = re.search(rf'<tr data-platform="{platform}">(.*?)</tr>', text, re.S)
    assert row is not None, platform
    found = re.search(rf'<td class="{name}">(.*?)</td>', row[1], re.S)
    assert found is not None, name
    return html.unescape(re.sub(r"<[^>]+>", "", found[1])).strip()


async def test_an_admin_names_telegrams_token_and_gives_it_back(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOME_VAR", SECRET)
    async with browsing(server, "root") as root:
        status, text = await page(root, PAGE)
        assert status == 200 and 'href="/ui/connections" aria-current="page"' in text
        assert cell(text, "telegram", "source") == "not configured"
        assert cell(text, "telegram", "state") == "not connected"
        assert 'placeholder="env:TELEGRAM_BOT_TOKEN"' in text
        assert "/ui/connections/telegram/reset" not in text  # nothing configured to reset
        assert str(server.runtime.settings.secrets_path) in html.unescape(text)

        token = await csrf(root)
        form = {"csrf": token, "token": "env:SOME_VAR", "enabled": "on"}
        status, location = await post(root, f"{PAGE}/telegram", form)
        assert (status, location) == (303, f"{PAGE}?saved=telegram")
        status, text = await page(root, location)
        assert status == 200
        assert "the running gateway applies it now" in text
        assert cell(text, "telegram", "source") == "env:SOME_VAR"
        assert cell(text, "telegram", "by") == "http:root"
        assert cell(text, "telegram", "when") != "—"
        assert cell(text, "discord", "source") == "not configured"
        assert 'value="env:SOME_VAR"' in tag(text, "c-telegram-token")
        assert "checked" in tag(text, "c-telegram-enabled")
        assert "/ui/connections/telegram/reset" in text
        assert SECRET not in text and "the-secret-bot-token" not in text

        api = await listed(server)
        assert api["telegram"]["source"] == "env:SOME_VAR"
        assert api["telegram"]["token"] == "env:SOME_VAR" and api["telegram"]["enabled"] is True
        assert api["telegram"]["changed_by"] == "http:root"

        # Turned off: the checkbox left unchecked.
        form = {"csrf": token, "token": "env:SOME_VAR"}
        status, location = await post(root, f"{PAGE}/telegram", form)
        assert status == 303
        status, text = await page(root, location)
        assert cell(text, "telegram", "source") == "off"
        assert "checked" not in tag(text, "c-telegram-enabled")
        assert (await listed(server))["telegram"]["source"] == "off"

        status, location = await post(root, f"{PAGE}/telegram/reset", {"csrf": token})
        assert (status, location) == (303, f"{PAGE}?reset=telegram")
        status, text = await page(root, location)
        assert cell(text, "telegram", "source") == "not configured"
        assert cell(text, "telegram", "by") == "—"
        assert "/ui/connections/telegram/reset" not in text
        assert (await listed(server))["telegram"]["source"] == "not configured"

        # Reset again: nothing to reset, and the page says so.
        status, location = await post(root, f"{PAGE}/telegram/reset", {"csrf": token})
        assert status == 303 and "?refused=" in location
        status, text = await page(root, location)
        assert "telegram has no connection configured here" in text


async def test_a_pasted_token_is_refused_and_not_shown_back(server: Server) -> None:
    async with browsing(server, "root") as root:
        token = await csrf(root)
        form = {"csrf": token, "token": PASTED, "enabled": "on"}
        status, location = await post(root, f"{PAGE}/telegram", form)
        assert status == 303 and "?refused=" in location, (status, location)
        assert PASTED not in location and "AAHk3jQv9" not in location
        status, text = await page(root, location)
        assert status == 200
        said = html.unescape(text)
        assert "Not changed: token: this looks like a token itself" in said
        field = tag(text, "c-telegram-token")
        assert 'aria-invalid="true"' in field and 'value=""' in field
        assert "AAHk3jQv9" not in said and "123456789" not in said

        # A reference mistyped is not a token: kept for another try.
        form = {"csrf": token, "token": "ENV:SOME_VAR", "enabled": "on"}
        status, location = await post(root, f"{PAGE}/telegram", form)
        status, text = await page(root, location)
        assert "env:NAME or file:NAME" in html.unescape(text)
        assert 'aria-invalid="true"' in tag(text, "c-telegram-token")
        assert tag(text, "c-discord-token").count("aria-invalid") == 0
    assert (await listed(server))["telegram"]["source"] == "not configured"


async def test_an_unknown_platform_is_not_found(server: Server) -> None:
    async with browsing(server, "root") as root:
        token = await csrf(root)
        form = {"csrf": token, "token": "env:SOME_VAR", "enabled": "on"}
        status, text = await post(root, f"{PAGE}/whatsapp", form)
        assert status == 404 and "no platform" in text
        status, text = await post(root, f"{PAGE}/whatsapp/reset", {"csrf": token})
        assert status == 404 and "no platform" in text


async def test_a_webhook_gateways_telegram_keeps_the_environments_token(
    tmp_path: Path,
) -> None:
    async with (
        serving(
            tmp_path,
            telegram_mode="webhook",
            telegram_webhook_url="https://bot.example.org/telegram",
            telegram_webhook_secret="hook-secret",
        ) as srv,
        browsing(srv, "root") as root,
    ):
        status, text = await page(root, PAGE)
        assert status == 200
        assert "Telegram in webhook mode keeps the environment" in html.unescape(text)
        assert 'action="/ui/connections/telegram"' not in text
        assert 'action="/ui/connections/discord"' in text
        form = {"csrf": await csrf(root), "token": "env:SOME_VAR", "enabled": "on"}
        status, location = await post(root, f"{PAGE}/telegram", form)
        assert status == 303 and "?refused=" in location
        status, text = await page(root, location)
        assert "webhook mode keeps the environment" in html.unescape(text)
        assert (await listed(srv))["telegram"]["source"] == "not configured"


async def test_a_viewer_who_is_not_a_gateway_admin_gets_403(server: Server) -> None:
    async with browsing(server, "ann") as ann:
        status, text = await page(ann, "/ui/")
        assert status == 200 and 'href="/ui/connections"' not in text
        status, text = await page(ann, PAGE)
        assert status == 403 and "only gateway admins manage platform connections" in text
        token = await csrf(ann)  # her own page's token: the refusal is for who she is
        form = {"csrf": token, "token": "env:SOME_VAR", "enabled": "on"}
        status, text = await post(ann, f"{PAGE}/telegram", form)
        assert status == 403 and "only gateway admins" in text
        status, text = await post(ann, f"{PAGE}/telegram/reset", {"csrf": token})
        assert status == 403 and "only gateway admins" in text
    assert (await listed(server))["telegram"]["source"] == "not configured"


async def test_a_form_without_the_pages_csrf_token_changes_nothing(server: Server) -> None:
    await server.runtime.connections.put("discord", "env:SOME_VAR", True, by="terminal:op")
    async with browsing(server, "root") as root:
        form = {"token": "env:OTHER_VAR", "enabled": "on"}
        status, text = await post(root, f"{PAGE}/telegram", form)
        assert status == 403 and "stale or forged" in text
        status, text = await post(root, f"{PAGE}/telegram", {**form, "csrf": "0" * 64})
        assert status == 403 and "stale or forged" in text
        status, text = await post(root, f"{PAGE}/discord/reset", {})
        assert status == 403 and "stale or forged" in text
    api = await listed(server)
    assert api["telegram"]["source"] == "not configured"
    assert api["discord"]["source"] == "env:SOME_VAR"


async def test_a_live_connection_ends_the_first_run_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sessions list points a gateway admin to Getting started while nothing is
    configured; Telegram connected live by reference, from this page, counts as configured
    at once (no restart), and given back to an empty environment it no longer does."""
    monkeypatch.setenv("SOME_VAR", SECRET)
    # Given as arguments, which win over any AGENVOY_* variable of the test's environment.
    bare: dict[str, Any] = {"agent": "offline", "telegram_token": None, "discord_token": None}
    async with serving(tmp_path, **bare) as srv, browsing(srv, "root") as root:
        status, text = await page(root, "/ui/")
        assert status == 200 and 'id="first-run"' in text

        token = await csrf(root)
        form = {"csrf": token, "token": "env:SOME_VAR", "enabled": "on"}
        status, _ = await post(root, f"{PAGE}/telegram", form)
        assert status == 303
        status, text = await page(root, "/ui/")
        assert status == 200 and 'id="first-run"' not in text

        # Turned off, no platform has a token to connect with: nothing is, again.
        status, _ = await post(root, f"{PAGE}/telegram", {"csrf": token, "token": "env:SOME_VAR"})
        assert status == 303
        assert 'id="first-run"' in (await page(root, "/ui/"))[1]

        await srv.runtime.connections.put("discord", "env:SOME_VAR", True, by="terminal:op")
        assert 'id="first-run"' not in (await page(root, "/ui/"))[1]
        status, _ = await post(root, f"{PAGE}/discord/reset", {"csrf": token})
        assert status == 303
        assert 'id="first-run"' in (await page(root, "/ui/"))[1]
