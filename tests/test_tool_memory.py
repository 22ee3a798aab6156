"""The tool cache and the error memory through the router — the openai agent against the fake
OpenAI server, the claude agent against the fake Messages API, the offline agent's `!tool` —
on the embedded KV store and on Redis.

That a call was served from the cache is shown by a counter around the real tool function
(the code under test is not replaced): the counter does not move on a hit.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clock import FakeClock
from fakes.anthropic import FakeAnthropic, ToolUse
from fakes.anthropic import Text as ClaudeText
from fakes.openai import FakeOpenAI, Text, ToolCalls
from support import REDIS_URL, open_redis

from adapters.http.metrics import HttpMetrics
from gateway.agents.base import AgentContext
from gateway.agents.error_memory import ErrorMemory
from gateway.agents.tool_cache import Reads, ToolCache, canonical_args
from gateway.agents.tools import BUILTIN_TOOLS, Tool
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.events import Inbound, Origin
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.kv import ERROR_MEMORY_PREFIX, TOOL_CACHE_PREFIX, KVStore, SqliteKV

ANN = Origin("http", sender_id="ann", sender_name="Ann")
BOB = Origin("telegram", sender_id="42", sender_name="Bob")
SPIED = ("list_files", "read_file", "search_history", "write_file", "delete_file")


def spy(tools: dict[str, Tool], runs: Counter[str]) -> None:
    """Count the runs of the real tool functions, which still do the work."""
    for name in SPIED:
        tool = tools[name]

        async def counted(ctx: AgentContext, args: dict[str, Any], _tool: Tool = tool) -> str:
            runs[_tool.name] += 1
            return await _tool.run(ctx, args)

        tools[name] = dataclasses.replace(tool, run=counted)


@pytest.fixture(params=["sqlite", "redis"])
async def kv_url(request: pytest.FixtureRequest) -> str:
    """ "" for the embedded store under the home, or the Redis test server."""
    if request.param == "sqlite":
        return ""
    probe = await open_redis()  # skips (or fails in CI) with a reason when Redis is not there
    await probe.close()
    return REDIS_URL


class Gateway:
    """A runtime with its agent's tools counted, and the sessions a test used (their KV keys
    go at the end: Redis is shared)."""

    def __init__(self, rt: Runtime, runs: Counter[str]) -> None:
        self.rt = rt
        self.runs = runs
        self.sessions: list[str] = []
        self.calls = 0

    def session(self, prefix: str = "cli") -> str:
        sid = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.sessions.append(sid)
        return sid

    def workspace(self, sid: str) -> Path:
        return self.rt.store.files(sid).dir / "workspace"

    async def put_file(self, sid: str, name: str, text: str) -> Path:
        """A file put there behind the gateway's back (not through its tools)."""
        await self.rt.store.ensure(sid)
        path = self.workspace(sid) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    async def keys(self, prefix: str, sid: str) -> dict[str, str]:
        return await self.rt.kv.scan(f"{prefix}{sid}:")

    def metrics(self) -> str:
        return HttpMetrics(self.rt.router, self.rt.tool_memory.cache).exposition().decode()

    async def close(self) -> None:
        try:
            for sid in self.sessions:
                await self.rt.tool_memory.forget(sid)
        finally:
            await self.rt.close()


def settings(home: Path, kv_url: str, **extra: Any) -> Settings:
    options: dict[str, Any] = {
        "home": home,
        "kv_url": kv_url,
        "instance_id": f"test-{uuid.uuid4().hex[:8]}",
        "confirm_timeout_seconds": 30,
        **extra,
    }
    return Settings(_env_file=None, **options)


async def openai_gateway(
    fake: FakeOpenAI, home: Path, kv_url: str, clock: Clock = SYSTEM_CLOCK, **extra: Any
) -> Gateway:
    rt = await Runtime.start(
        settings(
            home,
            kv_url,
            agent="openai",
            openai_base_url=fake.url,
            openai_api_key=fake.api_key,
            model="fake-model",
            **extra,
        ),
        clock=clock,
    )
    runs: Counter[str] = Counter()
    spy(rt.agent.tools, runs)  # type: ignore[attr-defined]
    return Gateway(rt, runs)


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def gw(fake: FakeOpenAI, kv_url: str, tmp_path: Path) -> AsyncIterator[Gateway]:
    made = await openai_gateway(fake, tmp_path / "home", kv_url)
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def clocked(
    fake: FakeOpenAI, kv_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Gateway, FakeClock]]:
    clock = FakeClock()
    made = await openai_gateway(fake, tmp_path / "clocked", kv_url, clock)
    try:
        yield made, clock
    finally:
        await made.close()


async def call(
    g: Gateway, fake: FakeOpenAI, sid: str, tool: str, args: dict[str, Any], **how: Any
) -> str:
    """One task in which the model makes one call; what the model was given back."""
    (result,) = await calls(g, fake, sid, [(tool, args)], **how)
    return result


async def calls(
    g: Gateway,
    fake: FakeOpenAI,
    sid: str,
    made: list[tuple[str, dict[str, Any]]],
    *,
    approve: bool | None = None,
) -> list[str]:
    """One task in which the model makes the calls one reply after the other."""
    replies: list[Any] = []
    for tool, args in made:
        g.calls += 1
        replies.append(ToolCalls([(f"call_{g.calls}", tool, args)]))
    fake.script(*replies, Text("done"))
    router = g.rt.router
    sub = await router.submit(Inbound(ANN, sid, f"use {', '.join(t for t, _ in made)}"))
    if approve is not None:
        state = await router.wait(sub.task_hash, 15, until_prompt=True)
        assert state.prompt is not None, "a confirmation was expected"
        await router.answer(sid, sub.task_hash, ANN, approve=approve)
    state = await router.wait(sub.task_hash, 15)
    assert (state.status, state.reply) == ("done", "done"), state.error
    if approve is None:
        assert "confirm" not in [e.kind for e in state.events]
    messages = fake.requests[-1]["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"][-len(made) :]


# --------------------------------------------------------------------------- tool cache


async def test_a_cache_hit_skips_the_tool_and_returns_the_same_bytes(
    fake: FakeOpenAI, gw: Gateway
) -> None:
    sid = gw.session()
    await gw.put_file(sid, "notes.txt", "línea uno\r\n\tdos  \n")
    first = await call(gw, fake, sid, "read_file", {"name": "notes.txt"})
    second = await call(gw, fake, sid, "read_file", {"name": "./notes.txt"})  # same file
    listed = await calls(gw, fake, sid, [("list_files", {}), ("list_files", {})])
    assert first == second == "línea uno\r\n\tdos  \n"
    assert listed == ['["notes.txt"]'] * 2
    assert gw.runs == {"read_file": 1, "list_files": 1}
    text = gw.metrics()
    assert 'agenvoy_tool_cache_lookups_total{result="hit",tool="read_file"} 1.0' in text
    assert 'agenvoy_tool_cache_lookups_total{result="miss",tool="read_file"} 1.0' in text
    assert 'agenvoy_tool_cache_lookups_total{result="hit",tool="list_files"} 1.0' in text
    # A hit is still a journaled, visible tool call.
    log = (gw.rt.store.files(sid).dir / "action.log").read_text()
    assert log.count("[tool_result]") == 4


async def test_a_write_through_the_tools_invalidates(fake: FakeOpenAI, gw: Gateway) -> None:
    sid = gw.session()
    await gw.put_file(sid, "plan.md", "old plan")
    assert await call(gw, fake, sid, "read_file", {"name": "plan.md"}) == "old plan"
    assert await call(gw, fake, sid, "list_files", {}) == '["plan.md"]'
    write = {"name": "plan.md", "content": "new plan"}
    assert (
        await call(gw, fake, sid, "write_file", write, approve=True) == "wrote 8 bytes to plan.md"
    )
    assert await call(gw, fake, sid, "read_file", {"name": "plan.md"}) == "new plan"
    await call(gw, fake, sid, "delete_file", {"name": "plan.md"}, approve=True)
    assert await call(gw, fake, sid, "list_files", {}) == "[]"
    assert gw.runs["read_file"] == 2 and gw.runs["list_files"] == 2


async def test_a_change_behind_the_gateways_back_misses(fake: FakeOpenAI, gw: Gateway) -> None:
    sid = gw.session()
    path = await gw.put_file(sid, "data.txt", "1111")
    assert await call(gw, fake, sid, "read_file", {"name": "data.txt"}) == "1111"
    assert await call(gw, fake, sid, "list_files", {}) == '["data.txt"]'
    path.write_text("2222")  # same size, in place: the file's times move
    await gw.put_file(sid, "sub/attachment.bin", "x")  # a new folder deep in the workspace
    assert await call(gw, fake, sid, "read_file", {"name": "data.txt"}) == "2222"
    assert await call(gw, fake, sid, "list_files", {}) == '["data.txt", "sub/attachment.bin"]'
    await gw.put_file(sid, "sub/second.bin", "y")  # only the subfolder changes
    listed = await call(gw, fake, sid, "list_files", {})
    assert listed == '["data.txt", "sub/attachment.bin", "sub/second.bin"]'
    assert gw.runs == {"read_file": 2, "list_files": 3}


async def test_a_folder_swapped_for_a_link_misses(fake: FakeOpenAI, gw: Gateway) -> None:
    sid = gw.session()
    await gw.put_file(sid, "docs/b.txt", "inside")
    assert await call(gw, fake, sid, "read_file", {"name": "docs/b.txt"}) == "inside"
    docs = gw.workspace(sid) / "docs"
    docs.rename(gw.workspace(sid) / "real")
    docs.symlink_to("real", target_is_directory=True)  # the same file, now through a link
    refused = await call(gw, fake, sid, "read_file", {"name": "docs/b.txt"})
    assert "is a link" in refused or "not a folder" in refused
    assert gw.runs["read_file"] == 2


async def test_search_history_is_cached_until_the_archive_moves(
    fake: FakeOpenAI, gw: Gateway
) -> None:
    sid = gw.session()
    query = {"query": "use"}
    twice = await calls(gw, fake, sid, [("search_history", query), ("search_history", query)])
    assert twice[0] == twice[1] and "use search_history" in twice[0]
    assert gw.runs["search_history"] == 1
    # The next message is archived before its task runs: the same search runs again.
    again = await call(gw, fake, sid, "search_history", query)
    assert gw.runs["search_history"] == 2 and again != twice[0]


async def test_entries_expire_on_the_runtime_clock(
    fake: FakeOpenAI, clocked: tuple[Gateway, FakeClock]
) -> None:
    gw, clock = clocked
    sid = gw.session()
    await gw.put_file(sid, "a.txt", "alpha")
    await call(gw, fake, sid, "read_file", {"name": "a.txt"})
    await clock.advance(299)
    await call(gw, fake, sid, "read_file", {"name": "a.txt"})
    assert gw.runs["read_file"] == 1  # within the 300 s
    await clock.advance(2)
    assert await call(gw, fake, sid, "read_file", {"name": "a.txt"}) == "alpha"
    assert gw.runs["read_file"] == 2


async def test_another_session_never_hits(fake: FakeOpenAI, gw: Gateway) -> None:
    one, other = gw.session(), gw.session()
    for sid in (one, other):
        await gw.put_file(sid, "same.txt", "same")
        await call(gw, fake, sid, "list_files", {})
        await call(gw, fake, sid, "read_file", {"name": "same.txt"})
    assert gw.runs == {"list_files": 2, "read_file": 2}
    assert await gw.keys(TOOL_CACHE_PREFIX, one) and await gw.keys(TOOL_CACHE_PREFIX, other)


async def test_failures_are_never_cached(fake: FakeOpenAI, kv_url: str, tmp_path: Path) -> None:
    g = await openai_gateway(fake, tmp_path / "no-errmem", kv_url, error_memory_seconds=0)
    try:
        sid = g.session()
        for _ in range(2):
            failed = await call(g, fake, sid, "read_file", {"name": "nothing.txt"})
            assert failed == "error (error): RuntimeError: no file 'nothing.txt' in the workspace"
        assert g.runs["read_file"] == 2
        assert list(await g.keys(TOOL_CACHE_PREFIX, sid)) == [
            f"{TOOL_CACHE_PREFIX}{sid}:@generation"
        ]
    finally:
        await g.close()


async def test_zero_seconds_turns_both_off(fake: FakeOpenAI, kv_url: str, tmp_path: Path) -> None:
    g = await openai_gateway(
        fake, tmp_path / "off", kv_url, tool_cache_seconds=0, error_memory_seconds=0
    )
    try:
        sid = g.session()
        await g.put_file(sid, "here.txt", "here")
        for name in ("here.txt", "here.txt", "gone.txt", "gone.txt"):
            await call(g, fake, sid, "read_file", {"name": name})
        assert g.runs["read_file"] == 4
        assert await g.keys(TOOL_CACHE_PREFIX, sid) == {}
        assert await g.keys(ERROR_MEMORY_PREFIX, sid) == {}
        assert "agenvoy_tool_cache_lookups_total{" not in g.metrics()
    finally:
        await g.close()


# --------------------------------------------------------------------------- error memory


async def test_a_repeated_failing_call_is_told_first_then_runs_if_insisted(
    fake: FakeOpenAI, clocked: tuple[Gateway, FakeClock]
) -> None:
    gw, clock = clocked
    sid = gw.session()
    args = {"name": "missing.txt"}
    error = "RuntimeError: no file 'missing.txt' in the workspace"
    assert await call(gw, fake, sid, "read_file", args) == f"error (error): {error}"
    await clock.advance(180)
    told = await call(gw, fake, sid, "read_file", {"name": "./missing.txt"})
    assert gw.runs["read_file"] == 1  # not run
    assert told.startswith("error (error): RepeatedFailure: not run: this exact call failed ")
    assert f"3 minutes ago with: {error}" in told and "same call again unchanged" in told
    assert await call(gw, fake, sid, "read_file", args) == f"error (error): {error}"
    assert gw.runs["read_file"] == 2  # the model insisted: it ran
    assert "RepeatedFailure" in await call(gw, fake, sid, "read_file", args)
    assert gw.runs["read_file"] == 2  # failed again, so told again


async def test_a_changed_workspace_lets_the_call_run_and_a_success_forgets(
    fake: FakeOpenAI, gw: Gateway
) -> None:
    sid = gw.session()
    args = {"name": "later.txt"}
    assert "no file" in await call(gw, fake, sid, "read_file", args)
    assert len(await gw.keys(ERROR_MEMORY_PREFIX, sid)) == 1
    write = {"name": "later.txt", "content": "now here"}
    await call(gw, fake, sid, "write_file", write, approve=True)
    assert await call(gw, fake, sid, "read_file", args) == "now here"
    assert gw.runs["read_file"] == 2
    assert await gw.keys(ERROR_MEMORY_PREFIX, sid) == {}  # the success forgot it


async def test_a_known_failure_is_told_before_asking_for_confirmation(
    fake: FakeOpenAI, gw: Gateway
) -> None:
    sid = gw.session()
    (gw.workspace(sid) / "reports").mkdir(parents=True)
    await gw.rt.store.ensure(sid)
    write = {"name": "reports", "content": "oops"}
    failed = await call(gw, fake, sid, "write_file", write, approve=True)
    assert "'reports' cannot be used: Is a directory" in failed
    # No confirmation is asked this time (`call` checks there was none).
    told = await call(gw, fake, sid, "write_file", write)
    assert "not run: this exact call failed moments ago" in told
    assert "cannot be used: Is a directory" in told
    assert gw.runs["write_file"] == 1


async def test_failures_are_forgotten_after_their_time(
    fake: FakeOpenAI, clocked: tuple[Gateway, FakeClock]
) -> None:
    gw, clock = clocked
    sid = gw.session()
    await call(gw, fake, sid, "read_file", {"name": "gone.txt"})
    await clock.advance(3601)
    assert "RepeatedFailure" not in await call(gw, fake, sid, "read_file", {"name": "gone.txt"})
    assert gw.runs["read_file"] == 2


async def test_failures_are_kept_per_session(fake: FakeOpenAI, gw: Gateway) -> None:
    one, other = gw.session(), gw.session()
    await call(gw, fake, one, "read_file", {"name": "x.txt"})
    assert "RepeatedFailure" not in await call(gw, fake, other, "read_file", {"name": "x.txt"})
    assert gw.runs["read_file"] == 2


# --------------------------------------------------------------------------- /forget


async def test_forget_clears_the_error_memory_and_the_cache(fake: FakeOpenAI, gw: Gateway) -> None:
    sid = gw.session()
    await gw.put_file(sid, "kept.txt", "kept")
    await call(gw, fake, sid, "read_file", {"name": "kept.txt"})
    await call(gw, fake, sid, "read_file", {"name": "absent.txt"})
    keep = gw.session()  # another session's memory stays
    await call(gw, fake, keep, "read_file", {"name": "absent.txt"})

    sub = await gw.rt.router.submit(Inbound(ANN, sid, "/forget"))
    assert sub.command is not None and sub.command.ok
    assert sub.command.text == "forgot 1 failed tool call and cleared the tool cache"
    assert await gw.keys(TOOL_CACHE_PREFIX, sid) == {}
    assert await gw.keys(ERROR_MEMORY_PREFIX, sid) == {}
    assert len(await gw.keys(ERROR_MEMORY_PREFIX, keep)) == 1

    assert await call(gw, fake, sid, "read_file", {"name": "kept.txt"}) == "kept"
    assert "RepeatedFailure" not in await call(gw, fake, sid, "read_file", {"name": "absent.txt"})
    assert gw.runs["read_file"] == 5


async def test_forget_in_a_shared_chat_is_for_admins(fake: FakeOpenAI, gw: Gateway) -> None:
    sid = gw.session("tg")
    await gw.rt.store.ensure(sid)
    await gw.rt.kv.set(f"{ERROR_MEMORY_PREFIX}{sid}:read_file:x", "{}")
    refused = await gw.rt.router.submit(Inbound(BOB, sid, "/forget"))
    assert refused.command is not None and not refused.command.ok
    assert "only an admin" in refused.command.text
    assert len(await gw.keys(ERROR_MEMORY_PREFIX, sid)) == 1
    admin = dataclasses.replace(BOB, is_admin=True)
    done = await gw.rt.router.submit(Inbound(admin, sid, "/forget"))
    assert done.command is not None and done.command.ok
    assert await gw.keys(ERROR_MEMORY_PREFIX, sid) == {}


# --------------------------------------------------------------------------- other agents


async def test_the_claude_agent_uses_the_cache_and_the_error_memory(
    kv_url: str, tmp_path: Path
) -> None:
    async with FakeAnthropic() as claude:
        rt = await Runtime.start(
            settings(
                tmp_path / "claude",
                kv_url,
                agent="claude",
                anthropic_base_url=claude.url,
                anthropic_api_key=claude.api_key,
                anthropic_model="claude-test",
            )
        )
        runs: Counter[str] = Counter()
        spy(rt.agent.tools, runs)  # type: ignore[attr-defined]
        g = Gateway(rt, runs)
        try:
            sid = g.session()
            await g.put_file(sid, "c.txt", "claude reads")
            results = []
            for n, name in enumerate(["c.txt", "c.txt", "no.txt", "no.txt"]):
                claude.script(
                    ToolUse([(f"toolu_{n}", "read_file", {"name": name})]), ClaudeText("ok")
                )
                state = await rt.router.wait(
                    (await rt.router.submit(Inbound(ANN, sid, "read"))).task_hash, 15
                )
                assert state.status == "done"
                results.append(claude.requests[-1]["messages"][-1]["content"][0]["content"])
            assert results[0] == results[1] == "claude reads"
            assert "no file 'no.txt'" in results[2] and "RepeatedFailure" in results[3]
            assert runs["read_file"] == 2
        finally:
            await g.close()


async def test_the_offline_agents_tool_hook(kv_url: str, tmp_path: Path, monkeypatch: Any) -> None:
    runs: Counter[str] = Counter()
    tools = dict(BUILTIN_TOOLS)
    spy(tools, runs)
    for name in SPIED:
        monkeypatch.setitem(BUILTIN_TOOLS, name, tools[name])
    rt = await Runtime.start(settings(tmp_path / "offline", kv_url))
    g = Gateway(rt, runs)

    async def say(sid: str, text: str) -> str:
        state = await rt.router.wait(
            (await rt.router.submit(Inbound(ANN, sid, text))).task_hash, 15
        )
        return state.reply

    try:
        sid = g.session()
        await g.put_file(sid, "o.txt", "offline")
        assert await say(sid, '!tool read_file {"name": "o.txt"}') == "read_file: offline"
        assert await say(sid, '!tool read_file {"name": "o.txt"}') == "read_file: offline"
        assert runs["read_file"] == 1
        assert (await say(sid, "!tool read_file {")).startswith("refused: !tool <name>")
        # An argument the schema does not take: refused before the cache or the tool.
        extra = await say(sid, '!tool list_files {"x": 1}')
        assert "Additional properties are not allowed ('x' was unexpected)" in extra
        assert runs["list_files"] == 0
        assert await say(sid, "!tool list_files {}") == 'list_files: ["o.txt"]'
        assert runs["list_files"] == 1
        assert "no tool named" in await say(sid, "!tool nope {}")
    finally:
        await g.close()


# --------------------------------------------------------------------------- the pieces


async def test_keys_are_per_session_even_for_the_same_version(kv: KVStore) -> None:
    cache = ToolCache(kv, 300, FakeClock())
    await cache.put("cli-one", "list_files", "{}", "v1", '["a"]')
    assert await cache.get("cli-one", "list_files", "{}", "v1") == '["a"]'
    assert await cache.get("cli-two", "list_files", "{}", "v1") is None
    assert await cache.get("cli-one", "list_files", "{}", "v2") is None
    assert await cache.get("cli-one", "read_file", "{}", "v1") is None
    await cache.clear("cli-one")


async def test_a_write_changes_the_version_even_where_the_files_look_the_same(
    kv: KVStore, tmp_path: Path
) -> None:
    """The generation covers what a fingerprint can miss (a write within one tick of the
    filesystem's clock); and a lost generation is replaced by a new one, never an old one."""
    cache = ToolCache(kv, 300, FakeClock())
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    async def version() -> str | None:
        return await cache.version("cli-v", Reads.workspace, workspace, {}, _no_history)

    first = await version()
    assert first is not None and await version() == first
    await cache.workspace_changed("cli-v")
    second = await version()
    assert second not in (None, first)
    await kv.delete(f"{TOOL_CACHE_PREFIX}cli-v:@generation")
    assert await version() not in (None, first, second)
    await cache.clear("cli-v")


async def test_a_failing_kv_store_costs_a_miss_not_the_call(tmp_path: Path) -> None:
    kv = await SqliteKV.open(tmp_path / "kv.db")
    cache = ToolCache(kv, 300, FakeClock())
    errors = ErrorMemory(kv, 300, FakeClock())
    await kv.close()
    await cache.put("cli-x", "read_file", "{}", "v", "r")  # logged, not raised
    assert await cache.get("cli-x", "read_file", "{}", "v") is None
    assert await cache.version("cli-x", Reads.file, tmp_path, {"name": "a"}, _no_history) is None
    await errors.remember("cli-x", "read_file", "{}", "boom", "v")
    assert await errors.recall("cli-x", "read_file", "{}") is None


def test_arguments_are_normalised() -> None:
    assert canonical_args({"b": 1, "a": "ü"}) == '{"a":"ü","b":1}'
    same = canonical_args({"name": "./d//f.txt"}, Reads.file)
    assert same == canonical_args({"name": "d/f.txt"}, Reads.file)
    assert canonical_args({"name": "../x"}, Reads.file) == '{"name":"../x"}'


async def _no_history() -> int:
    return 0
