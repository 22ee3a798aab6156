"""The `agenvoy` commands of semantic recall: `search --semantic` and `reindex`.

They open the archive directly, like the other archive readers; numpy and the embedder are
imported only when one of them runs, so `agenvoy --help` and the client commands stay cheap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gateway.cli_support import checked_id, fail, load_settings, printable

if TYPE_CHECKING:
    from gateway.memory.setup import Memory
    from gateway.store.sessions import SessionStore

T = TypeVar("T")


def with_memory(work: Callable[[SessionStore, Memory], Awaitable[T]]) -> T:
    from gateway.memory.embedders import EmbeddingFailed
    from gateway.memory.setup import Memory
    from gateway.store.db import DatabaseError
    from gateway.store.sessions import SessionStore, UnknownSession

    settings = load_settings()

    async def main() -> T:
        store = await SessionStore.open(settings)
        memory = Memory.open(settings, store.vectors, store.knowledge)
        try:
            return await work(store, memory)
        finally:
            await memory.close()
            await store.close()

    try:
        return asyncio.run(main())
    except UnknownSession as exc:
        fail(str(exc), 1)
    except (DatabaseError, EmbeddingFailed) as exc:
        fail(str(exc), 1)


def semantic_search(query: str, session: str | None, limit: int) -> None:
    """The messages and summaries closest in meaning to `query`, best first: of `session`, or
    (None) of every session with embeddings, the most recently active up to recall's cap."""
    from gateway.memory.recalled import recalled_line
    from gateway.store.ownership import EVERYTHING

    async def work(store: SessionStore, memory: Memory) -> tuple[list[str], str]:
        if session is not None:
            await store.require(session)
            found = await memory.recall.search(session, query, limit, summaries=True)
            return [f"{r.score:.3f}  #{r.message_id}  {recalled_line(r)}" for r in found], ""
        # The operator's command: every session is theirs to read.
        searchable = await memory.recall.searchable(EVERYTHING)
        hits = await memory.recall.search_sessions(
            searchable.session_ids, query, limit, summaries=True
        )
        lines = [
            f"{h.recalled.score:.3f}  {h.session_id}  #{h.recalled.message_id}  "
            f"{recalled_line(h.recalled)}"
            for h in hits
        ]
        searched = f"searched {len(searchable.session_ids)} sessions with embeddings"
        if searchable.left_out:
            searched += " (the most recently active; older ones were left out)"
        return lines, searched

    lines, searched = with_memory(work)
    if not lines:
        where = "the session's messages" if session is not None else "any messages"
        typer.echo(f"no matches (are {where} embedded yet? see `agenvoy reindex`)")
    for line in lines:
        typer.echo(printable(line))
    if searched:  # on stderr, so the lines on stdout stay one hit each
        typer.echo(searched, err=True)


def reindex(
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", help="Only this session.", metavar="SID"),
    ] = None,
) -> None:
    """Drop the embeddings of every session (or one) and make them again with the configured
    model (AGENVOY_EMBEDDING_MODEL): what a model change needs before old messages are found.
    Without --session, the attached documents' passages are embedded again too."""
    if session is not None:
        checked_id(session)

    async def work(store: SessionStore, memory: Memory) -> int:
        sessions = [session] if session else await memory.vectors.session_ids()
        total = 0
        for sid in sessions:
            done = await memory.indexer.reindex(sid)
            total += done
            typer.echo(f"{sid}: {done} embedded")
        if session is None:  # attached documents are embedded with the same model
            passages = await memory.knowledge.reindex()
            typer.echo(f"knowledge: {passages} passages embedded")
        typer.echo(f"{total} embedded with {memory.indexer.embedder.model}")
        return total

    with_memory(work)
