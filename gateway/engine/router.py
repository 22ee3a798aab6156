"""The router: every inbound message from every adapter goes through `Router.submit`.

What it guarantees:
- per session, messages are archived (SQL, history.json, action.log) and queued in one turn,
  in arrival order, before `submit` returns: archive order is run order is reply order;
- each session runs one task at a time; sessions run side by side, at most
  `max_concurrent_tasks` at once (a task waiting on a prompt holds no slot);
- a task's events go to its origin only, and to live subscribers of the session;
- a confirmation or question is answered only by its requester or an admin;
- with several instances on one database, one instance at a time runs a session's tasks
  (`ownership`); the others store what they receive and hand it over.

Everything outside the engine gets `TaskView` snapshots; no caller touches a task's state.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

from gateway.adapter import Sink
from gateway.agents.base import Agent
from gateway.agents.tool_memory import ToolMemory
from gateway.auth import Authority
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.crash import NO_CRASH, CrashPoints
from gateway.engine.cancels import Cancels
from gateway.engine.cluster import Cluster, OwnerParts, RelayParts
from gateway.engine.dispatch import Dispatch, Subscription
from gateway.engine.intake import CommandRunner, Intake
from gateway.engine.journal import Answer
from gateway.engine.order import Turn
from gateway.engine.outbox import Courier
from gateway.engine.prompts import PromptNotFound, Prompts
from gateway.engine.queue_modes import QueueModes
from gateway.engine.recovery import import_journal_files
from gateway.engine.runner import Runner
from gateway.engine.scheduler import Scheduler
from gateway.engine.takeover import Takeover
from gateway.engine.task import Prompt, Submission, Task, TaskNotFound, TaskView
from gateway.engine.tasks import TaskTable
from gateway.events import Event, Inbound, Origin
from gateway.ids import validate_session_id
from gateway.logs import get_logger
from gateway.memory.recall import Recall
from gateway.presence import Presence
from gateway.settings import Settings
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

COUNTERS = (
    "tasks_started",
    "tasks_done",
    "tasks_failed",
    "tasks_canceled",
    "events",
    "subscriber_drops",
    "sink_errors",
)


class Router:
    def __init__(
        self,
        settings: Settings,
        store: SessionStore,
        agent: Agent,
        presence: Presence,
        cluster: Cluster,
        *,
        authority: Authority | None = None,
        clock: Clock = SYSTEM_CLOCK,
        crash: CrashPoints = NO_CRASH,
        tool_memory: ToolMemory | None = None,
        commands: CommandRunner | None = None,
        recall: Recall | None = None,
        after_task: Sequence[Callable[[str], None]] = (),
    ) -> None:
        """`cluster`: alone or one of several instances (`gateway.cluster`); `commands`:
        gateway commands, answered before the agent sees a text; `recall`:
        older messages recalled into each task's context; `after_task`: called with the
        session id after each task that finished with a reply (the rolling summary)."""
        self._store = store
        self._presence = presence
        self._authority = authority or Authority(settings.admin_keys)
        self._clock = clock
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        # From `expect_recovery` until `recover(at_start=True)` has run, a task this instance
        # does not know may be one a previous life left unfinished (front-ends say "ask again").
        self.taking_up = False
        self._tasks = TaskTable(store)
        # The owner, the queue modes and the relay are built on the scheduler and the
        # dispatch; those reach them back through the router, which holds all of them.
        self._dispatch = Dispatch(
            store,
            self.counters,
            clock,
            claimant=cluster.claimant,
            claim_seconds=cluster.claim_seconds,
            published=lambda task, event: self._elsewhere.publish(task, event),
        )
        self._scheduler: Scheduler[Task] = Scheduler(
            settings.max_concurrent_tasks,
            self._run,
            self._canceled_before_start,
            per_sender=settings.max_running_per_sender,
            before_next=lambda session_id: self._ownership.refresh(session_id),
            on_idle=lambda session_id: self._ownership.idle(session_id),
            gather=lambda session_id, queue: self._queue_modes.gather(session_id, queue),
        )
        self._takeover = Takeover(store, self._tasks, self._scheduler)
        self._ownership = cluster.owner(
            OwnerParts(
                store,
                take_up=self._takeover.take_up,
                interrupt=self._takeover.interrupt,
                is_busy=self._scheduler.is_busy,
                is_live=self._takeover.is_live,
            )
        )
        self._prompts = Prompts(
            self._dispatch,
            self._scheduler,
            self._authority,
            clock,
            settings.confirm_timeout_seconds,
            crash,
            answers=cluster.answers(store),
        )
        self._elsewhere = cluster.elsewhere(
            RelayParts(
                tasks=self._tasks,
                dispatch=self._dispatch,
                prompts=self._prompts,
                store=store,
                authority=self._authority,
                cancel_here=self._cancel_here,
            )
        )
        self._cancels = Cancels(self._tasks, self._scheduler, self._elsewhere, self._authority)
        self._queue_modes = QueueModes(store, self._scheduler, self._dispatch, self._tasks, crash)
        self._runner = Runner(
            store,
            agent,
            presence,
            self._dispatch,
            self._prompts,
            self.counters,
            settings.history_window,
            crash,
            tool_memory,
            steer=self._queue_modes.steer,
            max_subagent_depth=settings.max_subagent_depth,
            max_subagents_per_task=settings.max_subagents_per_task,
            after_task=after_task,
            recall=recall,
        )
        self._intake = Intake(
            store,
            self._tasks,
            self._dispatch,
            self._scheduler,
            clock,
            settings.max_message_chars,
            self._ownership,
            crash,
            settings.max_pending_per_sender,
            accepting=self._takeover.accepting,
            queue_modes=self._queue_modes,
            max_queued_per_session=settings.max_queued_per_session,
            commands=commands,
        )

    # -- wiring ----------------------------------------------------------------------------

    def register_sink(self, platform: str, sink: Sink) -> None:
        """Push replies, prompts and notices for `platform` origins to `sink`."""
        self._dispatch.register_sink(platform, sink)

    def register_pulled(self, platform: str) -> None:
        """`platform`'s clients read events from the gateway (streams, task routes)."""
        self._dispatch.register_pulled(platform)

    def front_ends(self) -> tuple[frozenset[str], frozenset[str]]:
        """The platforms replies are pushed to, and those whose clients pull them."""
        return frozenset(self._dispatch.sinks), frozenset(self._dispatch.pulled)

    def subscribe(self, session_id: str) -> contextlib.AbstractContextManager[Subscription]:
        """Live events of a session, for as long as the `with` block lasts."""
        return self._dispatch.subscribe(session_id)

    def subscribers(self, session_id: str) -> int:
        return self._dispatch.subscribers(session_id)

    @property
    def courier(self) -> Courier:
        return self._dispatch.courier

    @property
    def runner(self) -> Runner:
        """What runs this router's tasks, for a test that drives one run by itself."""
        return self._runner

    @property
    def after_task(self) -> list[Callable[[str], None]]:
        """Hooks called with the session id after each task that finished with a reply."""
        return self._runner.after_task

    # -- intake ----------------------------------------------------------------------------

    def take_turn(self, session_id: str) -> Turn:
        """A place in the session's arrival order, taken at once. An adapter that must await
        something before `submit`/`record` (a download) takes it first and passes it on."""
        return self._intake.turns.take(validate_session_id(session_id))

    def check_text(self, text: str) -> None:
        """Raise what `submit` would raise for `text` (MessageTooLong, UnstorableText), for a
        front-end that wants to know before it writes anything (an attachment) for it."""
        self._intake.check_text(text)

    async def submit(self, inbound: Inbound, *, turn: Turn | None = None) -> Submission:
        """Store the message and queue a task for it (or answer a gateway command)."""
        return await self._intake.submit(inbound, turn)

    async def record(self, inbound: Inbound, *, turn: Turn | None = None) -> int | None:
        """Keep a message as context (history, archive, action.log) without starting a task;
        its archive id, or None when the platform delivered it before.

        Group chatter the bot was not addressed in: the agent sees it later as part of the
        conversation, with who said it, in the order it was said."""
        return await self._intake.record(inbound, turn)

    # -- queries ---------------------------------------------------------------------------

    def task(self, task_hash: str) -> TaskView:
        """A task this instance knows (raises TaskNotFound)."""
        return self._tasks.get(task_hash).view()

    async def find(self, task_hash: str) -> TaskView:
        """A task this instance knows, or (with several instances) one another instance runs
        (raises TaskNotFound)."""
        return (await self._task(task_hash)).view()

    async def _task(self, task_hash: str) -> Task:
        task = await self._elsewhere.follow(task_hash)
        if task is None:
            raise TaskNotFound(f"no such task: {task_hash}")
        return task

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
            for t in self._tasks
            if t.prompt is not None
            and t.waiting_for_answer()
            and (session_id is None or t.session_id == session_id)
        ]
        return sorted(prompts, key=lambda p: p.expires_at)

    async def open_prompts(self, session_id: str | None = None) -> list[Prompt]:
        """`pending`, and the prompts of tasks other instances run."""
        prompts = self.pending(session_id)
        known = {p.task_hash for p in prompts}
        elsewhere = await self._elsewhere.prompts(session_id)
        prompts += [p for p in elsewhere if p.task_hash not in known]
        return sorted(prompts, key=lambda p: p.expires_at)

    async def wait(self, task_hash: str, within: float, *, until_prompt: bool = False) -> TaskView:
        """The task once it finishes (or parks on a prompt, if asked), or after `within`."""
        task = await self._task(task_hash)
        return await task.settled(self._clock, within, until_prompt=until_prompt)

    async def stream(self, task_hash: str) -> AsyncIterator[Event]:
        """Every event of a task so far, then live ones until it finishes."""
        async for event in (await self._task(task_hash)).follow():
            yield event

    async def may_answer(self, task_hash: str, responder: Origin) -> Prompt:
        """The task's open prompt if `responder` may answer it; raises PromptError or
        NotAllowed otherwise (for a front-end that asks for the answer in a second step)."""
        task = await self._elsewhere.follow(task_hash)
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
        task = self._tasks.find(task_hash, session_id)
        if task is not None and not task.elsewhere:
            return await self._prompts.answer(task, responder, approve=approve, text=text)
        # Another instance runs the task, if any does: the answer is recorded here and
        # signalled there.
        return await self._elsewhere.answer(
            session_id, task_hash, responder, approve=approve, text=text
        )

    async def cancel(self, session_id: str, task_hash: str = "", *, by: str = "") -> bool:
        """Cancel a queued or running task (the running one when no hash is given)."""
        return await self._cancels.cancel(session_id, task_hash, by=by)

    async def _cancel_here(self, session_id: str, task_hash: str, by: str) -> bool:
        """Another instance asked to cancel a task this one runs."""
        return await self._cancels.cancel(session_id, task_hash, by=by)

    async def cancel_for(self, who: Origin, session_id: str, task_hash: str) -> bool:
        """Cancel on behalf of `who`: its requester or an admin (NotAllowed otherwise)."""
        return await self._cancels.cancel_for(who, session_id, task_hash)

    async def cancel_all(self, session_id: str, *, by: str = "") -> int:
        return await self._cancels.cancel_all(session_id, by=by)

    # -- lifecycle -------------------------------------------------------------------------

    def expect_recovery(self) -> None:
        """Front-ends start before `recover(at_start=True)` runs: until it has, a task not
        known here may still be taken up."""
        self.taking_up = True

    async def recover(self, *, at_start: bool = False) -> int:
        """Take up the tasks nobody runs: those that died with a process (this one's previous
        life, or another instance whose leases lapsed) and those another instance stored and
        signalled while this one was not listening; returns how many. Run at start-up and then
        now and again. Each session's tasks are queued in archive order and replay from their
        journals, after its history.json is caught up with the archive."""
        if at_start:
            await import_journal_files(self._store)
        records = await self._store.unfinished()
        live = self._takeover.is_live
        sessions = dict.fromkeys(r.session_id for r in records if not live(r.task_hash))
        taken = 0
        for session_id in sessions:
            taken += await self._ownership.adopt(session_id)
        if taken:
            log.info("resuming tasks left unfinished", count=taken)
        if at_start:
            self.taking_up = False
        return taken

    async def close(self) -> None:
        """Stop taking work; running tasks are interrupted with their journals kept, the
        sessions this instance ran are let go and the other instances told to take them."""
        had = self._scheduler.sessions()
        await self._scheduler.close()
        await self._ownership.close(had)

    async def _run(self, task: Task) -> None:
        await self._runner.run(task)
        if task.finished:
            self._tasks.ended(task)

    async def _canceled_before_start(self, task: Task) -> None:
        await self._runner.finish_canceled(task)
        self._tasks.ended(task)
