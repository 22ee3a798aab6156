"""Quotas and budgets: what one person (an identity and those linked with it) and one shared
chat may take, checked once, when a message is taken in, before anything of it is stored.

Limits, 0 meaning none: `messages_per_minute`, `running` and `waiting` tasks, `sessions`
owned (`cli-`/`chat-`), and the budgets of gateway/budgets.py: `tokens_day`/`tokens_month`
(input + output tokens since 00:00 UTC of the day, of the 1st of the month) and
`cost_day`/`cost_month` (the same in dollars, by the price table). A shared chat (`dc-`/`tg-`)
has `messages_per_minute` and the budgets of its own. Budgets are asked again before each
model call of a run (`recheck`), so a tool loop or subagents stop at the limit. Defaults come
from the settings; the `quota` table overrides them per identity or per chat. Gateway admins
are exempt from all but the task counts (which guard the gateway's load rather than its spend)
unless the settings say otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from gateway.budgets import BUDGET_KEYS, check_budgets, day_start, micros, next_month, seconds
from gateway.clock import Clock
from gateway.engine.errors import QuotaExceeded, TooManyTasks
from gateway.events import Origin
from gateway.ids import prefix_of
from gateway.ownership import is_shared
from gateway.rate_window import LocalWindow, Rate, RateWindow
from gateway.settings import Settings
from gateway.store.quotas import OWNED_PREFIXES, PersonQuotas, Quotas
from gateway.store.sessions import SessionStore

# Where they were before gateway/budgets.py held them; callers import them from here.
__all__ = ["Admission", "People", "Person", "day_start", "defaults", "next_month"]

PERSON_KEYS = ("messages_per_minute", "running", "waiting", "sessions", *BUDGET_KEYS)
CHAT_KEYS = ("messages_per_minute", *BUDGET_KEYS)
# How many tasks an identity's person has waiting or running (the scheduler's count).
TasksOf = Callable[[str], int]


def defaults(settings: Settings) -> tuple[dict[str, int], dict[str, int]]:
    """The settings' limits: (a person's, a shared chat's)."""
    person = {
        "messages_per_minute": settings.quota_messages_per_minute,
        "running": settings.max_running_per_sender,
        "waiting": settings.max_pending_per_sender,
        "sessions": settings.quota_sessions,
        "tokens_day": settings.quota_tokens_day,
        "tokens_month": settings.quota_tokens_month,
        "cost_day": micros(settings.quota_cost_day),
        "cost_month": micros(settings.quota_cost_month),
    }
    chat = {
        "messages_per_minute": settings.chat_quota_messages_per_minute,
        "tokens_day": settings.chat_quota_tokens_day,
        "tokens_month": settings.chat_quota_tokens_month,
        "cost_day": micros(settings.chat_quota_cost_day),
        "cost_month": micros(settings.chat_quota_cost_month),
    }
    return person, chat


@dataclass(frozen=True, slots=True)
class Person:
    key: str  # the identity its tasks count under: the least of its identities
    identities: frozenset[str]
    limits: Mapping[str, int]
    exempt: bool


class People:
    """Which key each identity's tasks count under, and that person's running limit: what the
    scheduler asks, synchronously, of what admission learned when their message came in."""

    def __init__(self, running: int) -> None:
        self._running_default = running
        self._keys: dict[str, str] = {}
        self._running: dict[str, int] = {}

    def key(self, identity: str) -> str:
        return self._keys.get(identity, identity)

    def running(self, key: str) -> int:
        return self._running.get(key, self._running_default)

    def learn(self, person: Person) -> None:
        for identity in person.identities:
            self._keys[identity] = person.key
        self._running[person.key] = person.limits.get("running") or self._running_default


class Admission:
    """The one check a message passes before it becomes a task."""

    def __init__(
        self,
        settings: Settings,
        store: SessionStore,
        admins: frozenset[str],
        clock: Clock,
        tasks_of: TasksOf,
    ) -> None:
        self.store = store
        self.quotas = Quotas(store.db)
        self.admins = admins
        self.clock = clock
        self.exempt_admins = settings.quota_admins_exempt
        self.priced = settings.prices is not None  # spend is shown, and held, in money too
        self.person_defaults, self.chat_defaults = defaults(settings)
        self.people = People(settings.max_running_per_sender)
        self._tasks_of = tasks_of
        # Messages a minute: this instance's count, or one all instances share (Runtime).
        self.window: RateWindow = LocalWindow()

    async def person(self, identity: str) -> Person:
        return self._person(identity, await self.quotas.of_person(identity))

    def _person(self, identity: str, found: PersonQuotas) -> Person:
        identities, overrides = found
        limits = dict(self.person_defaults)
        # The identity's own overrides win over those of the identities linked with it.
        for subject in sorted(overrides, key=lambda s: (s == identity, s)):
            limits.update({k: v for k, v in overrides[subject].items() if k in PERSON_KEYS})
        exempt = self.exempt_admins and bool(identities & self.admins)
        person = Person(min(identities), identities, limits, exempt)
        self.people.learn(person)
        return person

    async def chat(self, session_id: str) -> dict[str, int]:
        return self._chat(await self.quotas.of_chat(session_id))

    def _chat(self, own: Mapping[str, int]) -> dict[str, int]:
        limits = dict(self.chat_defaults)
        limits.update({k: v for k, v in own.items() if k in CHAT_KEYS})
        return limits

    async def admit(self, origin: Origin, session_id: str, message: str = "") -> None:
        """Raise `QuotaExceeded` (or `TooManyTasks`) when `origin`'s message to `session_id`
        would pass a limit; else count it — once for `message` (its source key), however
        often it is taken in again (a retry after a crash cut off the first)."""
        now = self.clock.now_ms()
        chat: dict[str, int] | None = None
        if is_shared(session_id):  # the chat's overrides come with the sender's, in one read
            found, own = await self.quotas.of_person_and_chat(origin.sender_key, session_id)
            person, chat = self._person(origin.sender_key, found), self._chat(own)
        else:
            person = await self.person(origin.sender_key)
        waiting = person.limits["waiting"]
        if waiting and self._tasks_of(origin.sender_key) >= waiting:
            raise TooManyTasks(waiting)
        if person.exempt:
            return
        # Only a sessions limit needs to know whether the message makes its session: a read
        # every message would pay for otherwise.
        counted = person.limits["sessions"] and f"{prefix_of(session_id)}-" in OWNED_PREFIXES
        if counted and not await self.store.exists(session_id):
            await self._check_sessions(person)
        usage = self.store.usage
        await check_budgets(usage, person.limits, now, "", identities=person.identities)
        if chat is not None:
            await check_budgets(usage, chat, now, "this chat's ", session_id=session_id)
        # Last: a message counts against the minute only once nothing else refuses it.
        rates = [Rate(person.key, person.limits["messages_per_minute"])]
        if chat is not None:
            rates.append(Rate(session_id, chat["messages_per_minute"]))
        refused = await self.window.take(rates, now, message)
        if refused is not None:
            rate, wait = refused
            whose = "you have" if rate is rates[0] else "this chat has"
            self._rate_limited(rate.limit, wait, whose)

    async def recheck(
        self, identity: str, session_id: str, profile: Mapping[str, int] | None = None
    ) -> None:
        """Raise `QuotaExceeded` when the budgets of `identity`'s person, or of the shared chat
        `session_id`, are spent: asked before each model call of a run taken in under them.
        `profile`: the budgets per member of the profile that answers the run, held against
        the person's whole spend besides their own budgets."""
        person = await self.person(identity)
        if person.exempt:
            return
        now, usage = self.clock.now_ms(), self.store.usage
        await check_budgets(usage, person.limits, now, "", identities=person.identities)
        if profile:
            whose = "this agent's "
            await check_budgets(usage, profile, now, whose, identities=person.identities)
        if is_shared(session_id):
            chat = await self.chat(session_id)
            await check_budgets(usage, chat, now, "this chat's ", session_id=session_id)

    async def admit_session(self, origin: Origin) -> None:
        """Raise `QuotaExceeded` when `origin` owns as many sessions as it may."""
        person = await self.person(origin.sender_key)
        if not person.exempt:
            await self._check_sessions(person)

    async def _check_sessions(self, person: Person) -> None:
        limit = person.limits["sessions"]
        if limit and await self.quotas.sessions_owned(person.identities) >= limit:
            raise QuotaExceeded(
                "session_quota",
                f"limit of {limit:,} sessions reached; delete one to make another",
                None,
            )

    def _rate_limited(self, limit: int, wait: int, whose: str) -> NoReturn:
        raise QuotaExceeded(
            "rate_limited",
            f"{whose} sent {limit:,} message{'s' if limit != 1 else ''} in the last minute, "
            f"the most allowed; try again in {seconds(wait)} s",
            seconds(wait),
        )
