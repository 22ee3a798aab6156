"""MCP servers' tools for the openai agent, through the router, against the fake OpenAI server
and the small MCP server of tests/fakes/mcp_server.py (over stdio, and over streamable HTTP)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fakes.anthropic import FakeAnthropic, ToolUse
from fakes.anthropic import Text as AnthropicText
from fakes.openai import FakeOpenAI, Text, ToolCalls
from gateway_proc import free_port
from mcp_rig import SERVER, started_pids, stdio_server, wait_gone, write_config
from sqlalchemy import text
from sqlmodel import Session
from structlog.testing import capture_logs
from support import wait_until
from test_claude_agent import settings_for

from gateway.engine.views import TaskView
from gateway.events import Inbound, Origin
from gateway.logs import configure_logging
from gateway.mcp_tools.server import START_ATTEMPTS
from gateway.runtime import Runtime
from gateway.settings import Settings

ANN = Origin("http", sender_id="ann", sender_name="Ann")


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


async def start(fake: FakeOpenAI, home: Path, **extra: Any) -> Runtime:
    options: dict[str, Any] = {
        "home": home,
        "agent": "openai",
        "openai_base_url": fake.url,
        "openai_api_key": fake.api_key,
        "model": "fake-model",
        "confirm_timeout_seconds": 30,
        **extra,
    }
    return await Runtime.start(Settings(_env_file=None, **options))


@pytest.fixture
def pids(tmp_path: Path) -> Path:
    return tmp_path / "mcp-pids"


@pytest.fixture
async def runtime(fake: FakeOpenAI, tmp_path: Path, pids: Path) -> AsyncIterator[Runtime]:
    write_config(tmp_path / "home", {"fake": stdio_server(pids)})
    rt = await start(fake, tmp_path / "home")
    try:
        yield rt
    finally:
        await rt.close()


async def approved(rt: Runtime, sid: str, message: str, approve: bool = True) -> TaskView:
    """Run `message`; answer the confirmation it asks for."""
    sub = await rt.router.submit(Inbound(ANN, sid, message))
    state = await rt.router.wait(sub.task_hash, 20, until_prompt=True)
    assert state.prompt is not None, f"no confirmation was asked: {state.status}"
    await rt.router.answer(sid, sub.task_hash, ANN, approve=approve)
    return await rt.router.wait(sub.task_hash, 20)


async def ran(rt: Runtime, sid: str, message: str) -> TaskView:
    sub = await rt.router.submit(Inbound(ANN, sid, message))
    return await rt.router.wait(sub.task_hash, 20)


def tool_messages(fake: FakeOpenAI) -> list[str]:
    return [m["content"] for m in fake.requests[-1]["messages"] if m["role"] == "tool"]


async def test_tools_are_listed_by_server_and_started_lazily(
    fake: FakeOpenAI, runtime: Runtime, pids: Path
) -> None:
    await runtime.router.submit(Inbound(ANN, "cli-m", "/status"))
    assert started_pids(pids) == []  # a gateway that ran no task started no server
    fake.script(Text("hello"))
    assert (await ran(runtime, "cli-m", "hi")).reply == "hello"
    tools = {t["function"]["name"]: t["function"] for t in fake.requests[0]["tools"]}
    assert {"read_file", "fake__add", "fake__echo", "fake__crash"} <= set(tools)
    assert tools["fake__add"]["parameters"]["required"] == ["a", "b"]
    assert "MCP server 'fake'" in tools["fake__add"]["description"]
    fake.script(Text("again"))
    await ran(runtime, "cli-m", "and again")
    assert len(started_pids(pids)) == 1  # one process for every task
    assert runtime.mcp is not None
    found = await runtime.mcp.tools()
    # Run again after a crash only where the annotations say it is safe (add: read-only).
    assert found["fake__add"].idempotent and not found["fake__echo"].idempotent
    assert all(t.needs_confirmation and not t.cached for t in found.values())


async def test_a_call_is_confirmed_journaled_and_in_action_history(
    fake: FakeOpenAI, runtime: Runtime
) -> None:
    fake.script(ToolCalls([("c1", "fake__add", {"a": 2, "b": 40})]), Text("It is 42."))
    state = await approved(runtime, "cli-a", "add them")
    assert state.reply == "It is 42." and tool_messages(fake) == ["42"]
    kinds = [(e.kind, getattr(e, "tool", "")) for e in state.events]
    assert ("confirm", "fake__add") in kinds
    assert ("tool_call", "fake__add") in kinds and ("tool_result", "fake__add") in kinds

    def rows(session: Session) -> list[str]:
        res = session.connection().execute(text("SELECT tool_results FROM action_history"))
        return [r[0] for r in res.all()]

    (results,) = await runtime.store.db.read(rows)
    (tool,) = json.loads(results)
    assert (tool["tool"], tool["status"]) == ("fake__add", "ok")
    logged = [r.kind for r in runtime.store.files("cli-a").action_log.read()]
    assert "tool_call" in logged and "tool_result" in logged


async def test_denied_is_not_called(fake: FakeOpenAI, runtime: Runtime, pids: Path) -> None:
    fake.script(ToolCalls([("c1", "fake__crash", {})]), Text("Left alone."))
    state = await approved(runtime, "cli-d", "crash it", approve=False)
    assert state.reply == "Left alone."
    assert tool_messages(fake)[0].startswith("error (denied)")
    fake.script(ToolCalls([("c2", "fake__pid", {})]), Text("done"))
    await approved(runtime, "cli-d", "which pid")
    assert tool_messages(fake)[-1] == str(started_pids(pids)[0])  # never crashed: one process
    assert len(started_pids(pids)) == 1


async def test_allow_runs_it_without_asking(fake: FakeOpenAI, runtime: Runtime) -> None:
    for command in ("/allow fake__echo", "/allow other__echo"):
        await runtime.router.submit(Inbound(ANN, "cli-al", command))
    # A configured server's tools may be allowed before it ever ran; another server's not.
    assert (await runtime.store.require("cli-al")).allowed_tools == {"fake__echo"}
    fake.script(ToolCalls([("c1", "fake__echo", {"text": "unasked"})]), Text("ok"))
    state = await ran(runtime, "cli-al", "echo")
    assert state.reply == "ok" and tool_messages(fake) == ["unasked"]
    assert not any(e.kind == "confirm" for e in state.events)


async def test_tool_error_is_a_failed_call_remembered(fake: FakeOpenAI, runtime: Runtime) -> None:
    await runtime.router.submit(Inbound(ANN, "cli-e", "/allow fake__fail"))
    call = ToolCalls([("c1", "fake__fail", {"reason": "disk full"})])
    fake.script(call, Text("It failed."))
    await ran(runtime, "cli-e", "try")
    assert tool_messages(fake)[0].startswith("error (error):")
    assert "disk full" in tool_messages(fake)[0]
    # The same call again is told of the failure first (error memory), not run.
    fake.script(ToolCalls([("c2", "fake__fail", {"reason": "disk full"})]), Text("Still."))
    await ran(runtime, "cli-e", "again")
    assert "failed" in tool_messages(fake)[-1] and "disk full" in tool_messages(fake)[-1]


async def test_picture_parts_are_described(fake: FakeOpenAI, runtime: Runtime) -> None:
    await runtime.router.submit(Inbound(ANN, "cli-p", "/allow fake__picture"))
    fake.script(ToolCalls([("c1", "fake__picture", {})]), Text("ok"))
    await ran(runtime, "cli-p", "picture")
    (result,) = tool_messages(fake)
    assert result.startswith("a red pixel\n[image, image/png,") and "not shown" in result


async def test_a_changed_tool_list_is_listed_again(fake: FakeOpenAI, runtime: Runtime) -> None:
    await runtime.router.submit(Inbound(ANN, "cli-g", "/allow fake__grow"))
    fake.script(ToolCalls([("c1", "fake__grow", {})]), Text("grown"))
    await ran(runtime, "cli-g", "grow")
    assert "fake__extra" not in {t["function"]["name"] for t in fake.requests[0]["tools"]}
    assert runtime.mcp is not None
    server = runtime.mcp.servers["fake"]  # type: ignore[attr-defined]

    async def unlisted() -> bool:
        return not server.listed

    assert await wait_until(unlisted, within=10)
    fake.script(Text("ok"))
    await ran(runtime, "cli-g", "what now")
    assert "fake__extra" in {t["function"]["name"] for t in fake.requests[-1]["tools"]}


async def test_a_crashed_server_is_started_again_on_the_next_call(
    fake: FakeOpenAI, runtime: Runtime, pids: Path
) -> None:
    for tool in ("fake__crash", "fake__pid"):
        await runtime.router.submit(Inbound(ANN, "cli-c", f"/allow {tool}"))
    fake.script(ToolCalls([("c1", "fake__crash", {})]), Text("It crashed."))
    assert (await ran(runtime, "cli-c", "crash")).reply == "It crashed."
    assert "stopped during the call" in tool_messages(fake)[0]
    first = started_pids(pids)[0]
    assert await wait_gone(first)
    fake.script(ToolCalls([("c2", "fake__pid", {})]), Text("back"))
    assert (await ran(runtime, "cli-c", "pid")).reply == "back"
    assert started_pids(pids) == [first, int(tool_messages(fake)[-1])]


async def test_a_server_that_died_idle_is_started_again_unnoticed(
    fake: FakeOpenAI, runtime: Runtime, pids: Path
) -> None:
    await runtime.router.submit(Inbound(ANN, "cli-i", "/allow fake__pid"))
    fake.script(Text("started"))
    await ran(runtime, "cli-i", "start it")
    (first,) = started_pids(pids)
    os.kill(first, signal.SIGKILL)
    assert runtime.mcp is not None
    server = runtime.mcp.servers["fake"]  # type: ignore[attr-defined]

    async def noticed() -> bool:
        return not server.running

    assert await wait_until(noticed, within=10)
    fake.script(ToolCalls([("c1", "fake__pid", {})]), Text("back"))
    await ran(runtime, "cli-i", "pid")
    second = started_pids(pids)[-1]
    assert tool_messages(fake) == [str(second)] and second != first


async def test_a_server_that_cannot_start_is_left_out_for_a_while(
    fake: FakeOpenAI, tmp_path: Path, pids: Path
) -> None:
    write_config(tmp_path / "home", {"fake": stdio_server(pids, FAKE_MCP_EXIT="broken")})
    rt = await start(fake, tmp_path / "home")
    try:
        fake.script(Text("without it"), Text("still without it"))
        assert (await ran(rt, "cli-x", "hi")).reply == "without it"
        assert len(started_pids(pids)) == START_ATTEMPTS
        names = {t["function"]["name"] for t in fake.requests[-1]["tools"]}
        assert "read_file" in names and not any(n.startswith("fake__") for n in names)
        assert (await ran(rt, "cli-x", "again")).reply == "still without it"
        assert len(started_pids(pids)) == START_ATTEMPTS  # not tried again so soon
    finally:
        await rt.close()


async def test_servers_stop_with_the_gateway_and_keep_no_secrets(
    fake: FakeOpenAI, tmp_path: Path, pids: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENVOY_TELEGRAM_TOKEN", "12345:gateway-secret")
    write_config(tmp_path / "home", {"fake": stdio_server(pids, GIVEN="by the config")})
    configure_logging("INFO")  # the tests log warnings only; a server's stderr is info
    with capture_logs() as logs:
        rt = await start(fake, tmp_path / "home")
        try:
            for tool in ("fake__env", "fake__pid"):
                await rt.router.submit(Inbound(ANN, "cli-s", f"/allow {tool}"))
            fake.script(
                ToolCalls(
                    [
                        ("c1", "fake__env", {"name": "AGENVOY_TELEGRAM_TOKEN"}),
                        ("c2", "fake__env", {"name": "GIVEN"}),
                        ("c3", "fake__env", {"name": "PATH"}),
                    ]
                ),
                Text("ok"),
            )
            await ran(rt, "cli-s", "env")
            secret, given, path = tool_messages(fake)
            assert (secret, given) == ("(unset)", "by the config") and path != "(unset)"
        finally:
            await rt.close()
            configure_logging("WARNING")
    (pid,) = started_pids(pids)
    assert await wait_gone(pid, within=0.5)  # close() waited for it
    # Its stderr went to the log, not the terminal.
    lines = [e.get("line") for e in logs if e["event"] == "MCP server stderr"]
    assert f"fake mcp server up {pid}" in lines


async def test_a_streamable_http_server(fake: FakeOpenAI, tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    write_config(tmp_path / "home", {"remote": {"url": url, "headers": {"X-Test": "given"}}})
    server = await serve_http(port)
    rt = await start(fake, tmp_path / "home")
    try:
        for tool in ("remote__add", "remote__header"):
            await rt.router.submit(Inbound(ANN, "cli-h", f"/allow {tool}"))
        fake.script(ToolCalls([("c1", "remote__header", {"name": "X-Test"})]), Text("sent"))
        assert (await ran(rt, "cli-h", "header")).reply == "sent"
        assert tool_messages(fake) == ["given"]
        # The server goes away and comes back: the next call reaches the new one.
        server.kill()
        await server.wait()
        assert rt.mcp is not None
        remote = rt.mcp.servers["remote"]  # type: ignore[attr-defined]

        async def noticed() -> bool:
            return not remote.running

        assert await wait_until(noticed, within=10)
        server = await serve_http(port)
        fake.script(ToolCalls([("c2", "remote__add", {"a": 1, "b": 2})]), Text("3"))
        assert (await ran(rt, "cli-h", "add")).reply == "3"
        assert tool_messages(fake) == ["3"]
    finally:
        await rt.close()
        server.kill()
        await server.wait()


async def serve_http(port: int) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SERVER), "--http", str(port), stderr=asyncio.subprocess.DEVNULL
    )
    await wait_listening(port)
    return proc


async def wait_listening(port: int, within: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            assert asyncio.get_running_loop().time() < deadline, "the MCP server never listened"
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return


async def test_the_claude_agent_gets_them_too(tmp_path: Path, pids: Path) -> None:
    write_config(tmp_path / "home", {"fake": stdio_server(pids)})
    async with FakeAnthropic() as anthropic:
        rt = await Runtime.start(settings_for(anthropic, tmp_path / "home"))
        try:
            anthropic.script(
                ToolUse([("toolu_1", "fake__add", {"a": 1, "b": 1})]), AnthropicText("Two.")
            )
            assert (await approved(rt, "cli-cl", "add")).reply == "Two."
            tools = [t["name"] for t in anthropic.requests[0]["tools"]]
            assert "fake__add" in tools and "read_file" in tools
            # The cache breakpoint stays on the last tool, now an MCP server's.
            assert "cache_control" in anthropic.requests[0]["tools"][-1]
            (_, results) = anthropic.requests[-1]["messages"][-2:]
            assert results["content"][0]["content"] == "2"
        finally:
            await rt.close()


async def test_a_slow_call_times_out(fake: FakeOpenAI, tmp_path: Path, pids: Path) -> None:
    write_config(tmp_path / "home", {"fake": stdio_server(pids)})
    rt = await start(fake, tmp_path / "home", mcp_call_timeout_seconds=0.5)
    try:
        for tool in ("fake__nap", "fake__add"):
            await rt.router.submit(Inbound(ANN, "cli-t", f"/allow {tool}"))
        fake.script(ToolCalls([("c1", "fake__nap", {"seconds": 30})]), Text("Too slow."))
        assert (await ran(rt, "cli-t", "nap")).reply == "Too slow."
        assert "did not answer within 0.5 s" in tool_messages(fake)[0]
        # The server stays up for the next call.
        fake.script(ToolCalls([("c2", "fake__add", {"a": 1, "b": 1})]), Text("ok"))
        await ran(rt, "cli-t", "add")
        assert tool_messages(fake) == ["2"] and len(started_pids(pids)) == 1
    finally:
        await rt.close()
