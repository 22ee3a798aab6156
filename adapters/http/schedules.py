"""A session's schedules: list, make, remove — what `/schedules`, `/schedule` and `/unschedule`
do, with the same rule (gateway/schedules.py checks it: admins only in shared chats) — and a
suspended one resumed by a gateway admin."""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field

from adapters.http.errors import ApiError, bad
from adapters.http.idempotency import kept, outcome_unknown, request_key
from adapters.http.models import NonBlank, Query, RequestBody, SessionId
from adapters.http.paging import IdCursor, limit_field, page_of, read_cursor
from adapters.http.replies import NextCursor, Reply, UnixMs
from adapters.http.route import Call
from gateway.auth import NotAllowed
from gateway.schedule_spec import BadSchedule
from gateway.schedules import NewSchedule, ScheduleNotFound, ScheduleQuota
from gateway.store.errors import OutcomeUnknown
from gateway.store.request_keys import KeptRequest, RequestKeyTaken
from gateway.store.schedules import Schedule

# Past any id the archive hands out, short of what an SQL integer holds.
MAX_SCHEDULE_ID: Final = 10**12


class ScheduleRequest(RequestBody):
    spec: Annotated[NonBlank, Field(max_length=200)] = Field(
        description="Five cron fields (`0 9 * * 1-5`), a macro (`@daily`) or `every 30m`.",
        examples=["0 9 * * *", "every 30m"],
    )
    prompt: NonBlank = Field(description="What runs as a task of the session at each due time.")
    skip_missed: bool = Field(
        False, description="Drop a due time missed while no gateway ran (default: run it once)."
    )
    timezone: str | None = Field(
        None, max_length=64, description="IANA zone a cron spec is read in; default: the setting."
    )


class ScheduleView(Reply):
    """A scheduled prompt of the session."""

    id: int
    session_id: SessionId
    spec: str
    prompt: str
    timezone: str
    misfire: Literal["once", "skip"]
    created_by: str = Field(description="`platform:sender id` of whoever made it.")
    created_by_name: str
    created_at: UnixMs
    next_due_at: UnixMs
    last_fired_at: UnixMs = Field(description="0 until it has fired.")
    suspended: bool = Field(
        False, description="It does not fire: its creator's credential was revoked."
    )
    suspended_at: UnixMs = Field(0, description="0 unless suspended.")
    suspended_reason: str = ""


class ScheduleList(Reply):
    """The session's schedules, oldest first."""

    schedules: list[ScheduleView]
    next_cursor: NextCursor = None


class SchedulesQuery(Query):
    # A session holds at most 50 (gateway/schedules.py): a page is all of them by default.
    limit: int = limit_field(50, 200)
    cursor: IdCursor | None = None


class ResumeRequest(RequestBody):
    take_over: bool = Field(
        False,
        description="Resume it even though its creator holds no credential now: it then acts"
        " for the caller.",
    )


class Unscheduled(Reply):
    """The schedule is gone."""

    removed: Literal[True] = True


def _view(schedule: Schedule) -> ScheduleView:
    return ScheduleView(
        id=schedule.id,
        session_id=schedule.session_id,
        spec=schedule.spec,
        prompt=schedule.prompt,
        timezone=schedule.timezone,
        misfire="skip" if schedule.skip_missed else "once",
        created_by=schedule.created_by_id,
        created_by_name=schedule.created_by_name,
        created_at=schedule.created_at,
        next_due_at=schedule.next_due_at,
        last_fired_at=schedule.last_fired_at,
        suspended=schedule.suspended,
        suspended_at=schedule.suspended_at,
        suspended_reason=schedule.suspended_reason,
    )


async def list_schedules(call: Call) -> ScheduleList:
    query = call.query(SchedulesQuery)
    after = read_cursor(query.cursor, int)
    await call.ctx.require_session(call.session_id)
    found = await call.ctx.runtime.schedules.of_session(
        call.session_id, after_id=0 if after is None else int(after[0]), limit=query.limit + 1
    )
    shown, next_cursor = page_of(found, query.limit, lambda s: (s.id,))
    return ScheduleList(schedules=[_view(s) for s in shown], next_cursor=next_cursor)


async def create_schedule(call: Call) -> ScheduleView:
    """The prompt runs as a task of the session at each due time; its reply goes where the
    session is (its Telegram chat, its Discord channel; the session's readers otherwise).
    With an Idempotency-Key sent before (within 24 hours, by the same caller), the answer is
    the schedule that first request made: none is made again."""
    body = await call.body(ScheduleRequest)
    asked = {"op": "schedule", "session_id": call.session_id, **body.model_dump()}
    request = request_key(call, asked)
    first = await kept(call, request)
    if first is not None:
        return await _made(call, first)
    limit = call.ctx.settings.max_message_chars
    if len(body.prompt) > limit:
        raise ApiError(413, "too_long", f"the prompt is longer than {limit} chars")
    await call.ctx.require_session(call.session_id)
    new = NewSchedule(body.spec, body.prompt, body.skip_missed, body.timezone)
    who = call.origin()
    admin = await call.ctx.access.is_gateway_admin(who)
    schedules = call.ctx.runtime.schedules
    try:
        made = await schedules.create(call.session_id, who, new, request, gateway_admin=admin)
    except ScheduleQuota as exc:
        raise ApiError(429, "schedule_quota", str(exc)) from None
    except BadSchedule as exc:
        bad(str(exc))
    except OutcomeUnknown:
        raise outcome_unknown(request) from None
    except RequestKeyTaken:  # the same key, sent twice at once: the other one stored first
        first = await kept(call, request)
        if first is None:
            raise
        return await _made(call, first)
    return _view(made)


async def _made(call: Call, first: KeptRequest) -> ScheduleView:
    """The schedule the key's first request made, as it stands now."""
    found = await call.ctx.runtime.schedules.of_session(first.session_id)
    for schedule in found:
        if schedule.id == first.schedule_id:
            return _view(schedule)
    raise ApiError(404, "not_found", "the schedule this Idempotency-Key made was removed since")


def _schedule_id(call: Call) -> int:
    raw = call.request.match_info["schedule_id"]
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_SCHEDULE_ID:
        raise ApiError(404, "not_found", "no such schedule in this session")
    return int(raw)


async def resume_schedule(call: Call) -> ScheduleView:
    """A suspended schedule fires again, from its next due time; for gateway admins. One
    whose creator holds no credential now is resumed only with `take_over` (it then acts
    for the caller)."""
    body = await call.body(ResumeRequest)
    schedule_id = _schedule_id(call)
    ctx = call.ctx
    found = await ctx.store.schedules.get(schedule_id)
    if found is None or found.session_id != call.session_id:
        raise ApiError(404, "not_found", "no such schedule in this session")
    who = call.origin()
    try:
        resumed = await ctx.runtime.schedules.resume(
            schedule_id,
            who,
            ctx.http_identities(),
            take_over=body.take_over,
            gateway_admin=await ctx.access.is_gateway_admin(who),
        )
    except NotAllowed as exc:
        raise ApiError(403, "not_allowed", str(exc)) from None
    except ScheduleNotFound as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    except BadSchedule as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    return _view(resumed)


async def delete_schedule(call: Call) -> Unscheduled:
    await call.ctx.require_session(call.session_id)
    schedule_id = _schedule_id(call)
    try:
        await call.ctx.runtime.schedules.remove(call.session_id, call.origin(), schedule_id)
    except ScheduleNotFound as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    return Unscheduled()
