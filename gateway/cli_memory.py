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


def _with_memory(work: Callable[[SessionStore, Memory], Awaitable[T]]) -> T:
    from gateway.memory.embedders import EmbeddingFailed
    from gateway.memory.setup import Memory
    from gateway.store.db import DatabaseError
    from gateway.store.sessions import SessionStore, UnknownSession

    settings = load_settings()

    async def main() -> T:
        store = await SessionStore.open(settings)
        memory = Memory.open(settings, store.vectors)
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


def semantic_search(query: str, session: str, limit: int) -> None:
    """One session's messages and summaries closest in meaning to `query`, best first."""
    from gateway.memory.recalled import recalled_line

    async def work(store: SessionStore, memory: Memory) -> list[str]:
        await store.require(session)
        found = await memory.recall.search(session, query, limit, summaries=True)
        return [f"{r.score:.3f}  #{r.message_id}  {recalled_line(r)}" for r in found]

    lines = _with_memory(work)
    if not lines:
        typer.echo("no matches (are the session's messages embedded yet? see `agenvoy reindex`)")
    for line in lines:
        typer.echo(printable(line))


def reindex(
    session: Annotated[
        str | None,
        typer.Option("--session", "-s", help="Only this session.", metavar="SID"),
    ] = None,
) -> None:
    """Drop the embeddings of every session (or one) and make them again with the configured
    model (AGENVOY_EMBEDDING_MODEL): what a model change needs before old messages are found."""
    if session is not None:
        checked_id(session)

    async def work(store: SessionStore, memory: Memory) -> int:
        sessions = [session] if session else await memory.vectors.session_ids()
        total = 0
        for sid in sessions:
            done = await memory.indexer.reindex(sid)
            total += done
            typer.echo(f"{sid}: {done} embedded")
        typer.echo(f"{total} embedded with {memory.indexer.embedder.model}")
        return total

    _with_memory(work)
