"""Who may do what in the web console, as one table: every route of the console's router,
asked through real HTTP by each kind of viewer (signed in with their token, as a browser
would: the console's cookie and its forms' CSRF token), of a private session and of a shared
chat. The HTTP API and MCP side is tests/test_authorization.py, chat commands
tests/test_authorization_commands.py.

Each route is written once with what it needs; each viewer once with what they get. A route
added to the console without a row, a looser need or a looser grant fails here; so does a
console answer without `nosniff` or a `Referrer-Policy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import aiohttp
import pytest
from support import wait_until
from test_console import sign_in
from test_http import USERS, Server, bearer, revoke_token, serving

from adapters.web.app import CONSOLE_PREFIX, ENTRY_PATHS
from gateway.events import Inbound, Origin
from gateway.store.usage import UsageRecord

pytestmark = pytest.mark.timeout(120)

# What a viewer gets: the console served them (whatever it then showed), or not.
OK: Final = "ok"
HIDDEN: Final = "hidden"  # 404 "no such session", or left out of a list: as if it did not exist
REFUSED: Final = "refused"  # 403: seen, but not theirs to do
SIGN_IN: Final = "sign in"  # sent to the sign-in form (a stream: 401)

COOKIE: Final = "agenvoy_console"
_CSRF: Final = re.compile(r'name="csrf" value="([0-9a-f]+)"')


@dataclass(frozen=True, slots=True)
class Row:
    """One console action: `route` as the router names it, what is added to its address and
    sent with it, and what it needs. `shows`: on a page that lists, the mark of the session
    being listed (the answer is then OK when it is there, HIDDEN when not)."""

    method: str
    route: str
    query: str = ""
    form: dict[str, str] | None = None
    need: str = "signed in"
    shows: str = ""


S: Final = "/ui/session/{sid}"
# Every console route. Needs: `public` (anyone), `signed in` (any viewer), `token` (the
# viewer's own token, at sign-in), and of the session: `read`, `write`, `configure`, `spend`
# (the usage page shows what was spent for its members), `answer` (the approvals page shows
# the open prompt of its member's task), `admin` (gateway admins only: the profiles' pages and
# forms, Getting started; 403 for anyone else). The sign-out comes last: it ends the viewer's
# sign-in.
ROWS: Final[tuple[Row, ...]] = (
    Row("GET", "/", need="public"),
    Row("GET", "/ui", need="public"),
    Row("GET", "/ui/static", "/console.css", need="public"),
    Row("GET", "/ui/login", need="public"),
    Row("GET", "/ui/", "?q={sid}", need="read", shows='data-session="{sid}"'),
    Row("GET", "/ui/search", "?q={word}", need="read", shows='href="/ui/session/{sid}"'),
    Row("GET", "/ui/search", "?q={word}&session={sid}", need="read"),
    Row("GET", "/ui/usage", need="spend", shows="spent-in-{sid}"),
    Row("GET", "/ui/health"),
    Row("GET", "/ui/approvals", need="answer", shows='name="session_id" value="{sid}"'),
    Row("GET", S, need="read"),
    Row("GET", S + "/events", need="read"),
    Row("GET", S + "/file", "?path=workspace/attachments/note.txt", need="read"),
    Row("POST", S + "/send", form={"content": "hello from the console"}, need="write"),
    Row("POST", S + "/cancel/{task}", need="write"),
    Row("POST", "/ui/answer", form={"decision": "approve"}, need="write"),
    Row("POST", "/ui/answer", form={"decision": "deny"}, need="write"),
    Row("POST", "/ui/answer", form={"answer": "blue"}, need="write"),
    Row("POST", S + "/settings", form={"name": "renamed"}, need="configure"),
    Row("GET", "/ui/profiles", need="admin"),
    Row("POST", "/ui/profiles", form={"name": "house", "model": "m-house"}, need="admin"),
    Row("GET", "/ui/profiles/{name}", need="admin"),
    Row("POST", "/ui/profiles/{name}", form={"model": "m-house-2"}, need="admin"),
    Row("POST", "/ui/profiles/{name}/rollback", form={"version": "1"}, need="admin"),
    Row("POST", "/ui/bindings", form={"target": "prefix:temp", "profile": "house"}, need="admin"),
    Row("POST", "/ui/bindings/remove", form={"target": "prefix:temp"}, need="admin"),
    Row("POST", "/ui/profiles/{name}/delete", need="admin"),
    Row("GET", "/ui/start", need="admin"),
    Row("GET", "/ui/quotas", need="admin"),
    Row(
        "POST",
        "/ui/quotas",
        form={"subject": "http:zed", "limit": "running", "value": "2"},
        need="admin",
    ),
    Row("GET", "/ui/changes", need="admin"),
    Row("GET", "/ui/tokens", need="admin"),
    Row("POST", "/ui/tokens", form={"name": "zed"}, need="admin"),
    Row("POST", "/ui/tokens/revoke", form={"name": "nobody"}, need="admin"),
    Row("POST", "/ui/changes/{change}/revert", need="admin"),
    Row(
        "POST", "/ui/identities/link", form={"identity": "http:zed", "to": "http:yan"}, need="admin"
    ),
    Row("POST", "/ui/identities/unlink", form={"identity": "http:nobody"}, need="admin"),
    Row("GET", "/ui/knowledge", need="admin"),
    Row("POST", "/ui/knowledge", form={"target": "profile:default"}, need="admin"),
    Row("GET", "/ui/knowledge/{id}", need="admin"),
    Row("POST", "/ui/knowledge/{id}/remove", need="admin"),
    Row("GET", "/ui/connections", need="admin"),
    Row(
        "POST",
        "/ui/connections/{platform}",
        form={"token": "env:NOPE", "enabled": "on"},
        need="admin",
    ),
    Row("POST", "/ui/connections/{platform}/reset", need="admin"),
    Row("POST", "/ui/login", need="token"),
    Row("POST", "/ui/logout"),
)
SESSION_NEEDS: Final = ("read", "write", "configure")
PROFILE: Final = "house"  # the profile the rows above make, change and bind
NO_TASK: Final = "nosuchtask"

# The viewers, each signed in with their token (`None`: no sign-in). `ann` owns the private
# session and shared it with `bob` (read-write), `dave` (read-only) and `mallory` (read-write,
# whose token was revoked after she signed in); `carol`'s and `kim`'s Telegram identities,
# linked with their tokens, wrote in the shared chat, kim as an admin there; `root` is a
# gateway admin (AGENVOY_ADMINS); `eve` is nobody to either.
VIEWERS: Final = {
    "owner": "ann",
    "shared read-write": "bob",
    "shared read-only": "dave",
    "other token": "eve",
    "revoked token": "mallory",
    "anonymous": None,
    "chat member": "carol",
    "chat admin": "kim",
    "gateway admin": "root",
}
# Neither of these is signed in: every route but the public ones sends them to sign in.
SIGNED_OUT: Final = frozenset({"revoked token", "anonymous"})
OWN: Final = ("spend", "answer")
ALL: Final = dict.fromkeys((*SESSION_NEEDS, *OWN), OK)
NONE: Final = dict.fromkeys((*SESSION_NEEDS, *OWN), HIDDEN)
MEMBER: Final = {"read": OK, "write": OK, "configure": REFUSED, "spend": HIDDEN, "answer": HIDDEN}
# What each signed-in viewer gets, need by need: of the private session, of the shared chat.
# `spend` and `answer` are of ann's in the private session, of carol's in the chat (where
# she asked on Telegram).
GRANTS: Final[dict[str, tuple[dict[str, str], dict[str, str]]]] = {
    "owner": (ALL, NONE),
    "shared read-write": (MEMBER, NONE),
    "shared read-only": ({**MEMBER, "write": REFUSED}, NONE),
    "other token": (NONE, NONE),
    # Her prompt is her Telegram identity's: the requester rule (gateway/auth.py) does not
    # follow links, so the console does not offer it to her.
    "chat member": (NONE, {**MEMBER, "spend": OK}),
    # A chat's admin is vouched for by the platform in that chat only (its commands): reached
    # through the console, they are one of its members.
    "chat admin": (NONE, MEMBER),
    "gateway admin": (ALL, ALL),
}


def expected(kind: str, place: int, need: str) -> str:
    if need == "public":
        return OK
    if kind in SIGNED_OUT:
        return SIGN_IN
    if need in ("signed in", "token"):
        return OK
    if need == "admin":
        return OK if kind == "gateway admin" else REFUSED
    return GRANTS[kind][place][need]


def outcome(resp: aiohttp.ClientResponse, text: str, shows: str) -> str:
    location = resp.headers.get("Location", "")
    cookie_set = any(COOKIE in c for c in resp.headers.getall("Set-Cookie", []))
    if resp.status == 401:
        return SIGN_IN
    if resp.status in (302, 303) and location.endswith("/ui/login") and not cookie_set:
        return SIGN_IN  # with the cookie set (to nothing), it is a sign-out done
    if resp.status == 403 and "not valid" in text:
        return SIGN_IN  # the sign-in form again
    if resp.status == 404 and "no such session" in text:
        return HIDDEN
    if resp.status == 403 and ("only" in text or "read-only" in text):
        return REFUSED
    if resp.status == 403 or resp.status >= 500:
        return f"{resp.status}: {text[:200]}"  # matches no expectation: shown as it is
    if shows and resp.status == 200:
        return OK if shows in text else HIDDEN
    return OK


@dataclass
class Place:
    sid: str
    word: str


async def make_places(srv: Server) -> tuple[Place, Place]:
    """ann's private session, shared as the table says, and a Telegram chat carol and kim
    wrote in; each with a word only it has, a file in its workspace, and spending and a task
    waiting for a confirmation of its member's (ann's, carol's)."""
    store = srv.runtime.store
    body = {"content": "the word is tulipprivate", "persist": True}
    status, sent = await srv.call("POST", "/v1/send", json_body=body, headers=bearer("ann"))
    assert status == 200, sent
    private = Place(sent["session_id"], "tulipprivate")
    for user, mode in (("bob", "write"), ("dave", "read"), ("mallory", "write")):
        await srv.share(private.sid, user, by=bearer("ann"), mode=mode)
    chat = Place("tg-700", "tulipchat")
    await store.take_in(chat.sid, "the word is tulipchat", sender="Kim", sender_key="telegram:kim")
    await store.take_in(chat.sid, "hi", sender="Carol", sender_key="telegram:carol")
    now = srv.runtime.clock.now_ms()
    for place, identity in ((private, "http:ann"), (chat, "telegram:carol")):
        attachments = store.files(place.sid).dir / "workspace" / "attachments"
        await asyncio.to_thread(attachments.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread((attachments / "note.txt").write_text, "a note")
        record = UsageRecord(
            place.sid, f"spent-in-{place.sid}", input=1, output=1, send_at=now, identity=identity
        )
        await store.usage.record(record)
    router = srv.runtime.router
    for place, asker in (
        (private, Origin("http", sender_id="ann", sender_name="Ann")),
        (chat, Origin("telegram", chat.sid, sender_id="carol", sender_name="Carol")),
    ):
        await router.submit(Inbound(asker, place.sid, "!confirm deploy"))

        async def asked(sid: str = place.sid) -> bool:
            return bool(await router.open_prompts(sid))

        assert await wait_until(asked, within=10)
    return private, chat


@contextlib.asynccontextmanager
async def viewer(srv: Server, user: str | None) -> AsyncIterator[aiohttp.ClientSession]:
    """A cookie-keeping client as a browser is, signed in to the console as `user`."""
    jar = aiohttp.CookieJar(unsafe=True)  # cookies for 127.0.0.1
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(srv.base, cookie_jar=jar, timeout=timeout) as client:
        if user is not None:
            async with client.post("/ui/login", data={"token": f"agv_test-{user}"}) as resp:
                assert resp.status == 200 and resp.url.path == "/ui/", resp.status
        yield client


async def csrf_of(client: aiohttp.ClientSession) -> str:
    """What the viewer's pages carry in their forms ("" for one not signed in)."""
    async with client.get("/ui/approvals", allow_redirects=False) as resp:
        found = _CSRF.search(await resp.text())
    return found[1] if found else ""


async def ask(
    client: aiohttp.ClientSession, user: str | None, row: Row, place: Place
) -> tuple[str, list[str]]:
    """What `row` answers, and which of the guarding headers it lacked."""
    fill = {
        "sid": place.sid,
        "word": place.word,
        "task": NO_TASK,
        "name": PROFILE,
        "change": "999999",
        "id": "999999",
        "platform": "telegram",
    }
    url = row.route.format(**fill) + row.query.format(**fill)
    data: dict[str, str] | None = None
    if row.method == "POST":
        data = {**(row.form or {}), "csrf": await csrf_of(client)}
        if row.route == "/ui/answer":
            data |= {"session_id": place.sid, "task_hash": NO_TASK}
        if row.route == "/ui/login":
            data = {"token": f"agv_test-{user}" if user else ""}
    async with client.request(row.method, url, data=data, allow_redirects=False) as resp:
        # An event stream's first answer is all that counts.
        streaming = resp.content_type == "text/event-stream"
        text = "" if streaming else await resp.text()
        lacking = [
            name
            for name, value in (("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", None))
            if resp.headers.get(name) is None or value not in (None, resp.headers[name])
        ]
        return outcome(resp, text, row.shows.format(**fill)), lacking


def console_routes(srv: Server) -> set[tuple[str, str]]:
    """Every route the console's router serves (HEAD being GET's), and the entry redirects."""
    served = {("GET", path) for path in ENTRY_PATHS}
    for resource in srv.runner.app.router.resources():
        info = resource.get_info()
        if info.get("prefix") != CONSOLE_PREFIX:
            continue
        for route in info["app"].router.routes():
            if route.method != "HEAD" and route.resource is not None:
                served.add((route.method, route.resource.canonical))
    return served


def test_every_viewer_has_a_grant_for_every_need() -> None:
    assert set(VIEWERS) == set(GRANTS) | SIGNED_OUT
    for grants in GRANTS.values():
        for place in grants:
            assert set(place) == {*SESSION_NEEDS, *OWN}


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    users = {**USERS, "dave": "Dave", "eve": "Eve", "carol": "Carol", "kim": "Kim"}
    users["mallory"] = "Mallory"
    # The prompts wait for as long as the table takes.
    async with serving(tmp_path, users=users, confirm_timeout_seconds=600) as srv:
        for user in ("carol", "kim"):
            await srv.runtime.store.ownership.link(f"telegram:{user}", f"http:{user}")
        yield srv


async def test_every_console_route_is_in_the_table(server: Server) -> None:
    assert console_routes(server) == {(row.method, row.route) for row in ROWS}


async def test_who_may_do_what_in_the_console(server: Server) -> None:
    places = await make_places(server)
    async with contextlib.AsyncExitStack() as stack:
        clients = {
            kind: await stack.enter_async_context(viewer(server, user))
            for kind, user in VIEWERS.items()
        }
        # Mallory signed in, then her token was revoked.
        await revoke_token(server.runtime, "mallory")

        async def revoked() -> bool:
            status, _ = await server.call("GET", "/v1/sessions", headers=bearer("mallory"))
            return status == 403

        assert await wait_until(revoked, within=10)
        seen: dict[tuple[str, str, str, str, str], str] = {}
        want: dict[tuple[str, str, str, str, str], str] = {}
        unguarded: dict[tuple[str, str], list[str]] = {}
        for row in ROWS:
            per_place = "{" in row.route + row.query + row.shows
            for kind, user in VIEWERS.items():
                for n, place in enumerate(places if per_place else places[:1]):
                    where = ("private", "chat")[n] if per_place else "-"
                    key = (kind, where, row.method, row.route + row.query, str(row.form or ""))
                    seen[key], lacking = await ask(clients[kind], user, row, place)
                    want[key] = expected(kind, n, row.need)
                    if lacking:
                        unguarded[(row.method, row.route)] = lacking
    wrong = {key: (seen[key], w) for key, w in want.items() if seen[key] != w}
    assert not wrong, "\n".join(f"{k}: got {g}, expected {w}" for k, (g, w) in wrong.items())
    assert not unguarded, unguarded


async def test_in_the_browser_another_viewer_sees_nothing_and_a_revoked_one_is_ended(
    browser: Any, server: Server
) -> None:
    base = server.base
    private, _ = await make_places(server)
    eve = await sign_in(browser, base, "eve")
    assert await eve.locator("tr[data-session]").count() == 0  # nothing of hers yet
    response = await eve.goto(f"{base}/ui/session/{private.sid}")
    assert response is not None and response.status == 404
    assert "no such session" in await eve.get_by_role("alert").inner_text()
    await eve.goto(f"{base}/ui/")
    assert await eve.locator(f'tr[data-session="{private.sid}"]').count() == 0
    bob = await sign_in(browser, base, "bob")
    assert await bob.locator(f'tr[data-session="{private.sid}"]').count() == 1  # shared

    # Mallory follows the session live; her token is revoked: the page is told at once.
    mallory = await sign_in(browser, base, "mallory")
    events = f"{base}/ui/session/{private.sid}/events"
    async with mallory.expect_response(events) as opened:
        await mallory.goto(f"{base}/ui/session/{private.sid}")
    assert (await opened.value).status == 200
    await revoke_token(server.runtime, "mallory")
    revoked = time.monotonic()
    await mallory.get_by_text("Your sign-in has ended").wait_for(timeout=5_000)
    assert time.monotonic() - revoked < 1.0
    # Her next request finds the sign-in ended.
    await mallory.reload()
    assert mallory.url == f"{base}/ui/login"


async def test_a_stream_ends_when_its_viewer_may_no_longer_read_the_session(
    server: Server,
) -> None:
    private, _ = await make_places(server)
    events = f"/ui/session/{private.sid}/events"
    async with viewer(server, "bob") as bob:
        async with bob.get(events) as stream:
            assert stream.status == 200
            assert (await stream.content.readline()).startswith(b"event: state")
            path = f"/v1/session/{private.sid}/shares/http:bob"
            status, body = await server.call("DELETE", path, headers=bearer("ann"))
            assert status in (200, 204), body
            withdrawn = time.monotonic()
            rest = await asyncio.wait_for(stream.content.read(), 10)
            closed = time.monotonic() - withdrawn
        assert b"signed_out" not in rest  # still signed in: only this session is gone
        assert closed < 1.0, closed
        async with bob.get(events) as again:
            assert again.status == 404
