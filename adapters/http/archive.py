"""What the gateway keeps: a session's messages, its action.log followed live, and token
usage (search: `adapters.http.search`)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from adapters.http.context import Context
from adapters.http.errors import bad
from adapters.http.models import HistoryQuery, LogQuery, UsageQuery
from adapters.http.paging import encode_cursor, page_of, read_cursor
from adapters.http.replies import (
    IdentityUsage,
    LogRecord,
    Message,
    Messages,
    ModelUsage,
    UsageList,
)
from adapters.http.route import Call
from adapters.http.sse import StreamClosed
from gateway.events import event_to_json
from gateway.store.usage import DAY_MS


async def get_history(call: Call) -> Messages:
    """The newest `limit` messages (older than the cursor's), oldest first; `next_cursor`
    pages back in time, so a page never shifts as new messages arrive."""
    query = call.query(HistoryQuery)
    before = read_cursor(query.cursor, int)
    await call.ctx.require_session(call.session_id)
    return await history_page(call.ctx, call.session_id, query.limit, before)


async def history_page(
    ctx: Context, session_id: str, limit: int, before: tuple[int | str, ...] | None
) -> Messages:
    """A page of history, as the route and the MCP tool answer it."""
    found = await ctx.store.message_page(
        session_id, limit + 1, before_id=None if before is None else int(before[0])
    )
    # Oldest first: the one more than the page, if any, is the first.
    more = len(found) > limit
    shown = found[1:] if more else found
    return Messages(
        messages=[Message.of(m) for m in shown],
        next_cursor=encode_cursor(shown[0].id) if more else None,
    )


async def stream_log(call: Call) -> web.StreamResponse:
    """First `log` frames (data: a LogRecord) for the last `tail` records, then the comment
    `: live`, then one frame per live event of the session, until the client leaves.
    `: dropped N` reports events lost to a slow reader."""
    session_id = call.session_id
    tail = call.query(LogQuery).tail
    ctx = call.ctx
    await ctx.require_session(session_id)
    action_log = ctx.store.files(session_id).action_log
    response, stream = ctx.event_stream(call.request, ctx.farewell(session_id))
    # Subscribed before the tail is read: an event can then show up twice, never not at all.
    with ctx.router.subscribe(session_id) as sub, ctx.metrics.log_streams.track_inprogress():
        records = await asyncio.to_thread(action_log.tail, tail)
        reported = 0
        try:
            await stream.start()
            for record in records:
                await stream.frame("log", LogRecord.of(record).model_dump_json())
            await stream.comment("live")
            while True:
                event = await stream.receive(sub.get)
                if sub.dropped > reported:
                    await stream.comment(f"dropped {sub.dropped - reported}")
                    reported = sub.dropped
                await stream.frame(event.kind, event_to_json(event))
        except StreamClosed:
            pass
    return response


async def usage(call: Call) -> UsageList:
    query = call.query(UsageQuery)
    runtime = call.ctx.runtime
    since = runtime.clock.now_ms() - query.days * DAY_MS
    if query.by == "model":
        if query.cursor is not None:
            bad("by=model answers every model at once: it takes no cursor")
        rows = await call.ctx.store.usage.summary(since_ms=since)
        return UsageList(models=[ModelUsage.of(r) for r in rows])
    after = read_cursor(query.cursor, str)
    caller = call.ctx.caller(call.request)
    mine = None
    if not runtime.authority.is_admin(caller):
        mine = await call.ctx.store.ownership.linked(caller.sender_key)
    spent = await call.ctx.store.usage.by_identity(
        since_ms=since,
        identities=mine,
        after=None if after is None else str(after[0]),
        limit=query.limit + 1,
    )
    shown, next_cursor = page_of(spent, query.limit, lambda u: (u.identity,))
    return UsageList(
        models=[],
        identities=[
            IdentityUsage(
                identity=u.identity, calls=u.calls, input=u.input, output=u.output, cost=u.cost
            )
            for u in shown
        ],
        next_cursor=next_cursor,
    )
