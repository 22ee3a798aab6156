"""The console's listings page as the API's do: a conversation opens at its newest messages and
pages back (and forward again) by cursor, approvals and word search page forward; every item
shows once while new ones arrive, none the viewer may not see, and a damaged address is a 400.
Through the real app with the console's sign-in (aiohttp clients as browsers), and in Chromium
for where the conversation opens."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest
from test_console import sign_in
from test_console_signin import browsing, page
from test_http import Server, bearer, serving

import adapters.web.overview as overview_module
import adapters.web.pages as pages_module
from gateway.store.usage import UsageRecord

pytestmark = pytest.mark.timeout(120)

SID: Final = "chat-long"
_MESSAGE: Final = re.compile(r"said (\d+)\b")


def _links(text: str) -> dict[str, str]:
    """The page's rel=prev and rel=next links."""
    return {
        rel: html.unescape(href)
        for rel, href in re.findall(r'rel="(prev|next)" href="([^"]+)"', text)
    }


async def _said(srv: Server, numbers: range, session_id: str = SID) -> None:
    for n in numbers:
        await srv.runtime.store.append_message(session_id, "user", f"said {n}", sender="ann")


async def _shown(client: aiohttp.ClientSession, path: str) -> tuple[list[int], dict[str, str]]:
    status, text = await page(client, path)
    assert status == 200, (path, status, text[:300])
    return [int(n) for n in _MESSAGE.findall(text)], _links(text)


async def test_a_conversation_opens_at_its_newest_and_pages_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages_module, "CONVERSATION_PAGE", 4)
    async with serving(tmp_path) as srv, browsing(srv, "ann") as ann:
        await srv.runtime.store.ensure(SID, owner="http:ann")
        await _said(srv, range(10))
        shown, links = await _shown(ann, f"/ui/session/{SID}")
        assert shown == [6, 7, 8, 9] and set(links) == {"prev"}  # the newest; no newer page
        shown, links = await _shown(ann, links["prev"])
        assert shown == [2, 3, 4, 5] and set(links) == {"prev", "next"}
        back_to_newer = links["next"]
        await _said(srv, range(10, 12))  # new ones arrive: the older pages stay as they were
        shown, links = await _shown(ann, links["prev"])
        assert shown == [0, 1] and set(links) == {"next"}  # the oldest
        shown, links = await _shown(ann, links["next"])
        assert shown == [2, 3, 4, 5]
        shown, links = await _shown(ann, back_to_newer)
        assert shown == [6, 7, 8, 9] and set(links) == {"prev", "next"}
        shown, links = await _shown(ann, links["next"])
        assert shown == [10, 11] and set(links) == {"prev"}
        for damaged in ("before=nonsense", "after=%7B", "before=WyJzZWFyY2giLDFd"):
            status, _ = await page(ann, f"/ui/session/{SID}?{damaged}")
            assert status == 400, damaged


async def test_approvals_page_through_every_open_prompt_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pages_module, "APPROVALS_PAGE", 2)
    async with serving(tmp_path, confirm_timeout_seconds=600) as srv, browsing(srv, "ann") as ann:

        async def confirm(user: str, n: int) -> str:
            body = {"content": f"!confirm launch{n}", "persist": True, "wait": 30}
            status, sent = await srv.call("POST", "/v1/send", json_body=body, headers=bearer(user))
            assert status == 202 and sent["pending"], sent
            return str(sent["task_hash"])

        await confirm("bob", 99)  # not ann's to answer, nor to see
        made = {await confirm("ann", n) for n in range(5)}
        seen: list[str] = []
        path: str | None = "/ui/approvals"
        while path is not None:
            status, text = await page(ann, path)
            assert status == 200, status
            seen += re.findall(r'<article class="card prompt" data-task="([^"]+)"', text)
            if path == "/ui/approvals":
                made.add(await confirm("ann", 100))  # arrives after the first page: comes last
            path = _links(text).get("next")
        assert len(seen) == len(set(seen)) and set(seen) == made
        assert (await page(ann, "/ui/approvals?after=nonsense"))[0] == 400


async def test_word_search_pages_through_every_match_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overview_module, "SEARCH_PAGE", 3)
    async with serving(tmp_path) as srv, browsing(srv, "ann") as ann:
        await srv.runtime.store.ensure(SID, owner="http:ann")
        await srv.runtime.store.ensure("chat-bobs", owner="http:bob")
        await _said(srv, range(100, 101), "chat-bobs")
        await _said(srv, range(8))
        seen: list[int] = []
        path: str | None = "/ui/search?q=said&mode=words"
        while path is not None:
            shown, links = await _shown(ann, path)
            if not seen:
                await _said(srv, range(50, 51))  # newer than the pages being read
            seen += shown
            path = links.get("next")
        assert seen == list(range(7, -1, -1))  # newest first, each once, none of bob's
        assert (await page(ann, "/ui/search?q=said&after=%7B"))[0] == 400


async def test_in_the_browser_a_long_conversation_opens_at_its_newest(
    browser: Any, tmp_path: Path
) -> None:
    async with serving(tmp_path) as srv:
        await srv.runtime.store.ensure(SID, owner="http:root")
        await _said(srv, range(80))
        view = await sign_in(browser, srv.base)
        await view.goto(f"{srv.base}/ui/session/{SID}")

        async def in_view(n: int) -> bool:
            box = view.locator("#conversation li", has_text=re.compile(rf"said {n}\s*$"))
            found: bool = await box.evaluate(
                "e => { const r = e.getBoundingClientRect();"
                " return r.top >= 0 && r.bottom <= window.innerHeight; }"
            )
            return found

        # The script runs once the page is parsed: wait for it rather than for a time.
        await view.wait_for_function("() => window.scrollY > 0", timeout=15_000)
        assert await in_view(79) and not await in_view(0)


async def test_the_usage_page_lists_the_biggest_spenders_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(overview_module, "USAGE_TOP", 2)
    async with serving(tmp_path) as srv, browsing(srv, "root") as root:
        for n, spent in enumerate((5, 50, 500, 1)):
            await srv.runtime.store.usage.record(
                UsageRecord(f"tg-{n}", "gpt-a", input=spent, output=0, identity=f"telegram:{n}")
            )
        status, text = await page(root, "/ui/usage")
        assert status == 200, status
        members = text.split('class="per-member"')[1].split("</table>")[0]
        chats = text.split('class="per-chat"')[1].split("</table>")[0]
        assert re.findall(r"<tr><td>(telegram:\d)</td>", members) == ["telegram:2", "telegram:1"]
        assert re.findall(r'<a href="/ui/session/(tg-\d)">', chats) == ["tg-2", "tg-1"]
        assert "more-members" in text and "more-chats" in text
