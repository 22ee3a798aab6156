"""The HTTP adapter, served for real on a loopback port and driven over TCP."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from clock import FakeClock
from openapi_spec_validator import validate as validate_openapi
from prometheus_client.parser import text_string_to_metric_families
from support import wait_until
from yarl import URL

from adapters.http import InsecureBinding, is_loopback, sse_frame, start_http
from adapters.http.context import Context
from adapters.http.errors import errors
from adapters.http.models import SendRequest
from adapters.http.operations import Health, HealthChecks
from adapters.http.replies import Inputs, OpenApiDocument
from adapters.http.route import Call, Route
from adapters.http.routes import ROUTES
from adapters.mcp.endpoint import MCP_PATH
from gateway.access import SessionAccess
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.credentials import local_token, new_token, read_terminal_credential
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.tokens import TokenStore

TIMEOUT = 10.0
# Per-user tokens every test server knows (name, display name), as `agenvoy token add` keeps
# them: hashed, in <home>/.store/api_tokens.json.
USERS = {"ann": "Ann", "bob": "Bob", "root": "Root", "bot": "Build Bot", "tester": "tester"}


# What /healthz answers for an instance whose archive, KV store and leases all answer.
READY = {
    "status": "ok",
    "checks": {"database": "ok", "kv": "ok", "leases": "ok"},
    "platforms": {},
}
UP = Health(checks=HealthChecks(database="ok", kv="ok", leases="ok"))


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer agv_test-{name}"}


ANN = {**bearer("ann"), "X-Agenvoy-Window": "w-ann"}
BOB = bearer("bob")
ROOT = bearer("root")


def terminal(server: Server, sender: str = "ann", window: str = "") -> dict[str, str]:
    """A local client's credential: `sender`, in `window`, signed with the home's credential."""
    credential = read_terminal_credential(server.runtime.settings.store_dir)
    return {"Authorization": f"Bearer {local_token(credential, sender, window)}"}


def write_tokens(store_dir: Path, users: dict[str, str]) -> None:
    store_dir.mkdir(parents=True, exist_ok=True)
    entries = [
        {
            "name": name,
            "display": display,
            "sha256": sha256(f"agv_test-{name}".encode()).hexdigest(),
        }
        for name, display in users.items()
    ]
    (store_dir / "api_tokens.json").write_text(json.dumps({"tokens": entries}))


async def issue_token(runtime: Runtime, name: str) -> str:
    """A new token for `name`, issued in `runtime`'s archive as `agenvoy token add` does."""
    token, issued = new_token(name)
    await TokenStore(runtime.store.db).issue(issued, by="test", at=runtime.clock.now_ms())
    return token


async def revoke_token(runtime: Runtime, name: str) -> bool:
    """`name`'s token revoked in `runtime`'s archive, as `agenvoy token remove` does."""
    return await TokenStore(runtime.store.db).revoke(name, by="test", at=runtime.clock.now_ms())


@dataclass
class Server:
    runtime: Runtime
    runner: web.AppRunner
    client: aiohttp.ClientSession
    base: str

    def url(self, path: str) -> URL:
        # encoded=True keeps %2F and the like exactly as written.
        return URL(self.base + path, encoded=True)

    async def call(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        data: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """As `tester` unless `headers` carry a credential of their own."""
        sent = dict(headers or {})
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        async with self.client.request(
            method, self.url(path), json=json_body, data=data, headers=sent
        ) as resp:
            body = await resp.read()
            ctype = resp.headers.get("Content-Type", "")
            return resp.status, json.loads(body) if ctype.startswith("application/json") else body

    async def share(
        self, session_id: str, with_user: str, *, by: dict[str, str], mode: str = "write"
    ) -> None:
        """The owner (`by`) shares a private session with another token's user."""
        path = f"/v1/session/{session_id}/shares/http:{with_user}"
        status, body = await self.call("PUT", path, json_body={"mode": mode}, headers=by)
        assert status == 200, body


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path,
    clock: Clock = SYSTEM_CLOCK,
    *,
    users: dict[str, str] | None = USERS,
    **overrides: Any,
) -> AsyncIterator[Server]:
    """A gateway on a loopback port; with `users`, their tokens are issued and calls go as
    `tester` by default, without, callers are anonymous."""
    options: dict[str, Any] = {"confirm_timeout_seconds": 5, "admins": "http:root"}
    options.update(overrides)
    settings = Settings(home=tmp_path / "home", _env_file=None, **options)
    if users:
        write_tokens(settings.store_dir, users)
    runtime = await Runtime.start(settings, clock=clock)
    try:
        runner = await start_http(runtime, "127.0.0.1", 0, keepalive_seconds=0.5)
        try:
            port = runner.addresses[0][1]
            timeout = aiohttp.ClientTimeout(total=TIMEOUT)
            default = bearer("tester") if users else {}
            async with aiohttp.ClientSession(timeout=timeout, headers=default) as client:
                yield Server(runtime, runner, client, f"http://127.0.0.1:{port}")
        finally:
            await asyncio.wait_for(runner.cleanup(), TIMEOUT)
    finally:
        await runtime.close()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(tmp_path) as srv:
        yield srv


@pytest.fixture
async def clocked(tmp_path: Path) -> AsyncIterator[tuple[Server, FakeClock]]:
    """A server whose time moves only when the test moves it (`!sleep`, keep-alives)."""
    clock = FakeClock()
    async with serving(tmp_path, clock) as srv:
        yield srv, clock


def err(body: Any) -> str:
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    code: str = body["error"]["code"]
    return code


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse_metrics(text: str) -> Samples:
    """Every sample of a Prometheus exposition, read by the Prometheus client's own parser."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape(server: Server) -> Samples:
    status, body = await server.call("GET", "/metrics")
    assert status == 200
    return parse_metrics(body.decode())


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


# -- SSE reading -----------------------------------------------------------------------------


@dataclass
class Frame:
    event: str = "message"
    id: str | None = None
    data: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    raw: list[str] = field(default_factory=list)

    @property
    def json(self) -> Any:
        return json.loads("\n".join(self.data))


async def next_frame(resp: aiohttp.ClientResponse) -> Frame | None:
    """The next frame (a comment-only block counts as one); None at the end of the stream."""
    frame = Frame()
    while True:
        line = await asyncio.wait_for(resp.content.readline(), TIMEOUT)
        if not line:
            assert not frame.raw, f"stream ended inside a frame: {frame.raw}"
            return None
        assert line.endswith(b"\n"), line
        text = line.decode()[:-1]
        if text == "":
            if frame.raw:
                return frame
            continue
        frame.raw.append(text)
        name, _, value = text.partition(":")
        value = value.removeprefix(" ")
        if name == "":
            frame.comments.append(value)
        elif name == "event":
            frame.event = value
        elif name == "id":
            frame.id = value
        elif name == "data":
            frame.data.append(value)
        else:
            raise AssertionError(f"unexpected SSE field: {text!r}")


async def next_event(resp: aiohttp.ClientResponse) -> Frame:
    """The next frame that carries data, skipping keep-alive comments."""
    while True:
        frame = await next_frame(resp)
        assert frame is not None, "stream ended early"
        if frame.data:
            return frame
        assert frame.comments == ["keepalive"], frame


# -- plain routes ------------------------------------------------------------------------------


async def test_healthz_and_openapi(server: Server) -> None:
    assert await server.call("GET", "/healthz") == (200, READY)
    status, doc = await server.call("GET", "/openapi.json")
    assert status == 200
    validate_openapi(doc)
    assert doc["openapi"].startswith("3.1")
    assert "bearerAuth" in doc["components"]["securitySchemes"]
    # Every route the app serves is described, with the same methods, and nothing more.
    served: dict[str, set[str]] = {}
    for route in server.runner.app.router.routes():
        info = route.resource.get_info() if route.resource else {}
        path = info.get("path") or info.get("formatter")
        if route.method != "HEAD" and path:
            served.setdefault(path, set()).add(route.method.lower())
    described = {
        path: {m for m in item if m in {"get", "post", "delete", "put", "patch"}}
        for path, item in doc["paths"].items()
    }
    # `/mcp` speaks JSON-RPC and describes itself to MCP clients (tools/list); the console's
    # pages are for browsers.
    assert served.pop(MCP_PATH) == {"post"}
    # `/` and `/ui` only send a browser on to the console (`/ui/`).
    assert (served.pop("/"), served.pop("/ui")) == ({"get"}, {"get"})
    served = {path: methods for path, methods in served.items() if not path.startswith("/ui/")}
    assert described == served
    # The app serves the route table and nothing beside it, so a route added without an
    # entry (and so without documentation) fails here.
    table: dict[str, set[str]] = {}
    for entry in ROUTES:
        table.setdefault(entry.path, set()).add(entry.method.lower())
    assert table == served
    operation_ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(operation_ids) == len(set(operation_ids)) == len(ROUTES)
    heads = {
        route.resource.canonical
        for route in server.runner.app.router.routes()
        if route.method == "HEAD"
        and route.resource
        and not route.resource.canonical.startswith("/ui")
        and route.resource.canonical != "/"
    }
    assert heads == {e.path for e in ROUTES if e.method == "GET"} - {"/v1/session/{sid}/log"}
    for item in doc["paths"].values():
        for method, op in item.items():
            if method == "parameters":
                continue
            errors = [code for code in op["responses"] if code.startswith(("4", "5"))]
            for code in errors:
                if "$ref" not in op["responses"][code]:
                    # A reply the route declares at an error status (/healthz's 503) carries
                    # the error object too.
                    reply = op["responses"][code]["content"]["application/json"]["schema"]
                    model = doc["components"]["schemas"][reply["$ref"].rsplit("/", 1)[1]]
                    assert model["properties"]["error"] == {
                        "$ref": "#/components/schemas/ErrorDetail"
                    }
                    assert "error" in model["required"]
                    continue
                ref = op["responses"][code]["$ref"]
                response = doc["components"]["responses"][ref.rsplit("/", 1)[1]]
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Error"}


async def test_sessions_lifecycle(server: Server) -> None:
    status, body = await server.call("POST", "/v1/session")
    assert status == 201 and body["session_id"].startswith("cli-")
    cli = body["session_id"]
    status, body = await server.call("POST", "/v1/session", json_body={"prefix": "chat"})
    assert status == 201 and body["session_id"].startswith("chat-")
    chat = body["session_id"]
    for bad in ({"prefix": "temp"}, {"prefix": "dc"}, {"prefix": 3}, {"prefix": False}):
        status, body = await server.call("POST", "/v1/session", json_body=bad)
        assert (status, err(body)) == (400, "bad_request")
        assert "prefix" in body["error"]["message"]
    assert server.runtime.store.files(cli).dir.is_dir()

    status, meta = await server.call("GET", f"/v1/session/{cli}")
    assert status == 200
    assert set(meta) == {
        "session_id",
        "name",
        "persona",
        "model",
        "reasoning",
        "allowed_tools",
        "created_at",
        "updated_at",
        "running",
        "queued",
    }
    assert meta["session_id"] == cli and meta["running"] is False and meta["queued"] == 0

    status, body = await server.call("GET", "/v1/sessions")
    assert status == 200
    assert {s["session_id"] for s in body["sessions"]} == {cli, chat}
    assert set(body["sessions"][0]) == {
        "session_id",
        "name",
        "updated_at",
        "message_count",
        "running",
        "parent",
    }
    assert body["sessions"][0]["parent"] == ""  # a subagent's session names its parent's
    status, body = await server.call("GET", "/v1/sessions?prefix=chat")
    assert [s["session_id"] for s in body["sessions"]] == [chat]
    status, body = await server.call("GET", "/v1/sessions?prefix=nope")
    assert (status, err(body)) == (400, "bad_request")

    assert await server.call("DELETE", f"/v1/session/{chat}") == (200, {"deleted": True})
    assert not server.runtime.store.files(chat).dir.exists()
    for method in ("GET", "DELETE"):
        status, body = await server.call(method, f"/v1/session/{chat}")
        assert (status, err(body)) == (404, "not_found")


async def test_send_temp_persist_and_existing_session(server: Server) -> None:
    status, body = await server.call("POST", "/v1/send", json_body={"content": "hello"})
    assert status == 200, body
    assert body["session_id"].startswith("temp-")
    assert (body["status"], body["text"], body["error"]) == ("done", "echo: hello", "")
    assert [e["kind"] for e in body["events"]] == ["user", "text", "done"]
    assert all(e["task_hash"] == body["task_hash"] for e in body["events"])

    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "keep me", "persist": True}, headers=ANN
    )
    assert status == 200 and body["session_id"].startswith("chat-")
    chat = body["session_id"]
    user = body["events"][0]
    assert (user["sender"], user["window_hash"]) == ("Ann", "w-ann")
    await server.share(chat, "tester", by=ANN)

    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "again", "session_id": chat, "persist": False}
    )
    assert status == 200 and body["session_id"] == chat

    status, body = await server.call("GET", f"/v1/session/{chat}/history")
    assert status == 200
    messages = body["messages"]
    assert [(m["role"], m["content"]) for m in messages] == [
        ("user", "keep me"),
        ("assistant", "echo: keep me"),
        ("user", "again"),
        ("assistant", "echo: again"),
    ]
    assert set(messages[0]) == {
        "id",
        "session_id",
        "role",
        "content",
        "sender",
        "send_at",
        "task_hash",
    }
    assert messages[0]["sender"] == "Ann"
    status, body = await server.call("GET", f"/v1/session/{chat}/history?limit=1")
    assert [m["content"] for m in body["messages"]] == ["echo: again"]
    for bad in ("0", "501", "ten"):
        status, body = await server.call("GET", f"/v1/session/{chat}/history?limit={bad}")
        assert (status, err(body)) == (400, "bad_request") and "limit" in body["error"]["message"]

    status, body = await server.call("GET", "/v1/sessions?prefix=chat")
    (listed,) = body["sessions"]
    assert listed["message_count"] == 4


async def test_send_wait_zero_and_task_route(clocked: tuple[Server, FakeClock]) -> None:
    server, clock = clocked
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "!sleep 1", "wait": 0}, headers=ANN
    )
    assert status == 202 and set(body) == {"session_id", "task_hash", "status"}
    assert body["status"] in {"queued", "running"}
    sid, task = body["session_id"], body["task_hash"]
    await server.share(sid, "tester", by=ANN)
    await clock.until_sleeping(1, seconds=1)
    status, view = await server.call("GET", f"/v1/session/{sid}/task/{task}?wait=0")
    assert (status, view["status"]) == (200, "running")
    await clock.advance(1)
    status, view = await server.call("GET", f"/v1/session/{sid}/task/{task}?wait=10")
    assert status == 200
    assert (view["status"], view["text"], view["pending"]) == ("done", "slept 1s", None)
    assert [e["kind"] for e in view["events"]] == ["user", "text_delta", "text", "done"]
    status, view = await server.call("GET", f"/v1/session/{sid}/task/{task}")
    assert status == 200 and view["status"] == "done"
    for bad in ("-1", "301", "soon", "nan"):
        status, body = await server.call("GET", f"/v1/session/{sid}/task/{task}?wait={bad}")
        assert (status, err(body)) == (400, "bad_request")
    other = await server.call("POST", "/v1/session")
    status, body = await server.call("GET", f"/v1/session/{other[1]['session_id']}/task/{task}")
    assert (status, err(body)) == (404, "not_found")
    status, body = await server.call("GET", f"/v1/session/{sid}/task/nosuchtask")
    assert (status, err(body)) == (404, "not_found")


async def test_concurrent_sends_to_one_session_run_in_archive_order(server: Server) -> None:
    sid = "chat-busy"
    texts = [f"m{i}" for i in range(20)]
    answers = await asyncio.gather(
        *(
            server.call("POST", "/v1/send", json_body={"content": t, "session_id": sid})
            for t in texts
        )
    )
    assert all(status == 200 for status, _ in answers), answers
    assert {body["text"] for _, body in answers} == {f"echo: {t}" for t in texts}
    archived = await server.runtime.store.recent_messages(sid, 100)
    asked = [m.task_hash for m in archived if m.role == "user"]
    replied = [m.task_hash for m in archived if m.role == "assistant"]
    log = server.runtime.store.files(sid).action_log.read()
    ran = [r.task_hash for r in log if r.kind == "done"]
    accepted = [r.task_hash for r in log if r.kind == "user"]
    # Whatever order the requests raced in, the archive, the audit trail, the runs and the
    # replies all follow one order.
    assert len(asked) == 20
    assert accepted == asked and ran == asked and replied == asked
    history = server.runtime.store.files(sid).history.read()
    assert [(m.role, m.content) for m in history] == [(m.role, m.content) for m in archived]


async def test_commands_answer_at_once(server: Server) -> None:
    status, body = await server.call("POST", "/v1/send", json_body={"content": "/help"})
    assert status == 200
    assert body["command"] == "help" and body["ok"] is True and "/status" in body["text"]
    assert body["session_id"].startswith("temp-")
    created = (await server.call("POST", "/v1/session"))[1]["session_id"]
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "/status", "session_id": created}
    )
    assert status == 200 and f"session: {created}" in body["text"]
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "/cancel", "session_id": created}
    )
    assert (body["command"], body["ok"]) == ("cancel", False)


async def test_commands_are_listed_from_the_registry_per_front_end(server: Server) -> None:
    status, body = await server.call("GET", "/v1/commands")
    assert status == 200
    names = [c["name"] for c in body["commands"]]
    registry = server.runtime.commands
    assert names == [c.name for c in registry.menu("http")]
    assert "new" not in names  # a terminal-only command
    model = next(c for c in body["commands"] if c["name"] == "model")
    assert (model["usage"], model["access"]) == ("<name>", "shared_admin")
    status, body = await server.call(
        "GET", "/v1/commands", headers={"X-Agenvoy-Client": "terminal"}
    )
    assert names == [c["name"] for c in body["commands"]]  # a header makes no terminal
    status, body = await server.call("GET", "/v1/commands", headers=terminal(server))
    assert [c["name"] for c in body["commands"]] == [c.name for c in registry.menu("terminal")]
    assert "new" in [c["name"] for c in body["commands"]]


async def test_search_and_usage(server: Server) -> None:
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "zebra crossing", "persist": True}
    )
    sid = body["session_id"]
    status, body = await server.call("GET", "/v1/search?q=zebra")
    assert status == 200
    assert [r["content"] for r in body["results"]] == ["echo: zebra crossing", "zebra crossing"]
    status, body = await server.call("GET", f"/v1/search?q=zebra&session_id={sid}&limit=1")
    assert [r["role"] for r in body["results"]] == ["assistant"]
    status, body = await server.call("GET", "/v1/search?q=zebra&limit=1&offset=1")
    assert [r["role"] for r in body["results"]] == ["user"]
    status, body = await server.call("GET", "/v1/search?q=zebra&session_id=cli-other")
    assert status == 200
    assert (body["results"], body["next_cursor"], body["sessions_searched"]) == ([], None, None)
    for query in ("", "?q=", "?q=%20%20"):
        status, body = await server.call("GET", f"/v1/search{query}")
        assert (status, err(body)) == (400, "bad_request") and "'q'" in body["error"]["message"]
    status, body = await server.call("GET", "/v1/search?q=x&session_id=..%2Fx")
    assert (status, err(body)) == (400, "bad_session_id")

    status, body = await server.call("GET", "/v1/usage")
    assert status == 200
    (row,) = body["models"]
    assert (
        row["model"] == "offline"
        and row["calls"] == 1
        and (row["input"], row["output"])
        == (
            2,
            3,
        )
    )
    assert set(row) == {
        "model",
        "calls",
        "input",
        "output",
        "cache_read",
        "cache_write",
        "elapsed_ms",
        "output_tps",
        "cost",
    }
    status, body = await server.call("GET", "/v1/usage?days=1")
    assert status == 200 and len(body["models"]) == 1
    status, body = await server.call("GET", "/v1/usage?days=0")
    assert (status, err(body)) == (400, "bad_request")


# -- validation ----------------------------------------------------------------------------------


async def test_body_validation(server: Server) -> None:
    status, body = await server.call("POST", "/v1/send", data=b'{"content": "x"')
    assert (status, err(body)) == (400, "bad_json")
    status, body = await server.call("POST", "/v1/send", data=b"\xff\xfe")
    assert (status, err(body)) == (400, "bad_json")
    status, body = await server.call("POST", "/v1/send", data=b"[" * 100_000)
    assert (status, err(body)) == (400, "bad_json")
    status, body = await server.call("POST", "/v1/send", json_body=["content"])
    assert (status, err(body)) == (400, "bad_request")
    cases = [
        ({}, "content"),
        ({"content": 5}, "content"),
        ({"content": "   "}, "content"),
        ({"content": "x", "session_id": 7}, "session_id"),
        ({"content": "x", "persist": "yes"}, "persist"),
        ({"content": "x", "stream": 1}, "stream"),
        ({"content": "x", "wait": "10"}, "wait"),
        ({"content": "x", "wait": True}, "wait"),
        ({"content": "x", "wait": -1}, "wait"),
        ({"content": "x", "wait": 301}, "wait"),
    ]
    for payload, name in cases:
        status, body = await server.call("POST", "/v1/send", json_body=payload)
        assert (status, err(body)) == (400, "bad_request"), payload
        assert f"'{name}'" in body["error"]["message"], body
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "x"}, headers={"X-Agenvoy-Window": "../w"}
    )
    assert (status, err(body)) == (400, "bad_request") and "window" in body["error"]["message"]
    # Identity headers claim nothing (the token decides), so they are not even read.
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "x"}, headers={"X-Agenvoy-Sender": "s" * 200}
    )
    assert status == 200 and body["events"][0]["sender"] == "tester"
    await server.runtime.store.delete(body["session_id"])
    for path, payload, name in (
        ("/v1/send", {"content": "x", "colour": "blue"}, "colour"),
        ("/v1/session", {"prefix": "cli", "colour": "x"}, "colour"),
    ):
        status, body = await server.call("POST", path, json_body=payload)
        assert (status, err(body)) == (400, "bad_request"), payload
        assert f"unknown field '{name}'" in body["error"]["message"], body
    # Nothing above reached the store.
    assert await server.runtime.store.list_sessions() == []


async def test_null_fields_count_as_absent(server: Server) -> None:
    send = {"content": "hi", "session_id": None, "persist": None, "stream": None, "wait": None}
    status, body = await server.call("POST", "/v1/send", json_body=send)
    assert (status, body["text"]) == (200, "echo: hi"), body
    assert body["session_id"].startswith("temp-")
    for empty in (None, ""):
        status, body = await server.call("POST", "/v1/session", json_body={"prefix": empty})
        assert status == 201 and body["session_id"].startswith("cli-"), empty
    sid = body["session_id"]
    status, meta = await server.call("PUT", f"/v1/session/{sid}", json_body={"name": "kept"})
    status, meta = await server.call(
        "PUT", f"/v1/session/{sid}", json_body={"name": None, "model": "m"}
    )
    assert (status, meta["name"], meta["model"]) == (200, "kept", "m")


async def test_a_route_answers_only_what_it_declares(server: Server) -> None:
    """A handler that reads or answers what its route does not list fails loudly, so the
    document generated from the routes cannot leave it out."""

    async def answers_undeclared(call: Call) -> Health:
        return UP

    async def reads_undeclared_body(call: Call) -> Health:
        await call.body(SendRequest)
        return UP

    async def reads_undeclared_headers(call: Call) -> Health:
        call.origin()
        return UP

    access = SessionAccess(
        server.runtime.store.ownership, server.runtime.authority, open_gateway=_closed
    )
    ctx = Context(
        server.runtime, access, keepalive_seconds=1.0, document=lambda: OpenApiDocument({})
    )
    app = web.Application(middlewares=[errors])
    for name, handler, replies in (
        ("answer", answers_undeclared, {200: Inputs}),
        ("body", reads_undeclared_body, {200: Health}),
        ("headers", reads_undeclared_headers, {200: Health}),
    ):
        route = Route("POST", f"/{name}", handler, "a test route", replies=replies)
        app.router.add_post(route.path, route.serve(ctx))
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        for name in ("answer", "body", "headers"):
            async with server.client.post(f"{base}/{name}", json={"content": "x"}) as resp:
                assert resp.status == 500, name
                assert err(await resp.json()) == "internal"
    finally:
        await runner.cleanup()


async def test_bad_session_ids_never_touch_the_filesystem(server: Server) -> None:
    sessions_dir = server.runtime.settings.sessions_dir
    huge = "cli-" + "a" * 10_240
    for sid in ("../x", huge, "cli-a/../../etc", "nope", ""):
        status, body = await server.call(
            "POST", "/v1/send", json_body={"content": "hi", "session_id": sid}
        )
        assert (status, err(body)) == (400, "bad_session_id"), sid
        assert "invalid session id" in body["error"]["message"]
        assert len(body["error"]["message"]) < 400
    for path in ("..%2Fx", "..%2F..%2Fhome", huge, "cli-a%00b", "dc-%2E%2E"):
        for method, suffix in (
            ("GET", ""),
            ("DELETE", ""),
            ("GET", "/history"),
            ("GET", "/log"),
            ("GET", "/pending"),
            ("POST", "/pending/abc"),
            ("GET", "/task/abc"),
            ("POST", "/cancel/abc"),
        ):
            status, body = await server.call(
                method, f"/v1/session/{path}{suffix}", json_body={"approve": True}
            )
            assert (status, err(body)) == (400, "bad_session_id"), (method, path, suffix)
    assert not sessions_dir.exists() or list(sessions_dir.iterdir()) == []
    assert not (sessions_dir.parent / "x").exists()


async def test_unknown_things_are_404(server: Server) -> None:
    for method, path in (
        ("GET", "/v1/session/cli-nope"),
        ("DELETE", "/v1/session/cli-nope"),
        ("GET", "/v1/session/cli-nope/history"),
        ("GET", "/v1/session/cli-nope/log"),
        ("GET", "/v1/session/cli-nope/pending"),
        ("POST", "/v1/session/cli-nope/pending/abc"),
        ("GET", "/v1/session/cli-nope/task/abc"),
        ("POST", "/v1/session/cli-nope/cancel/abc"),
        ("GET", "/v1/nothing"),
    ):
        status, body = await server.call(method, path, json_body={"approve": True})
        assert (status, err(body)) == (404, "not_found"), (method, path)
    status, body = await server.call("PUT", "/v1/send")
    assert (status, err(body)) == (405, "method_not_allowed")
    assert not server.runtime.store.files("cli-nope").dir.exists()


async def test_size_limits(server: Server) -> None:
    status, body = await server.call(
        "POST", "/v1/send", data=json.dumps({"content": "x" * (2 * 1024 * 1024)}).encode()
    )
    assert (status, err(body)) == (413, "too_large")
    limit = server.runtime.settings.max_message_chars
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "y" * (limit + 1), "session_id": "cli-long"}
    )
    assert (status, err(body)) == (413, "too_long")
    assert str(limit) in body["error"]["message"]
    assert await server.runtime.store.get("cli-long") is None


# -- auth ------------------------------------------------------------------------------------------


async def test_token_auth(tmp_path: Path) -> None:
    async with serving(tmp_path, api_token="s3cret", users=None) as srv:
        assert await srv.call("GET", "/healthz") == (200, READY)
        for method, path in (
            ("GET", "/v1/sessions"),
            ("POST", "/v1/send"),
            ("GET", "/metrics"),
            ("GET", "/openapi.json"),
            ("GET", "/v1/session/cli-x/log"),
        ):
            async with srv.client.request(method, srv.url(path)) as resp:
                assert resp.status == 401
                assert resp.headers["WWW-Authenticate"].startswith("Bearer")
                assert err(await resp.json()) == "unauthorized"
            status, body = await srv.call(method, path, headers={"Authorization": "Basic eA=="})
            assert (status, err(body)) == (401, "unauthorized")
            status, body = await srv.call(method, path, headers={"Authorization": "Bearer nope"})
            assert (status, err(body)) == (403, "forbidden")
        good = {"Authorization": "Bearer s3cret"}
        assert (await srv.call("GET", "/v1/sessions", headers=good))[0] == 200
        assert (await srv.call("GET", "/metrics", headers=good))[0] == 200
        assert (await srv.call("GET", "/openapi.json", headers=good))[0] == 200
        status, body = await srv.call(
            "POST", "/v1/send", json_body={"content": "hi"}, headers={**ANN, **good}
        )
        assert status == 200 and body["text"] == "echo: hi"
        # The shared token is one identity, whatever the headers say.
        assert body["events"][0]["sender"] == "api"


async def test_insecure_binding(tmp_path: Path) -> None:
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LocalHost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "", "::", "10.0.0.1", "example.com", "::ffff:127.0.0.1", "128.0.0.1"):
        assert not is_loopback(host), host
    for n, token in enumerate((None, "")):  # a blank AGENVOY_API_TOKEN is none
        settings = Settings(home=tmp_path / f"h{n}", api_token=token, _env_file=None)
        runtime = await Runtime.start(settings)
        try:
            with pytest.raises(InsecureBinding, match=r"AGENVOY_API_TOKEN.*127\.0\.0\.1"):
                await start_http(runtime, "0.0.0.0", 0)
            with pytest.raises(InsecureBinding):
                await start_http(runtime, "::", 0)
            # Loopback needs no token; a token issued since lets it bind anywhere.
            await (await start_http(runtime, "127.0.0.1", 0)).cleanup()
            _, issued = new_token("ann")
            await TokenStore(runtime.store.db).issue(issued, by="test", at=0)
            await (await start_http(runtime, "0.0.0.0", 0)).cleanup()
        finally:
            await runtime.close()
    configured = Settings(home=tmp_path / "h3", api_token="t", _env_file=None)
    runtime = await Runtime.start(configured)
    try:
        await (await start_http(runtime, "0.0.0.0", 0)).cleanup()
    finally:
        await runtime.close()


# -- streams ---------------------------------------------------------------------------------------


def test_sse_frame_format() -> None:
    assert sse_frame("done", '{"a":1}', 3) == b'event: done\nid: 3\ndata: {"a":1}\n\n'
    assert (
        sse_frame("log", "one\ntwo\r\nthree")
        == b"event: log\ndata: one\ndata: two\ndata: three\n\n"
    )


async def test_send_stream_framing(clocked: tuple[Server, FakeClock]) -> None:
    server, clock = clocked
    async with server.client.post(
        server.url("/v1/send"), json={"content": "!sleep 1", "stream": True}, headers=ANN
    ) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        task = resp.headers["X-Agenvoy-Task"]
        sid = resp.headers["X-Agenvoy-Session"]
        frames: list[Frame] = [await next_event(resp)]
        await clock.until_sleeping(1, seconds=1)
        await clock.advance(1)
        while (frame := await next_frame(resp)) is not None:
            if frame.data:
                frames.append(frame)
    assert [f.event for f in frames] == ["user", "text_delta", "text", "done"]
    assert [f.id for f in frames] == ["1", "2", "3", "4"]
    for frame in frames:
        # Exactly one event:, one id: and one data: line per frame, in that order.
        assert [line.split(":", 1)[0] for line in frame.raw] == ["event", "id", "data"]
        data = frame.json
        assert data["kind"] == frame.event
        assert (data["session_id"], data["task_hash"], data["window_hash"]) == (sid, task, "w-ann")
        assert isinstance(data["at"], int)
    assert frames[-1].json["text"] == "slept 1s"


async def test_stream_client_leaving_does_not_cancel(clocked: tuple[Server, FakeClock]) -> None:
    server, clock = clocked
    async with server.client.post(
        server.url("/v1/send"), json={"content": "!sleep 2", "stream": True}
    ) as resp:
        assert resp.status == 200
        task = resp.headers["X-Agenvoy-Task"]
        sid = resp.headers["X-Agenvoy-Session"]
        first = await next_event(resp)
        assert first.event == "user"
        resp.close()  # drop the connection mid-run
    for _ in range(2):
        await clock.until_sleeping(1, seconds=1)
        await clock.advance(1)
    status, view = await server.call("GET", f"/v1/session/{sid}/task/{task}?wait=10")
    assert status == 200
    assert (view["status"], view["text"]) == ("done", "slept 2s")
    assert server.runtime.router.counters["tasks_canceled"] == 0


async def test_log_stream_replays_then_goes_live(server: Server) -> None:
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "first"}, headers=ANN
    )
    sid, first_task = body["session_id"], body["task_hash"]
    await server.share(sid, "tester", by=ANN)
    await server.share(sid, "bob", by=ANN)
    async with server.client.get(server.url(f"/v1/session/{sid}/log?tail=100")) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        replay = [await next_frame(resp) for _ in range(3)]
        assert all(f is not None and f.event == "log" for f in replay)
        records = [f.json for f in replay if f is not None]
        assert [r["kind"] for r in records] == ["user", "text", "done"]
        assert set(records[0]) == {"at", "window_hash", "kind", "task_hash", "body", "identity"}
        assert {r["identity"] for r in records} == {"http:ann"}
        assert {r["task_hash"] for r in records} == {first_task}
        assert records[0]["window_hash"] == "w-ann"
        assert json.loads(records[0]["body"])["text"] == "first"
        live = await next_frame(resp)
        assert live is not None and live.comments == ["live"]

        status, body = await server.call(
            "POST", "/v1/send", json_body={"content": "second", "session_id": sid}, headers=BOB
        )
        assert status == 200
        events = [await next_event(resp) for _ in range(3)]
        assert [f.event for f in events] == ["user", "text", "done"]
        assert {f.json["task_hash"] for f in events} == {body["task_hash"]}
        assert events[0].json["sender"] == "Bob"
        assert [int(f.id or 0) for f in events] == [4, 5, 6]

        # A subscriber that lost events is told how many before its next frame.
        (sub,) = server.runtime.router._dispatch._subscribers[sid]
        sub.dropped += 3
        await server.call("POST", "/v1/send", json_body={"content": "third", "session_id": sid})
        while True:
            frame = await next_frame(resp)
            assert frame is not None
            if frame.comments != ["keepalive"]:
                break
        assert frame.comments == ["dropped 3"]
        assert (await next_event(resp)).event == "user"

    async with server.client.get(server.url(f"/v1/session/{sid}/log?tail=1")) as resp:
        (only,) = [await next_frame(resp)]
        assert only is not None and only.event == "log" and only.json["kind"] == "done"
        live = await next_frame(resp)
        assert live is not None and live.comments == ["live"]
    status, body = await server.call("GET", f"/v1/session/{sid}/log?tail=5000")
    assert (status, err(body)) == (400, "bad_request")


async def test_log_stream_tail_zero_and_keepalive(clocked: tuple[Server, FakeClock]) -> None:
    server, clock = clocked
    created = (await server.call("POST", "/v1/session"))[1]["session_id"]
    async with server.client.get(server.url(f"/v1/session/{created}/log?tail=0")) as resp:
        live = await next_frame(resp)
        assert live is not None and live.comments == ["live"]
        await clock.until_sleeping(1, seconds=0.5)  # the stream's poll
        await clock.advance(0.5)  # keepalive_seconds=0.5 in these tests
        ping = await next_frame(resp)
        assert ping is not None and ping.comments == ["keepalive"]
    # The subscription ends once the client is gone.
    router = server.runtime.router

    async def unsubscribed() -> bool:
        await clock.advance(0.5)  # the stream notices a client that left when it polls
        return router.subscribers(created) == 0

    assert await wait_until(unsubscribed, TIMEOUT)


# -- prompts ---------------------------------------------------------------------------------------


async def test_confirm_over_http(server: Server) -> None:
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "!confirm launch"}, headers=ANN
    )
    assert status == 202, body
    sid, task = body["session_id"], body["task_hash"]
    for other in ("tester", "bob"):
        await server.share(sid, other, by=ANN)
    pending = body["pending"]
    assert (pending["kind"], pending["tool"], pending["task_hash"]) == (
        "confirm",
        "demo_action",
        task,
    )
    assert pending["args"] == {"action": "launch"} and pending["origin"]["sender_id"] == "ann"

    status, body = await server.call("GET", f"/v1/session/{sid}/pending", headers=ANN)
    assert status == 200 and [p["task_hash"] for p in body["pending"]] == [task]
    status, body = await server.call("GET", f"/v1/session/{sid}/pending", headers=BOB)
    assert status == 200 and body["pending"] == []  # a listing shows what the caller may answer

    samples = await scrape(server)
    assert sample(samples, "agenvoy_tasks_running") == 1
    assert sample(samples, "agenvoy_tasks_waiting") == 1

    answer = f"/v1/session/{sid}/pending/{task}"
    status, body = await server.call("POST", answer, json_body={"approve": True}, headers=BOB)
    assert (status, err(body)) == (403, "not_allowed")
    assert "only Ann or an admin" in body["error"]["message"]
    status, body = await server.call("GET", f"/v1/session/{sid}/pending", headers=ANN)
    assert len(body["pending"]) == 1  # still open

    for bad in ({}, {"approve": True, "answer": "x"}, {"approve": "yes"}, {"answer": 3}):
        status, body = await server.call("POST", answer, json_body=bad, headers=ANN)
        assert (status, err(body)) == (400, "bad_request"), bad
    status, body = await server.call("POST", answer, data=b"{", headers=ANN)
    assert (status, err(body)) == (400, "bad_json")
    status, body = await server.call("POST", answer, json_body={"answer": "x"}, headers=ANN)
    assert (status, err(body)) == (400, "invalid")  # a confirmation takes approve

    status, body = await server.call("POST", answer, json_body={"approve": True}, headers=ANN)
    assert (status, body) == (200, {"answered": True, "approved": True, "by": "Ann"})
    status, view = await server.call("GET", f"/v1/session/{sid}/task/{task}?wait=10")
    assert (view["status"], view["text"]) == ("done", "approved: launch")
    kinds = [e["kind"] for e in view["events"]]
    assert kinds[0] == "user" and kinds[-2:] == ["text", "done"]
    assert kinds.index("confirm") < kinds.index("answer")
    (answered,) = [e for e in view["events"] if e["kind"] == "answer"]
    assert (answered["approved"], answered["answered_by"]) == (True, "Ann")

    status, body = await server.call("POST", answer, json_body={"approve": False}, headers=ANN)
    assert (status, err(body)) == (409, "already_answered")
    status, body = await server.call(
        "POST", f"/v1/session/{sid}/pending/nosuchtask", json_body={"approve": True}
    )
    assert (status, err(body)) == (404, "not_found")


async def test_ask_user_answered_by_admin(server: Server) -> None:
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "!ask favourite colour?"}, headers=ANN
    )
    assert status == 202 and body["pending"]["kind"] == "ask_user"
    assert body["pending"]["question"] == "favourite colour?"
    sid, task = body["session_id"], body["task_hash"]
    await server.share(sid, "tester", by=ANN)
    status, body = await server.call(
        "POST", f"/v1/session/{sid}/pending/{task}", json_body={"answer": "green"}, headers=ROOT
    )
    assert (status, body) == (200, {"answered": True, "answer": "green", "by": "Root"})
    status, view = await server.call("GET", f"/v1/session/{sid}/task/{task}?wait=10")
    assert view["text"] == "answer: green"


async def test_prompt_expiry(tmp_path: Path) -> None:
    async with serving(tmp_path, confirm_timeout_seconds=0.3) as srv:
        status, body = await srv.call(
            "POST", "/v1/send", json_body={"content": "!confirm x"}, headers=ANN
        )
        assert status == 202 and body["pending"]["kind"] == "confirm"
        sid, task = body["session_id"], body["task_hash"]
        await srv.share(sid, "tester", by=ANN)
        # Already waiting on the prompt: the long poll waits for the end, not for a prompt.
        status, view = await srv.call("GET", f"/v1/session/{sid}/task/{task}?wait=10")
        assert (view["status"], view["text"]) == ("done", "denied: x")
        (answer_event,) = [e for e in view["events"] if e["kind"] == "answer"]
        assert answer_event["answered_by"] == "timeout" and answer_event["approved"] is False
        status, body = await srv.call(
            "POST", f"/v1/session/{sid}/pending/{task}", json_body={"approve": True}, headers=ANN
        )
        assert (status, err(body)) == (409, "already_answered")
        assert await srv.call("GET", f"/v1/session/{sid}/pending") == (
            200,
            {"pending": [], "next_cursor": None},
        )


# -- canceling -------------------------------------------------------------------------------------


async def test_cancel_route(server: Server) -> None:
    # A task parked on a prompt is well inside its run, so the cancel is not racing its start.
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "!confirm x", "persist": True}, headers=ANN
    )
    assert status == 202 and body["pending"]
    sid, task = body["session_id"], body["task_hash"]
    await server.share(sid, "tester", by=ANN)
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "later", "session_id": sid, "wait": 0}
    )
    assert (status, body["status"]) == (202, "queued")
    queued = body["task_hash"]
    status, meta = await server.call("GET", f"/v1/session/{sid}")
    assert (meta["running"], meta["queued"]) == (True, 1)
    assert sample(await scrape(server), "agenvoy_tasks_queued") == 1

    # The queued task was sent by "http" (no sender header): Ann may not cancel it, root may.
    status, body = await server.call("POST", f"/v1/session/{sid}/cancel/{queued}", headers=ANN)
    assert (status, err(body)) == (403, "not_allowed")
    assert await server.call("POST", f"/v1/session/{sid}/cancel/{queued}", headers=ROOT) == (
        200,
        {"canceled": True, "was": "queued"},
    )
    status, view = await server.call("GET", f"/v1/session/{sid}/task/{queued}")
    assert view["status"] == "canceled"

    cancel = f"/v1/session/{sid}/cancel/{task}"
    status, body = await server.call("POST", cancel, headers=BOB)
    assert (status, err(body)) == (404, "not_found")  # not shared with bob: not even there
    assert await server.call("POST", cancel, headers=ANN) == (
        200,
        {"canceled": True, "was": "running"},  # parked on its prompt, its run begun
    )
    status, view = await server.call("GET", f"/v1/session/{sid}/task/{task}?wait=10")
    assert view["status"] == "canceled" and view["events"][-1]["kind"] == "canceled"
    assert view["events"][-1]["by"] == "Ann"
    assert await server.call("GET", f"/v1/session/{sid}/pending") == (
        200,
        {"pending": [], "next_cursor": None},
    )
    assert await server.call("POST", cancel, headers=ANN) == (200, {"canceled": False, "was": None})
    status, body = await server.call("POST", f"/v1/session/{sid}/cancel/nosuchtask")
    assert (status, err(body)) == (404, "not_found")


async def test_delete_cancels_running_task(server: Server) -> None:
    status, body = await server.call(
        "POST", "/v1/send", json_body={"content": "!confirm x", "persist": True}
    )
    assert status == 202
    sid, task = body["session_id"], body["task_hash"]
    status, meta = await server.call("GET", f"/v1/session/{sid}")
    assert meta["running"] is True
    status, listed = await server.call("GET", "/v1/sessions")
    assert [s["running"] for s in listed["sessions"]] == [True]
    assert await server.call("DELETE", f"/v1/session/{sid}") == (200, {"deleted": True})
    state = await server.runtime.router.wait(task, TIMEOUT)
    assert state.status == "canceled"
    assert await server.runtime.store.get(sid) is None
    assert not server.runtime.store.files(sid).dir.exists()


async def test_delete_forgets_the_sessions_tool_memory(server: Server) -> None:
    """And /metrics counts the tool cache's hits and misses."""
    kv = server.runtime.kv
    sid = None
    for content in ("!tool list_files {}", "!tool list_files {}", '!tool read_file {"name": "n"}'):
        body: dict[str, Any] = {"content": content, "persist": True}
        if sid is not None:
            body["session_id"] = sid
        status, sent = await server.call("POST", "/v1/send", json_body=body)
        assert status == 200 and sent["status"] == "done", sent
        sid = sent["session_id"]
    async with server.client.get(server.url("/metrics")) as resp:
        text = await resp.text()
    assert 'agenvoy_tool_cache_lookups_total{result="hit",tool="list_files"} 1.0' in text
    assert 'agenvoy_tool_cache_lookups_total{result="miss",tool="list_files"} 1.0' in text
    assert await kv.scan(f"toolcache:{sid}:") and await kv.scan(f"errmem:{sid}:")
    assert await server.call("DELETE", f"/v1/session/{sid}") == (200, {"deleted": True})
    assert await kv.scan(f"toolcache:{sid}:") == {}
    assert await kv.scan(f"errmem:{sid}:") == {}


# -- metrics ---------------------------------------------------------------------------------------


async def test_metrics_exposition(server: Server) -> None:
    await server.call("GET", "/healthz")
    await server.call("GET", "/healthz")
    await server.call("POST", "/v1/send", json_body={"content": "hi"})
    await server.call("GET", "/v1/nothing")
    async with server.client.get(server.url("/metrics")) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
    assert text.endswith("\n")
    typed: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            typed[name] = kind
    assert typed["agenvoy_tasks_running"] == "gauge"
    assert typed["agenvoy_tasks_queued"] == "gauge"
    assert typed["agenvoy_tasks_done_total"] == "counter"
    assert typed["agenvoy_http_request_duration_seconds"] == "histogram"
    assert typed["agenvoy_http_responses_total"] == "counter"
    assert typed["agenvoy_http_log_streams"] == "gauge"
    samples = parse_metrics(text)
    assert sample(samples, "agenvoy_tasks_queued") == 0
    assert sample(samples, "agenvoy_tasks_done_total") == 1
    assert sample(samples, "agenvoy_tasks_started_total") == 1
    assert sample(samples, "agenvoy_events_total") == 3
    labels = {"method": "GET", "route": "/healthz"}
    buckets = sorted(
        (float(dict(key)["le"]), value)
        for (name, key), value in samples.items()
        if name == "agenvoy_http_request_duration_seconds_bucket" and labels.items() <= key
    )
    counts = [count for _, count in buckets]
    assert buckets[-1][0] == float("inf") and counts == sorted(counts) and len(buckets) > 5
    assert counts[-1] == sample(samples, "agenvoy_http_request_duration_seconds_count", **labels)
    assert counts[-1] == 2
    assert sample(samples, "agenvoy_http_request_duration_seconds_sum", **labels) > 0
    assert sample(samples, "agenvoy_http_responses_total", **labels, status="200") == 2
    unmatched = {"method": "GET", "route": "unmatched", "status": "404"}
    assert sample(samples, "agenvoy_http_responses_total", **unmatched) == 1
    send = {"method": "POST", "route": "/v1/send", "status": "200"}
    assert sample(samples, "agenvoy_http_responses_total", **send) == 1
    # One series per metric: no `_created` timestamps beside the counters.
    assert not [name for name, _ in samples if name.endswith("_created")]


async def test_each_app_counts_its_own_requests(tmp_path: Path) -> None:
    async with serving(tmp_path / "a") as one, serving(tmp_path / "b") as other:
        for _ in range(3):
            await one.call("GET", "/healthz")
        await other.call("GET", "/healthz")
        labels = {"method": "GET", "route": "/healthz", "status": "200"}
        assert sample(await scrape(one), "agenvoy_http_responses_total", **labels) == 3
        assert sample(await scrape(other), "agenvoy_http_responses_total", **labels) == 1


async def test_log_streams_gauge(server: Server) -> None:
    created = (await server.call("POST", "/v1/session"))[1]["session_id"]
    assert sample(await scrape(server), "agenvoy_http_log_streams") == 0
    async with server.client.get(server.url(f"/v1/session/{created}/log?tail=0")) as resp:
        live = await next_frame(resp)
        assert live is not None and live.comments == ["live"]
        assert sample(await scrape(server), "agenvoy_http_log_streams") == 1

    async def closed() -> bool:
        return sample(await scrape(server), "agenvoy_http_log_streams") == 0

    assert await wait_until(closed, TIMEOUT)


# -- shutdown --------------------------------------------------------------------------------------


async def test_shutdown_ends_streams_and_long_polls(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", _env_file=None)
    runtime = await Runtime.start(settings)
    try:
        runner = await start_http(runtime, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as client:
            created = await client.post(f"{base}/v1/session", json={"prefix": "chat"})
            sid = (await created.json())["session_id"]
            log_stream = await client.get(f"{base}/v1/session/{sid}/log")
            live = await next_frame(log_stream)
            assert live is not None and live.comments == ["live"]
            task_stream = await client.post(
                f"{base}/v1/send", json={"content": "!sleep 30", "session_id": sid, "stream": True}
            )
            assert (await next_event(task_stream)).event == "user"
            first_task = task_stream.headers["X-Agenvoy-Task"]
            long_poll = asyncio.create_task(
                client.post(
                    f"{base}/v1/send", json={"content": "!sleep 30", "session_id": sid, "wait": 300}
                )
            )
            # Both messages are in: the second one queued behind the first.
            users = 0
            while users < 2:
                users += (await next_event(log_stream)).event == "user"
            started = asyncio.get_running_loop().time()
            await asyncio.wait_for(runner.cleanup(), TIMEOUT)
            assert asyncio.get_running_loop().time() - started < 5
            answered = await asyncio.wait_for(long_poll, TIMEOUT)
            body = await answered.json()
            assert (answered.status, err(body)) == (503, "restarting")
            assert answered.headers["Retry-After"] == "5"
            task = answered.headers["X-Agenvoy-Task"]
            assert f"GET /v1/session/{sid}/task/{task}" in body["error"]["message"]
            for resp, task_hash in ((log_stream, None), (task_stream, first_task)):
                frames = []
                with contextlib.suppress(aiohttp.ClientError):
                    while (frame := await next_frame(resp)) is not None:
                        frames.append(frame)
                resp.close()
                last = frames[-1]
                assert last.event == "restarting", frames
                farewell = json.loads("\n".join(last.data))
                assert (farewell["session_id"], farewell["task_hash"]) == (sid, task_hash)
                assert farewell["retry_after"] == 5
                resource = "log" if task_hash is None else f"task/{task_hash}"
                assert farewell["resume"].startswith(f"GET /v1/session/{sid}/{resource}")
    finally:
        await runtime.close()


async def test_update_session(server: Server) -> None:
    status, body = await server.call("POST", "/v1/session")
    sid = body["session_id"]
    change = {
        "name": "  release notes ",
        "persona": "a terse release manager",
        "model": "big-model",
        "reasoning": "high",
        "allowed_tools": ["write_file", "write_file"],
    }
    status, meta = await server.call("PUT", f"/v1/session/{sid}", json_body=change)
    assert status == 200, meta
    assert (meta["name"], meta["persona"], meta["model"], meta["reasoning"]) == (
        "release notes",
        "a terse release manager",
        "big-model",
        "high",
    )
    assert meta["allowed_tools"] == ["write_file"]
    # Only the given fields change; "" restores the default.
    status, meta = await server.call("PUT", f"/v1/session/{sid}", json_body={"reasoning": ""})
    assert (status, meta["reasoning"], meta["model"]) == (200, "", "big-model")
    row = await server.runtime.store.require(sid)
    assert (row.name, row.persona, row.allowed_tools) == (
        "release notes",
        "a terse release manager",
        frozenset({"write_file"}),
    )

    bad_bodies: list[Any] = [
        {"reasoning": "extreme"},
        {"colour": "blue"},
        {"name": 3},
        {"name": "x" * 201},
        {"allowed_tools": "write_file"},
        {"allowed_tools": ["../etc"]},
        {"allowed_tools": ["t"] * 65},
    ]
    for bad in bad_bodies:
        status, body = await server.call("PUT", f"/v1/session/{sid}", json_body=bad)
        assert (status, err(body)) == (400, "bad_request"), bad
    status, body = await server.call("PUT", f"/v1/session/{sid}", data=b"[1")
    assert (status, err(body)) == (400, "bad_json")
    status, body = await server.call("PUT", "/v1/session/cli-nobody", json_body={"name": "x"})
    assert (status, err(body)) == (404, "not_found")
    status, body = await server.call("PUT", "/v1/session/..%2Fetc", json_body={"name": "x"})
    assert status == 400
    assert (await server.runtime.store.require(sid)).model == "big-model"  # nothing leaked in


async def member_of(server: Server, chat: str, user: str) -> None:
    """`user`'s Discord identity, linked with their token, has written in `chat`."""
    store = server.runtime.store
    await store.ownership.link(f"discord:{user}-id", f"http:{user}")
    await store.take_in(chat, "hello", sender=user, sender_key=f"discord:{user}-id")


async def test_update_shared_session_needs_an_admin(server: Server) -> None:
    await server.runtime.store.ensure("dc-42")
    path = "/v1/session/dc-42"
    status, body = await server.call("PUT", path, json_body={"name": "general"}, headers=ANN)
    assert (status, err(body)) == (404, "not_found")  # not a member: not even there
    await member_of(server, "dc-42", "ann")
    status, body = await server.call("GET", path, headers=ANN)
    assert status == 200
    changes: tuple[dict[str, Any], ...] = ({"model": "m"}, {"allowed_tools": []}, {"name": "g"})
    for change in changes:
        status, body = await server.call("PUT", path, json_body=change, headers=ANN)
        assert (status, err(body)) == (403, "not_allowed"), change
    status, meta = await server.call("PUT", path, json_body={"model": "m"}, headers=ROOT)
    assert (status, meta["model"]) == (200, "m")


async def test_allowed_tool_runs_without_asking(server: Server) -> None:
    status, body = await server.call("POST", "/v1/session", headers=ANN)
    sid = body["session_id"]
    send = {"content": "/allow demo_action", "session_id": sid}
    status, body = await server.call("POST", "/v1/send", json_body=send, headers=ANN)
    assert status == 200 and "without asking" in body["text"], body
    send = {"content": "/allow no_such_tool", "session_id": sid}
    status, body = await server.call("POST", "/v1/send", json_body=send, headers=ANN)
    assert "no tool 'no_such_tool'" in body["text"] and "demo_action" in body["text"]

    send = {"content": "!confirm launch", "session_id": sid, "wait": 10}
    status, view = await server.call("POST", "/v1/send", json_body=send, headers=ANN)
    assert status == 200 and (view["status"], view["text"]) == ("done", "approved: launch"), view
    kinds = [e["kind"] for e in view["events"]]
    assert "confirm" not in kinds  # nobody was asked
    (answered,) = [e for e in view["events"] if e["kind"] == "answer"]
    assert (answered["approved"], answered["answered_by"]) == (True, "allow-list")
    log_text = server.runtime.store.files(sid).action_log.path.read_text()
    assert "[answer]" in log_text and "allow-list" in log_text

    send = {"content": "/disallow demo_action", "session_id": sid}
    status, body = await server.call("POST", "/v1/send", json_body=send, headers=ANN)
    assert "asks for confirmation again" in body["text"]
    send = {"content": "!confirm again", "session_id": sid}
    status, body = await server.call("POST", "/v1/send", json_body=send, headers=ANN)
    assert status == 202 and body["pending"]["tool"] == "demo_action", body


async def test_allow_in_a_shared_chat_needs_an_admin(server: Server) -> None:
    await server.runtime.store.ensure("tg-7")
    await member_of(server, "tg-7", "ann")
    send = {"content": "/allow demo_action", "session_id": "tg-7"}
    status, body = await server.call("POST", "/v1/send", json_body=send, headers=ANN)
    assert "only an admin" in body["text"]
    assert (await server.runtime.store.require("tg-7")).allowed_tools == frozenset()
    status, body = await server.call("POST", "/v1/send", json_body=send, headers=ROOT)
    assert "without asking" in body["text"]
    send = {"content": "/allow", "session_id": "tg-7"}
    status, body = await server.call("POST", "/v1/send", json_body=send, headers=ANN)
    assert (status, body["text"]) == (200, "allowed without confirmation: demo_action")


async def test_terminal_prompt_is_answered_from_its_own_window(server: Server) -> None:
    status, body = await server.call("POST", "/v1/session")
    sid = body["session_id"]
    window_a = terminal(server, "ann", "a")
    window_b = terminal(server, "ann", "b")
    send = {"content": "!confirm deploy", "session_id": sid}
    status, body = await server.call("POST", "/v1/send", json_body=send, headers=window_a)
    assert status == 202, body
    task = body["task_hash"]
    assert body["pending"]["origin"]["platform"] == "terminal"
    assert body["pending"]["origin"]["window_hash"] == "a"

    status, body = await server.call("GET", "/v1/pending", headers=window_b)
    assert body["pending"] == []  # same person, other window: not theirs to answer
    status, body = await server.call("GET", "/v1/pending", headers=ROOT)
    assert [p["task_hash"] for p in body["pending"]] == [task]
    status, body = await server.call("GET", "/v1/pending", headers=window_a)
    assert [p["task_hash"] for p in body["pending"]] == [task]

    answer = f"/v1/session/{sid}/pending/{task}"
    # Knowing the window's hash is not enough: headers claim nothing, and a token signed with
    # anything but the home's credential stands for nobody.
    posing = [
        {"X-Agenvoy-Sender": "ann", "X-Agenvoy-Client": "terminal", "X-Agenvoy-Window": "a"},
        {**BOB, "X-Agenvoy-Client": "terminal", "X-Agenvoy-Window": "a"},
        {"Authorization": f"Bearer {local_token('agenvoy-local-guess', 'ann', 'a')}"},
    ]
    for headers in posing:
        status, body = await server.call(
            "POST", answer, json_body={"approve": True}, headers=headers
        )
        assert status in {403, 404}, (headers, body)
    status, body = await server.call("POST", answer, json_body={"approve": True}, headers=window_b)
    assert (status, err(body)) == (403, "not_allowed")
    assert "terminal window" in body["error"]["message"]
    status, body = await server.call("POST", answer, json_body={"approve": True}, headers=window_a)
    assert (status, body["approved"]) == (200, True)

    bad_window = {"Authorization": window_a["Authorization"].replace(".a.", "./a.", 1)}
    status, body = await server.call("POST", "/v1/send", json_body=send, headers=bad_window)
    assert (status, err(body)) == (403, "forbidden")


async def test_input_history_routes(server: Server) -> None:
    status, body = await server.call("POST", "/v1/session")
    sid = body["session_id"]
    path = f"/v1/session/{sid}/inputs"
    status, body = await server.call("GET", path)
    assert (status, body) == (200, {"inputs": []})
    for entry in ["first", "second\nline two", "second\nline two", "third"]:
        status, body = await server.call("POST", path, json_body={"entry": entry})
        assert status == 200
    assert body["inputs"] == ["first", "second\nline two", "third"]
    for _ in range(60):
        status, body = await server.call("POST", path, json_body={"entry": f"n{_}"})
    status, body = await server.call("GET", path)
    assert len(body["inputs"]) == 50 and body["inputs"][-1] == "n59"
    for bad in ({}, {"entry": ""}, {"entry": "  "}, {"entry": 5}):
        status, body = await server.call("POST", path, json_body=bad)
        assert (status, err(body)) == (400, "bad_request"), bad
    status, body = await server.call("POST", path, json_body={"entry": "x" * 20_000})
    assert status == 413
    status, body = await server.call("GET", "/v1/session/cli-none/inputs")
    assert (status, err(body)) == (404, "not_found")


async def test_a_sender_over_its_share_gets_429_and_nothing_is_stored(tmp_path: Path) -> None:
    async with serving(tmp_path, max_pending_per_sender=2) as server:
        for i in range(2):
            status, _ = await server.call(
                "POST", "/v1/send", json_body={"content": "!sleep 30", "wait": 0}
            )
            assert status == 202, i
        async with server.client.post(
            server.url("/v1/send"), json={"content": "one too many", "session_id": "chat-x"}
        ) as resp:
            body = await resp.json()
            assert (resp.status, err(body)) == (429, "too_many_requests")
            assert resp.headers["Retry-After"] == "10"
        assert await server.runtime.store.get("chat-x") is None


async def _closed() -> bool:
    return False
