"""Semantic recall with the openai agent against the fake server: embeddings from its
`/v1/embeddings`, the recalled messages in the model's context, and the `recall` tool."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fakes.openai import DEFAULT_EMBEDDING_MODEL, FakeOpenAI, Text, ToolCalls

from gateway.events import Inbound, Origin
from gateway.memory.recalled import RECALL_HEADER
from gateway.runtime import Runtime
from gateway.settings import Settings

ANN = Origin("http", sender_id="ann", sender_name="Ann")
BOB = Origin("http", sender_id="bob", sender_name="Bob")
FILLER = [
    "the weather was cloudy all afternoon",
    "we should order pizza for the meeting",
    "the train to Lyon leaves at nine",
    "remember to water the plants",
    "the printer on floor two is jammed",
    "lunch is at noon on Friday",
]


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def runtime(fake: FakeOpenAI, tmp_path: Path) -> AsyncIterator[Runtime]:
    settings = Settings(
        home=tmp_path / "home",
        agent="openai",
        openai_base_url=fake.url,
        openai_api_key=fake.api_key,
        model="fake-model",
        embedding_model=DEFAULT_EMBEDDING_MODEL,
        history_window=4,
        recall_count=2,
        _env_file=None,
    )
    rt = await Runtime.start(settings)
    try:
        yield rt
    finally:
        await rt.close()


async def test_the_model_sees_an_old_message_and_can_recall_more(
    fake: FakeOpenAI, runtime: Runtime
) -> None:
    assert runtime.memory is not None
    for sid in ("tg--1", "tg--2"):
        await runtime.store.ensure(sid)
    router = runtime.router
    await router.record(Inbound(BOB, "tg--1", "the wifi password is lobster42"))
    await router.record(Inbound(BOB, "tg--2", "the wifi password is zebra9"))
    for line in FILLER:
        await router.record(Inbound(ANN, "tg--1", line))
    assert await runtime.memory.indexer.embed_due() == len(FILLER) + 2

    fake.script(
        ToolCalls([("call_1", "recall", {"query": "wifi password"})]),
        Text("It is lobster42."),
    )
    sub = await router.submit(Inbound(ANN, "tg--1", "what is the wifi password?"))
    state = await router.wait(sub.task_hash, 15)
    assert state.reply == "It is lobster42."

    first = fake.requests[0]["messages"]
    notes = [m["content"] for m in first if m["role"] == "system" and RECALL_HEADER in m["content"]]
    assert len(notes) == 1, first
    # With sender and date, just before the new message; never the other chat's password.
    assert "] Bob: the wifi password is lobster42" in notes[0]
    assert "zebra9" not in json.dumps(first)
    assert first[-2]["content"] == notes[0]
    # The window still holds the last four fillers: those are not recalled.
    assert FILLER[-1] not in notes[0]

    tool_message = next(m for m in fake.requests[1]["messages"] if m["role"] == "tool")
    found = json.loads(tool_message["content"])
    assert [f["content"] for f in found][:1] == ["the wifi password is lobster42"]
    assert all("zebra9" not in f["content"] for f in found)
    assert {f["sender"] for f in found} <= {"Bob", "Ann"}
    # Each message is embedded once, whatever the job and the searches did meanwhile.
    embedded = [t for r in fake.embedding_requests for t in r["input"]]
    assert embedded.count("the wifi password is lobster42") == 1


def test_the_claude_agent_reads_recalled_messages_first_in_the_new_turn() -> None:
    from types import SimpleNamespace

    from gateway.agents.anthropic import conversation, with_breakpoint
    from gateway.memory.recalled import Recalled
    from gateway.store.sessions import StoredMessage

    old = Recalled(
        7, "message", "user", "Bob", "the wifi password is lobster42", 1_700_000_000_000, 0.8
    )
    ctx = SimpleNamespace(
        history=[StoredMessage(0, "tg--1", "user", "lunch?", "Ann", 0)],
        origin=ANN,
        text="what is the wifi password?",
        recalled=[old],
        member_memories=[],
        knowledge=[],
    )
    turns = with_breakpoint(conversation(ctx))
    blocks = turns[-1]["content"]
    assert RECALL_HEADER in blocks[-2]["text"]
    assert "[2023-11-14 22:13 UTC] Bob: the wifi password is lobster42" in blocks[-2]["text"]
    assert blocks[-1]["text"] == "Ann: what is the wifi password?"
    assert "cache_control" in blocks[-1]
    # Without anything recalled the turn is as before.
    ctx.recalled = []
    assert [b["text"] for b in conversation(ctx)[-1]["content"]] == [
        "Ann: lunch?",
        "Ann: what is the wifi password?",
    ]
