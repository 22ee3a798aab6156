"""`GET /v1/search`: full-text search over every message (newest first), or semantic search
(best first) over one session's messages and summaries or, without a session, over those of
the sessions the caller may read, under the same rule as full-text."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from adapters.http.context import Context
from adapters.http.errors import ApiError, bad
from adapters.http.models import SearchQuery
from adapters.http.paging import page_of, read_cursor
from adapters.http.replies import Message, NextCursor, Reply
from adapters.http.route import Call
from gateway.events import Origin
from gateway.ids import validate_session_id
from gateway.memory.embedders import EmbeddingFailed
from gateway.memory.recalled import Recalled
from gateway.ownership import Need
from gateway.store.message_reads import StoredMessage


class SearchHit(Message):
    kind: Literal["message", "summary"] = Field(
        description="summary: a version of the rolling summary (id: the last message it covers)"
    )
    score: float | None = Field(description="Cosine similarity to q (semantic mode only).")


class SearchHits(Reply):
    """The matches: newest first (fulltext), or best first (semantic)."""

    results: list[SearchHit]
    next_cursor: NextCursor = None
    sessions_searched: int | None = Field(
        None,
        description="Semantic mode without session_id: how many sessions were searched (those "
        "the caller may read that have embeddings, the most recently active first); null "
        "otherwise.",
    )
    sessions_left_out: bool | None = Field(
        None,
        description="Semantic mode without session_id: whether more such sessions exist than "
        "one search looks in (the least recently active were not searched); null otherwise.",
    )


async def search(call: Call) -> SearchHits:
    query = call.query(SearchQuery)
    session_id = validate_session_id(query.session_id) if query.session_id else None
    if query.mode == "semantic":
        if query.cursor is not None:
            bad("mode=semantic answers one page, best first: it takes no cursor")
        return await _semantic(call, query, session_id)
    if query.cursor is not None and query.offset:
        bad("send either cursor or offset, not both")
    shown, next_cursor = await search_page(
        call.ctx,
        call.ctx.caller(call.request),
        query.q,
        session_id,
        query.limit,
        query.cursor,
        query.offset,
    )
    hits = [SearchHit(**Message.of(m).model_dump(), kind="message", score=None) for m in shown]
    return SearchHits(results=hits, next_cursor=next_cursor)


async def search_page(
    ctx: Context,
    who: Origin,
    terms: str,
    session_id: str | None,
    limit: int,
    cursor: str | None,
    offset: int = 0,
) -> tuple[list[StoredMessage], str | None]:
    """A page of full-text matches `who` may read, newest first, and the next page's cursor:
    as the route and the MCP tool answer it."""
    before = read_cursor(cursor, int)
    found = await ctx.store.search.messages(
        terms,
        session_id=session_id,
        limit=limit + 1,
        offset=offset,
        visible=await ctx.access.visibility(who),
        before_id=None if before is None else int(before[0]),
    )
    return page_of(found, limit, lambda m: (m.id,))


async def _semantic(call: Call, query: SearchQuery, session_id: str | None) -> SearchHits:
    memory = call.ctx.runtime.memory
    if memory is None:
        bad("semantic search is not available on this gateway")
    who = call.ctx.caller(call.request)
    try:
        if session_id is not None:
            await call.ctx.access.require(who, session_id, Need.read)
            found = await memory.recall.search(session_id, query.q, query.limit, summaries=True)
            return SearchHits(results=[_hit(session_id, r) for r in found])
        # Across sessions: only those the caller may read are ever looked in, so another
        # person's messages are never candidates, not merely filtered out afterwards.
        searchable = await memory.recall.searchable(await call.ctx.access.visibility(who))
        across = await memory.recall.search_sessions(
            searchable.session_ids, query.q, query.limit, summaries=True
        )
    except EmbeddingFailed as exc:  # the embedding endpoint is away: try again later
        raise ApiError(503, "unavailable", str(exc), {"Retry-After": "5"}) from exc
    return SearchHits(
        results=[_hit(h.session_id, h.recalled) for h in across],
        sessions_searched=len(searchable.session_ids),
        sessions_left_out=searchable.left_out,
    )


def _hit(session_id: str, found: Recalled) -> SearchHit:
    return SearchHit(
        id=found.message_id,
        session_id=session_id,
        role=found.role,
        content=found.content,
        sender=found.sender,
        send_at=found.send_at,
        task_hash="",
        kind="summary" if found.kind == "summary" else "message",
        score=found.score,
    )
