"""Semantic recall on PostgreSQL with pgvector: the search is one SQL query.

pgvector is an extension the PostgreSQL server must have installed; the one CI and this
project's machines run does not (Debian's package is not there). So, unlike a missing
PostgreSQL, a missing pgvector is a plain skip that `AGENVOY_REQUIRE_SERVICES=1` does not turn
into a failure: without it, PostgreSQL deployments use the in-process index, which the other
recall tests cover on PostgreSQL too. Where pgvector is installed, set
`AGENVOY_REQUIRE_PGVECTOR=1` to make its absence a failure.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from conftest import _pg_database, _pg_drop

from gateway.events import Inbound, Origin
from gateway.runtime import Runtime
from gateway.settings import Settings

BOB = Origin("http", sender_id="bob", sender_name="Bob")
NO_PGVECTOR = (
    "pgvector is not installed in this PostgreSQL server: recall uses the in-process index "
    "there (covered by test_recall.py on PostgreSQL)"
)


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    url, name = await _pg_database()  # a missing PostgreSQL: skipped, or failed in CI
    settings = Settings(
        home=tmp_path / "home",
        database_url=url,
        history_window=2,
        _env_file=None,
    )
    rt = await Runtime.start(settings)
    try:
        assert rt.memory is not None
        if not await rt.memory.vectors.uses_pgvector():
            if os.environ.get("AGENVOY_REQUIRE_PGVECTOR", "") not in ("", "0", "false"):
                pytest.fail(NO_PGVECTOR)
            pytest.skip(NO_PGVECTOR)
        yield rt
    finally:
        await rt.close()
        await _pg_drop(name)


async def test_pgvector_recall_stays_in_its_session_and_below_the_window(
    runtime: Runtime,
) -> None:
    assert runtime.memory is not None
    for sid in ("cli-pg1", "cli-pg2"):
        await runtime.store.ensure(sid)
    await runtime.router.record(Inbound(BOB, "cli-pg1", "the harbour crane lifts containers"))
    await runtime.router.record(Inbound(BOB, "cli-pg2", "the harbour crane lifts containers!"))
    late = await runtime.router.record(Inbound(BOB, "cli-pg1", "a harbour crane again"))
    assert late is not None
    await runtime.memory.indexer.embed_due()
    recall = runtime.memory.recall
    found = await recall.search("cli-pg1", "harbour crane containers", 5, before=late)
    assert [(r.sender, r.content) for r in found] == [("Bob", "the harbour crane lifts containers")]
    assert recall._indexes == {}  # answered by SQL, not by an index in this process
    await runtime.memory.indexer.reindex("cli-pg1")  # rows dropped and made again
    again = await recall.search("cli-pg1", "harbour crane containers", 5, before=late)
    assert [r.content for r in again] == ["the harbour crane lifts containers"]
