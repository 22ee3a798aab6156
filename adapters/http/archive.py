"""What the gateway keeps: a session's messages, its action.log followed live, and token
usage (search: `adapters.http.search`)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from adapters.http.models import HistoryQuery, LogQuery, UsageQuery
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
    limit = call.query(HistoryQuery).limit
    await call.ctx.require_session(call.session_id)
    messages = await call.ctx.store.recent_messages(call.session_id, limit)
    return Messages(messages=[Message.of(m) for m in messages])


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
        rows = await call.ctx.store.usage.summary(since_ms=since)
        return UsageList(models=[ModelUsage.of(r) for r in rows])
    caller = call.ctx.caller(call.request)
    mine = None
    if not runtime.authority.is_admin(caller):
        mine = await call.ctx.store.ownership.linked(caller.sender_key)
    spent = await call.ctx.store.usage.by_identity(since_ms=since, identities=mine)
    return UsageList(
        models=[],
        identities=[
            IdentityUsage(identity=u.identity, calls=u.calls, input=u.input, output=u.output)
            for u in spent
        ],
    )
