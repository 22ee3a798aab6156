"""Who may do what, as one table: every HTTP route on a session and every MCP tool, asked by
each kind of caller, of a private session and of a shared chat (gateway/ownership.py); and
every other HTTP route, asked by the same callers (any token, gateway admins only, or anyone).

Each route is written once with what it needs of the session (read, write, configure,
manage); each kind of caller once with what it gets for each need. A route given a looser
need, or a caller a looser grant, answers otherwise than written here and fails the test.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest
from support import wait_until
from test_http import USERS, Server, bearer, revoke_token, serving
from test_mcp_server import call, mcp_client
from typer.testing import CliRunner

from adapters.http.routes import ROUTES
from gateway.cli import app as cli_app

# What a caller gets: the route served them (whatever it then answered), or it was refused.
OK: Final = "ok"
HIDDEN: Final = "hidden"  # 404: as if the session did not exist
REFUSED: Final = "refused"  # 403 not_allowed: seen, but not theirs to do
BAD_TOKEN: Final = "bad token"  # 403 forbidden: the token stands for nobody
NO_TOKEN: Final = "no token"  # 401

NEEDS: Final = ("read", "write", "configure", "manage")
S: Final = "{sid}"
# Every route on a session: method, path, body, and what it needs of the session.
SESSION_ROUTES: Final[tuple[tuple[str, str, Any, str], ...]] = (
    ("GET", "/v1/session/{sid}", None, "read"),
    ("GET", "/v1/session/{sid}/history", None, "read"),
    ("GET", "/v1/session/{sid}/log", None, "read"),
    ("GET", "/v1/session/{sid}/inputs", None, "read"),
    ("GET", "/v1/session/{sid}/schedules", None, "read"),
    ("GET", "/v1/session/{sid}/pending", None, "read"),
    ("GET", "/v1/session/{sid}/task/{task_hash}", None, "read"),
    ("POST", "/v1/session/{sid}/inputs", {"entry": "ls"}, "write"),
    ("POST", "/v1/session/{sid}/pending/{task_hash}", {"approve": True}, "write"),
    ("POST", "/v1/session/{sid}/cancel/{task_hash}", None, "write"),
    ("PUT", "/v1/session/{sid}", {"name": "renamed"}, "configure"),
    ("GET", "/v1/session/{sid}/shares", None, "manage"),
    ("PUT", "/v1/session/{sid}/shares/{identity}", {"mode": "read"}, "manage"),
    ("DELETE", "/v1/session/{sid}/shares/{identity}", None, "manage"),
    ("POST", "/v1/session/{sid}/schedules", {}, "manage"),
    ("DELETE", "/v1/session/{sid}/schedules/{schedule_id}", None, "manage"),
    # Gateway admins only, which the schedules check past this rule (test_schedule_revocation).
    ("POST", "/v1/session/{sid}/schedules/{schedule_id}/resume", {}, "read"),
    ("DELETE", "/v1/session/{sid}", None, "manage"),  # last: it ends the session
)
FILLED: Final = {"task_hash": "nosuchtask", "identity": "http:zed", "schedule_id": "999"}

# The callers: a token's user, or none. `ann` owns the private session and shared it with
# `bob` (read-write), `dave` (read-only) and `mallory` (read-write, token revoked since);
# `carol`'s Telegram identity, linked with her token, wrote in the shared chat; `root` is a
# gateway admin (AGENVOY_ADMINS); `eve` is nobody to either.
CALLERS: Final = {
    "owner": "ann",
    "shared read-write": "bob",
    "shared read-only": "dave",
    "other token": "eve",
    "revoked token": "mallory",
    "anonymous": None,
    "chat member": "carol",
    "gateway admin": "root",
}
ALL: Final = dict.fromkeys(NEEDS, OK)
# What each caller gets, need by need: of the private session, of the shared chat.
GRANTS: Final[dict[str, tuple[dict[str, str], dict[str, str]]]] = {
    "owner": (ALL, dict.fromkeys(NEEDS, HIDDEN)),
    "shared read-write": (
        {"read": OK, "write": OK, "configure": REFUSED, "manage": REFUSED},
        dict.fromkeys(NEEDS, HIDDEN),
    ),
    "shared read-only": (
        {"read": OK, "write": REFUSED, "configure": REFUSED, "manage": REFUSED},
        dict.fromkeys(NEEDS, HIDDEN),
    ),
    "other token": (dict.fromkeys(NEEDS, HIDDEN), dict.fromkeys(NEEDS, HIDDEN)),
    "revoked token": (dict.fromkeys(NEEDS, BAD_TOKEN), dict.fromkeys(NEEDS, BAD_TOKEN)),
    "anonymous": (dict.fromkeys(NEEDS, NO_TOKEN), dict.fromkeys(NEEDS, NO_TOKEN)),
    "chat member": (
        dict.fromkeys(NEEDS, HIDDEN),
        {"read": OK, "write": OK, "configure": REFUSED, "manage": REFUSED},
    ),
    "gateway admin": (ALL, ALL),
}
# The listing and the search show a session exactly when its caller may read it.


def outcome(status: int, body: Any) -> str:
    error = body.get("error", {}) if isinstance(body, dict) else {}
    code, message = error.get("code", ""), error.get("message", "")
    if status == 401:
        return NO_TOKEN
    if status == 403:
        return BAD_TOKEN if code == "forbidden" else REFUSED
    if status == 404 and message.startswith("no such session"):
        return HIDDEN
    return OK


@dataclass
class Place:
    private: str
    chat: str


async def make_places(server: Server, n: int) -> Place:
    """A private session of ann's, shared as the table says, and a Telegram chat carol wrote
    in; each with a message holding a word only it has."""
    store = server.runtime.store
    status, body = await server.call(
        "POST",
        "/v1/send",
        json_body={"content": f"private{n}", "persist": True},
        headers=bearer("ann"),
    )
    assert status == 200, body
    private = body["session_id"]
    for user, mode in (("bob", "write"), ("dave", "read"), ("mallory", "write")):
        await server.share(private, user, by=bearer("ann"), mode=mode)
    chat = f"tg-{900 + n}"
    await store.take_in(chat, f"chatword{n}", sender="Carol", sender_key="telegram:carol")
    return Place(private, chat)


async def ask(server: Server, method: str, path: str, body: Any, user: str | None) -> str:
    # Its own client: the server's sends the default user's token with every request.
    headers = bearer(user) if user else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
        request = client.request(method, server.url(path), json=body, headers=headers)
        async with request as resp:
            # An event stream's first answer is all that counts.
            streaming = resp.content_type == "text/event-stream"
            text = b"{}" if streaming else await resp.read()
            try:
                answer = json.loads(text or b"{}")
            except ValueError:
                answer = {}
            return outcome(resp.status, answer)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    users = {**USERS, "dave": "Dave", "eve": "Eve", "carol": "Carol", "mallory": "Mallory"}
    async with serving(tmp_path, users=users) as srv:
        await srv.runtime.store.ownership.link("telegram:carol", "http:carol")
        await revoke_token(srv.runtime, "mallory")

        async def revoked() -> bool:
            return await ask(srv, "GET", "/v1/sessions", None, "mallory") == BAD_TOKEN

        assert await wait_until(revoked, within=10)
        yield srv


def test_every_route_on_a_session_is_in_the_table() -> None:
    served = {(r.method, r.path) for r in ROUTES if "{sid}" in r.path}
    assert served == {(method, path) for method, path, _, _ in SESSION_ROUTES}


async def test_who_may_do_what_over_http(server: Server) -> None:
    seen: dict[tuple[str, str, str, str], str] = {}
    expected: dict[tuple[str, str, str, str], str] = {}
    for n, (kind, user) in enumerate(CALLERS.items()):
        place = await make_places(server, n)
        for where, sid, grants in (
            ("private", place.private, GRANTS[kind][0]),
            ("chat", place.chat, GRANTS[kind][1]),
        ):
            for method, path, body, need in SESSION_ROUTES:
                filled = path.format(sid=sid, **FILLED)
                key = (kind, where, method, path)
                seen[key] = await ask(server, method, filled, body, user)
                expected[key] = grants[need]
    wrong = {key: (seen[key], want) for key, want in expected.items() if seen[key] != want}
    assert not wrong, "\n".join(f"{k}: got {g}, expected {w}" for k, (g, w) in wrong.items())


# Messages sent to a private session: a command that changes it asks what the routes that
# change it ask; one that only shows something, or plain text, asks what sending does.
SENT_TO_PRIVATE: Final = (
    ("/persona a pirate", "configure"),
    ("/allow write_file", "configure"),
    ("/model", "write"),
    ("hello", "write"),
    ("/reset", "configure"),
)


async def test_commands_sent_to_a_private_session_ask_what_its_routes_ask(
    server: Server,
) -> None:
    wrong = {}
    places = {}
    for n, (kind, user) in enumerate(CALLERS.items()):
        place = places[kind] = await make_places(server, 70 + n)
        for text, need in SENT_TO_PRIVATE:
            body = {"session_id": place.private, "content": text, "wait": 0}
            got = await ask(server, "POST", "/v1/send", body, user)
            if got != GRANTS[kind][0][need]:
                wrong[(kind, text)] = (got, GRANTS[kind][0][need])
    assert not wrong, wrong
    for kind, persona in (("shared read-write", ""), ("owner", "a pirate")):
        sid = places[kind].private
        status, body = await server.call("GET", f"/v1/session/{sid}", headers=bearer("ann"))
        assert status == 200 and body.get("persona") == persona, (kind, body)


async def test_listings_and_searches_show_what_the_caller_may_read(server: Server) -> None:
    place = await make_places(server, 50)
    for kind, user in CALLERS.items():
        if user is None or kind == "revoked token":
            continue
        readable = {
            sid
            for sid, grants in ((place.private, GRANTS[kind][0]), (place.chat, GRANTS[kind][1]))
            if grants["read"] == OK
        }
        status, body = await server.call("GET", "/v1/sessions?limit=500", headers=bearer(user))
        assert status == 200, body
        listed = {s["session_id"] for s in body["sessions"]} & {place.private, place.chat}
        assert listed == readable, kind
        found = set()
        for word in ("private50", "chatword50"):
            status, body = await server.call("GET", f"/v1/search?q={word}", headers=bearer(user))
            assert status == 200, body
            found |= {hit["session_id"] for hit in body["results"]}
        assert found == readable, kind


async def test_who_may_do_what_over_mcp(server: Server) -> None:
    place = await make_places(server, 60)
    tools: tuple[tuple[str, dict[str, Any], str], ...] = (
        ("read_history", {"session_id": S}, "read"),
        ("get_task", {"session_id": S, "task_hash": "nosuchtask"}, "read"),
        ("list_pending", {"session_id": S}, "read"),
        ("send_message", {"session_id": S, "content": "hi", "wait": 0}, "write"),
        ("send_message", {"session_id": S, "content": "/persona a pirate", "wait": 0}, "configure"),
        ("answer_prompt", {"session_id": S, "task_hash": "nosuchtask", "approve": True}, "write"),
    )
    for kind, user in CALLERS.items():
        if user is None or kind == "revoked token":
            continue  # refused before MCP: the same middleware as every route
        async with mcp_client(server, bearer(user)) as client:
            for sid, grants in ((place.private, GRANTS[kind][0]), (place.chat, GRANTS[kind][1])):
                for tool, arguments, need in tools:
                    args = {k: sid if v == S else v for k, v in arguments.items()}
                    failed, answer = await call(client, tool, **args)
                    got = OK
                    if failed and "no such session" in answer:
                        got = HIDDEN
                    elif failed and ("read-only" in answer or "only the owner" in answer):
                        got = REFUSED
                    elif isinstance(answer, dict) and answer.get("ok") is False:
                        got = REFUSED  # a command that said no: in a shared chat, its own check
                    assert got == grants[need], (kind, tool, sid, answer)


async def test_a_subagent_session_belongs_to_whom_its_parent_task_acts_for(
    server: Server,
) -> None:
    status, body = await server.call(
        "POST",
        "/v1/send",
        json_body={"content": "!delegate hello there", "persist": True},
        headers=bearer("ann"),
    )
    assert status == 200 and body["text"] == "delegated: echo: hello there", body
    status, body = await server.call("GET", "/v1/sessions?prefix=temp", headers=bearer("ann"))
    (child,) = [s for s in body["sessions"] if s["parent"]]
    path = f"/v1/session/{child['session_id']}/history"
    assert await ask(server, "GET", path, None, "ann") == OK
    assert await ask(server, "GET", path, None, "eve") == HIDDEN


async def test_a_session_from_before_owners_is_the_admins_until_the_operator_names_one(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = server.runtime.store
    await store.ensure("chat-old")  # as an older release left it: no owner
    path = "/v1/session/chat-old/history"
    assert await ask(server, "GET", path, None, "ann") == HIDDEN
    assert await ask(server, "GET", path, None, "root") == OK
    monkeypatch.setenv("AGENVOY_HOME", str(server.runtime.settings.home))
    given = await asyncio.to_thread(
        CliRunner().invoke, cli_app, ["identity", "own", "http:ann", "chat-old", "chat-none"]
    )
    assert given.exit_code == 1  # chat-none does not exist
    assert "chat-old: http:ann" in given.output and "chat-none: no such session" in given.output
    assert await ask(server, "GET", path, None, "ann") == OK
    shared = await asyncio.to_thread(
        CliRunner().invoke, cli_app, ["identity", "own", "http:ann", "tg-1"]
    )
    assert shared.exit_code == 2


async def test_the_session_listing_pages_with_a_cursor(server: Server) -> None:
    store = server.runtime.store
    for n in range(7):
        await store.ensure(f"chat-page{n}", owner="http:ann")
    await store.ensure("chat-someone-else", owner="http:bob")
    seen: list[str] = []
    cursor = ""
    for _ in range(10):
        query = "/v1/sessions?prefix=chat&limit=3" + (f"&cursor={cursor}" if cursor else "")
        status, body = await server.call("GET", query, headers=bearer("ann"))
        assert status == 200, body
        assert len(body["sessions"]) <= 3
        seen += [s["session_id"] for s in body["sessions"]]
        cursor = body["next_cursor"] or ""
        if not cursor:
            break
    # Every one of ann's, once, newest first; bob's never.
    assert sorted(seen) == [f"chat-page{n}" for n in range(7)]
    assert len(seen) == len(set(seen))
    for bad in ("limit=0", "limit=501", "cursor=nonsense", "cursor=1~../etc"):
        status, body = await server.call("GET", f"/v1/sessions?{bad}", headers=bearer("ann"))
        assert status == 400, (bad, body)


# Every route not on one session: what it asks of the caller. "token": any caller whose token
# stands for someone; "admin": gateway admins only; "public": anyone, with or without a token.
# Bodies are harmless: an admin's request may be answered 400 or 404, never 401 or 403.
OTHER_ROUTES: Final[tuple[tuple[str, str, Any, str], ...]] = (
    ("POST", "/v1/session", {}, "token"),
    ("GET", "/v1/sessions", None, "token"),
    ("POST", "/v1/send", {"content": "hi", "wait": 0}, "token"),
    ("GET", "/v1/commands", None, "token"),
    ("GET", "/v1/pending", None, "token"),
    ("GET", "/v1/search?q=hello", None, "token"),
    ("GET", "/v1/usage", None, "token"),
    ("GET", "/v1/me", None, "token"),
    ("POST", "/v1/me/link-code", None, "token"),
    ("POST", "/v1/me/link", {"code": "nope"}, "token"),
    ("GET", "/v1/me/export", None, "token"),
    ("POST", "/v1/me/forget", {"confirm": False}, "token"),
    ("DELETE", "/v1/me/link", None, "token"),  # after /v1/me/forget: carol's link goes last
    ("GET", "/v1/profiles", None, "admin"),
    ("GET", "/v1/profiles/{profile}", None, "admin"),
    ("PUT", "/v1/profiles/{profile}", {}, "admin"),
    ("DELETE", "/v1/profiles/{profile}", None, "admin"),
    ("GET", "/v1/profiles/{profile}/history", None, "admin"),
    ("POST", "/v1/profiles/{profile}/rollback", {"version": 1}, "admin"),
    ("GET", "/v1/bindings", None, "admin"),
    ("PUT", "/v1/bindings", {}, "admin"),
    ("DELETE", "/v1/bindings", {}, "admin"),
    ("GET", "/v1/knowledge", None, "admin"),
    ("POST", "/v1/knowledge", {}, "admin"),
    ("GET", "/v1/search/knowledge?q=hello&target=profile:default", None, "admin"),
    ("GET", "/v1/knowledge/{document}", None, "admin"),
    ("DELETE", "/v1/knowledge/{document}", None, "admin"),
    ("GET", "/v1/connections", None, "admin"),
    ("PUT", "/v1/connections/{platform}", {}, "admin"),
    ("DELETE", "/v1/connections/{platform}", None, "admin"),
    ("GET", "/v1/identities/{identity}", None, "admin"),
    ("PUT", "/v1/identities/{identity}/person", {}, "admin"),
    ("DELETE", "/v1/identities/{identity}/person", None, "admin"),
    ("GET", "/v1/quotas", None, "admin"),
    ("PUT", "/v1/quotas/{subject}", {}, "admin"),
    ("GET", "/v1/tokens", None, "admin"),
    ("POST", "/v1/tokens", {}, "admin"),
    ("DELETE", "/v1/tokens/{name}", None, "admin"),
    ("GET", "/v1/changes", None, "admin"),
    ("POST", "/v1/changes/{change}/revert", None, "admin"),
    ("GET", "/healthz", None, "public"),
    ("GET", "/metrics", None, "token"),
    ("GET", "/openapi.json", None, "token"),
)
OTHER_FILLED: Final = {
    "profile": "nosuch",
    "document": "999",
    "platform": "telegram",
    "identity": "http:zed",
    "subject": "http:zed",
    "name": "nobody",
    "change": "999",
}
# What each kind of caller gets from a route asking "token", "admin" or "public".
OTHER_GRANTS: Final[dict[str, dict[str, str]]] = {
    kind: {"token": OK, "admin": REFUSED, "public": OK}
    for kind in ("owner", "shared read-write", "shared read-only", "other token", "chat member")
} | {
    "gateway admin": {"token": OK, "admin": OK, "public": OK},
    "revoked token": {"token": BAD_TOKEN, "admin": BAD_TOKEN, "public": OK},
    "anonymous": {"token": NO_TOKEN, "admin": NO_TOKEN, "public": OK},
}


async def ask_anywhere(server: Server, method: str, path: str, body: Any, user: str | None) -> str:
    """As `ask`, telling a refused caller (403, by the route's own rule) from a token that
    stands for nobody (403, before any route)."""
    headers = bearer(user) if user else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
        request = client.request(method, server.url(path), json=body, headers=headers)
        async with request as resp:
            try:
                answer = json.loads(await resp.read() or b"{}")
            except ValueError:
                answer = {}
            if resp.status == 401:
                return NO_TOKEN
            if resp.status == 403:
                message = answer.get("error", {}).get("message", "")
                return BAD_TOKEN if message == "the bearer token is not valid" else REFUSED
            return OK


def test_every_route_off_a_session_is_in_the_table() -> None:
    served = {(r.method, r.path) for r in ROUTES if "{sid}" not in r.path}
    assert served == {(method, path.partition("?")[0]) for method, path, _, _ in OTHER_ROUTES}


async def test_who_may_call_every_route_off_a_session(server: Server) -> None:
    wrong = {}
    for kind, user in CALLERS.items():
        for method, path, body, rule in OTHER_ROUTES:
            got = await ask_anywhere(server, method, path.format(**OTHER_FILLED), body, user)
            if got != OTHER_GRANTS[kind][rule]:
                wrong[(kind, method, path)] = (got, OTHER_GRANTS[kind][rule])
    assert not wrong, "\n".join(f"{k}: got {g}, expected {w}" for k, (g, w) in wrong.items())
