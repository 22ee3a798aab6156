"""Where a task's events go: the task itself, the session's audit trail, live subscribers, and
the task's origin — through the outbox for platforms the gateway pushes to.

Two kinds of platform: *pushed* ones have a `Sink` (Discord, Telegram): replies and prompts are
recorded in the outbox and handed to the sink, once. *Pulled* ones (HTTP, the terminal) read
a task's events from the gateway themselves (streams, task routes), so nothing is pushed to
them and the outbox keeps nothing for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Final

from gateway.adapter import Progress, Sink
from gateway.clock import Clock
from gateway.engine.journal import JournalHead
from gateway.engine.outbox import DEFAULT_EXPIRY_SECONDS, OUTBOX_KINDS, Courier
from gateway.engine.task import Task
from gateway.engine.traffic import LOST, Traffic
from gateway.events import Event, NoticeEvent, Origin, UserEvent
from gateway.ids import validate_session_id
from gateway.logs import get_logger
from gateway.store.actionlog import ActionLog
from gateway.store.outbox import OutboxEntry, OutboxItem
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

SUBSCRIBER_BUFFER = 256
# How far back in a session's action.log a taken-up task's `user` line is looked for.
RESTORE_LOOKBACK: Final = 2000

# What an action.log line's body leaves out: the line says them itself.
_NOT_IN_BODY: Final = {"kind", "session_id", "task_hash", "window_hash", "at"}


def _lines(events: list[Event]) -> list[tuple[str, str]]:
    """`action.log` entries of stamped events: the kind, and the body without what the line
    says itself."""
    return [(event.kind, event.model_dump_json(exclude=_NOT_IN_BODY)) for event in events]


class Subscription:
    """Live events of one session, for a reader that may be slow: drops rather than blocks."""

    def __init__(self, session_id: str, size: int = SUBSCRIBER_BUFFER) -> None:
        self.session_id = session_id
        self.queue: asyncio.Queue[Event] = asyncio.Queue(size)
        self.dropped = 0

    def offer(self, event: Event) -> None:
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    async def get(self) -> Event:
        return await self.queue.get()


class Dispatch:
    def __init__(
        self,
        store: SessionStore,
        counters: dict[str, int],
        clock: Clock,
        *,
        claimant: str | None = None,
        claim_seconds: float = 30.0,
        outbox_expiry_seconds: float = DEFAULT_EXPIRY_SECONDS,
        published: Callable[[Task, Event], Awaitable[None]] | None = None,
        traffic: Traffic | None = None,
    ) -> None:
        """`claimant`: the name this instance claims deliveries under, when several send
        from one outbox (None: one instance, nothing to claim); a claim lapses after
        `claim_seconds`."""
        self.store = store
        self.counters = counters
        # Messages out per platform (gateway.engine.traffic), the courier's and the sinks'.
        self.traffic = traffic if traffic is not None else Traffic()
        self.sinks: dict[str, Sink] = {}
        self.pulled: set[str] = set()
        self.courier = Courier(
            store.outbox,
            self.sinks,
            self._log_for_courier,
            clock=clock,
            claimant=claimant,
            claim_seconds=claim_seconds,
            expiry_seconds=outbox_expiry_seconds,
            counters=counters,
            traffic=self.traffic,
        )
        self._subscribers: dict[str, set[Subscription]] = {}
        # Told of every event recorded here (the relay, which tells the other instances).
        self.published = published

    # -- wiring ----------------------------------------------------------------------------

    def register_sink(self, platform: str, sink: Sink) -> None:
        self.sinks[platform] = sink
        self.pulled.discard(platform)

    def register_pulled(self, platform: str) -> None:
        """The platform's clients read every event from the gateway: push nothing to them."""
        self.pulled.add(platform)
        self.sinks.pop(platform, None)

    def pushed(self, origin: Origin) -> bool:
        """Whether replies to this origin go out through the outbox."""
        return origin.platform not in self.pulled

    @contextlib.contextmanager
    def subscribe(self, session_id: str) -> Iterator[Subscription]:
        sub = Subscription(validate_session_id(session_id))
        self._subscribers.setdefault(session_id, set()).add(sub)
        try:
            yield sub
        finally:
            self._subscribers[session_id].discard(sub)
            if not self._subscribers[session_id]:
                del self._subscribers[session_id]
            if sub.dropped:
                self.counters["subscriber_drops"] += sub.dropped
                log.warning("slow subscriber lost events", session=session_id, dropped=sub.dropped)

    def subscribers(self, session_id: str) -> int:
        return len(self._subscribers.get(session_id, ()))

    # -- events ----------------------------------------------------------------------------

    async def emit(self, task: Task, event: Event, *, item: OutboxItem | None = None) -> None:
        """Record `event` (task, audit trail, subscribers), then deliver it to the origin."""
        event = await self.record(task, event)
        await self.deliver(task, event, item=item)

    async def record(self, task: Task, event: Event) -> Event:
        """Stamp `event` with its task and window, and record it everywhere but the origin:
        the task holds it at once (what waits on the task sees it), then its line is written,
        then the subscribers and the other instances are given it."""
        stamped = self._stamped(task, [event])
        self.counters["events"] += 1
        await task.add_event(stamped[0])
        await self._log(task, stamped)
        await self._announce(task, stamped[0])
        return stamped[0]

    async def show(self, task: Task, events: list[Event]) -> None:
        """Give events whose lines are written to their task, the live subscribers and the
        other instances, in order."""
        self.counters["events"] += len(events)
        for event in events:
            await task.add_event(event)
            await self._announce(task, event)

    def line_writer(
        self,
        session_id: str,
        task_hash: str,
        origin: Origin,
        events: list[Event],
        then: Callable[[], None] | None = None,
        *,
        hold: bool = False,
    ) -> tuple[list[Event], Callable[[], None]]:
        """`events` stamped for the task `task_hash`, not shown to anyone yet (`show`), and a
        blocking write of their `action.log` lines for a hand-off off the event loop that is
        made anyway (a write to the archive: the lines go with it rather than in a hand-off of
        their own). The write is done once, however often it is called (a retried archive
        write calls it again); `then` follows it. `hold`: the write follows a commit, which
        its failure cannot undo, so lines the disk refuses are held for the session's next
        line (gateway/store/actionlog.py) rather than failing the write."""
        stamped = self._stamp(task_hash, origin, events)
        log_file = self.store.files(session_id).action_log
        lines = _lines(stamped)
        written: list[bool] = []

        def write() -> None:
            if written:
                return
            try:
                log_file.append_all(
                    lines,
                    window_hash=origin.window_hash,
                    task_hash=task_hash,
                    identity=origin.sender_key,
                    hold=hold,
                )
            except FileNotFoundError:
                log.warning("session gone before its lines were written", session=session_id)
            written.append(True)
            if then is not None:
                then()

        return stamped, write

    async def restore_user_lines(self, heads: Sequence[JournalHead]) -> int:
        """Write the `user` lines that tasks taken up after a crash lack, from their journals,
        at the time each message arrived; returns how many. A message's line follows its
        commit, so a kill in between, or the end of a process that held the line for a full
        disk, leaves a stored message without one. Looked for among the session's last
        `RESTORE_LOOKBACK` lines: a task taken up is among a session's newest."""
        restored = 0
        by_session: dict[str, list[JournalHead]] = {}
        for head in heads:
            by_session.setdefault(head.session_id, []).append(head)
        for session_id, found in by_session.items():
            log_file = self.store.files(session_id).action_log

            def restore(found: list[JournalHead] = found, log_file: ActionLog = log_file) -> int:
                logged = {r.task_hash for r in log_file.tail(RESTORE_LOOKBACK) if r.kind == "user"}
                missing = [head for head in found if head.task_hash not in logged]
                for head in missing:
                    said = UserEvent(
                        session_id=head.session_id, text=head.text, sender=head.origin.sender_name
                    )
                    log_file.append_all(
                        _lines(self._stamp(head.task_hash, head.origin, [said])),
                        window_hash=head.origin.window_hash,
                        task_hash=head.task_hash,
                        identity=head.origin.sender_key,
                        at=datetime.fromtimestamp(head.user_sent_at / 1000, UTC),
                    )
                return len(missing)

            try:
                count = await asyncio.to_thread(restore)
            except OSError as exc:  # a full disk, a session gone: the task runs all the same
                log.error("user lines not restored", session=session_id, error=str(exc))
                continue
            if count:
                log.warning("user lines restored from journals", session=session_id, lines=count)
            restored += count
        return restored

    async def log_switch(self, task: Task, said: dict[str, str], detail: str) -> None:
        """A `fallback` line in action.log: which model took over from which, and why."""
        body = json.dumps({**said, "detail": detail}, ensure_ascii=False)
        with contextlib.suppress(FileNotFoundError):
            await self.store.log_action(
                task.session_id,
                "fallback",
                body,
                window_hash=task.origin.window_hash,
                task_hash=task.task_hash,
                identity=task.origin.sender_key,
            )

    @staticmethod
    def _stamped(task: Task, events: list[Event]) -> list[Event]:
        return Dispatch._stamp(task.task_hash, task.origin, events)

    @staticmethod
    def _stamp(task_hash: str, origin: Origin, events: list[Event]) -> list[Event]:
        stamp = {"task_hash": task_hash, "window_hash": origin.window_hash}
        return [event.model_copy(update=stamp) for event in events]

    async def _log(self, task: Task, events: list[Event]) -> None:
        lines = _lines(events)
        try:
            await self.store.log_actions(
                task.session_id,
                lines,
                window_hash=task.origin.window_hash,
                task_hash=task.task_hash,
                identity=task.origin.sender_key,
            )
        except FileNotFoundError:
            log.warning("session gone while its task ran", session=task.session_id)

    async def _announce(self, task: Task, event: Event) -> None:
        self.offer(event, task.session_id)
        if self.published is not None:
            await self.published(task, event)

    def offer(self, event: Event, session_id: str | None = None) -> None:
        """Give `event` to the live subscribers of its session."""
        for sub in self._subscribers.get(session_id or event.session_id, ()):
            sub.offer(event)

    async def deliver(self, task: Task, event: Event, *, item: OutboxItem | None = None) -> None:
        """Hand a recorded event to its origin: replies and prompts through the outbox (`item`
        when the caller recorded the entry already), the rest straight to the sink."""
        platform = task.origin.platform
        if not self.pushed(task.origin):
            # Its client reads the event from the gateway: recorded is as far as it goes.
            if event.kind in OUTBOX_KINDS:
                self.traffic.delivered(platform, event.kind)
            return
        if event.kind in OUTBOX_KINDS:
            if item is None:
                item = await self.store.outbox.claim(self.outbox_entry(task, event))
            await self.courier.send(item)
            return
        sink = self.sinks.get(platform)
        if sink is None:
            return
        try:
            await sink.deliver(task.origin, event, Progress())
        except Exception:
            self.counters["sink_errors"] += 1
            self.traffic.delivery_failed(platform, LOST)
            log.exception("delivery failed", platform=platform, kind=event.kind)
            return
        self.traffic.delivered(platform, event.kind)

    def outbox_entry(self, task: Task, event: Event) -> OutboxEntry:
        event = event.model_copy(
            update={"task_hash": task.task_hash, "window_hash": task.origin.window_hash}
        )
        # The timestamp is left out of the identity: the same chunk made again after a restart
        # must be recognised as the one already recorded.
        payload = {
            "origin": task.origin.to_json(),
            "event": event.model_dump(mode="json", exclude={"at"}),
        }
        return OutboxEntry(
            task.session_id,
            task.task_hash,
            task.next_chunk(),
            event.kind,
            task.origin.platform,
            payload,
        )

    async def notice(self, origin: Origin, text: str, task: Task | None = None) -> None:
        """A line for `origin` outside any conversation (queue position, prompt expiry).
        A client that pulls its events (HTTP, the terminal) has no sink to be told through: it
        reads the line among the events of `task`, the task it is about."""
        sink = self.sinks.get(origin.platform)
        if sink is None:
            if task is not None and origin.platform in self.pulled:
                await self.record(task, NoticeEvent(session_id=task.session_id, text=text))
                self.traffic.delivered(origin.platform, "notice")
            return
        try:
            await sink.notice(origin, text)
        except Exception:
            self.counters["sink_errors"] += 1
            self.traffic.delivery_failed(origin.platform, LOST)
            log.exception("notice failed", platform=origin.platform)
            return
        self.traffic.delivered(origin.platform, "notice")

    async def _log_for_courier(
        self, session_id: str, kind: str, body: str, task_hash: str, identity: str
    ) -> None:
        with contextlib.suppress(FileNotFoundError):
            await self.store.log_action(
                session_id, kind, body, task_hash=task_hash, identity=identity
            )
