"""`agenvoy search --semantic` and `agenvoy reindex` on an archive."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gateway.cli import app as cli_app
from gateway.events import Inbound, Origin
from gateway.memory.embedders import LOCAL_MODEL
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.sessions import SessionStore

BOB = Origin("http", sender_id="bob", sender_name="Bob\x1b[8m")


def invoke(args: list[str], code: int = 0) -> Result:
    result = CliRunner().invoke(cli_app, args, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result


@pytest.fixture
async def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("AGENVOY_HOME", str(home))
    # The commands' vectors are the hashed embedder's here (LOCAL_MODEL), extra or not.
    monkeypatch.setenv("AGENVOY_LOCAL_EMBEDDINGS", "off")
    runtime = await Runtime.start(Settings(home=home, _env_file=None))
    try:
        for sid, text in [
            ("cli-a", "the lighthouse keeper feeds the seagulls"),
            ("cli-a", "tomorrow we paint the fence"),
            ("cli-b", "the lighthouse keeper retired"),
        ]:
            await runtime.store.ensure(sid)
            await runtime.router.record(Inbound(BOB, sid, text))
    finally:
        await runtime.close()
    return home


async def test_reindex_then_semantic_search(home: Path) -> None:
    # Nothing embedded yet (no gateway ran the job): the command says where to look.
    found = await asyncio.to_thread(invoke, ["search", "lighthouse", "-s", "cli-a", "--semantic"])
    assert "agenvoy reindex" in found.output
    done = await asyncio.to_thread(invoke, ["reindex"])
    assert "cli-a: 2 embedded" in done.output and "cli-b: 1 embedded" in done.output
    assert f"3 embedded with {LOCAL_MODEL}" in done.output

    found = await asyncio.to_thread(
        invoke, ["search", "lighthouse seagulls", "-s", "cli-a", "--semantic", "--limit", "5"]
    )
    lines = found.output.splitlines()
    assert "Bob\\x1b[8m: the lighthouse keeper feeds the seagulls" in lines[0]
    assert all("retired" not in line for line in lines)  # another session's

    # A reindex of one session makes its embeddings again, and only its own.
    store = await SessionStore.open(Settings(home=home, _env_file=None))
    try:
        before = await store.vectors.cursor("cli-b")
        await asyncio.to_thread(invoke, ["reindex", "--session", "cli-a"])
        assert await store.vectors.cursor("cli-b") == before
        after = await store.vectors.message_rows("cli-a", LOCAL_MODEL, 0)
        assert len(after.message_ids) == 2
    finally:
        await store.close()


async def test_semantic_search_without_a_session_looks_everywhere(home: Path) -> None:
    # Across every session (tests/test_semantic_across.py); nothing is embedded here yet.
    result = await asyncio.to_thread(invoke, ["search", "lighthouse", "--semantic"])
    assert "agenvoy reindex" in result.output
