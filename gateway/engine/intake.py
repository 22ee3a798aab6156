"""Taking a message in: in the session's turn, archive it, make and journal its task and
queue it — or answer it at once when it is a gateway command, or keep it as context."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import TypeVar

from gateway.clock import Clock
from gateway.commands.registry import CommandReply
from gateway.crash import NO_CRASH, CrashPoints
from gateway.engine.cluster import Elsewhere, Owning
from gateway.engine.dispatch import Dispatch
from gateway.engine.errors import MaybeStored, MessageTooLong, QueueFull, TooManyTasks
from gateway.engine.journal import RECEIVED_BY, JournalHead, Replay
from gateway.engine.order import Turn, Turns
from gateway.engine.queue_modes import QueueModes
from gateway.engine.scheduler import Scheduler
from gateway.engine.task import Task
from gateway.engine.tasks import TaskTable
from gateway.engine.traffic import COMMAND, CONTEXT, DUPLICATE, TASK, Traffic
from gateway.engine.views import Submission
from gateway.events import Event, Inbound, Origin, UserEvent
from gateway.ids import new_task_hash, validate_session_id
from gateway.ownership import owner_for
from gateway.store.errors import OutcomeUnknown, until_available
from gateway.store.journals import JournalRecord
from gateway.store.message_reads import StoredMessage
from gateway.store.request_keys import RequestKey
from gateway.store.sessions import SessionStore
from gateway.text import check_storable

T = TypeVar("T")

CommandRunner = Callable[[Inbound], Awaitable[CommandReply | None]]
# Whether a text is a gateway command (answered now, or not at all) rather than a message.
IsCommand = Callable[[str], bool]
# Raises when the sender may not write where the message was sent (a ban): nothing is kept.
Screen = Callable[[Inbound], Awaitable[None]]
# Quotas and budgets (gateway/quotas.py): raises to refuse a sender's message to a session;
# counts it once for its source key (the third argument).
Admit = Callable[[Origin, str, str], Awaitable[None]]


class Intake:
    def __init__(
        self,
        store: SessionStore,
        tasks: TaskTable,
        dispatch: Dispatch,
        scheduler: Scheduler[Task],
        clock: Clock,
        max_chars: int,
        ownership: Owning,
        elsewhere: Elsewhere,
        crash: CrashPoints = NO_CRASH,
        max_pending_per_sender: int | None = None,
        *,
        accepting: set[str] | None = None,
        queue_modes: QueueModes | None = None,
        max_queued_per_session: int | None = None,
        commands: CommandRunner | None = None,
        is_command: IsCommand | None = None,
        screen: Screen | None = None,
        admit: Admit | None = None,
        traffic: Traffic | None = None,
        received_by: str = "",
    ) -> None:
        self.store = store
        # This instance's name where several share the archive: kept in each journal.
        self.received_by = received_by
        self.tasks = tasks
        self.dispatch = dispatch
        self.scheduler = scheduler
        self.clock = clock
        self.max_chars = max_chars
        self.ownership = ownership
        self.elsewhere = elsewhere
        self.crash = crash
        self.max_pending_per_sender = max_pending_per_sender
        self.turns = Turns()
        # Tasks whose journal is committed but which are not in the task table yet: another
        # part of this instance reading the journals meanwhile must not take them up.
        self.accepting: set[str] = accepting if accepting is not None else set()
        # Gateway commands, answered before the agent sees a text.
        self.commands = commands
        self.is_command = is_command
        self.screen = screen
        self.queue_modes = queue_modes
        self.max_queued_per_session = max_queued_per_session
        self.admit = admit
        self.traffic = traffic if traffic is not None else Traffic()

    async def submit(self, inbound: Inbound, turn: Turn | None = None) -> Submission:
        """Take a message in. An unreachable database raises `DatabaseUnavailable`, or with
        `inbound.wait_for_store` is waited out in the turn (later messages wait behind it)."""
        return await self._counted(inbound, lambda taken: self._submit(inbound, turn, taken))

    async def _counted(self, inbound: Inbound, take: Callable[[list[str]], Awaitable[T]]) -> T:
        """`take(taken)`, counted per platform: what the message became once `take` notes it
        in `taken`, or why it was refused if it raised before that (an error after the
        message was kept, such as a platform call, is no refusal)."""
        taken: list[str] = []
        platform = inbound.origin.platform
        try:
            return await take(taken)
        except Exception as exc:
            if not taken:
                self.traffic.turned_away(platform, exc)
            raise
        finally:
            if taken:
                self.traffic.took(platform, taken[0])

    async def _submit(self, inbound: Inbound, turn: Turn | None, taken: list[str]) -> Submission:
        session_id = validate_session_id(inbound.session_id)
        async with turn or self.turns.take(session_id):
            self.check_text(inbound.text)
            if self.screen is not None:
                # A command is answered now or not at all: it does not wait for the database.
                waits = self.is_command is None or not self.is_command(inbound.text)
                await self._read(inbound, self.screen, wait=waits)
                self.crash.reach("screened")
            command = await self.commands(inbound) if self.commands is not None else None
            if command is None:
                admit = self.admit
                if admit is not None:
                    await self._read(inbound, lambda i: admit(i.origin, session_id, i.source_key))
                    self.crash.reach("admitted")
                self._check_load(inbound)
                accepted = await self._accept(session_id, inbound)
                if accepted is None:
                    taken.append(DUPLICATE)
                    return Submission(session_id, duplicate=True)
                taken.append(TASK)
                task, event = accepted
                position = await self.ownership.run_here(
                    session_id, lambda: self.scheduler.enqueue(task)
                )
                if position is None:  # another instance runs the session: it takes the task
                    self.elsewhere.watch(self.tasks.drop(task))
                elif position:
                    position -= self._answered_ahead(session_id)
        if command is not None and command.duplicate:
            taken.append(DUPLICATE)
            return Submission(session_id, duplicate=True)
        if command is not None:
            taken.append(COMMAND)
            await self.dispatch.notice(inbound.origin, command.text)
            return Submission(command.session_id or session_id, command=command)
        # The user event reaches the origin (a typing indicator) outside the turn: the next
        # message need not wait for a platform call.
        await self.dispatch.deliver(task, event)
        modes = self.queue_modes
        if position and modes is not None and await modes.interrupt_for(task):
            position = 0  # what was ahead is canceled, and says so
        if position:
            await self.dispatch.notice(inbound.origin, f"queued ({position} ahead)", task)
        return Submission(session_id, task.task_hash, position or 0)

    async def record(self, inbound: Inbound, turn: Turn | None = None) -> int | None:
        """Keep a message as context; its archive id, or None if it was stored before.
        An unreachable database as for `submit`."""
        return await self._counted(inbound, lambda taken: self._record(inbound, turn, taken))

    async def _record(self, inbound: Inbound, turn: Turn | None, taken: list[str]) -> int | None:
        session_id = validate_session_id(inbound.session_id)
        origin = inbound.origin
        async with turn or self.turns.take(session_id):
            self.check_text(inbound.text)
            if self.screen is not None:
                await self._read(inbound, self.screen)
            log_file = self.store.files(session_id).action_log

            def log_it(_stored: StoredMessage) -> None:
                log_file.append_all(
                    [("user", inbound.text)],
                    window_hash=origin.window_hash,
                    identity=origin.sender_key,
                    hold=True,  # after the commit: a full disk holds the line, not the message
                )

            stored = await self._archive(session_id, inbound, then=log_it)
            if stored is None:
                taken.append(DUPLICATE)
                return None
            taken.append(CONTEXT)
            self.crash.reach("stored")
        return stored.id

    async def _read(
        self, inbound: Inbound, check: Callable[[Inbound], Awaitable[None]], *, wait: bool = True
    ) -> None:
        """A check that reads the archive before the message is kept (a ban, a quota): with
        `inbound.wait_for_store` it waits out an outage as the archive write does, so the
        message is answered once the database is back and a stop can still give it up."""
        if not (wait and inbound.wait_for_store):
            return await check(inbound)
        await until_available(
            lambda: check(inbound), sleep=self.clock.sleep, what="taking a message in"
        )

    def _answered_ahead(self, session_id: str) -> int:
        """1 when the task running in the session has its answer recorded: a message arriving
        while the previous reply goes out is not "queued" in any sense its sender would see."""
        current = self.scheduler.current(session_id)
        return 1 if current is not None and current.recorded else 0

    def _check_load(self, inbound: Inbound) -> None:
        limit = self.max_pending_per_sender
        if limit is not None and self.scheduler.tasks_of(inbound.origin.sender_key) >= limit:
            raise TooManyTasks(limit)
        cap = self.max_queued_per_session
        if cap is not None and len(self.scheduler.queued(inbound.session_id)) >= cap:
            raise QueueFull(cap)

    def check_text(self, text: str) -> None:
        if len(text) > self.max_chars:
            raise MessageTooLong(len(text), self.max_chars)
        check_storable(text, "the message")

    async def _archive(
        self,
        session_id: str,
        inbound: Inbound,
        *,
        task_hash: str = "",
        journal: Callable[[StoredMessage], JournalRecord] | None = None,
        then: Callable[[StoredMessage], None] | None = None,
    ) -> StoredMessage | None:
        """Archive the message (with its task's journal, or `then` after its history line);
        with `inbound.wait_for_store`, waiting for an unreachable database. One transaction:
        when it raises `DatabaseUnavailable` nothing of it was committed, so it can run again."""
        request = None
        if inbound.request_fingerprint:
            now = self.clock.now_ms()
            request = RequestKey(inbound.source_key, inbound.request_fingerprint, now)

        def take_in() -> Awaitable[StoredMessage | None]:
            return self.store.take_in(
                session_id,
                inbound.text,
                sender=inbound.origin.sender_name,
                sender_key=inbound.origin.sender_key,
                owner=owner_for(session_id, inbound.origin),
                claim=inbound.claim,
                task_hash=task_hash,
                source_key=inbound.source_key,
                request=request,
                journal=journal,
                then=then,
            )

        if not inbound.wait_for_store:
            return await take_in()
        return await until_available(take_in, sleep=self.clock.sleep, what="taking a message in")

    def _line_after_commit(self, write_line: Callable[[], None], _stored: StoredMessage) -> None:
        self.crash.reach("committed")  # a kill here leaves a stored message without its line
        write_line()

    async def _accept(self, session_id: str, inbound: Inbound) -> tuple[Task, Event] | None:
        """Archive the message and, in the same transaction, its task's journal; returns the
        task and its user event (recorded, not yet delivered), or None for a message the
        platform delivered before."""
        origin = inbound.origin
        task_hash = new_task_hash()
        submitted_at = self.clock.now_ms()

        def journal(stored: StoredMessage) -> JournalRecord:
            record = head_of(stored).record()
            if not self.received_by:
                return record
            return replace(record, origin={**record.origin, RECEIVED_BY: self.received_by})

        def head_of(stored: StoredMessage) -> JournalHead:
            return JournalHead(
                session_id,
                task_hash,
                origin,
                inbound.text,
                stored.id,
                stored.send_at,
                submitted_at,
            )

        # Its action.log line is written in the archive write's own hand-off, after the
        # commit and the history.json line, before the task is made: one hand-off fewer.
        said = UserEvent(session_id=session_id, text=inbound.text, sender=origin.sender_name)
        events, write_line = self.dispatch.line_writer(
            session_id, task_hash, origin, [said], hold=True
        )
        self.accepting.add(task_hash)
        try:
            try:
                stored = await self._archive(
                    session_id,
                    inbound,
                    task_hash=task_hash,
                    journal=journal,
                    then=partial(self._line_after_commit, write_line),
                )
            except OutcomeUnknown as unknown:
                # If it landed, its journal is there for recovery to take up.
                raise MaybeStored(session_id, task_hash) from unknown
            if stored is None:
                return None
            self.crash.reach("stored")
            task = self.tasks.add(head_of(stored), tuple(inbound.attachments), Replay())
        finally:
            self.accepting.discard(task_hash)
        await self.dispatch.show(task, events)
        return task, events[0]
