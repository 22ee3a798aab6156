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
from collections.abc import AsyncIterator, Awaitable, Callable

from gateway.adapter import Sink
from gateway.clock import Clock
from gateway.engine.cancels import Canceled, Cancels
from gateway.engine.cluster import Elsewhere, Owning
from gateway.engine.dispatch import Dispatch, Subscription
from gateway.engine.errors import TaskNotFound
from gateway.engine.intake import Intake
from gateway.engine.journal import Answer
from gateway.engine.order import Turn
from gateway.engine.prompts import PromptNotFound, Prompts, Reply
from gateway.engine.recovery import import_journal_files
from gateway.engine.scheduler import Scheduler
from gateway.engine.takeover import Takeover
from gateway.engine.task import Task, TaskState
from gateway.engine.tasks import TaskTable
from gateway.engine.traffic import Traffic
from gateway.engine.views import Prompt, Submission, TaskView
from gateway.events import Event, Inbound, Origin
from gateway.ids import validate_session_id
from gateway.logs import get_logger
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

# Raises when someone may not answer a prompt in a session (gateway/bans.py).
AnswerScreen = Callable[[Origin, str], Awaitable[None]]

COUNTERS = (
    "tasks_started",
    "tasks_done",
    "tasks_failed",
    "tasks_canceled",
    "events",
    "subscriber_drops",
    "sink_errors",
    "model_calls_unpriced",  # calls of a model the price table does not name (cost 0)
)


class Router:
    """The engine's face. Built by `gateway.engine.assembly.assemble`, from its parts."""

    def __init__(
        self,
        *,
        store: SessionStore,
        clock: Clock,
        counters: dict[str, int],
        traffic: Traffic,
        tasks: TaskTable,
        dispatch: Dispatch,
        scheduler: Scheduler[Task],
        intake: Intake,
        prompts: Prompts,
        cancels: Cancels,
        takeover: Takeover,
        ownership: Owning,
        elsewhere: Elsewhere,
    ) -> None:
        self._store = store
        self._clock = clock
        self.counters = counters
        self.traffic = traffic  # messages in and out per platform
        # From `expect_recovery` until `recover(at_start=True)` has run, a task this instance
        # does not know may be one a previous life left unfinished (front-ends say "ask again").
        self.taking_up = False
        self._tasks = tasks
        self._dispatch = dispatch
        self._scheduler = scheduler
        self._intake = intake
        self._prompts = prompts
        self._cancels = cancels
        self._takeover = takeover
        self._ownership = ownership
        self._elsewhere = elsewhere
        self._answer_screens: list[AnswerScreen] = []

    # -- wiring ----------------------------------------------------------------------------

    def register_sink(self, platform: str, sink: Sink) -> None:
        """Push replies, prompts and notices for `platform` origins to `sink`."""
        self._dispatch.register_sink(platform, sink)

    def register_pulled(self, platform: str) -> None:
        """`platform`'s clients read events from the gateway (streams, task routes)."""
        self._dispatch.register_pulled(platform)

    def screen_answers(self, screen: AnswerScreen) -> None:
        """Ask `screen` before anyone's answer to a prompt is taken (a ban: it raises)."""
        self._answer_screens.append(screen)

    def front_ends(self) -> tuple[frozenset[str], frozenset[str]]:
        """The platforms replies are pushed to, and those whose clients pull them."""
        return frozenset(self._dispatch.sinks), frozenset(self._dispatch.pulled)

    def subscribe(self, session_id: str) -> contextlib.AbstractContextManager[Subscription]:
        """Live events of a session, for as long as the `with` block lasts."""
        return self._dispatch.subscribe(session_id)

    def subscribers(self, session_id: str) -> int:
        return self._dispatch.subscribers(session_id)

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

    async def _task(self, task_hash: str) -> Task | TaskState:
        """The task if it runs here, else what this instance sees of it on another."""
        task = self._tasks.find(task_hash) or await self._elsewhere.follow(task_hash)
        if task is None:
            raise TaskNotFound(f"no such task: {task_hash}")
        return task

    def live_tasks(self) -> list[TaskView]:
        """The tasks of this instance that have not ended (running, waiting, queued)."""
        return [task.view() for task in self._tasks if not task.finished]

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
        task = self._tasks.find(task_hash)
        if task is not None:
            await self._screen_answer(responder, task.session_id)
            return self._prompts.check(task, responder)
        followed = await self._elsewhere.follow(task_hash)
        if followed is None:
            raise PromptNotFound(f"no task {task_hash}")
        await self._screen_answer(responder, followed.session_id)
        return self._prompts.check_followed(followed, responder)

    async def _screen_answer(self, responder: Origin, session_id: str) -> None:
        for screen in self._answer_screens:
            await screen(responder, session_id)

    # -- answering and canceling -------------------------------------------------------------

    async def answer(
        self,
        session_id: str | None,
        task_hash: str,
        responder: Origin,
        *,
        approve: bool | None = None,
        text: str | None = None,
        option: int | None = None,
    ) -> Answer:
        """`responder`'s answer to the task's open prompt: `approve` for a confirmation, `text`
        or one of its `option`s (by index) for a question. `session_id`: the session the task
        must be of (None: whichever it is, for a front-end that knows only the task)."""
        if session_id is not None:
            validate_session_id(session_id)
        task = self._tasks.find(task_hash, session_id)
        reply = Reply(approve, text, option)
        if self._answer_screens:
            where = session_id or (task.session_id if task is not None else None)
            if where is None:
                followed = await self._elsewhere.follow(task_hash)
                where = followed.session_id if followed is not None else None
            if where is not None:
                await self._screen_answer(responder, where)
        if task is not None:
            return await self._prompts.answer(task, responder, reply)
        # Another instance runs the task, if any does: the answer is recorded here and
        # signalled there.
        return await self._elsewhere.answer(session_id, task_hash, responder, reply)

    async def cancel(self, session_id: str, task_hash: str = "", *, by: str = "") -> bool:
        """Cancel a task, whether it runs, waits for a slot or waits in its session's queue
        (with no hash: the one `cancel_target` names)."""
        return await self._cancels.cancel(session_id, task_hash, by=by)

    def cancel_target(self, session_id: str) -> TaskView | None:
        """The task canceling the session's task ends: the running one, else the next one
        (waiting for a slot)."""
        task = self._cancels.target(session_id)
        return task.view() if task else None

    async def cancel_for(self, who: Origin, session_id: str, task_hash: str) -> Canceled | None:
        """Cancel on behalf of `who`: its requester or an admin (NotAllowed otherwise); where
        the task stood (running, waiting_for_slot, queued, elsewhere), None if it had ended."""
        return await self._cancels.cancel_for(who, session_id, task_hash)

    async def cancel_all(self, session_id: str, *, by: str = "") -> int:
        return await self._cancels.cancel_all(session_id, by=by)

    # -- lifecycle -------------------------------------------------------------------------

    def expect_recovery(self) -> None:
        """Front-ends start before `recover(at_start=True)` runs: until it has, a task not
        known here may still be taken up."""
        self.taking_up = True

    async def recover(self, *, at_start: bool = False, settled_for: float = 0.0) -> int:
        """Take up the tasks nobody runs: those that died with a process (this one's previous
        life, or another instance whose leases lapsed) and those another instance stored and
        signalled while this one was not listening; returns how many. Run at start-up and then
        now and again. Each session's tasks are queued in archive order and replay from their
        journals, after its history.json is caught up with the archive.

        `settled_for`: journals younger than this many seconds are left alone. The instance
        that stored one a moment ago is queuing it (or handing it to its session's owner); a
        look now and again must not race it for the session, and a journal whose instance
        died meanwhile is found by the next look."""
        if at_start:
            await import_journal_files(self._store)
        records = await self._store.unfinished()
        live = self._takeover.is_live
        settled = self._clock.now_ms() - int(settled_for * 1000)
        sessions = dict.fromkeys(
            r.session_id
            for r in records
            if not live(r.task_hash) and (not settled_for or r.submitted_at <= settled)
        )
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
