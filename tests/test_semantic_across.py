"""Semantic search across sessions: `GET /v1/search?mode=semantic` without a session looks in
the sessions the caller may read (and only those), and `agenvoy search --semantic` without
`--session` in every session, the most recently active first, up to a cap."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fakes.openai import DEFAULT_EMBEDDING_MODEL, Error, FakeOpenAI
from sqlalchemy import text
from sqlmodel import Session
from test_http import ANN, BOB, ROOT, Server, err, serving
from typer.testing import CliRunner, Result

from gateway.cli import app as cli_app
from gateway.events import Inbound, Origin
from gateway.runtime import Runtime
from gateway.settings import Settings

QUERY = "basement boiler knocking noise"
ANN_BOILER = "the boiler in the basement makes a knocking noise"
# Bob's message is the query itself: it would be the best hit of anyone allowed to see it.
BOB_BOILER = QUERY
UNRELATED = "zebra xylophone quartz"


def sender(name: str) -> Origin:
    return Origin("http", sender_id=name, sender_name=name.title())


async def seed(runtime: Runtime, messages: list[tuple[str, str, str]]) -> None:
    """(session, owner's name, text): each session private to its owner, written in by them,
    and every message embedded before this returns."""
    for sid, owner, content in messages:
        await runtime.store.ensure(sid, owner=f"http:{owner}")
        await runtime.router.record(Inbound(sender(owner), sid, content))
    assert runtime.memory is not None
    # The indexer's own lock orders this run after any background one: once it returns,
    # every message recorded above has its vector.
    await runtime.memory.indexer.embed_due()
    for sid in {sid for sid, _, _ in messages}:
        assert await runtime.store.vectors.cursor(sid) is not None, sid


async def set_last_activity(runtime: Runtime, session_id: str, at_ms: int) -> None:
    """Say when the session was last active (what "most recently active first" orders by)."""
    stmt = text("UPDATE session SET updated_at = :at WHERE id = :sid")

    def work(session: Session) -> None:
        session.connection().execute(stmt, {"at": at_ms, "sid": session_id})

    await runtime.store.db.write(work)


async def across(server: Server, query: str, headers: dict[str, str]) -> dict[str, Any]:
    status, body = await server.call(
        "GET", f"/v1/search?q={quote(query)}&mode=semantic&limit=10", headers=headers
    )
    assert status == 200, body
    return dict(body)


def found_in(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(h["session_id"], h["content"]) for h in body["results"]]


async def test_a_member_finds_only_what_they_may_read(tmp_path: Path, database_url: str) -> None:
    # On both databases: which sessions a caller may read is a SQL condition of each dialect.
    async with serving(tmp_path, database_url=database_url) as server:
        await seed(
            server.runtime,
            [
                ("cli-ann-garden", "ann", "the garden party is on Sunday"),
                ("cli-ann-house", "ann", ANN_BOILER),
                ("cli-bob-house", "bob", BOB_BOILER),
            ],
        )

        # The admin sees every session: Bob's message is the better match, Ann's follows.
        body = await across(server, QUERY, ROOT)
        hits = found_in(body)
        assert hits[0] == ("cli-bob-house", BOB_BOILER)
        assert ("cli-ann-house", ANN_BOILER) in hits
        assert body["sessions_searched"] == 3 and body["sessions_left_out"] is False
        scores = [h["score"] for h in body["results"]]
        assert scores == sorted(scores, reverse=True)

        # Ann finds her own message in another of her sessions, never Bob's better one.
        body = await across(server, QUERY, ANN)
        hits = found_in(body)
        assert hits[0] == ("cli-ann-house", ANN_BOILER)
        assert {sid for sid, _ in hits} <= {"cli-ann-garden", "cli-ann-house"}
        assert body["sessions_searched"] == 2 and body["sessions_left_out"] is False

        # Bob, likewise, only his own; until Ann shares her session with him.
        body = await across(server, QUERY, BOB)
        assert {sid for sid, _ in found_in(body)} == {"cli-bob-house"}
        await server.share("cli-ann-house", "bob", by=ANN, mode="read")
        body = await across(server, QUERY, BOB)
        assert {sid for sid, _ in found_in(body)} == {"cli-bob-house", "cli-ann-house"}
        assert body["sessions_searched"] == 2

        # Someone with no session of their own searches nothing and finds nothing.
        body = await across(server, QUERY, {})  # as `tester`
        assert body["results"] == [] and body["sessions_searched"] == 0


async def test_an_unrelated_query_finds_nothing(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        await seed(
            server.runtime,
            [("cli-ann-house", "ann", ANN_BOILER), ("cli-bob-house", "bob", BOB_BOILER)],
        )
        body = await across(server, UNRELATED, ROOT)
        assert body["results"] == []
        assert body["sessions_searched"] == 2  # searched, and nothing was close enough


async def test_the_cap_keeps_the_most_recently_active_sessions(
    tmp_path: Path, database_url: str
) -> None:
    async with serving(tmp_path, database_url=database_url) as server:
        runtime = server.runtime
        await seed(
            runtime,
            [
                ("cli-ann-old", "ann", BOB_BOILER),  # the best match, in the least active
                ("cli-ann-mid", "ann", ANN_BOILER),
                ("cli-ann-new", "ann", "the boiler knocks at night"),
            ],
        )
        for at, sid in enumerate(["cli-ann-old", "cli-ann-mid", "cli-ann-new"], start=1):
            await set_last_activity(runtime, sid, at * 1000)
        assert runtime.memory is not None
        runtime.memory.recall.max_sessions_searched = 2

        body = await across(server, QUERY, ANN)
        assert body["sessions_searched"] == 2 and body["sessions_left_out"] is True
        sessions = {sid for sid, _ in found_in(body)}
        assert "cli-ann-mid" in sessions and "cli-ann-old" not in sessions

        runtime.memory.recall.max_sessions_searched = 3
        body = await across(server, QUERY, ANN)
        assert body["sessions_searched"] == 3 and body["sessions_left_out"] is False
        assert found_in(body)[0] == ("cli-ann-old", BOB_BOILER)


async def test_with_a_session_the_search_stays_in_it(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        await seed(
            server.runtime,
            [
                ("cli-ann-garden", "ann", "the garden party is on Sunday"),
                ("cli-ann-house", "ann", ANN_BOILER),
                ("cli-bob-house", "bob", BOB_BOILER),
            ],
        )
        path = f"/v1/search?q={quote(QUERY)}&mode=semantic&session_id="
        status, body = await server.call("GET", path + "cli-ann-house", headers=ANN)
        assert status == 200, body
        assert found_in(body) == [("cli-ann-house", ANN_BOILER)]
        assert body["sessions_searched"] is None and body["sessions_left_out"] is None

        # A session that matches nothing finds nothing, though another would.
        status, body = await server.call("GET", path + "cli-ann-garden", headers=ANN)
        assert status == 200 and body["results"] == []

        # Another's private session is not there for her at all.
        status, body = await server.call("GET", path + "cli-bob-house", headers=ANN)
        assert (status, err(body)) == (404, "not_found")

        # Full-text search says nothing of sessions searched.
        status, body = await server.call("GET", "/v1/search?q=boiler", headers=ROOT)
        assert status == 200 and len(body["results"]) == 2
        assert body["sessions_searched"] is None and body["sessions_left_out"] is None


async def test_across_sessions_the_embedding_endpoint_away_is_a_503(tmp_path: Path) -> None:
    async with FakeOpenAI() as fake:
        options: dict[str, Any] = {
            "openai_base_url": fake.url,
            "openai_api_key": fake.api_key,
            "embedding_model": DEFAULT_EMBEDDING_MODEL,
        }
        async with serving(tmp_path, **options) as server:
            await seed(server.runtime, [("cli-ann-house", "ann", ANN_BOILER)])
            fake.fail_embeddings(Error(400, "model is loading"))
            url = server.url(f"/v1/search?q={quote(QUERY)}&mode=semantic")
            async with server.client.get(url, headers=ANN) as resp:
                body = await resp.json()
                assert (resp.status, err(body)) == (503, "unavailable")
                assert resp.headers["Retry-After"] == "5"
                assert "model is loading" in body["error"]["message"]


# -- the command line --------------------------------------------------------------------------


def invoke(args: list[str]) -> Result:
    result = CliRunner().invoke(cli_app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


async def test_the_command_searches_every_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("AGENVOY_HOME", str(home))
    # The hashed embedder's vectors, whether the local model is installed or not.
    monkeypatch.setenv("AGENVOY_LOCAL_EMBEDDINGS", "off")
    runtime = await Runtime.start(Settings(home=home, _env_file=None))
    try:
        await seed(
            runtime,
            [
                ("cli-ann-garden", "ann", "the garden party is on Sunday"),
                ("cli-ann-house", "ann", ANN_BOILER),
                ("cli-bob-house", "bob", BOB_BOILER),
            ],
        )
    finally:
        await runtime.close()

    found = await asyncio.to_thread(invoke, ["search", "--semantic", QUERY])
    lines = found.stdout.splitlines()
    # The operator's command: everyone's sessions, best first, each hit naming its session.
    assert "cli-bob-house" in lines[0] and BOB_BOILER in lines[0]
    assert any("cli-ann-house" in line and ANN_BOILER in line for line in lines[1:])
    assert all("garden" not in line for line in lines)
    assert "searched 3 sessions" in found.stderr

    nothing = await asyncio.to_thread(invoke, ["search", "--semantic", UNRELATED])
    assert nothing.stdout.startswith("no matches")
