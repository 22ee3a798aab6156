"""Sessions: create, list, read, change and delete them, and their terminal input history."""

from __future__ import annotations

import asyncio
from typing import Final

from adapters.http.context import Context
from adapters.http.errors import ApiError, bad, no_session
from adapters.http.models import (
    SESSIONS_DEFAULT,
    AddInputRequest,
    CreateSessionRequest,
    SessionsQuery,
    UpdateSessionRequest,
)
from adapters.http.replies import (
    CreatedSession,
    Deleted,
    Inputs,
    SessionList,
    SessionMeta,
    SessionSummary,
)
from adapters.http.route import Call
from gateway.events import Origin
from gateway.ids import new_session_id
from gateway.logs import get_logger
from gateway.session_settings import SettingsChange, SettingsRefused
from gateway.store.fslock import SessionDirectoryMissing
from gateway.store.sessions import SessionCursor, UnknownSession

log = get_logger(__name__)

# How long deleting a session waits for its running task to wind down after the cancel.
DELETE_GRACE_SECONDS: Final = 5.0


async def create_session(call: Call) -> CreatedSession:
    body = await call.body(CreateSessionRequest)
    session_id = new_session_id(body.prefix)
    caller = call.ctx.caller(call.request)
    await call.ctx.runtime.engine.admission.admit_session(caller)
    # Named as it is made: the new-session log line carries the name.
    await call.ctx.store.ensure(session_id, name=body.name, owner=caller.sender_key)
    return CreatedSession(session_id=session_id)


async def list_sessions(call: Call) -> SessionList:
    query = call.query(SessionsQuery)
    who = call.ctx.caller(call.request)
    return await session_list(call.ctx, who, query.prefix, query.cursor, query.limit)


async def session_list(
    ctx: Context,
    who: Origin,
    prefix: str | None,
    cursor: str | None = None,
    limit: int = SESSIONS_DEFAULT,
) -> SessionList:
    """The sessions `who` may see (of `prefix`), most recently active first, a page of
    `limit` after `cursor`."""
    after = None
    if cursor is not None:
        at, _, last = cursor.partition("~")
        after = SessionCursor(int(at), last)
    page = await ctx.store.list_sessions(
        await ctx.access.visibility(who), prefix=prefix, after=after, limit=limit + 1
    )
    more = len(page) > limit
    page = page[:limit]
    return SessionList(
        sessions=[
            SessionSummary(
                session_id=info.id,
                name=info.name,
                updated_at=info.updated_at,
                message_count=info.message_count,
                running=ctx.router.running_task(info.id) is not None,
                parent=info.parent,
            )
            for info in page
        ],
        next_cursor=f"{page[-1].updated_at}~{page[-1].id}" if more else None,
    )


async def get_session(call: Call) -> SessionMeta:
    session_id = call.session_id
    row = await call.ctx.store.get(session_id)
    if row is None:
        raise no_session(session_id)
    router = call.ctx.router
    return SessionMeta(
        session_id=row.id,
        name=row.name,
        persona=row.persona,
        model=row.model,
        reasoning=row.reasoning,
        allowed_tools=sorted(row.allowed_tools),
        created_at=row.created_at,
        updated_at=row.updated_at,
        running=router.running_task(session_id) is not None,
        queued=router.queue_length(session_id),
    )


async def update_session(call: Call) -> SessionMeta:
    """Only the fields given change; an empty string restores the default. In dc-* and tg-*
    sessions only admins may change anything but the name."""
    session_id = call.session_id
    body = await call.body(UpdateSessionRequest)
    change = SettingsChange(**body.model_dump(exclude_unset=True))
    await call.ctx.require_session(session_id)
    origin = call.origin()
    try:
        await call.ctx.runtime.session_settings.change(session_id, origin, change)
    except SettingsRefused as exc:
        bad(str(exc))
    except UnknownSession:
        raise no_session(session_id) from None
    log.info(
        "session updated over http",
        session=session_id,
        by=origin.sender_key,
        fields=sorted(body.model_fields_set),
    )
    return await get_session(call)


async def delete_session(call: Call) -> Deleted:
    """Cancels the session's tasks, then deletes its rows and files."""
    session_id = call.session_id
    ctx = call.ctx
    await ctx.require_session(session_id)
    origin = call.origin()
    running = ctx.router.running_task(session_id)
    await ctx.router.cancel_all(session_id, by=origin.sender_name)
    if running is not None:
        # Let the canceled run write its last events before its directory goes.
        await ctx.router.wait(running.task_hash, DELETE_GRACE_SECONDS)
    if not await ctx.store.delete(session_id):
        raise no_session(session_id)
    try:
        # A chat's id comes back with its next message: it must not find this one's memory.
        await ctx.runtime.tool_memory.forget(session_id)
    except Exception:
        log.warning("tool memory of a deleted session kept", session=session_id, exc_info=True)
    log.info("session deleted over http", session=session_id, by=origin.sender_key)
    return Deleted()


async def list_inputs(call: Call) -> Inputs:
    await call.ctx.require_session(call.session_id)
    files = call.ctx.store.files(call.session_id)
    return Inputs(inputs=await asyncio.to_thread(files.read_cmd_history))


async def add_input(call: Call) -> Inputs:
    """Remembers a line typed in a terminal window (`.cmd_history`: the last 50, and a repeat
    of the last one is not stored)."""
    session_id = call.session_id
    entry = (await call.body(AddInputRequest)).entry
    limit = call.ctx.settings.max_message_chars
    if len(entry) > limit:
        raise ApiError(413, "too_large", f"entry is longer than {limit} chars")
    await call.ctx.require_session(session_id)
    files = call.ctx.store.files(session_id)
    try:
        entries = await asyncio.to_thread(files.add_cmd_history, entry)
    except (FileNotFoundError, SessionDirectoryMissing):
        raise no_session(session_id) from None
    return Inputs(inputs=entries)
