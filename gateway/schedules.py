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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gateway.auth import Authority
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
from gateway.store.schedules import Schedule
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


class ScheduleNotFound(LookupError):
    pass


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
    ) -> None:
        self.store = store
        self.router = router
        self.authority = authority
        self.clock = clock
        self.default_timezone = default_timezone
        self.max_chars = max_chars
        self.grace_ms = MISFIRE_GRACE_MS + int(check_seconds * 1000)
        self.crash = crash

    # -- made, listed, removed -----------------------------------------------------------

    async def create(
        self, session_id: str, who: Origin, new: NewSchedule, request: RequestKey | None = None
    ) -> Schedule:
        """A new schedule, first due at its spec's next time; raises NotAllowed (a shared
        chat, not an admin) or BadSchedule. `request`: the client's key, kept with it in its
        transaction (RequestKeyTaken if another request stored the key first)."""
        validate_session_id(session_id)
        self.authority.require_shared_admin(who, session_id, "schedule prompts in")
        spec = parse_spec(new.spec)
        zone_name = new.timezone or self.default_timezone
        zone = parse_zone(zone_name)
        prompt = self._check_prompt(new.prompt)
        if len(await self.store.schedules.of_session(session_id)) >= MAX_PER_SESSION:
            raise BadSchedule(f"a session has at most {MAX_PER_SESSION} schedules")
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

    async def of_session(self, session_id: str) -> list[Schedule]:
        return await self.store.schedules.of_session(validate_session_id(session_id))

    async def remove(self, session_id: str, who: Origin, schedule_id: int) -> None:
        """Raises NotAllowed or ScheduleNotFound."""
        validate_session_id(session_id)
        self.authority.require_shared_admin(who, session_id, "remove schedules of")
        if not await self.store.schedules.remove(session_id, schedule_id):
            raise ScheduleNotFound(f"no schedule #{schedule_id} in this session")
        log.info("schedule removed", session=session_id, schedule=schedule_id, by=who.sender_key)

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
        inbound = Inbound(
            home_origin(schedule.session_id, schedule.id),
            schedule.session_id,
            schedule.prompt,
            source_key=schedule.source_key(due),
        )
        try:
            submission = await self.router.submit(inbound)
        except (TooManyTasks, MessageTooLong, UnstorableText) as exc:
            # Refused for good at this due time (the session is flooded, a limit shrank):
            # the next one may go through.
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
