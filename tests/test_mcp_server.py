"""The gateway as an MCP server, driven by the MCP SDK's own client: over `/mcp` with per-user
tokens, and over stdio through `agenvoy mcp` run as a real process. Callers act as their
credential says and under the same rules as the HTTP routes."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from clock import FakeClock
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from support import wait_until
from test_http import Server, bearer, serving

from gateway.ownership import ShareMode

TOOLS = {
    "list_sessions",
    "read_history",
    "search_history",
    "send_message",
    "get_task",
    "list_pending",
    "answer_prompt",
}


@asynccontextmanager
async def mcp_client(srv: Server, headers: dict[str, str]) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(str(srv.url("/mcp")), http_client=http)
        async with Client(transport) as client:
            yield client


async def call(client: Client, tool: str, **arguments: Any) -> tuple[bool, Any]:
    """(whether the tool failed, what it answered: the JSON, or the error text)."""
    result = await client.call_tool(tool, arguments)
    text = "".join(getattr(part, "text", "") for part in result.content)
    if result.is_error:
        return True, text
    assert result.structured_content == json.loads(text)
    return False, json.loads(text)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(tmp_path) as srv:
        yield srv


async def test_tools_are_listed_with_their_argument_schemas(server: Server) -> None:
    async with mcp_client(server, bearer("ann")) as ann:
        listed = {tool.name: tool for tool in (await ann.list_tools()).tools}
    assert set(listed) == TOOLS
    send = listed["send_message"].input_schema
    assert "content" in send["required"] and send["additionalProperties"] is False
    reading, answering = listed["read_history"].annotations, listed["answer_prompt"].annotations
    assert reading is not None and reading.read_only_hint is True
    assert answering is not None and answering.read_only_hint is False


async def test_send_read_search_and_list_as_the_caller(server: Server) -> None:
    async with mcp_client(server, bearer("ann")) as ann:
        failed, sent = await call(ann, "send_message", content="hello over mcp", persist=True)
        assert not failed, sent
        assert sent["status"] == "done" and sent["text"] == "echo: hello over mcp"
        sid = sent["session_id"]
        assert sid.startswith("chat-")

        failed, history = await call(ann, "read_history", session_id=sid)
        assert not failed
        said = [(m["role"], m["sender"], m["content"]) for m in history["messages"]]
        assert said == [("user", "Ann", "hello over mcp"), ("assistant", "offline", sent["text"])]

        failed, found = await call(ann, "search_history", query="hello")
        assert not failed and {m["session_id"] for m in found["results"]} == {sid}

        failed, sessions = await call(ann, "list_sessions", prefix="chat")
        assert not failed
        assert [s["session_id"] for s in sessions["sessions"]] == [sid]
        assert sessions["sessions"][0]["message_count"] == 2

        failed, command = await call(ann, "send_message", content="/help", session_id=sid)
        assert not failed and command["command"] == "help" and command["ok"] is True


async def test_prompts_are_answered_only_by_the_requester_or_an_admin(server: Server) -> None:
    async with (
        mcp_client(server, bearer("ann")) as ann,
        mcp_client(server, bearer("bob")) as bob,
        mcp_client(server, bearer("root")) as root,
    ):
        failed, sent = await call(ann, "send_message", content="!confirm deploy", persist=True)
        assert not failed and sent["status"] == "waiting", sent
        prompt = sent["pending"]
        assert prompt["tool"] == "demo_action" and prompt["origin"]["sender_id"] == "ann"
        sid, task = sent["session_id"], sent["task_hash"]

        # Bob, shared in to write, neither sees it nor may answer it; the admin sees it.
        await server.share(sid, "bob", by=bearer("ann"))
        assert (await call(bob, "list_pending"))[1]["pending"] == []
        failed, refused = await call(
            bob, "answer_prompt", session_id=sid, task_hash=task, approve=True
        )
        assert failed and refused.startswith("not_allowed:"), refused
        seen = (await call(root, "list_pending", session_id=sid))[1]["pending"]
        assert [p["task_hash"] for p in seen] == [task]

        failed, answered = await call(
            ann, "answer_prompt", session_id=sid, task_hash=task, approve=True
        )
        assert not failed and answered == {"answered": True, "approved": True, "by": "Ann"}
        failed, done = await call(ann, "get_task", session_id=sid, task_hash=task, wait=10)
        assert not failed and done["status"] == "done" and done["text"] == "approved: deploy"


async def test_bad_arguments_get_clear_errors_and_store_nothing(server: Server) -> None:
    async with mcp_client(server, bearer("ann")) as ann:
        cases: dict[str, dict[str, Any]] = {
            "unknown argument 'sender'": {"content": "hi", "sender": "root"},
            "argument 'content'": {"content": ""},
            "bad_text": {"content": "a\x00b"},
            "bad_session_id": {"content": "hi", "session_id": "../etc"},
            "argument 'wait'": {"content": "hi", "wait": 301},
        }
        for expected, arguments in cases.items():
            failed, said = await call(ann, "send_message", **arguments)
            assert failed and expected in said, (arguments, said)
        failed, said = await call(ann, "answer_prompt", session_id="cli-x", task_hash="ab")
        assert failed and said.startswith("bad_request:"), said
        failed, said = await call(ann, "read_history", session_id="chat-nobody")
        assert failed and said.startswith("not_found:"), said
        failed, said = await call(ann, "no_such_tool")
        assert failed and "no tool named" in said
        assert (await call(ann, "list_sessions"))[1]["sessions"] == []


async def test_the_endpoint_needs_a_valid_token(server: Server) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    async with server.client.post(
        server.url("/mcp"), json=body, headers={**headers, "Authorization": ""}
    ) as resp:
        assert resp.status == 401
    forged = {**headers, "Authorization": "Bearer agv_forged", "X-Agenvoy-Sender": "root"}
    async with server.client.post(server.url("/mcp"), json=body, headers=forged) as resp:
        assert resp.status == 403
    async with server.client.post(
        server.url("/mcp"), json=body, headers={**headers, "Origin": "https://evil.example"}
    ) as resp:
        assert resp.status == 403 and (await resp.json())["error"]["code"] == "cross_origin"


def agenvoy_command() -> list[str]:
    found = shutil.which("agenvoy", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "gateway.cli"]


def stdio_params(srv: Server) -> StdioServerParameters:
    command, *args = agenvoy_command()
    settings = srv.runtime.settings
    port = str(srv.url("").port)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", ""),
        "USER": "ann",
        "LOGNAME": "ann",
        "AGENVOY_HOME": str(settings.home),
        "AGENVOY_HTTP_PORT": port,
    }
    return StdioServerParameters(command=command, args=[*args, "mcp"], env=env, cwd=settings.home)


async def test_stdio_relay_signs_in_as_the_local_user(server: Server) -> None:
    async with Client(stdio_params(server)) as local:
        assert {tool.name for tool in (await local.list_tools()).tools} == TOOLS
        failed, sent = await call(local, "send_message", content="!confirm ship", persist=True)
        assert not failed and sent["status"] == "waiting", sent
        origin = sent["pending"]["origin"]
        assert (origin["platform"], origin["sender_id"]) == ("terminal", "ann")
        sid, task = sent["session_id"], sent["task_hash"]
        # The HTTP caller "ann" is someone else: shared in, still only the local user answers.
        await server.runtime.store.ownership.share(sid, "http:ann", ShareMode.write)
        async with mcp_client(server, bearer("ann")) as http_ann:
            failed, refused = await call(
                http_ann, "answer_prompt", session_id=sid, task_hash=task, approve=False
            )
            assert failed and refused.startswith("not_allowed:")
        failed, answered = await call(
            local, "answer_prompt", session_id=sid, task_hash=task, approve=False
        )
        assert not failed and answered["approved"] is False
        failed, done = await call(local, "get_task", session_id=sid, task_hash=task, wait=10)
        assert not failed and done["text"].startswith("denied"), done


async def test_stdio_relay_says_when_the_gateway_is_down(tmp_path: Path) -> None:
    async with serving(tmp_path) as srv:
        params = stdio_params(srv)
    # The gateway is gone: the request is answered with the reason, not left waiting.
    with pytest.raises(Exception) as caught:
        async with Client(params, read_timeout_seconds=20):
            pass
    assert "cannot be reached" in repr(caught.value), repr(caught.value)


async def test_stdio_relay_answers_garbage_and_keeps_going(server: Server) -> None:
    params = stdio_params(server)
    process = await asyncio.create_subprocess_exec(
        params.command,
        *params.args,
        env=params.env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
    process.stdin.write(b"not json\n[1, 2]\n\n" + json.dumps(ping).encode() + b"\n")
    await process.stdin.drain()
    answers = [json.loads(await asyncio.wait_for(process.stdout.readline(), 20)) for _ in range(3)]
    process.stdin.close()
    assert await asyncio.wait_for(process.wait(), 20) == 0
    errors = sorted(a["error"]["code"] for a in answers if "error" in a)
    assert errors == [-32700, -32600]
    assert [a for a in answers if a.get("id") == 7] == [{"jsonrpc": "2.0", "id": 7, "result": {}}]


async def test_a_shutdown_answers_a_waiting_send_with_where_to_ask_again(tmp_path: Path) -> None:
    clock = FakeClock()  # `!sleep` never ends unless the test moves the clock
    async with serving(tmp_path, clock) as srv, mcp_client(srv, bearer("ann")) as ann:
        sending = asyncio.create_task(call(ann, "send_message", content="!sleep 60"))

        async def running() -> bool:
            return any(
                srv.runtime.router.running_task(s.id)
                for s in await srv.runtime.store.list_sessions()
            )

        assert await wait_until(running, within=10)
        await srv.runner.shutdown()
        failed, said = await asyncio.wait_for(sending, 10)
    assert failed and said.startswith("restarting:"), said
    assert "call get_task with session_id temp-" in said
