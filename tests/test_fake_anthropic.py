"""The fake Messages API itself: the documented event order, its cache arithmetic, and the
requests it refuses as the real API does. The claude agent's tests lean on all three."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from fakes.anthropic import Error, FakeAnthropic, Text, ToolUse
from fakes.anthropic.cache import PromptCache
from fakes.anthropic.checks import Invalid, check_request, signature

HEADERS = {"anthropic-version": "2023-06-01"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


async def post(fake: FakeAnthropic, body: dict[str, Any], key: str = "") -> tuple[int, str]:
    headers = {**HEADERS, "x-api-key": key or fake.api_key}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{fake.url}/v1/messages", json=body, headers=headers) as resp,
    ):
        return resp.status, await resp.text()


def events(raw: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for frame in raw.strip().split("\n\n"):
        name, data = frame.split("\n")
        assert name.startswith("event: ") and data.startswith("data: ")
        event = json.loads(data[6:])
        assert event["type"] == name[7:]  # the event line names the data's own type
        found.append((name[7:], event))
    return found


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text, **extra}]}


async def test_stream_follows_the_documented_order(fake: FakeAnthropic) -> None:
    fake.script(ToolUse([("toolu_1", "read_file", {"name": "a.txt"})], text="Looking."))
    body = {"model": "m", "max_tokens": 2000, "stream": True, "messages": [user("hi there")]}
    body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    status, raw = await post(fake, body)
    assert status == 200
    stream = events(raw)
    kinds = [k for k, _ in stream]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[2] == "ping"
    starts = [e["content_block"]["type"] for k, e in stream if k == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    deltas = {e["delta"]["type"] for k, e in stream if k == "content_block_delta"}
    assert deltas == {"thinking_delta", "signature_delta", "text_delta", "input_json_delta"}
    fragments = [
        e["delta"]["partial_json"]
        for k, e in stream
        if k == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
    ]
    assert json.loads("".join(fragments)) == {"name": "a.txt"} and len(fragments) >= 2
    usage = stream[0][1]["message"]["usage"]
    assert set(usage) == {
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
        "output_tokens",
    }
    assert stream[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_refusals(fake: FakeAnthropic) -> None:
    status, raw = await post(fake, {"model": "m", "max_tokens": 5, "messages": []}, key="nope")
    assert status == 401 and json.loads(raw)["error"]["type"] == "authentication_error"
    status, raw = await post(fake, {"model": "m", "max_tokens": 5, "messages": []})
    assert status == 400 and json.loads(raw)["error"]["type"] == "invalid_request_error"
    assert fake.requests == []  # refused requests are not recorded
    fake.script(Text("plain"))
    status, raw = await post(fake, {"model": "m", "max_tokens": 5, "messages": [user("x")]})
    assert status == 200 and json.loads(raw)["content"] == [{"type": "text", "text": "plain"}]


def test_cache_reads_the_longest_cached_prefix() -> None:
    cache = PromptCache()
    marked = {"cache_control": {"type": "ephemeral"}}
    system = [{"type": "text", "text": "one two three", **marked}]
    first = {"system": system, "messages": [user("four five", **marked)]}
    use = cache.use(first)
    assert (use.read, use.written, use.uncached) == (0, 5, 0)
    second = {
        "system": system,
        "messages": [
            user("four five"),
            {"role": "assistant", "content": "six"},
            user("seven eight nine", **marked),
        ],
    }
    use = cache.use(second)
    assert (use.read, use.written, use.uncached) == (5, 4, 0)
    changed = {"system": system, "messages": [user("other words here")]}
    use = cache.use(changed)  # only the system breakpoint's prefix matches
    assert (use.read, use.written, use.uncached) == (3, 0, 3)
    unmarked = {"system": [{"type": "text", "text": "one two three"}], "messages": [user("x")]}
    assert cache.use(unmarked).read == 0  # no breakpoint: no cache at all


def test_short_prefixes_are_not_cached() -> None:
    cache = PromptCache(min_tokens=10)
    body = {"messages": [user("too short", cache_control={"type": "ephemeral"})]}
    assert cache.use(body).written == 0 and cache.use(body).read == 0


def test_checks_the_api_would_make() -> None:
    mark = {"cache_control": {"type": "ephemeral"}}
    base: dict[str, Any] = {"model": "m", "max_tokens": 4096}
    with pytest.raises(Invalid, match="maximum of 4"):
        check_request({**base, "messages": [user(str(i), **mark) for i in range(5)]})
    with pytest.raises(Invalid, match="non-empty"):
        check_request({**base, "messages": [user("")]})
    with pytest.raises(Invalid, match="first message"):
        check_request({**base, "messages": [{"role": "assistant", "content": "hi"}]})
    with pytest.raises(Invalid, match=r"greater than `thinking\.budget_tokens`"):
        thinks = {"type": "enabled", "budget_tokens": 4096}
        check_request({**base, "thinking": thinks, "messages": [user("a")]})
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]}
    with pytest.raises(Invalid, match="without `tool_result`"):
        asked = {"role": "assistant", "content": [use]}
        check_request({**base, "messages": [user("a"), asked, user("b")]})
    with pytest.raises(Invalid, match="corresponding `tool_use`"):
        check_request({**base, "messages": [user("a"), result]})
    thinking = {**base, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    loop = [user("a"), {"role": "assistant", "content": [use]}, result]
    with pytest.raises(Invalid, match=r"must start\s+with a thinking block"):
        check_request({**thinking, "messages": loop})
    signed = {"type": "thinking", "thinking": "hmm", "signature": signature("hmm")}
    loop[1] = {"role": "assistant", "content": [signed, use]}
    check_request({**thinking, "messages": loop})
    loop[1] = {"role": "assistant", "content": [{**signed, "thinking": "edited"}, use]}
    with pytest.raises(Invalid, match="Invalid `signature`"):
        check_request({**thinking, "messages": loop})


async def test_refusal_outlasts_retries_and_leaves_the_script(fake: FakeAnthropic) -> None:
    fake.script(Text("fresh answer here"))
    fake.refuse(lambda body: len(body["messages"]) > 1, Error(400, "conversation refused"))
    resumed = [user("hi"), {"role": "assistant", "content": "hello"}, user("again")]
    for _ in range(3):  # however often a client tries again
        status, raw = await post(fake, {"model": "m", "max_tokens": 10, "messages": resumed})
        assert status == 400 and "conversation refused" in raw
    status, raw = await post(fake, {"model": "m", "max_tokens": 10, "messages": [user("hi")]})
    assert status == 200 and json.loads(raw)["content"][0]["text"] == "fresh answer here"
    assert fake.output_counts == [3]  # only answers count: three words


async def test_adaptive_thinking_answers_with_a_thinking_block(fake: FakeAnthropic) -> None:
    fake.script(Text("done", thinking="Pondering."))
    body = {"model": "m", "max_tokens": 100, "messages": [user("hi")]}
    status, raw = await post(fake, {**body, "thinking": {"type": "adaptive"}})
    assert status == 200
    assert [b["type"] for b in json.loads(raw)["content"]] == ["thinking", "text"]
