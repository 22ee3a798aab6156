"""Scheduled prompts: made, listed and removed under the authorization rule, and fired — each
due time once — as tasks of their session whose replies go to the session's own chat.

Firing a due time is two writes: the prompt taken in as a task (message, journal and place in
the session's order, one transaction, through the router like any message) and the schedule
moved on. The message carries a key made of the schedule and the due time, which the archive
stores once: a crash between the two writes, or two instances firing the same time, leaves
one task, and the schedule is moved on when the due time is met again.

A due time found more than `grace` late was missed (no gateway ran then): with the default
policy it runs once however many times were missed, with `skip` it is dropped. Either way the
schedule moves to its first due time in the future.

A schedule acts for its creator: its task's sender is the creator's identity, so the limits
on one sender's tasks count it against them; a firing past them is dropped like any refused
one (the schedule stays and fires at its next due time). When the creator's credential is
gone the schedule is suspended (kept, not fired) until a gateway admin resumes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import islice, pairwise
from typing import Final

from cronsim import CronSim

from gateway.access import SessionAccess
from gateway.auth import Authority, NotAllowed
from gateway.clock import Clock
from gateway.commands.registry import parse_command
from gateway.crash import NO_CRASH, CrashPoints
from gateway.engine.errors import MessageTooLong, TooManyTasks
from gateway.engine.router import Router
from gateway.events import Inbound, Origin
from gateway.ids import Prefix, prefix_of, validate_session_id
from gateway.logs import get_logger
from gateway.schedule_spec import BadSchedule, Spec, parse_spec, parse_zone
from gateway.store.models import ScheduleRow
from gateway.store.request_keys import RequestKey
from gateway.store.schedules import Schedule, ScheduleTable
from gateway.store.sessions import SessionStore
from gateway.text import UnstorableText, check_storable

log = get_logger(__name__)

# The platform of a scheduled task in a session no chat platform holds (cli-*, chat-*,
# temp-*): nothing is pushed anywhere, the session's readers see the task like any other.
SCHEDULE_PLATFORM: Final = "schedule"
# A due time later than this when first seen counts as missed; the firing job's own period
# is added, so a slow round is never taken for downtime.
MISFIRE_GRACE_MS: Final = 60_000
MAX_PER_SESSION: Final = 50
# Firings of a cron spec looked at for its shortest gap: those of its first eight days (a
# week and a day, so weekly patterns are seen), at most this many.
GAP_SAMPLES: Final = 400
GAP_HORIZON_MS: Final = 8 * 86_400_000
REVOKED: Final = "the credential of its creator was revoked"


class ScheduleNotFound(LookupError):
    pass


class ScheduleQuota(BadSchedule):
    """A schedule past one of the identity's limits; the message names the setting."""


def creator_valid(creator: str, valid_http: Collection[str]) -> bool:
    """Whether a schedule's creator can still act: an HTTP identity while it holds a
    credential (`valid_http`), any other while its platform vouches for it."""
    return not creator.startswith("http:") or creator in valid_http


def shortest_gap_ms(spec: Spec, zone_name: str) -> int:
    """The shortest time between two firings of `spec` (of a cron spec, among its firings
    in `GAP_HORIZON_MS` from a fixed day, at most `GAP_SAMPLES` of them)."""
    if spec.interval_ms:
        return spec.interval_ms
    start = datetime(2026, 1, 1, tzinfo=parse_zone(zone_name))
    end = start.timestamp() * 1000 + GAP_HORIZON_MS
    times: list[float] = []
    for fired in islice(CronSim(spec.cron, start), GAP_SAMPLES):
        times.append(fired.timestamp() * 1000)
        if times[-1] > end:
            break
    return int(min((b - a for a, b in pairwise(times)), default=GAP_HORIZON_MS))


def home_origin(session_id: str, schedule_id: int) -> Origin:
    """Where a scheduled task of the session answers: the Telegram chat (and forum topic) or
    the Discord channel the session is, read back from its id (`gateway.ids`)."""
    prefix = prefix_of(session_id)
    key = session_id.split("-", 1)[1]
    platform, channel = SCHEDULE_PLATFORM, ""
    if prefix is Prefix.tg:
        chat, _, topic = key.partition("_")
        platform, channel = "telegram", f"{chat}:{topic}" if topic else chat
    elif prefix is Prefix.dc:
        platform, channel = "discord", key
    return Origin(
        platform,
        channel_id=channel,
        sender_id=f"schedule:{schedule_id}",
        sender_name=f"schedule #{schedule_id}",
    )


async def resume_suspended(
    table: ScheduleTable,
    schedule_id: int,
    who: Origin,
    valid_http: Collection[str],
    now_ms: int,
    take_over: bool,
) -> Schedule:
    """`Schedules.resume` once the caller is known to be a gateway admin (also what
    `agenvoy schedule resume` does, on the archive directly)."""
    found = await table.get(schedule_id)
    if found is None:
        raise ScheduleNotFound(f"no schedule #{schedule_id}")
    if not found.suspended:
        raise BadSchedule(f"schedule #{schedule_id} is not suspended")
    creator = None
    if not creator_valid(found.created_by_id, valid_http):
        if not take_over:
            raise BadSchedule(
                f"{found.created_by_id} holds no credential now; issue it one again, or take"
                " the schedule over (it then acts for you)"
            )
        creator = (who.sender_key, who.sender_name or who.sender_id)
    upcoming = parse_spec(found.spec).next_after(now_ms, parse_zone(found.timezone))
    if not await table.resume(schedule_id, upcoming, creator=creator):
        raise BadSchedule(f"schedule #{schedule_id} is not suspended")
    taken = creator is not None
    log.info("schedule resumed", schedule=schedule_id, by=who.sender_key, took_over=taken)
    resumed = await table.get(schedule_id)
    if resumed is None:
        raise ScheduleNotFound(f"no schedule #{schedule_id}")
    return resumed


@dataclass(frozen=True, slots=True)
class NewSchedule:
    spec: str
    prompt: str
    skip_missed: bool = False
    timezone: str | None = None  # None: the gateway's default


class Schedules:
    def __init__(
        self,
        store: SessionStore,
        router: Router,
        authority: Authority,
        clock: Clock,
        *,
        default_timezone: str,
        max_chars: int,
        check_seconds: float,
        crash: CrashPoints = NO_CRASH,
        max_per_identity: int = 0,
        min_interval_seconds: int = 0,
    ) -> None:
        self.store = store
        self.router = router
        self.authority = authority
        self.clock = clock
        self.default_timezone = default_timezone
        self.max_chars = max_chars
        self.grace_ms = MISFIRE_GRACE_MS + int(check_seconds * 1000)
        self.crash = crash
        self.max_per_identity = max_per_identity
        self.min_interval_seconds = min_interval_seconds
        # Who is a gateway admin, for callers that do not say: the operator's platforms and
        # the listed admins (an open HTTP gateway's anonymous callers are told by the API).
        self._access = SessionAccess(store.ownership, authority, open_gateway=_never)

    # -- made, listed, removed -----------------------------------------------------------

    async def create(
        self,
        session_id: str,
        who: Origin,
        new: NewSchedule,
        request: RequestKey | None = None,
        *,
        gateway_admin: bool | None = None,
    ) -> Schedule:
        """A new schedule, first due at its spec's next time; raises NotAllowed (a shared
        chat, not an admin), ScheduleQuota (past the identity's limits; `gateway_admin`, or
        whether `who` is one when not given, exempts) or BadSchedule. `request`: the client's
        key, kept with it in its transaction (RequestKeyTaken if another request stored the
        key first)."""
        validate_session_id(session_id)
        self.authority.require_shared_admin(who, session_id, "schedule prompts in")
        spec = parse_spec(new.spec)
        zone_name = new.timezone or self.default_timezone
        zone = parse_zone(zone_name)
        prompt = self._check_prompt(new.prompt)
        if len(await self.store.schedules.of_session(session_id)) >= MAX_PER_SESSION:
            raise BadSchedule(f"a session has at most {MAX_PER_SESSION} schedules")
        if gateway_admin is None:
            gateway_admin = await self._access.is_gateway_admin(who)
        if not gateway_admin:
            await self._check_quota(who, spec, zone_name)
        now = self.clock.now_ms()
        await self.store.ensure(session_id)
        made = await self.store.schedules.add(
            ScheduleRow(
                session_id=session_id,
                spec=spec.text,
                prompt=prompt,
                timezone=zone_name,
                misfire="skip" if new.skip_missed else "once",
                created_by_id=who.sender_key,
                created_by_name=who.sender_name or who.sender_id,
                created_at=now,
                next_due_at=spec.next_after(now, zone),
            ),
            request,
        )
        log.info("schedule made", session=session_id, schedule=made.id, by=who.sender_key)
        return made

    async def _check_quota(self, who: Origin, spec: Spec, zone_name: str) -> None:
        least = self.min_interval_seconds
        # No spec fires more often than once a minute (gateway/schedule_spec.py).
        if least > 60:
            # Some thousand steps of cron arithmetic: not on the event loop.
            gap = await asyncio.to_thread(shortest_gap_ms, spec, zone_name) // 1000
        else:
            gap = least
        if gap < least:
            raise ScheduleQuota(
                f"{spec.text!r} fires every {gap} s at times; a schedule fires at most every"
                f" {least} s (AGENVOY_MIN_SCHEDULE_INTERVAL_SECONDS)"
            )
        most = self.max_per_identity
        if not most:
            return
        made = await self.store.schedules.count_by(
            await self.store.ownership.linked(who.sender_key)
        )
        if made >= most:
            raise ScheduleQuota(
                f"{who.sender_key} has {made} schedules; one identity may have at most {most}"
                " (AGENVOY_MAX_SCHEDULES_PER_IDENTITY): remove one first"
            )

    def _check_prompt(self, prompt: str) -> str:
        prompt = prompt.strip()
        if not prompt:
            raise BadSchedule("a schedule needs a prompt")
        if parse_command(prompt) is not None:
            raise BadSchedule("a schedule runs a prompt for the agent, not a /command")
        if len(prompt) > self.max_chars:
            raise BadSchedule(f"the prompt is longer than {self.max_chars} chars")
        try:
            check_storable(prompt, "the prompt")
        except UnstorableText as exc:
            raise BadSchedule(str(exc)) from None
        return prompt

    async def of_session(
        self, session_id: str, *, after_id: int = 0, limit: int | None = None
    ) -> list[Schedule]:
        return await self.store.schedules.of_session(
            validate_session_id(session_id), after_id=after_id, limit=limit
        )

    async def remove(self, session_id: str, who: Origin, schedule_id: int) -> None:
        """Raises NotAllowed or ScheduleNotFound."""
        validate_session_id(session_id)
        self.authority.require_shared_admin(who, session_id, "remove schedules of")
        if not await self.store.schedules.remove(session_id, schedule_id):
            raise ScheduleNotFound(f"no schedule #{schedule_id} in this session")
        log.info("schedule removed", session=session_id, schedule=schedule_id, by=who.sender_key)

    # -- suspended and resumed -----------------------------------------------------------

    async def suspend_creators(self, creators: Collection[str], reason: str = REVOKED) -> int:
        """Stop the schedules of these identities from firing (their credential is gone);
        how many were suspended now. Safe to run on several instances at once."""
        ids = await self.store.schedules.suspend_by(creators, self.clock.now_ms(), reason)
        if ids:
            log.warning("schedules suspended", schedules=ids, creators=sorted(creators), why=reason)
        return len(ids)

    async def suspend_orphans(self, valid_http: Collection[str]) -> int:
        """Suspend the schedules made over HTTP by identities that hold no credential now
        (a token removed while no gateway ran); how many."""
        now = self.clock.now_ms()
        ids = await self.store.schedules.suspend_http_except(valid_http, now, REVOKED)
        if ids:
            log.warning("schedules suspended at start", schedules=ids, why=REVOKED)
        return len(ids)

    async def resume(
        self,
        schedule_id: int,
        who: Origin,
        valid_http: Collection[str],
        *,
        take_over: bool = False,
        gateway_admin: bool | None = None,
    ) -> Schedule:
        """Let a suspended schedule fire again, from its next due time after now; for a
        gateway admin only. A creator that still has no credential keeps it suspended unless
        the admin `take_over`s: then it acts for the admin. Raises NotAllowed,
        ScheduleNotFound or BadSchedule (not suspended; its creator is not valid)."""
        if gateway_admin is None:
            gateway_admin = await self._access.is_gateway_admin(who)
        if not gateway_admin:
            raise NotAllowed("only a gateway admin may resume a suspended schedule")
        return await resume_suspended(
            self.store.schedules, schedule_id, who, valid_http, self.clock.now_ms(), take_over
        )

    # -- firing --------------------------------------------------------------------------

    async def fire_due(self) -> int:
        """Fire every schedule due now, each due time once; returns how many tasks it took
        in. Run by one instance at a time (the job's lease); a second one changes nothing."""
        now = self.clock.now_ms()
        fired = 0
        for schedule in await self.store.schedules.due(now):
            try:
                fired += await self._fire(schedule, now)
            except Exception:  # one broken schedule must not hold up the others
                log.exception("schedule not fired", schedule=schedule.id)
        return fired

    async def _fire(self, schedule: Schedule, now: int) -> bool:
        due = schedule.next_due_at
        spec: Spec = parse_spec(schedule.spec)
        upcoming = spec.next_after(now, parse_zone(schedule.timezone), due_ms=due)
        context = {"schedule": schedule.id, "session": schedule.session_id, "due": due}
        if now - due > self.grace_ms and schedule.skip_missed:
            await self.store.schedules.advance(schedule.id, due, upcoming, fired_at=None)
            log.info("schedule missed a due time: skipped", next_due=upcoming, **context)
            return False
        origin = home_origin(schedule.session_id, schedule.id)
        # Limits, ownership and the audit count the task against its creator.
        origin = replace(origin, acting_for=schedule.created_by_id)
        inbound = Inbound(
            origin,
            schedule.session_id,
            schedule.prompt,
            source_key=schedule.source_key(due),
        )
        try:
            submission = await self.router.submit(inbound)
        except (TooManyTasks, MessageTooLong, UnstorableText, NotAllowed) as exc:
            # Refused for good at this due time (the session is flooded, a limit shrank, its
            # creator is banned there): the next one may go through.
            await self.store.schedules.advance(schedule.id, due, upcoming, fired_at=None)
            log.warning("schedule refused", reason=str(exc), **context)
            return False
        self.crash.reach("scheduled")
        await self.store.schedules.advance(schedule.id, due, upcoming, fired_at=now)
        log.info(
            "schedule fired",
            task=submission.task_hash,
            again=submission.duplicate,
            next_due=upcoming,
            **context,
        )
        return not submission.duplicate


async def _never() -> bool:
    return False
