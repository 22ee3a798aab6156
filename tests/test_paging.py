"""Every listing of the API pages the same way (adapters/http/paging.py), as one table: each
listing filled with more items than a page holds, then read page after page by its cursor
while new items arrive, must show every item that was there at the start exactly once and no
item twice, never one the caller may not see; and a bad limit or cursor is a 400 that says so.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
from test_http import ANN, BOB, ROOT, Server, bearer, serving
from test_mcp_server import call, mcp_client

from adapters.http.paging import encode_cursor
from gateway.store.usage import UsageRecord

N: Final = 7  # items made; more than two pages of LIMIT
LIMIT: Final = 3
PAGED: Final = "chat-paged"  # ann's session the per-session listings read
OTHERS: Final = "chat-bobs"  # bob's: what ann must never see


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    # Prompts stay open for the whole test.
    async with serving(tmp_path, confirm_timeout_seconds=600) as srv:
        await srv.runtime.store.ensure(PAGED, owner="http:ann")
        await srv.runtime.store.ensure(OTHERS, owner="http:bob")
        yield srv


async def _message(server: Server, n: int, session_id: str = PAGED) -> str:
    stored = await server.runtime.store.append_message(
        session_id, "user", f"needle number {n}", sender="ann"
    )
    return str(stored.id)


async def _messages(server: Server) -> set[str]:
    await _message(server, -1, OTHERS)
    return {await _message(server, n) for n in range(N)}


async def _schedule(server: Server, n: int) -> str:
    body = {"spec": "every 30m", "prompt": f"check {n}"}
    path = f"/v1/session/{PAGED}/schedules"
    status, made = await server.call("POST", path, json_body=body, headers=ANN)
    assert status == 201, made
    return str(made["id"])


async def _schedules(server: Server) -> set[str]:
    return {await _schedule(server, n) for n in range(N)}


async def _prompt(server: Server, n: int) -> str:
    body = {"content": f"!confirm launch{n}", "persist": True, "wait": 30}
    status, sent = await server.call("POST", "/v1/send", json_body=body, headers=ANN)
    assert status == 202 and sent["pending"], sent
    return str(sent["task_hash"])


async def _prompts(server: Server) -> set[str]:
    body = {"content": "!confirm bobs", "persist": True, "wait": 30}
    status, sent = await server.call("POST", "/v1/send", json_body=body, headers=BOB)
    assert status == 202, sent
    return {await _prompt(server, n) for n in range(N)}


async def _share(server: Server, n: int) -> str:
    # Identities sort by name: one made while paging (`z`) sorts after those made first.
    identity = f"http:{'z' if n >= 100 else 'u'}{n}"
    path = f"/v1/session/{PAGED}/shares/{identity}"
    status, body = await server.call("PUT", path, json_body={"mode": "read"}, headers=ANN)
    assert status == 200, body
    return identity


async def _shares(server: Server) -> set[str]:
    return {await _share(server, n) for n in range(N)}


async def _spend(server: Server, n: int) -> str:
    identity = f"http:{'z' if n >= 100 else 'u'}{n}"
    await server.runtime.store.usage.record(
        UsageRecord(PAGED, "gpt-a", input=n + 1, output=1, identity=identity)
    )
    return identity


async def _spending(server: Server) -> set[str]:
    return {await _spend(server, n) for n in range(N)}


@dataclass(frozen=True, slots=True)
class Listing:
    path: str
    items: str  # the answer's list
    key: str  # what names an item in it
    make: Callable[[Server], Awaitable[set[str]]]  # fills it; the keys ann must see
    more: Callable[[Server, int], Awaitable[str]]  # one more, made while paging
    # Whether an item made while paging comes later in the order (a new schedule), or
    # before the pages read (a new message, as history and search read newest first).
    new_shown: bool
    most: int  # the largest limit
    caller: dict[str, str] = field(default_factory=lambda: ANN)


LISTINGS: Final = {
    "history": Listing(
        f"/v1/session/{PAGED}/history", "messages", "id", _messages, _message, False, 500
    ),
    "search": Listing("/v1/search?q=needle", "results", "id", _messages, _message, False, 200),
    "schedules": Listing(
        f"/v1/session/{PAGED}/schedules", "schedules", "id", _schedules, _schedule, True, 200
    ),
    "pending": Listing("/v1/pending", "pending", "task_hash", _prompts, _prompt, True, 200),
    "shares": Listing(
        f"/v1/session/{PAGED}/shares", "shares", "identity", _shares, _share, True, 500
    ),
    # A gateway admin: everyone's spend (what others see is test_usage_private's).
    "usage": Listing(
        "/v1/usage?by=identity", "identities", "identity", _spending, _spend, True, 500, ROOT
    ),
}


def _with(path: str, query: str) -> str:
    return f"{path}{'&' if '?' in path else '?'}{query}"


@pytest.mark.parametrize("name", sorted(LISTINGS))
async def test_a_listing_pages_through_every_item_once(server: Server, name: str) -> None:
    listing = LISTINGS[name]
    made = await listing.make(server)
    seen: list[str] = []
    cursor = ""
    arrived: set[str] = set()
    for page in range(N):
        query = f"limit={LIMIT}" + (f"&cursor={cursor}" if cursor else "")
        status, body = await server.call("GET", _with(listing.path, query), headers=listing.caller)
        assert status == 200, body
        assert len(body[listing.items]) <= LIMIT, body
        seen += [str(item[listing.key]) for item in body[listing.items]]
        cursor = body["next_cursor"] or ""
        if not cursor:
            break
        if page == 0:  # a new one arrives between pages
            arrived.add(await listing.more(server, 100))
    assert len(seen) == len(set(seen)), seen  # none twice
    expected = made | (arrived if listing.new_shown else set())
    assert set(seen) == expected, (seen, made, arrived)  # none skipped, none of bob's


# Every listing's path, its largest limit and who asks: those above, and a session's open
# prompts (a session runs one task at a time, so it never holds more than a page of them).
REFUSING: Final = {
    **{name: (each.path, each.most, each.caller) for name, each in LISTINGS.items()},
    "session pending": (f"/v1/session/{PAGED}/pending", 200, ANN),
}


@pytest.mark.parametrize("name", sorted(REFUSING))
async def test_a_bad_limit_or_cursor_is_refused(server: Server, name: str) -> None:
    path, most, caller = REFUSING[name]
    for query, says in (
        ("limit=0", "limit"),
        (f"limit={most + 1}", "limit"),
        ("limit=ten", "limit"),
        ("cursor=nonsense", "cursor"),
        ("cursor=a%2Fb", "cursor"),
        ("cursor=1234567890123456789", "cursor"),  # past what an id may be
        ("cursor=1~..%2Fetc", "cursor"),
    ):
        status, body = await server.call("GET", _with(path, query), headers=caller)
        assert status == 400, (query, body)
        error: dict[str, Any] = body["error"]
        assert error["code"] == "bad_request" and says in error["message"], (query, error)


async def test_search_keeps_offset_but_not_with_a_cursor(server: Server) -> None:
    await _messages(server)
    status, body = await server.call("GET", "/v1/search?q=needle&offset=5", headers=ANN)
    assert status == 200 and len(body["results"]) == N - 5, body
    status, body = await server.call("GET", "/v1/search?q=needle&limit=2", headers=ANN)
    assert status == 200, body
    cursor = body["next_cursor"]
    status, body = await server.call(
        "GET", f"/v1/search?q=needle&cursor={cursor}&offset=1", headers=ANN
    )
    assert status == 400 and "not both" in body["error"]["message"], body
    status, body = await server.call(
        "GET",
        f"/v1/search?q=needle&mode=semantic&session_id={PAGED}&cursor={cursor}",
        headers=ANN,
    )
    assert status == 400 and "no cursor" in body["error"]["message"], body


async def test_history_pages_back_from_the_newest(server: Server) -> None:
    made = sorted(int(i) for i in await _messages(server))
    status, body = await server.call(
        "GET", f"/v1/session/{PAGED}/history?limit=3", headers=bearer("ann")
    )
    assert status == 200 and [m["id"] for m in body["messages"]] == made[-3:], body
    status, body = await server.call(
        "GET", f"/v1/session/{PAGED}/history?limit=3&cursor={body['next_cursor']}", headers=ANN
    )
    assert status == 200 and [m["id"] for m in body["messages"]] == made[-6:-3], body


async def test_usage_by_model_answers_at_once_and_takes_no_cursor(server: Server) -> None:
    cursor = encode_cursor("http:u1")
    status, body = await server.call("GET", f"/v1/usage?cursor={cursor}", headers=ROOT)
    assert status == 400 and "no cursor" in body["error"]["message"], body


async def _sessions(server: Server) -> set[str]:
    for n in range(N):
        await server.runtime.store.ensure(f"chat-s{n}", owner="http:ann")
    return {f"chat-s{n}" for n in range(N)} | {PAGED}


# The MCP tools that list: tool, its arguments, the answer's list, what names an item.
MCP_LISTINGS: Final = {
    "list_sessions": ({}, "sessions", "session_id", _sessions),
    "read_history": ({"session_id": PAGED}, "messages", "id", _messages),
    "search_history": ({"query": "needle"}, "results", "id", _messages),
    "list_pending": ({}, "pending", "task_hash", _prompts),
}


@pytest.mark.parametrize("tool", sorted(MCP_LISTINGS))
async def test_an_mcp_listing_pages_through_every_item_once(server: Server, tool: str) -> None:
    arguments, items, key, make = MCP_LISTINGS[tool]
    made = await make(server)
    seen: list[str] = []
    async with mcp_client(server, ANN) as client:
        cursor = None
        for _ in range(N):
            failed, body = await call(client, tool, **arguments, limit=LIMIT, cursor=cursor)
            assert not failed, body
            assert len(body[items]) <= LIMIT, body
            seen += [str(item[key]) for item in body[items]]
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert len(seen) == len(set(seen)) and set(seen) == made, (seen, made)
        failed, answer = await call(client, tool, **arguments, cursor="nonsense")
        assert failed and answer.startswith("bad_request: argument 'cursor'"), answer
