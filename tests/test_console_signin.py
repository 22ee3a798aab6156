"""The console's sign-ins and who sees what there, through the real app with aiohttp clients
as browsers: a sign-in is the server's (ended by signing out, by expiry, by revoking its token,
and a revoked token's live stream closes within a second), and every page and action asks the
session access rule (another token's viewer neither sees nor writes in a private session)."""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest
from clock import FakeClock
from test_console import sign_in
from test_http import Server, bearer, issue_token, revoke_token, serving

from gateway.store.usage import UsageRecord

pytestmark = pytest.mark.timeout(60)

COOKIE: Final = "agenvoy_console"
_CSRF: Final = re.compile(r'name="csrf" value="([0-9a-f]+)"')


@contextlib.asynccontextmanager
async def browsing(srv: Server, user: str | None = None) -> AsyncIterator[aiohttp.ClientSession]:
    """A cookie-keeping client, signed in to the console as `user` with their token."""
    jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
    async with aiohttp.ClientSession(base_url=str(srv.url("")), cookie_jar=jar) as client:
        if user is not None:
            async with client.post("/ui/login", data={"token": f"agv_test-{user}"}) as resp:
                assert resp.status == 200 and resp.url.path == "/ui/", resp.status
        yield client


def cookie_of(client: aiohttp.ClientSession) -> str:
    (found,) = [c.value for c in client.cookie_jar if c.key == COOKIE]
    return found


async def page(client: aiohttp.ClientSession, path: str) -> tuple[int, str]:
    """Status and text of a console page, redirects not followed."""
    async with client.get(path, allow_redirects=False) as resp:
        return resp.status, await resp.text()


async def csrf(client: aiohttp.ClientSession) -> str:
    status, text = await page(client, "/ui/approvals")
    assert status == 200, status
    found = _CSRF.search(text)
    assert found is not None
    return found[1]


async def with_cookie(srv: Server, value: str, path: str = "/ui/") -> int:
    """What a client holding only a copied cookie is answered."""
    async with browsing(srv) as client:
        client.cookie_jar.update_cookies({COOKIE: value})
        status, _ = await page(client, path)
        return status


async def private_session(srv: Server, user: str, text: str) -> str:
    body = {"content": text, "persist": True}
    status, sent = await srv.call("POST", "/v1/send", json_body=body, headers=bearer(user))
    assert status == 200, sent
    return str(sent["session_id"])


async def test_signing_out_ends_the_sign_in(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv, browsing(srv, "ann") as ann:
        held = cookie_of(ann)
        assert "agv_" not in held  # the cookie names a sign-in, not the token
        assert await with_cookie(srv, held) == 200
        async with ann.post("/ui/logout", data={"csrf": await csrf(ann)}) as resp:
            assert resp.url.path == "/ui/login"
        # A copy of the cookie taken before signing out opens nothing afterwards.
        assert await with_cookie(srv, held) == 303
        assert await with_cookie(srv, held, "/ui/approvals") == 303


async def test_a_sign_in_expires(tmp_path: Path, clock: FakeClock) -> None:
    async with (
        serving(tmp_path, clock, console_signin_hours=2) as srv,
        browsing(srv, "ann") as ann,
    ):
        await clock.advance(2 * 3600 - 1)
        assert (await page(ann, "/ui/"))[0] == 200
        await clock.advance(1)
        status, _ = await page(ann, "/ui/")
        assert status == 303  # sent to sign in again


async def test_a_revoked_tokens_sign_in_and_stream_end_at_once(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv, browsing(srv, "bob") as bob:
        sid = await private_session(srv, "bob", "a note of bob's")
        held = cookie_of(bob)
        async with bob.get(f"/ui/session/{sid}/events") as stream:
            assert stream.status == 200
            assert (await stream.content.readline()).startswith(b"event: state")
            await revoke_token(srv.runtime, "bob")
            revoked = time.monotonic()
            rest = await asyncio.wait_for(stream.content.read(), 10)
            closed = time.monotonic() - revoked
        assert b"event: signed_out" in rest
        assert closed < 1.0, closed
        assert await with_cookie(srv, held) == 303
        # A new token under the same name is not the revoked one: the old sign-in stays ended.
        await issue_token(srv.runtime, "bob")
        assert await with_cookie(srv, held) == 303


async def test_another_tokens_viewer_neither_sees_nor_writes_a_private_session(
    tmp_path: Path,
) -> None:
    async with (
        serving(tmp_path) as srv,
        browsing(srv, "ann") as ann,
        browsing(srv, "bob") as bob,
    ):
        sid = await private_session(srv, "ann", "the launch word is tulip")
        stored = len(await srv.runtime.store.recent_messages(sid))
        for path in (
            f"/ui/session/{sid}",
            f"/ui/session/{sid}/events",
            f"/ui/session/{sid}/file?path=attachments/x.png",
        ):
            assert (await page(bob, path))[0] == 404, path
        for path, form in (
            (f"/ui/session/{sid}/send", {"content": "bob was here"}),
            (f"/ui/session/{sid}/settings", {"name": "bob's now"}),
        ):
            async with bob.post(path, data={**form, "csrf": await csrf(bob)}) as resp:
                assert resp.status == 404, path
        assert len(await srv.runtime.store.recent_messages(sid)) == stored
        assert (await srv.runtime.store.require(sid)).name != "bob's now"
        assert sid not in (await page(bob, "/ui/"))[1]
        assert "launch word" not in (await page(bob, "/ui/search?q=tulip"))[1]
        assert (await page(bob, f"/ui/search?q=tulip&session={sid}"))[0] == 404

        # Its owner sees and writes in it.
        assert sid in (await page(ann, "/ui/"))[1]
        assert "launch word" in (await page(ann, "/ui/search?q=tulip"))[1]
        status, text = await page(ann, f"/ui/session/{sid}")
        assert status == 200 and "tulip" in text
        async with ann.post(
            f"/ui/session/{sid}/send", data={"content": "ann again", "csrf": await csrf(ann)}
        ) as resp:
            assert resp.status == 200 and resp.url.path == f"/ui/session/{sid}"
        contents = [m.content for m in await srv.runtime.store.recent_messages(sid)]
        assert "ann again" in contents


async def test_the_session_list_pages_with_a_cursor(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv, browsing(srv, "ann") as ann:
        made = {f"chat-p{i:02d}" for i in range(63)}
        for sid in made:
            await srv.runtime.store.ensure(sid, owner="http:ann")
        await srv.runtime.store.ensure("chat-bobs", owner="http:bob")
        seen: list[str] = []
        path: str | None = "/ui/"
        pages = 0
        while path is not None:
            status, text = await page(ann, path)
            assert status == 200, status
            pages += 1
            seen += re.findall(r'<tr data-session="([^"]+)"', text)
            after = re.search(r'rel="next" href="([^"]+)"', text)
            path = html.unescape(after[1]) if after else None
        assert pages == 2
        assert len(seen) == len(set(seen)) and set(seen) == made

        # A filter shows what matches, from past the first page too.
        status, text = await page(ann, "/ui/?q=p6")
        assert set(re.findall(r'<tr data-session="([^"]+)"', text)) == {
            "chat-p60",
            "chat-p61",
            "chat-p62",
        }
        assert (await page(ann, "/ui/?after=nonsense"))[0] == 400


async def test_usage_shows_a_viewers_own_unless_an_admin(tmp_path: Path) -> None:
    async with (
        serving(tmp_path) as srv,
        browsing(srv, "ann") as ann,
        browsing(srv, "root") as root,
    ):
        now = srv.runtime.clock.now_ms()
        for who, model in (("http:ann", "model-of-ann"), ("http:bob", "model-of-bob")):
            record = UsageRecord(
                "chat-x", model, input=1, output=2, elapsed_ms=10, send_at=now, identity=who
            )
            await srv.runtime.store.usage.record(record)
        mine = (await page(ann, "/ui/usage"))[1]
        assert "model-of-ann" in mine and "model-of-bob" not in mine
        everyone = (await page(root, "/ui/usage"))[1]  # root is a gateway admin here
        assert "model-of-ann" in everyone and "model-of-bob" in everyone


async def test_in_the_browser_a_signed_out_cookie_and_another_viewer_open_nothing(
    browser: Any, tmp_path: Path
) -> None:
    async with serving(tmp_path) as srv:
        sid = await private_session(srv, "ann", "the launch word is tulip")
        ann = await sign_in(browser, srv.base, "ann")
        await ann.goto(f"{srv.base}/ui/session/{sid}")
        await ann.get_by_text("the launch word is tulip", exact=True).wait_for()
        (kept,) = await ann.context.cookies()

        bob = await sign_in(browser, srv.base, "bob")
        response = await bob.goto(f"{srv.base}/ui/session/{sid}")
        assert response is not None and response.status == 404
        assert "no such session" in await bob.get_by_role("alert").inner_text()
        await bob.goto(f"{srv.base}/ui/")
        assert await bob.locator(f'tr[data-session="{sid}"]').count() == 0

        await ann.get_by_role("button", name="Sign out").click()
        await ann.wait_for_url(f"{srv.base}/ui/login")
        # The cookie as it was before signing out, put back in a fresh browser, opens nothing.
        replay = await browser.new_context()
        await replay.add_cookies([kept])
        again = await replay.new_page()
        await again.goto(f"{srv.base}/ui/session/{sid}")
        assert again.url == f"{srv.base}/ui/login"
