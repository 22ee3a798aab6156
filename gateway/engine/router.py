"""The router: every inbound message from every adapter goes through `Router.submit`.

What it guarantees:
- per session, messages are archived (SQL, history.json, action.log) and queued in one turn,
  in arrival order, before `submit` returns: archive order is run order is reply order;
- each session runs one task at a time; sessions run side by side, at most
  `max_concurrent_tasks` at once (a task waiting on a prompt holds no slot);
- a task's events go to its origin only, and to live subscribers of the session;
- a confirmation or question is answered only by its requester or an admin.

Everything outside the engine gets `TaskView` snapshots; no caller touches a task's state.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable

from gateway.adapter import Sink
from gateway.agents.base import Agent
from gateway.auth import Authority
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.commands.registry import CommandReply
from gateway.engine.dispatch import Dispatch, Subscription
from gateway.engine.journal import Answer, Journal, JournalHead, Replay
from gateway.engine.order import Turn, Turns
from gateway.engine.outbox import Courier
from gateway.engine.prompts import PromptNotFound, Prompts
from gateway.engine.recovery import unfinished_tasks
from gateway.engine.runner import Runner
from gateway.engine.scheduler import Scheduler
from gateway.engine.task import (
    MessageTooLong,
    Prompt,
    Submission,
    Task,
    TaskNotFound,
    TaskView,
)
from gateway.events import Attachment, Event, Inbound, Origin, UserEvent
from gateway.ids import new_task_hash, validate_session_id
from gateway.logs import get_logger
from gateway.presence import Presence
from gateway.settings import Settings
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

# Finished tasks stay answerable (task route, late waiters) until this many newer ones exist.
FINISHED_TASKS_KEPT = 2000
COUNTERS = (
    "tasks_started",
    "tasks_done",
    "tasks_failed",
    "tasks_canceled",
    "events",
    "subscriber_drops",
    "sink_errors",
)

CommandRunner = Callable[[Inbound], Awaitable[CommandReply | None]]


class Router:
    def __init__(
        self,
        settings: Settings,
        store: SessionStore,
        agent: Agent,
        presence: Presence,
        *,
        authority: Authority | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.authority = authority or Authority(settings.admin_keys)
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        # Gateway commands, answered before the agent sees a text (set by the runtime).
        self.commands: CommandRunner | None = None
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        self._turns = Turns()
        self._dispatch = Dispatch(store, self.counters, clock)
        self._scheduler: Scheduler[Task] = Scheduler(
            settings.max_concurrent_tasks, self._run, self._canceled_before_start
        )
        self._prompts = Prompts(
            self._dispatch,
            self._scheduler,
            self.authority,
            clock,
            settings.confirm_timeout_seconds,
        )
        self._runner = Runner(
            store,
            agent,
            presence,
            self._dispatch,
            self._prompts,
            self.counters,
            settings.history_window,
        )
        self._presence = presence

    # -- wiring ----------------------------------------------------------------------------

    def register_sink(self, platform: str, sink: Sink) -> None:
        """Push replies, prompts and notices for `platform` origins to `sink`."""
        self._dispatch.register_sink(platform, sink)

    def register_pulled(self, platform: str) -> None:
        """`platform`'s clients read events from the gateway (streams, task routes)."""
        self._dispatch.register_pulled(platform)

    def subscribe(self, session_id: str) -> contextlib.AbstractContextManager[Subscription]:
        """Live events of a session, for as long as the `with` block lasts."""
        return self._dispatch.subscribe(session_id)

    def subscribers(self, session_id: str) -> int:
        return self._dispatch.subscribers(session_id)

    @property
    def courier(self) -> Courier:
        return self._dispatch.courier

    @property
    def after_task(self) -> list[Callable[[str], None]]:
        """Hooks called with the session id after each task that finished with a reply."""
        return self._runner.after_task

    # -- intake ----------------------------------------------------------------------------

    def take_turn(self, session_id: str) -> Turn:
        """A place in the session's arrival order, taken at once. An adapter that must await
        something before `submit`/`record` (a download) takes it first and passes it on."""
        return self._turns.take(validate_session_id(session_id))

    async def submit(self, inbound: Inbound, *, turn: Turn | None = None) -> Submission:
        """Store the message and queue a task for it (or answer a gateway command)."""
        session_id = validate_session_id(inbound.session_id)
        async with turn or self._turns.take(session_id):
            self._check_length(inbound.text)
            command = await self.commands(inbound) if self.commands is not None else None
            if command is None:
                task, event = await self._accept(session_id, inbound)
                position = self._scheduler.enqueue(task)
        if command is not None:
            await self._dispatch.notice(inbound.origin, command.text)
            return Submission(command.session_id or session_id, command=command)
        # The user event reaches the origin (a typing indicator) outside the turn: the next
        # message need not wait for a platform call.
        await self._dispatch.deliver(task, event)
        if position:
            await self._dispatch.notice(inbound.origin, f"queued ({position} ahead)")
        return Submission(session_id, task.task_hash, position)

    async def record(self, inbound: Inbound, *, turn: Turn | None = None) -> int:
        """Keep a message as context (history, archive, action.log) without starting a task.

        Group chatter the bot was not addressed in: the agent sees it later as part of the
        conversation, with who said it, in the order it was said."""
        session_id = validate_session_id(inbound.session_id)
        origin = inbound.origin
        async with turn or self._turns.take(session_id):
            self._check_length(inbound.text)
            stored = await self.store.append_message(
                session_id, "user", inbound.text, sender=origin.sender_name, create_session=True
            )
            await self.store.log_action(
                session_id, "user", inbound.text, window_hash=origin.window_hash
            )
        return stored.id

    def _check_length(self, text: str) -> None:
        if len(text) > self.settings.max_message_chars:
            raise MessageTooLong(len(text), self.settings.max_message_chars)

    async def _accept(self, session_id: str, inbound: Inbound) -> tuple[Task, Event]:
        """Archive the message and make its task, journaled; returns the task and its user
        event, recorded but not yet delivered."""
        origin = inbound.origin
        task_hash = new_task_hash()
        stored = await self.store.append_message(
            session_id,
            "user",
            inbound.text,
            sender=origin.sender_name,
            task_hash=task_hash,
            create_session=True,
        )
        head = JournalHead(
            session_id,
            task_hash,
            origin,
            inbound.text,
            stored.id,
            stored.send_at,
            self.clock.now_ms(),
        )
        task = self._new_task(head, tuple(inbound.attachments), Replay())
        await task.save_journal()
        event = await self._dispatch.record(
            task, UserEvent(session_id=session_id, text=inbound.text, sender=origin.sender_name)
        )
        return task, event

    def _new_task(
        self, head: JournalHead, attachments: tuple[Attachment, ...], replay: Replay
    ) -> Task:
        task = Task(
            session_id=head.session_id,
            task_hash=head.task_hash,
            origin=head.origin,
            text=head.text,
            attachments=attachments,
            user_message_id=head.user_message_id,
            user_sent_at=head.user_sent_at,
            submitted_at=head.submitted_at,
            journal=Journal(self.store.files(head.session_id), head, replay),
        )
        self._tasks[task.task_hash] = task
        while len(self._tasks) > FINISHED_TASKS_KEPT:
            oldest_hash, oldest = next(iter(self._tasks.items()))
            if not oldest.finished:
                break
            del self._tasks[oldest_hash]
        return task

    # -- queries ---------------------------------------------------------------------------

    def task(self, task_hash: str) -> TaskView:
        return self._task(task_hash).view()

    def _task(self, task_hash: str) -> Task:
        try:
            return self._tasks[task_hash]
        except KeyError:
            raise TaskNotFound(f"no such task: {task_hash}") from None

    def latest_task(self, session_id: str) -> TaskView | None:
        """The most recently submitted task of a session this process knows of."""
        for task in reversed(self._tasks.values()):
            if task.session_id == session_id:
                return task.view()
        return None

    def running_task(self, session_id: str) -> TaskView | None:
        task = self._scheduler.current(session_id)
        return task.view() if task else None

    def queue_length(self, session_id: str) -> int:
        return len(self._scheduler.queued(session_id))

    def load(self) -> tuple[int, int]:
        """(running, queued) task counts over every session."""
        return self._scheduler.load()

    def is_busy(self, session_id: str) -> bool:
        return self._scheduler.is_busy(session_id)

    def pending(self, session_id: str | None = None) -> list[Prompt]:
        """Open prompts, of one session or of all, soonest to expire first."""
        prompts = [
            t.prompt
            for t in self._tasks.values()
            if t.prompt is not None
            and t.waiting_for_answer()
            and (session_id is None or t.session_id == session_id)
        ]
        return sorted(prompts, key=lambda p: p.expires_at)

    async def wait(self, task_hash: str, within: float, *, until_prompt: bool = False) -> TaskView:
        """The task once it finishes (or parks on a prompt, if asked), or after `within`."""
        task = self._task(task_hash)

        def ready() -> bool:
            return task.finished or (until_prompt and task.waiting_for_answer())

        async with task.changed:
            with contextlib.suppress(TimeoutError):
                await self.clock.wait_for(task.changed.wait_for(ready), within)
        return task.view()

    async def stream(self, task_hash: str) -> AsyncIterator[Event]:
        """Every event of a task so far, then live ones until it finishes."""
        task = self._task(task_hash)
        sent = 0
        while True:
            async with task.changed:
                await task.changed.wait_for(
                    lambda n=sent: len(task.events) > n or task.finished  # type: ignore[misc]
                )
                batch = task.events[sent:]
                done = task.finished
            for event in batch:
                yield event
            sent += len(batch)
            if done and sent >= len(task.events):
                return

    def may_answer(self, task_hash: str, responder: Origin) -> Prompt:
        """The task's open prompt if `responder` may answer it; raises PromptError or
        NotAllowed otherwise (for a front-end that asks for the answer in a second step)."""
        task = self._tasks.get(task_hash)
        if task is None:
            raise PromptNotFound(f"no task {task_hash}")
        return self._prompts.check(task, responder)

    # -- answering and canceling -------------------------------------------------------------

    async def answer(
        self,
        session_id: str,
        task_hash: str,
        responder: Origin,
        *,
        approve: bool | None = None,
        text: str | None = None,
    ) -> Answer:
        validate_session_id(session_id)
        task = self._tasks.get(task_hash)
        if task is None or task.session_id != session_id:
            raise PromptNotFound(f"no task {task_hash} in session {session_id}")
        return self._prompts.answer(task, responder, approve=approve, text=text)

    async def cancel(self, session_id: str, task_hash: str = "", *, by: str = "") -> bool:
        """Cancel a queued or running task (the running one when no hash is given)."""
        validate_session_id(session_id)
        target = self._scheduler.current(session_id) if not task_hash else None
        if task_hash:
            target = self._tasks.get(task_hash)
        if target is None or target.session_id != session_id or target.finished:
            return False
        target.canceled_by = by or "user"
        return await self._scheduler.cancel(target)

    async def cancel_for(self, who: Origin, session_id: str, task_hash: str) -> bool:
        """Cancel on behalf of `who`: its requester or an admin (NotAllowed otherwise)."""
        task = self._tasks.get(task_hash)
        if task is None or task.session_id != session_id:
            raise TaskNotFound(f"no task {task_hash} in session {session_id}")
        self.authority.require_requester(who, task.origin, "cancel this task")
        by = who.sender_name or who.sender_id or who.platform
        return await self.cancel(session_id, task_hash, by=by)

    async def cancel_all(self, session_id: str, *, by: str = "") -> int:
        count = 0
        for task in self._scheduler.queued(session_id):
            count += await self.cancel(session_id, task.task_hash, by=by)
        running = self._scheduler.current(session_id)
        if running is not None:
            count += await self.cancel(session_id, running.task_hash, by=by)
        return count

    # -- lifecycle -------------------------------------------------------------------------

    async def recover(self) -> int:
        """Take up the tasks a previous process left unfinished; returns how many.

        They are queued again in their original order and replay from their journals."""
        found = await unfinished_tasks(self.store, self._presence, self._tasks)
        for head, replay in found:
            self._scheduler.enqueue(self._new_task(head, (), replay))
        if found:
            log.info("resuming tasks left by a previous run", count=len(found))
        return len(found)

    async def close(self) -> None:
        """Stop taking work; running tasks are interrupted with their journals kept."""
        await self._scheduler.close()

    async def _run(self, task: Task) -> None:
        await self._runner.run(task)

    async def _canceled_before_start(self, task: Task) -> None:
        await self._runner.finish_canceled(task)
