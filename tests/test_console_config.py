"""The console's quota and change-log pages in a real headless browser (Chromium, driven by
Playwright), on two gateway instances sharing one archive: a gateway admin sets a member's
messages a minute on instance 1's console and the member's next message to instance 2 is held
to it, with no restart; a refused value names its limit and keeps what was entered; the change
is in the log with who made it, and rolling it back frees the member at once. A token issued on
instance 1's console is shown once and accepted by instance 2, and revoked there too. Two
identities linked on instance 1's console are one person on instance 2 at once, and parted
again. A viewer who is not a gateway admin gets 403 and no link."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from support import wait_until
from test_console import WAIT_MS, console, sign_in
from test_http import USERS, bearer, write_tokens

from gateway.runtime import Runtime
from gateway.settings import Settings

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
async def pair(tmp_path: Path, database_url: str) -> AsyncIterator[tuple[Runtime, Runtime]]:
    """Two instances on one archive; root is a gateway admin on the first."""
    runtimes = []
    for home, admins in (("a", "http:root"), ("b", "")):
        settings = Settings(
            home=tmp_path / home, database_url=database_url, admins=admins, _env_file=None
        )
        write_tokens(settings.store_dir, USERS)
        runtimes.append(await Runtime.start(settings))
    try:
        yield runtimes[0], runtimes[1]
    finally:
        for runtime in reversed(runtimes):
            await runtime.close()


async def send_as_ann(page: Any, base: str) -> int:
    """Ann's message to instance `base`, as her HTTP client sends it; the status."""
    resp = await page.request.post(
        f"{base}/v1/send", data={"content": "hello", "wait": 0}, headers=bearer("ann")
    )
    return int(resp.status)


async def test_an_admin_sets_a_quota_another_instance_holds_and_rolls_it_back(
    browser: Any, pair: tuple[Runtime, Runtime]
) -> None:
    one, two = pair
    async with console(one) as base, console(two) as other:
        page = await sign_in(browser, base)
        await page.get_by_role("link", name="Quotas").click()
        await page.wait_for_url(f"{base}/ui/quotas")
        assert "Nobody has limits of their own" in await page.locator("main").inner_text()

        # A value that is not a whole number: refused, naming the limit, the entries kept.
        await page.get_by_label("Identity or chat").fill("http:ann")
        await page.get_by_label("Limit", exact=True).select_option("messages_per_minute")
        await page.get_by_label("Value", exact=True).fill("2.5")
        await page.get_by_role("button", name="Set").click()
        alert = page.get_by_role("alert").filter(has_text="messages_per_minute: a whole number")
        await alert.wait_for(timeout=WAIT_MS)
        assert await page.get_by_label("Identity or chat").input_value() == "http:ann"
        assert await page.get_by_label("Value", exact=True).get_attribute("aria-invalid") == "true"

        await page.get_by_label("Value", exact=True).fill("1")
        await page.get_by_role("button", name="Set").click()
        await (
            page.get_by_role("status").filter(has_text="Saved: http:ann").wait_for(timeout=WAIT_MS)
        )
        row = page.locator('tr[data-subject="http:ann"]')
        assert "messages_per_minute=1" in await row.inner_text()

        # Instance 2 holds Ann to it from her next message.
        assert await send_as_ann(page, other) == 202
        assert await send_as_ann(page, other) == 429

        await page.get_by_role("link", name="Changes").click()
        await page.wait_for_url(f"{base}/ui/changes")
        change = page.locator("tr[data-change]").first
        text = await change.inner_text()
        assert "quota" in text and "http:ann" in text and "http:root" in text
        assert "messages_per_minute=1" in text
        number = await change.get_attribute("data-change")
        await page.get_by_role("button", name=f"Roll back change {number}").click()
        await (
            page.get_by_role("status")
            .filter(has_text=f"Change {number} rolled back")
            .wait_for(timeout=WAIT_MS)
        )
        assert f"(reverts {number})" in await page.locator("tr[data-change]").first.inner_text()
        assert await send_as_ann(page, other) == 202  # free again, at once

        # Not a gateway admin: no link, and 403.
        ann = await sign_in(browser, base, user="ann")
        assert await ann.get_by_role("link", name="Quotas").count() == 0
        for path in ("/ui/quotas", "/ui/changes"):
            resp = await ann.goto(f"{base}{path}")
            assert resp.status == 403
            assert "only gateway admins" in await ann.locator("main").inner_text()


async def test_an_admin_issues_a_token_another_instance_accepts_then_revokes_it(
    browser: Any, pair: tuple[Runtime, Runtime]
) -> None:
    one, two = pair
    async with console(one) as base, console(two) as other:
        page = await sign_in(browser, base)
        await page.get_by_role("link", name="Tokens").click()
        await page.wait_for_url(f"{base}/ui/tokens")
        await page.get_by_label("Name", exact=True).fill("zed")
        await page.get_by_label("Display name (optional)").fill("Zed Z")
        await page.get_by_role("button", name="Issue").click()
        shown = page.locator("#new-token")
        await shown.wait_for(timeout=WAIT_MS)
        token = await shown.inner_text()
        assert token.startswith("agv_")
        assert "Zed Z" in await page.locator('tr[data-token="zed"]').inner_text()

        async def status_on_two() -> int:
            resp = await page.request.get(
                f"{other}/v1/sessions", headers={"Authorization": f"Bearer {token}"}
            )
            return int(resp.status)

        assert await wait_until(lambda: _is(status_on_two, 200), within=3)
        # Shown once: the page read again holds no token.
        await page.goto(f"{base}/ui/tokens")
        assert await page.locator("#new-token").count() == 0
        assert token not in await page.content()

        await page.get_by_role("button", name="Revoke the token of zed").click()
        await (
            page.get_by_role("status")
            .filter(has_text="Revoked the token of zed")
            .wait_for(timeout=WAIT_MS)
        )
        assert await page.locator('tr[data-token="zed"]').count() == 0
        assert await wait_until(lambda: _is(status_on_two, 403), within=3)

        # A name that cannot be issued: refused, naming the field, what was entered kept.
        await page.get_by_label("Name", exact=True).fill("api")
        await page.get_by_role("button", name="Issue").click()
        await page.get_by_role("alert").filter(has_text="reserved").wait_for(timeout=WAIT_MS)
        assert await page.get_by_label("Name", exact=True).input_value() == "api"


async def _is(status: Callable[[], Awaitable[int]], wanted: int) -> bool:
    return await status() == wanted


async def test_an_admin_links_identities_another_instance_follows_then_unlinks(
    browser: Any, pair: tuple[Runtime, Runtime]
) -> None:
    one, two = pair
    async with console(one) as base, console(two) as other:
        page = await sign_in(browser, base)
        made = await page.request.post(
            f"{other}/v1/send", data={"content": "mine", "persist": True}, headers=bearer("ann")
        )
        private = (await made.json())["session_id"]

        async def bob_reads() -> int:
            resp = await page.request.get(
                f"{other}/v1/session/{private}/history", headers=bearer("bob")
            )
            return int(resp.status)

        assert await bob_reads() == 404
        await page.goto(f"{base}/ui/changes")
        link = page.locator('form[action="/ui/identities/link"]')
        await link.get_by_label("Identity").fill("bob")
        await link.get_by_label("Joins the person of").fill("http:ann")
        await link.get_by_role("button", name="Link").click()
        alert = page.get_by_role("alert").filter(has_text="identity: an identity is")
        await alert.wait_for(timeout=WAIT_MS)
        assert await link.get_by_label("Joins the person of").input_value() == "http:ann"

        await link.get_by_label("Identity").fill("http:bob")
        await link.get_by_role("button", name="Link").click()
        linked = page.get_by_role("status").filter(has_text="http:bob linked")
        await linked.wait_for(timeout=WAIT_MS)
        newest = await page.locator("tr[data-change]").first.inner_text()
        assert "link" in newest and "http:bob" in newest and "http:root" in newest
        assert await bob_reads() == 200  # on the other instance, from the next request

        unlink = page.locator('form[action="/ui/identities/unlink"]')
        await unlink.get_by_label("Identity").fill("http:bob")
        await unlink.get_by_role("button", name="Unlink").click()
        parted = page.get_by_role("status").filter(has_text="linked with nobody now")
        await parted.wait_for(timeout=WAIT_MS)
        assert await bob_reads() == 404
