"""The fake OpenAI chat-completions server, driven by a plain aiohttp client."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from fakes.openai import (
    CHAT_ROUTE,
    NO_SCRIPTED_REPLY,
    Error,
    FakeOpenAI,
    Malformed,
    Slow,
    Text,
    ToolCalls,
)

WAIT = 5.0
JSON = dict[str, Any]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=WAIT), trust_env=False
    ) as client:
        yield client


def _body(text: str = "say hello please", **extra: Any) -> JSON:
    return {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "you are terse"},
            {"role": "user", "content": text},
        ],
        **extra,
    }


async def _post(
    session: aiohttp.ClientSession, fake: FakeOpenAI, body: JSON, key: str | None = None
) -> aiohttp.ClientResponse:
    return await session.post(
        f"{fake.url}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key if key is not None else fake.api_key}"},
    )


async def _events(response: aiohttp.ClientResponse) -> list[str]:
    """The ``data:`` payloads of a server-sent-events answer, in order."""
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/event-stream")
    raw = await response.text()
    frames = [f for f in raw.split("\n\n") if f]
    assert all(f.startswith("data: ") for f in frames), frames
    return [f.removeprefix("data: ") for f in frames]


def _chunks(events: list[str]) -> list[JSON]:
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def _tool_calls(chunks: list[JSON]) -> dict[int, JSON]:
    calls: dict[int, JSON] = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            for fragment in choice["delta"].get("tool_calls", []):
                call = calls.setdefault(fragment["index"], {"name": "", "arguments": ""})
                if "id" in fragment:
                    call["id"] = fragment["id"]
                    call["type"] = fragment["type"]
                function = fragment.get("function", {})
                call["name"] += function.get("name", "")
                call["arguments"] += function.get("arguments", "")
    return calls


async def test_non_streaming_text_with_usage(
    fake: FakeOpenAI, session: aiohttp.ClientSession
) -> None:
    assert fake.url.startswith("http://127.0.0.1:") and fake.url.endswith("/v1")
    assert fake.api_key == "sk-test-fake"
    fake.script(Text("hello there world"))
    async with await _post(session, fake, _body()) as response:
        assert response.status == 200
        data = await response.json()
    assert data["object"] == "chat.completion"
    assert data["model"] == "gpt-test"
    assert data["id"] and isinstance(data["created"], int)
    [choice] = data["choices"]
    assert choice["index"] == 0
    assert choice["message"] == {"role": "assistant", "content": "hello there world"}
    assert choice["finish_reason"] == "stop"
    assert data["usage"] == {
        "prompt_tokens": 6,
        "completion_tokens": 3,
        "total_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    request = await fake.wait_for_request(timeout=WAIT)
    assert request["messages"][1]["content"] == "say hello please"
    assert fake.last_messages() == _body()["messages"]
    assert len(fake.requests) == 1


async def test_usage_override_and_unscripted_default(
    fake: FakeOpenAI, session: aiohttp.ClientSession
) -> None:
    fake.script(
        Text("hi", usage={"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 80}})
    )
    async with await _post(session, fake, _body()) as response:
        data = await response.json()
    assert data["usage"] == {
        "prompt_tokens": 100,
        "completion_tokens": 1,
        "total_tokens": 101,
        "prompt_tokens_details": {"cached_tokens": 80},
    }
    async with await _post(session, fake, _body()) as response:
        data = await response.json()
    assert data["choices"][0]["message"]["content"] == NO_SCRIPTED_REPLY


async def test_non_streaming_tool_calls(fake: FakeOpenAI, session: aiohttp.ClientSession) -> None:
    fake.script(ToolCalls([("call_1", "read_file", {"name": "a.txt"}), ("call_2", "list_dir", {})]))
    async with await _post(session, fake, _body()) as response:
        data = await response.json()
    [choice] = data["choices"]
    assert choice["finish_reason"] == "tool_calls"
    calls = choice["message"]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_1", "call_2"]
    assert all(c["type"] == "function" for c in calls)
    assert calls[0]["function"]["name"] == "read_file"
    assert json.loads(calls[0]["function"]["arguments"]) == {"name": "a.txt"}
    assert data["usage"]["completion_tokens"] == 20


async def test_streaming_text_reassembles(fake: FakeOpenAI, session: aiohttp.ClientSession) -> None:
    text = "The quick  brown fox\njumps over the lazy dog."
    fake.script(Text(text))
    async with await _post(session, fake, _body(stream=True)) as response:
        events = await _events(response)
    chunks = _chunks(events)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all("usage" not in c for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0]["role"] == "assistant"
    assert all("role" not in d for d in deltas[1:])
    content_deltas = [d["content"] for d in deltas if "content" in d]
    assert len(content_deltas) > 3
    assert "".join(content_deltas) == text
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + [
        "stop"
    ]


async def test_streaming_tool_calls_reassemble(
    fake: FakeOpenAI, session: aiohttp.ClientSession
) -> None:
    args_1 = {"name": "notes/a long file name.txt", "encoding": "utf-8"}
    args_2 = {"path": "."}
    fake.script(ToolCalls([("call_1", "read_file", args_1), ("call_2", "list_dir", args_2)]))
    async with await _post(session, fake, _body(stream=True)) as response:
        chunks = _chunks(await _events(response))
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    calls = _tool_calls(chunks)
    assert calls == {
        0: {
            "id": "call_1",
            "type": "function",
            "name": "read_file",
            "arguments": calls[0]["arguments"],
        },
        1: {
            "id": "call_2",
            "type": "function",
            "name": "list_dir",
            "arguments": calls[1]["arguments"],
        },
    }
    assert json.loads(calls[0]["arguments"]) == args_1
    assert json.loads(calls[1]["arguments"]) == args_2
    for index in (0, 1):
        fragments = [
            f
            for c in chunks
            for f in c["choices"][0]["delta"].get("tool_calls", [])
            if f["index"] == index and f.get("function", {}).get("arguments")
        ]
        assert len(fragments) >= 2, f"arguments of call {index} not split"


async def test_single_streaming_tool_call(fake: FakeOpenAI, session: aiohttp.ClientSession) -> None:
    fake.script(ToolCalls([("call_9", "now", {})]))
    async with await _post(session, fake, _body(stream=True)) as response:
        calls = _tool_calls(_chunks(await _events(response)))
    assert list(calls) == [0]
    assert calls[0]["id"] == "call_9" and json.loads(calls[0]["arguments"]) == {}


async def test_wrong_key_is_401(fake: FakeOpenAI, session: aiohttp.ClientSession) -> None:
    fake.script(Text("never sent"))
    async with await _post(session, fake, _body(), key="sk-wrong") as response:
        assert response.status == 401
        data = await response.json()
    assert data["error"]["message"] == "Incorrect API key provided"
    assert data["error"]["type"] == "invalid_request_error"
    assert data["error"]["code"] == "invalid_api_key"
    async with session.post(f"{fake.url}/chat/completions", json=_body()) as response:
        assert response.status == 401
    assert fake.requests == []
    assert fake.pending == 1


async def test_429_with_retry_after(fake: FakeOpenAI, session: aiohttp.ClientSession) -> None:
    fake.script(Error(429, "Rate limit reached", retry_after=2), Text("ok"))
    async with await _post(session, fake, _body()) as response:
        assert response.status == 429
        assert response.headers["Retry-After"] == "2"
        data = await response.json()
    assert data["error"]["message"] == "Rate limit reached"
    assert data["error"]["code"] == "rate_limit_exceeded"
    async with await _post(session, fake, _body()) as response:
        assert response.status == 200
        assert (await response.json())["choices"][0]["message"]["content"] == "ok"
    assert len(fake.requests) == 2


async def test_500_error(fake: FakeOpenAI, session: aiohttp.ClientSession) -> None:
    fake.script(Error(500, "The server had an error"))
    async with await _post(session, fake, _body(stream=True)) as response:
        assert response.status == 500
        assert "Retry-After" not in response.headers
        data = await response.json()
    assert data["error"]["type"] == "server_error"
    assert data["error"]["message"] == "The server had an error"


async def test_dropped_connections_leave_the_script_alone(
    fake: FakeOpenAI, session: aiohttp.ClientSession
) -> None:
    fake.script(Text("first"), Text("second"))
    fake.drop_next(CHAT_ROUTE, times=2, when=lambda body: body["messages"][-1]["content"] == "x")
    async with await _post(session, fake, _body("kept")) as response:
        assert (await response.json())["choices"][0]["message"]["content"] == "first"
    for _ in range(2):
        with pytest.raises(aiohttp.ClientConnectionError):
            await _post(session, fake, _body("x"))
    async with await _post(session, fake, _body("x")) as response:
        assert (await response.json())["choices"][0]["message"]["content"] == "second"
    assert [r.dropped for r in fake.call_log] == [False, True, True, False]
    dropped = await fake.wait_for_record(CHAT_ROUTE, ok=False, timeout=WAIT)
    assert dropped.status is None and dropped.data["messages"][-1]["content"] == "x"


async def test_malformed_chunk_in_stream(fake: FakeOpenAI, session: aiohttp.ClientSession) -> None:
    fake.script(Malformed(text="still here"))
    async with await _post(session, fake, _body(stream=True)) as response:
        events = await _events(response)
    assert events[-1] == "[DONE]"
    bad = []
    good = []
    for event in events[:-1]:
        try:
            good.append(json.loads(event))
        except ValueError:
            bad.append(event)
    assert len(bad) == 1
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in good) == "still here"


async def test_include_usage_only_when_requested(
    fake: FakeOpenAI, session: aiohttp.ClientSession
) -> None:
    fake.script(Text("one two three"), Text("one two three"))
    options = {"include_usage": True}
    async with await _post(session, fake, _body(stream=True, stream_options=options)) as response:
        with_usage = _chunks(await _events(response))
    last = with_usage[-1]
    assert last["choices"] == []
    assert last["usage"]["completion_tokens"] == 3
    assert last["usage"]["prompt_tokens"] == 6
    assert last["usage"]["total_tokens"] == 9
    assert all(c["choices"] for c in with_usage[:-1])

    async with await _post(session, fake, _body(stream=True)) as response:
        without = _chunks(await _events(response))
    assert all(c["choices"] for c in without)
    assert all(c.get("usage") is None for c in without)


async def test_slow_reply_and_wait_for_request(
    fake: FakeOpenAI, session: aiohttp.ClientSession
) -> None:
    fake.script(Slow(0.3, Text("late")))
    started = time.monotonic()
    task = asyncio.create_task(_post(session, fake, _body("first one")))
    request = await fake.wait_for_request(timeout=WAIT)
    assert request["messages"][-1]["content"] == "first one"
    assert not task.done()
    async with await asyncio.wait_for(task, WAIT) as response:
        assert (await response.json())["choices"][0]["message"]["content"] == "late"
    assert time.monotonic() - started >= 0.3
    with pytest.raises(AssertionError):
        await fake.wait_for_request(timeout=0.1)


async def test_wait_for_request_predicate_and_reset(
    fake: FakeOpenAI, session: aiohttp.ClientSession
) -> None:
    for text in ("alpha", "beta"):
        async with await _post(session, fake, _body(text)):
            pass
    beta = await fake.wait_for_request(
        lambda body: body["messages"][-1]["content"] == "beta", timeout=WAIT
    )
    assert beta["messages"][-1]["content"] == "beta"
    alpha = await fake.wait_for_request(timeout=WAIT)
    assert alpha["messages"][-1]["content"] == "alpha"
    fake.script(Text("x"))
    fake.reset()
    assert fake.requests == [] and fake.pending == 0
    with pytest.raises(AssertionError):
        fake.last_messages()
