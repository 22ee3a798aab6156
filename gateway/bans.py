"""Bans: a member kept out of one shared chat by its admins, or of the whole gateway by the
operator (`agenvoy ban`).

- A banned member's messages start no task, and are **not kept as context** either: they are
  not archived, not in `history.json`, not shown to the agent, so a banned member cannot steer
  the agent through what others' tasks read. One `banned` line in the session's `action.log`
  records that a message was turned away (who, never what).
- The member is **not told** in the chat, at the first message or later: a notice each time
  would let them flood the chat through the bot. Where an answer goes to them alone (a
  Discord slash command's response, an HTTP request) they get a refusal.
- A ban counts every identity linked with the banned one (`identity_link`).
- Checked on every message from a snapshot of the ban table at most a second old: a ban given
  on one instance holds on all of them within a second, and at once on the instance that gave
  it (its snapshot is dropped).
- A chat's admins ban and unban in their chat; gateway admins (`AGENVOY_ADMINS`) cannot be
  banned by them, and a chat ban does not keep out whom the platform calls an admin of that
  chat. The operator's gateway-wide ban (scope `*`) keeps out everyone it names.
- A Telegram forum topic belongs to its chat: a ban there holds in every topic. A Discord
  thread is a channel of its own, and so a chat of its own.
- A ban ends what the member already started where it holds: their running and waiting tasks
  are canceled as `/cancel` cancels them (the run ends as canceled, by the ban, in action.log),
  at once on the instance that gave the ban and within a second of it on the others (`sweep`,
  also for the operator's bans, which another process writes). A prompt of such a task closes
  with it; nobody answers it. A banned member answers no prompt where the ban holds, their own
  or, as an admin, another's (`screen_answer`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from gateway.auth import Authority, NotAllowed
from gateway.clock import Clock
from gateway.engine.views import TaskView
from gateway.events import Inbound, Origin
from gateway.ids import Prefix, prefix_of
from gateway.logs import get_logger
from gateway.store.bans import EVERYWHERE, Ban, BanList, BanSnapshot
from gateway.store.fslock import SessionDirectoryMissing
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

FRESH_SECONDS: Final = 1.0
MAX_REASON_CHARS: Final = 500
_KEY_RE: Final = re.compile(r"[a-z]{1,16}:[^\s:]{1,180}")
_MENTION_RE: Final = re.compile(r"<@!?(\d{1,25})>")

# Whether the platform calls a member (their id there) an admin of the chat of a session.
AdminCheck = Callable[[str, str], Awaitable[bool]]


class LiveTasks(Protocol):
    """The tasks of this instance that have not ended, and how to cancel one (the router)."""

    def live_tasks(self) -> list[TaskView]: ...

    async def cancel(self, session_id: str, task_hash: str = "", *, by: str = "") -> bool: ...


class Banned(NotAllowed):
    """The sender is banned where they wrote; nothing of the message was kept."""

    code = "banned"

    def __init__(self, ban: Ban) -> None:
        where = "this gateway" if ban.scope == EVERYWHERE else "this chat"
        super().__init__(f"you are banned from {where}")
        self.ban = ban


def chat_scope(session_id: str) -> str:
    """The scope a ban given in `session_id` has: the chat (a Telegram topic's chat)."""
    if prefix_of(session_id) is Prefix.tg:
        return session_id.split("_", 1)[0]
    return session_id


def identity_of(text: str, platform: str) -> str:
    """The identity a command names: `platform:id` as written, a Discord mention, or a bare
    id of the platform it is used on. Raises ValueError for anything else."""
    word = text.strip()
    mention = _MENTION_RE.fullmatch(word)
    if mention is not None:
        return f"{platform}:{mention.group(1)}"
    if word.lstrip("-").isdigit() and len(word) <= 25:
        return f"{platform}:{word}"
    if _KEY_RE.fullmatch(word):
        return word
    raise ValueError(f"not a member: {word[:40]!r} (give their user id, or reply to them)")


class Bans:
    def __init__(
        self,
        bans: BanList,
        store: SessionStore,
        authority: Authority,
        clock: Clock,
        *,
        fresh_seconds: float = FRESH_SECONDS,
    ) -> None:
        self.bans = bans
        self.store = store
        self.authority = authority
        self.clock = clock
        self.fresh_seconds = fresh_seconds
        self._snapshot: BanSnapshot | None = None
        self._taken_at = 0.0
        self._refresh = asyncio.Lock()
        self._admin_checks: dict[str, AdminCheck] = {}
        self._tasks: LiveTasks | None = None

    def enforce_on(self, tasks: LiveTasks) -> None:
        """Cancel the tasks of whom a ban keeps out (`sweep`) among `tasks`."""
        self._tasks = tasks

    def register_admin_check(self, platform: str, check: AdminCheck) -> None:
        """How a front-end tells whether a member is an admin of a chat: whom that chat's
        admins may not ban."""
        self._admin_checks[platform] = check

    async def is_chat_admin(self, session_id: str, identity: str) -> bool:
        platform, _, sender_id = identity.partition(":")
        check = self._admin_checks.get(platform)
        return check is not None and await check(session_id, sender_id)

    async def screen(self, inbound: Inbound) -> None:
        """Raise `Banned` when the sender of `inbound` may not write where it was sent."""
        ban = await self.keeping_out(inbound.origin, inbound.session_id)
        if ban is None:
            return
        await self._note(inbound, ban)
        raise Banned(ban)

    async def keeping_out(self, who: Origin, session_id: str) -> Ban | None:
        """The ban that keeps `who` out of `session_id`, if any."""
        snapshot = await self._current()
        if not snapshot.bans:
            return None
        scopes = (chat_scope(session_id), session_id, EVERYWHERE)
        ban = snapshot.matching(scopes, who.sender_key)
        if ban is not None and ban.scope != EVERYWHERE and self.authority.is_admin(who):
            return None  # chat admins are out of reach of a chat's bans
        return ban

    async def ban(self, scope: str, identity: str, *, by: str, reason: str = "") -> bool:
        """False when `identity` was banned there already."""
        if len(reason) > MAX_REASON_CHARS:
            raise ValueError(f"the reason is longer than {MAX_REASON_CHARS} characters")
        added = await self.bans.add(scope, identity, by=by, reason=reason, at=self.clock.now_ms())
        self._snapshot = None
        log.info("banned", scope=scope, identity=identity, by=by)
        await self.sweep()
        return added

    async def screen_answer(self, who: Origin, session_id: str) -> None:
        """Raise `Banned` when `who` may not answer a prompt in `session_id`."""
        ban = await self.keeping_out(who, session_id)
        if ban is not None:
            raise Banned(ban)

    async def sweep(self) -> int:
        """Cancel every task here whose requester a ban keeps out of its session (waiting
        ones first, so that none of them starts meanwhile); how many were canceled. Reads
        the bans only while some task is live."""
        if self._tasks is None:
            return 0
        live = sorted(self._tasks.live_tasks(), key=lambda view: view.status != "queued")
        canceled = 0
        for view in live:
            ban = await self.keeping_out(view.origin, view.session_id)
            if ban is None:
                continue
            where = "everywhere" if ban.scope == EVERYWHERE else ban.scope
            by = f"ban ({where}) by {ban.banned_by}"
            if await self._tasks.cancel(view.session_id, view.task_hash, by=by):
                canceled += 1
                log.info(
                    "task of a banned member canceled",
                    session_id=view.session_id,
                    task=view.task_hash,
                    identity=view.origin.sender_key,
                    scope=ban.scope,
                )
        return canceled

    async def unban(self, scope: str, identity: str, *, by: str) -> bool:
        lifted = await self.bans.remove(scope, identity)
        self._snapshot = None
        if lifted:
            log.info("ban lifted", scope=scope, identity=identity, by=by)
        return lifted

    async def listed(self, scope: str | None = None) -> list[Ban]:
        return await self.bans.listed(scope)

    async def _current(self) -> BanSnapshot:
        snapshot = self._snapshot
        if snapshot is not None and self.clock.monotonic() - self._taken_at < self.fresh_seconds:
            return snapshot
        async with self._refresh:  # one read for every message that waits on it
            if self._snapshot is not None and snapshot is not self._snapshot:
                return self._snapshot
            started = self.clock.monotonic()
            self._snapshot = await self.bans.snapshot()
            self._taken_at = started
            return self._snapshot

    async def _note(self, inbound: Inbound, ban: Ban) -> None:
        """One audit line per message turned away: who, and under which ban; never its text."""
        origin = inbound.origin
        body = f"message from {origin.sender_key} not taken: banned ({ban.scope})"
        log_file = self.store.files(inbound.session_id).action_log
        try:
            await asyncio.to_thread(
                log_file.append,
                "banned",
                body,
                window_hash=origin.window_hash,
                identity=origin.sender_key,
            )
        except SessionDirectoryMissing:
            # A chat whose first message comes from a banned member: its session is made for
            # the audit line, as any member's first message would make it.
            await self.store.ensure(inbound.session_id)
            await asyncio.to_thread(
                log_file.append,
                "banned",
                body,
                window_hash=origin.window_hash,
                identity=origin.sender_key,
            )
