"""Semantic recall: embeddings by cursor, the per-session index, and what the agents recall —
through the router with the offline agent, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from fakes.openai import DEFAULT_EMBEDDING_MODEL, Error, FakeOpenAI

from gateway.events import Inbound, Origin
from gateway.memory.embedders import LOCAL_MODEL, LocalEmbedder, OpenAIEmbedder
from gateway.memory.index import SessionIndex
from gateway.memory.indexer import Indexer
from gateway.memory.recalled import Recalled
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.vectors import Cursor, Item, VectorArchive

ANN = Origin("http", sender_id="ann", sender_name="Ann")
BOB = Origin("http", sender_id="bob", sender_name="Bob")
FILLER = [
    "the weather was cloudy all afternoon",
    "we should order pizza for the meeting",
    "the train to Lyon leaves at nine",
    "remember to water the plants",
    "the printer on floor two is jammed again",
    "lunch is at noon on Friday",
]


@pytest.fixture
async def runtime(tmp_path: Path, database_url: str) -> AsyncIterator[Runtime]:
    settings = Settings(
        home=tmp_path / "home",
        database_url=database_url,
        history_window=4,
        recall_count=2,
        # These tests are about the mechanics, on the hashed embedder whose vectors they name
        # (LOCAL_MODEL); the local model has tests/test_embeddings_local.py. Its threshold a
        # little lower than its default: it scores "which bicycle do I ride" against the
        # Gazelle message 0.275, and searches drop what is below.
        local_embeddings="off",
        recall_min_score=0.25,
        _env_file=None,
    )
    rt = await Runtime.start(settings)
    try:
        yield rt
    finally:
        await rt.close()


async def say(rt: Runtime, sid: str, text: str, origin: Origin = ANN) -> int:
    message_id = await rt.router.record(Inbound(origin, sid, text))
    assert message_id is not None
    return message_id


async def ask(rt: Runtime, sid: str, text: str) -> str:
    sub = await rt.router.submit(Inbound(ANN, sid, text))
    state = await rt.router.wait(sub.task_hash, 10)
    assert state.finished, state.status
    return state.reply


async def test_offline_agent_recalls_an_old_message_of_its_own_session_only(
    runtime: Runtime,
) -> None:
    assert runtime.memory is not None
    await runtime.store.ensure("cli-mine")
    await runtime.store.ensure("cli-theirs")
    await say(runtime, "cli-mine", "my bicycle is a green Gazelle from 1987", BOB)
    # Another session holds a message closer still to the question: never recalled here.
    await say(runtime, "cli-theirs", "which bicycle do I ride? a red Peugeot bicycle")
    for line in FILLER:
        await say(runtime, "cli-mine", line)
    # Inside the window (the last 4): as close to the question, and not recalled either.
    bell = await say(runtime, "cli-mine", "a bicycle bell rang outside")
    assert await runtime.memory.indexer.embed_due() == len(FILLER) + 3

    reply = await ask(runtime, "cli-mine", "!recall which bicycle do I ride")
    assert reply.startswith("recalled: [")
    assert "Bob: my bicycle is a green Gazelle from 1987" in reply
    assert "Peugeot" not in reply
    assert "bell" not in reply

    # Asked for one, the index of this session gives this session's best: the other
    # session's identical text is not in it (not filtered out after, which would leave none).
    top = await runtime.memory.recall.search(
        "cli-mine", "which bicycle do I ride? a red Peugeot bicycle", 1, before=bell
    )
    assert [r.content for r in top] == ["my bicycle is a green Gazelle from 1987"]
    # The other session's search (no window to leave out) finds its own, not this one's.
    theirs = await runtime.memory.recall.search("cli-theirs", "which bicycle do I ride", 5)
    assert [r.content for r in theirs] == ["which bicycle do I ride? a red Peugeot bicycle"]


async def test_each_message_is_embedded_once_and_a_restart_goes_on(runtime: Runtime) -> None:
    assert runtime.memory is not None
    vectors = runtime.memory.vectors
    await runtime.store.ensure("cli-once")
    for line in FILLER[:3]:
        await say(runtime, "cli-once", line)
    indexer = runtime.memory.indexer
    assert await indexer.embed_due() == 3
    assert await indexer.embed_due() == 0  # nothing new: nothing embedded again
    await say(runtime, "cli-once", FILLER[3])
    # A restarted gateway (a new indexer, knowing nothing) goes on from the stored cursor.
    again = Indexer(vectors, LocalEmbedder())
    assert await again.embed_due() == 1
    assert await again.embed_due() == 0
    rows = await vectors.message_rows("cli-once", LOCAL_MODEL, 0)
    assert len(rows.message_ids) == len(set(rows.message_ids)) == 4


async def test_a_session_longer_than_a_batch_is_embedded_in_full(runtime: Runtime) -> None:
    assert runtime.memory is not None
    vectors = runtime.memory.vectors
    await runtime.store.ensure("cli-long")
    ids = [await say(runtime, "cli-long", line) for line in FILLER[:5]]
    reads: list[int] = []

    class Counted(VectorArchive):
        async def due(self, session_id: str, limit: int) -> tuple[Cursor | None, list[Item]]:
            cursor, items = await super().due(session_id, limit)
            reads.append(len(items))
            return cursor, items

    indexer = Indexer(Counted(runtime.store.db), LocalEmbedder(), batch=2)
    # Full batches go on at once: two, two, then one, all in this run; the short one ends
    # the session's turn without another read to find nothing left.
    assert await indexer.embed_due() == 5
    assert reads == [2, 2, 1]
    cursor = await vectors.cursor("cli-long")
    assert cursor is not None and cursor.message_cursor == ids[-1]
    # A message archived after the run is the next run's.
    await say(runtime, "cli-long", FILLER[5])
    assert await indexer.embed_due() == 1
    rows = await vectors.message_rows("cli-long", LOCAL_MODEL, 0)
    assert len(rows.message_ids) == len(set(rows.message_ids)) == 6


async def test_the_cursor_moves_only_from_where_the_writer_read_it(runtime: Runtime) -> None:
    assert runtime.memory is not None
    vectors = runtime.memory.vectors
    await runtime.store.ensure("cli-race")
    await say(runtime, "cli-race", FILLER[0])
    read, items = await vectors.due("cli-race", 10)
    blob = [np.zeros(4, "<f4").tobytes()] * len(items)
    assert await vectors.save("cli-race", read, LOCAL_MODEL, items, blob, 4)
    await say(runtime, "cli-race", FILLER[1])
    # A second writer that read the cursor before the first moved it stores nothing.
    assert not await vectors.save("cli-race", read, LOCAL_MODEL, items, blob, 4)
    moved = await vectors.cursor("cli-race")
    assert moved is not None and moved.message_cursor == items[-1].message_id


async def test_a_failed_batch_leaves_the_cursor_and_is_taken_again(
    tmp_path: Path, database_url: str
) -> None:
    async with FakeOpenAI() as fake:
        settings = Settings(
            home=tmp_path / "home",
            database_url=database_url,
            openai_base_url=fake.url,
            openai_api_key=fake.api_key,
            embedding_model=DEFAULT_EMBEDDING_MODEL,
            _env_file=None,
        )
        rt = await Runtime.start(settings)
        try:
            assert rt.memory is not None
            await rt.store.ensure("cli-fail")
            for line in FILLER[:3]:
                await say(rt, "cli-fail", line)
            fake.fail_embeddings(Error(400, "bad request"))  # not worth a retry: fails at once
            assert await rt.memory.indexer.embed_due() == 0
            assert await rt.memory.vectors.cursor("cli-fail") is None
            assert await rt.memory.indexer.embed_due() == 3
            cursor = await rt.memory.vectors.cursor("cli-fail")
            assert cursor is not None and cursor.model == DEFAULT_EMBEDDING_MODEL
            # One batch per attempt: the failed one and the one that took the same messages.
            assert [r["input"] for r in fake.embedding_requests] == [FILLER[:3], FILLER[:3]]
        finally:
            await rt.close()


async def test_a_model_change_waits_for_reindex(runtime: Runtime) -> None:
    assert runtime.memory is not None
    vectors, recall = runtime.memory.vectors, runtime.memory.recall
    await runtime.store.ensure("cli-model")
    await say(runtime, "cli-model", "the secret word is marmalade")
    await runtime.memory.indexer.embed_due()
    assert [r.content for r in await recall.search("cli-model", "secret word", 3)] == [
        "the secret word is marmalade"
    ]

    class Renamed(LocalEmbedder):
        model = "local-renamed"

    other = Indexer(vectors, Renamed())
    await say(runtime, "cli-model", "a new message")
    assert await other.embed_session("cli-model") == 0  # left alone until a reindex
    assert await other.reindex("cli-model") == 2
    cursor = await vectors.cursor("cli-model")
    assert cursor is not None and cursor.model == "local-renamed"
    # The old index's rows are gone: the recall of the old model finds nothing now.
    assert await recall.search("cli-model", "secret word", 3) == []


def test_the_graph_and_the_exact_search_agree_and_leave_the_window_out() -> None:
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((300, 32)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    blobs = [row.astype("<f4").tobytes() for row in matrix]
    ids = list(range(1000, 1300))
    exact = SessionIndex(32, "e", hnsw_min=10_000)
    graph = SessionIndex(32, "e", hnsw_min=100)
    for index in (exact, graph):
        index.add(300, ids, blobs)
    assert graph.wants_graph() and not exact.wants_graph()
    graph.build_graph()
    query = matrix[290]  # a message inside the window: its own best match
    assert exact.search(query, 1, 0)[0].message_id == 1290
    for index in (exact, graph):
        hits = index.search(query, 5, before=1280)
        assert len(hits) == 5
        assert all(h.message_id < 1280 for h in hits)
    assert [h.message_id for h in graph.search(query, 5, 1280)] == [
        h.message_id for h in exact.search(query, 5, 1280)
    ]


async def test_the_openai_embedder_asks_in_batches(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        settings = Settings(
            home=tmp_path,
            openai_base_url=fake.url,
            openai_api_key=fake.api_key,
            embedding_model=DEFAULT_EMBEDDING_MODEL,
            _env_file=None,
        )
        embedder = OpenAIEmbedder(settings)
        try:
            texts = [f"message number {i}" for i in range(130)]
            matrix = await embedder.embed(texts)
        finally:
            await embedder.aclose()
        assert matrix.shape == (130, 64)
        assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0)
        assert [len(r["input"]) for r in fake.embedding_requests] == [64, 64, 2]


async def test_vectors_of_a_deleted_session_go_with_it(runtime: Runtime) -> None:
    assert runtime.memory is not None
    await runtime.store.ensure("cli-gone")
    await say(runtime, "cli-gone", "a message about marmalade")
    await runtime.memory.indexer.embed_due()
    assert await runtime.memory.recall.search("cli-gone", "marmalade", 2)
    await runtime.store.delete("cli-gone")
    assert await runtime.memory.recall.search("cli-gone", "marmalade", 2) == []
    assert await runtime.store.vectors.cursor("cli-gone") is None


async def test_every_summary_is_embedded_once_and_searchable(runtime: Runtime) -> None:
    from gateway.store.files import Summary

    assert runtime.memory is not None
    await runtime.store.ensure("cli-sum")
    first = await say(runtime, "cli-sum", FILLER[0])
    second = await say(runtime, "cli-sum", FILLER[1])
    await runtime.store.save_summary("cli-sum", Summary("Ann planned a trip to Lyon", first, 1))
    assert await runtime.memory.indexer.embed_due() == 3  # the messages and the summary
    assert await runtime.memory.indexer.embed_due() == 0
    # The next fold covers more: its version is embedded, the first one stays searchable.
    await runtime.store.save_summary("cli-sum", Summary("Ann booked the Lyon train", second, 2))
    assert await runtime.memory.indexer.embed_due() == 1  # the new version only
    found = await runtime.memory.recall.search("cli-sum", "Lyon trip", 5, summaries=True)
    assert {(r.kind, r.content) for r in found if r.kind == "summary"} == {
        ("summary", "Ann planned a trip to Lyon"),
        ("summary", "Ann booked the Lyon train"),
    }
    # Without summaries (what an agent's context recalls), messages only.
    assert {r.kind for r in await runtime.memory.recall.search("cli-sum", "Lyon", 5)} <= {"message"}


async def test_a_stuck_embedding_endpoint_delays_a_task_by_the_deadline_only(
    runtime: Runtime,
) -> None:
    import asyncio

    from clock import FakeClock

    from gateway.memory.recall import CONTEXT_DEADLINE_SECONDS, Recall

    class Stuck(LocalEmbedder):
        remote = True  # as an endpoint is

        async def embed(self, texts: object) -> np.ndarray:
            await asyncio.Event().wait()  # an endpoint that never answers
            raise AssertionError("unreachable")

    clock = FakeClock()
    assert runtime.memory is not None
    recall = Recall(runtime.memory.vectors, Stuck(), count=3, clock=clock)
    waiting = asyncio.ensure_future(recall.for_context("cli-stuck", "anything", 0))
    await clock.until_sleeping(seconds=CONTEXT_DEADLINE_SECONDS)
    assert not waiting.done()
    await clock.advance(CONTEXT_DEADLINE_SECONDS)
    assert await asyncio.wait_for(waiting, 5) == []


async def test_an_agent_that_shows_no_recall_to_a_model_does_not_pay_for_it(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The offline agent never shows `recalled` to a model: its tasks recall nothing up
    front (which cost every task a search), and `!recall` still asks on demand."""
    assert runtime.memory is not None
    asked: list[str] = []
    recall = runtime.memory.recall
    before = recall.for_context

    async def counted(session_id: str, text: str, start: int) -> list[Recalled]:
        asked.append(text)
        return await before(session_id, text, start)

    monkeypatch.setattr(recall, "for_context", counted)
    await runtime.store.ensure("cli-quiet")
    await say(runtime, "cli-quiet", "the kettle is descaled every spring")
    await runtime.memory.indexer.embed_due()
    assert await ask(runtime, "cli-quiet", "plain words") == "echo: plain words"
    reply = await ask(runtime, "cli-quiet", "!recall kettle descaled")
    assert asked == []
    assert reply.startswith("recalled: "), reply  # asked on demand (inside the window: nothing)
