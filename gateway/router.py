"""The core router: every inbound message from every adapter goes through `Router.submit`.

What it guarantees:
- the user's message is persisted (SQL, history.json, action.log) before `submit` returns;
- each session runs one task at a time, in arrival order; sessions run concurrently, at most
  `max_concurrent_tasks` at once (a task waiting on a prompt does not hold a slot);
- a task's events go to its origin's sink only, and to live subscribers of the session;
- a confirmation or question is answered only by the sender who started the task or an admin.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.agents.base import (
    Agent,
    AgentFailed,
    Delta,
    Reply,
    Step,
    ToolCall,
    ToolResult,
    Usage,
)
from gateway.clock import now_ms
from gateway.commands import CommandReply, run_command
from gateway.events import (
    AnswerEvent,
    AskUserEvent,
    Attachment,
    CanceledEvent,
    ConfirmEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    Inbound,
    Origin,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UserEvent,
)
from gateway.ids import new_task_hash, validate_session_id
from gateway.logs import get_logger
from gateway.outbox import OUTBOX_KINDS, Courier, OriginSink, Progress
from gateway.presence import Presence
from gateway.prompts import (
    AlreadyAnswered,
    Answer,
    NotAllowed,
    Prompt,
    PromptKind,
    PromptNotFound,
)
from gateway.settings import Settings
from gateway.store import outbox as outbox_table
from gateway.store.files import SessionFiles
from gateway.store.fslock import SessionDirectoryMissing
from gateway.store.outbox import OutboxEntry, OutboxItem
from gateway.store.search import search_messages
from gateway.store.sessions import RunRecord, SessionStore, StoredMessage
from gateway.store.usage import UsageRecord, record_usage

log = get_logger(__name__)

TaskStatus = Literal["queued", "running", "waiting", "done", "error", "canceled", "interrupted"]
FINISHED: frozenset[str] = frozenset({"done", "error", "canceled", "interrupted"})
SUBSCRIBER_BUFFER = 256
FINISHED_TASKS_KEPT = 2000
# Who "answered" a confirmation that the session allow-list approved without asking.
ALLOW_LIST = "allow-list"


class MessageTooLong(ValueError):
    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"message is {length} characters; the limit is {limit}")
        self.length, self.limit = length, limit


class TaskNotFound(LookupError):
    pass


@dataclass(frozen=True, slots=True)
class Submission:
    session_id: str
    task_hash: str = ""  # empty when the text was a gateway command
    position: int = 0  # tasks ahead of this one in the session
    command: CommandReply | None = None


@dataclass(eq=False)
class TaskState:
    session_id: str
    task_hash: str
    origin: Origin
    text: str
    attachments: Sequence[Attachment]
    user_message_id: int
    status: TaskStatus = "queued"
    user_sent_at: int = 0  # send_at of the user message, to find it in history.json
    reply: str = ""
    error: str = ""
    events: list[Event] = field(default_factory=list)
    prompt: Prompt | None = None
    canceled_by: str = ""
    runner: asyncio.Task[None] | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    steps: list[dict[str, Any]] = field(default_factory=list)
    holds_slot: bool = False
    submitted_at: int = field(default_factory=now_ms)
    # Steps recorded by a previous life of this task (restart): finished tools and answered
    # prompts are taken from here instead of being run or asked again.
    replay: list[dict[str, Any]] = field(default_factory=list)
    prompts_asked: int = 0
    outbox_chunks: int = 0
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    journal_io: asyncio.Future[None] | None = None
    journal_closed: bool = False

    def next_chunk(self) -> int:
        self.outbox_chunks += 1
        return self.outbox_chunks - 1

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def view(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "task_hash": self.task_hash,
            "status": self.status,
            "text": self.reply,
            "error": self.error,
            "pending": self.prompt.to_json() if self.prompt else None,
        }


@dataclass(eq=False)
class _Lane:
    waiting: deque[TaskState] = field(default_factory=deque)
    current: TaskState | None = None
    worker: asyncio.Task[None] | None = None


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


class Router:
    def __init__(
        self,
        settings: Settings,
        store: SessionStore,
        agent: Agent,
        presence: Presence,
    ) -> None:
        self.settings = settings
        self.store = store
        self.agent = agent
        self.presence = presence
        self._sinks: dict[str, OriginSink] = {}
        self._streamed: set[str] = set()
        self._lanes: dict[str, _Lane] = {}
        self._tasks: OrderedDict[str, TaskState] = OrderedDict()
        self._subscribers: dict[str, set[Subscription]] = {}
        self._slots = asyncio.Semaphore(settings.max_concurrent_tasks)
        self.courier = Courier(store.db, self._sinks, self._log_for_courier)
        self._closing = False
        # Called with the session id after each task that finished with a reply (background
        # work such as the rolling summary hooks in here, off the reply path).
        self.after_task: list[Callable[[str], None]] = []
        self.counters: dict[str, int] = {
            "tasks_started": 0,
            "tasks_done": 0,
            "tasks_failed": 0,
            "tasks_canceled": 0,
            "events": 0,
            "subscriber_drops": 0,
            "sink_errors": 0,
        }

    # -- wiring ----------------------------------------------------------------------------

    def register_sink(self, platform: str, sink: OriginSink, *, streamed: bool = False) -> None:
        """`streamed`: the platform's clients read every event from the gateway's streams and
        task routes, so nothing is pushed to them and the outbox keeps no entries for them."""
        self._sinks[platform] = sink
        if streamed:
            self._streamed.add(platform)
        else:
            self._streamed.discard(platform)

    def _pushed(self, state: TaskState) -> bool:
        """Whether replies to this task's origin go out through the outbox."""
        return state.origin.platform not in self._streamed

    @contextlib.contextmanager
    def subscribe(self, session_id: str) -> Any:
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

    # -- submitting ------------------------------------------------------------------------

    async def submit(self, inbound: Inbound) -> Submission:
        session_id = validate_session_id(inbound.session_id)
        if len(inbound.text) > self.settings.max_message_chars:
            raise MessageTooLong(len(inbound.text), self.settings.max_message_chars)
        command = await run_command(self, inbound)
        if command is not None:
            await self._notice(inbound.origin, command.text)
            return Submission(command.session_id or session_id, command=command)

        task_hash = new_task_hash()
        origin = inbound.origin
        stored = await self.store.append_message(
            session_id,
            "user",
            inbound.text,
            sender=origin.sender_name,
            task_hash=task_hash,
            create_session=True,
        )
        state = TaskState(
            session_id,
            task_hash,
            origin,
            inbound.text,
            tuple(inbound.attachments),
            stored.id,
            user_sent_at=stored.send_at,
        )
        self._remember(state)
        await self._journal(state)
        await self._emit(
            state, UserEvent(session_id=session_id, text=inbound.text, sender=origin.sender_name)
        )
        lane = self._lanes.setdefault(session_id, _Lane())
        position = len(lane.waiting) + (1 if lane.current is not None else 0)
        lane.waiting.append(state)
        if lane.worker is None or lane.worker.done():
            lane.worker = asyncio.create_task(self._drain(session_id, lane))
        if position:
            await self._notice(origin, f"queued ({position} ahead)")
        return Submission(session_id, task_hash, position)

    async def record(self, inbound: Inbound) -> int:
        """Keep a message as context (history, archive, action.log) without starting a task.

        Group chatter the bot was not addressed in: the agent sees it later as part of the
        conversation, with who said it.
        """
        session_id = validate_session_id(inbound.session_id)
        if len(inbound.text) > self.settings.max_message_chars:
            raise MessageTooLong(len(inbound.text), self.settings.max_message_chars)
        origin = inbound.origin
        stored = await self.store.append_message(
            session_id, "user", inbound.text, sender=origin.sender_name, create_session=True
        )
        await self.store.log_action(
            session_id, "user", inbound.text, window_hash=origin.window_hash
        )
        return stored.id

    # -- queries ---------------------------------------------------------------------------

    def task(self, task_hash: str) -> TaskState:
        try:
            return self._tasks[task_hash]
        except KeyError:
            raise TaskNotFound(f"no such task: {task_hash}") from None

    def latest_task(self, session_id: str) -> TaskState | None:
        """The most recently submitted task of a session this process knows of."""
        for state in reversed(self._tasks.values()):
            if state.session_id == session_id:
                return state
        return None

    def running_task(self, session_id: str) -> TaskState | None:
        lane = self._lanes.get(session_id)
        return lane.current if lane else None

    def queue_length(self, session_id: str) -> int:
        lane = self._lanes.get(session_id)
        return len(lane.waiting) if lane else 0

    def load(self) -> tuple[int, int]:
        """(running, queued) task counts over every session."""
        lanes = list(self._lanes.values())
        running = sum(1 for lane in lanes if lane.current is not None)
        return running, sum(len(lane.waiting) for lane in lanes)

    def is_busy(self, session_id: str) -> bool:
        return self.running_task(session_id) is not None or self.queue_length(session_id) > 0

    def pending(self, session_id: str | None = None) -> list[Prompt]:
        prompts = [
            t.prompt
            for t in self._tasks.values()
            if t.prompt is not None and (session_id is None or t.session_id == session_id)
        ]
        return sorted(prompts, key=lambda p: p.expires_at)

    async def wait(self, task_hash: str, within: float, *, until_prompt: bool = False) -> TaskState:
        """Wait until the task finishes (or parks on a prompt, if asked) or `within` passes."""
        state = self.task(task_hash)

        def ready() -> bool:
            open_prompt = state.prompt is not None and not state.prompt.future.done()
            return state.finished or (until_prompt and open_prompt)

        async with state.changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.changed.wait_for(ready), within)
        return state

    async def stream(self, task_hash: str) -> AsyncIterator[Event]:
        """Every event of a task so far, then live ones until it finishes."""
        state = self.task(task_hash)
        sent = 0
        while True:
            async with state.changed:
                await state.changed.wait_for(
                    lambda n=sent: len(state.events) > n or state.finished  # type: ignore[misc]
                )
                batch = state.events[sent:]
                done = state.finished
            for event in batch:
                yield event
            sent += len(batch)
            if done and sent >= len(state.events):
                return

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
        state = self._tasks.get(task_hash)
        if state is None or state.session_id != session_id:
            raise PromptNotFound(f"no task {task_hash} in session {session_id}")
        prompt = state.prompt
        if prompt is None:
            if any(step.get("type") == "prompt" for step in state.steps):
                raise AlreadyAnswered(f"the prompt of task {task_hash} was already answered")
            raise PromptNotFound(f"task {task_hash} is not waiting for an answer")
        if not prompt.may_answer(responder, self.settings.admin_keys):
            who = prompt.origin.sender_name or prompt.origin.sender_id or "the requester"
            if prompt.origin.platform == "terminal":
                who = f"the terminal window of {who}"
            raise NotAllowed(f"only {who} or an admin may answer this prompt")
        by = responder.sender_name or responder.sender_id or responder.platform
        return prompt.resolve(approve, text, by)

    async def cancel(self, session_id: str, task_hash: str = "", *, by: str = "") -> bool:
        """Cancel a queued or running task (the running one when no hash is given)."""
        lane = self._lanes.get(validate_session_id(session_id))
        if lane is None:
            return False
        target = lane.current if not task_hash else self._tasks.get(task_hash)
        if target is None or target.session_id != session_id or target.finished:
            return False
        target.canceled_by = by or "user"
        if target in lane.waiting:
            lane.waiting.remove(target)
            await self._finish_canceled(target)
            return True
        if target.runner is not None:
            target.runner.cancel()
            return True
        return False

    async def cancel_all(self, session_id: str, *, by: str = "") -> int:
        lane = self._lanes.get(session_id)
        if lane is None:
            return 0
        count = 0
        for state in list(lane.waiting):
            count += await self.cancel(session_id, state.task_hash, by=by)
        if lane.current is not None:
            count += await self.cancel(session_id, lane.current.task_hash, by=by)
        return count

    async def close(self) -> None:
        """Stop taking work; running tasks are interrupted with their journals kept."""
        self._closing = True
        workers = [lane.worker for lane in self._lanes.values() if lane.worker]
        for worker in workers:
            worker.cancel()
        for worker in workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    # -- running ---------------------------------------------------------------------------

    async def _drain(self, session_id: str, lane: _Lane) -> None:
        try:
            while lane.waiting and not self._closing:
                state = lane.waiting.popleft()
                lane.current = state
                try:
                    await self._slots.acquire()
                    state.holds_slot = True
                    state.runner = asyncio.create_task(self._run(state))
                    try:
                        await asyncio.shield(state.runner)
                    except asyncio.CancelledError:
                        worker = asyncio.current_task()
                        if worker is not None and worker.cancelling():
                            raise  # router shutdown, handled below
                        # cancel() reached the run before it began: nothing has recorded the
                        # end yet, so it is recorded here.
                        if not state.finished:
                            await self._finish_canceled(state)
                except asyncio.CancelledError:
                    # Router shutdown: the task is interrupted, its journal kept for restart.
                    if state.runner is not None and not state.runner.done():
                        state.runner.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await state.runner
                    raise
                finally:
                    if state.holds_slot:
                        state.holds_slot = False
                        self._slots.release()
                    lane.current = None
        finally:
            if not lane.waiting and self._lanes.get(session_id) is lane:
                del self._lanes[session_id]

    async def _run(self, state: TaskState) -> None:
        self.counters["tasks_started"] += 1
        try:
            await self._set_status(state, "running")
            # The journal written at submit already holds all a replay needs until a step.
            files = self.store.files(state.session_id)
            summary = await asyncio.to_thread(files.read_summary)
            context = _Context(self, state, await self._window(state, files))
            row = await self.store.get(state.session_id)
            context.persona = row.persona if row else ""
            context.model = row.model if row else ""
            context.reasoning = row.reasoning if row else ""
            context.allowed_tools = row.allowed_tools if row else frozenset()
            context.summary = summary.text if summary else ""
            async with (
                self.presence.hold(state.session_id, state.task_hash),
                _closing(self.agent.run(context)) as steps,
            ):
                async for step in steps:
                    await self._step(state, step)
        except asyncio.CancelledError:
            if state.canceled_by:
                await self._finish_canceled(state)
                return
            await self._set_status(state, "interrupted")
            raise
        except AgentFailed as exc:
            await self._finish_error(state, str(exc))
            return
        except Exception as exc:
            log.exception("task crashed", session=state.session_id, task=state.task_hash)
            await self._finish_error(state, f"internal error: {type(exc).__name__}")
            return
        await self._finish_done(state)

    async def _step(self, state: TaskState, step: object) -> None:
        sid = state.session_id
        if isinstance(step, Delta):
            await self._emit(state, TextDeltaEvent(session_id=sid, text=step.text))
        elif isinstance(step, ToolCall):
            await self._tool_started(state, step)
        elif isinstance(step, ToolResult):
            await self._tool_finished(state, step)
        elif isinstance(step, Usage):
            await record_usage(
                self.store.db,
                UsageRecord(
                    sid,
                    step.model,
                    input=step.input,
                    output=step.output,
                    cache_read=step.cache_read,
                    cache_write=step.cache_write,
                    elapsed_ms=step.elapsed_ms,
                    tool_calls=step.tool_calls,
                ),
            )
        elif isinstance(step, Reply):
            state.reply = step.text

    async def _window(self, state: TaskState, files: SessionFiles) -> list[StoredMessage]:
        """The recent conversation from history.json, without the task's own message."""
        size = self.settings.history_window
        try:
            recent = await asyncio.to_thread(files.history.tail, size + 1)
        except SessionDirectoryMissing:
            return []
        text = state.text.replace("\x00", "\ufffd")  # as the archive stored it
        for index in range(len(recent) - 1, -1, -1):
            line = recent[index]
            own = line.role == "user" and line.content == text
            if own and state.user_sent_at in (0, line.send_at):
                del recent[index]
                break
        return [
            StoredMessage(0, state.session_id, m.role, m.content, m.sender, m.send_at)
            for m in recent[-size:]
        ]

    async def _finish_done(self, state: TaskState) -> None:
        sid = state.session_id
        text_event = TextEvent(session_id=sid, text=state.reply)
        items = await self.store.finish_run(
            RunRecord(sid, state.task_hash, state.text, state.reply, state.tool_results),
            state.reply,
            sender=self.agent.name,
            outbox=[self._outbox_entry(state, text_event)] if self._pushed(state) else [],
        )
        await self._emit(state, text_event, item=items[0] if items else None)
        await self._emit(state, DoneEvent(session_id=sid, text=state.reply))
        self.counters["tasks_done"] += 1
        await self._drop_journal(state)  # before waiters hear of the end
        await self._set_status(state, "done")
        for hook in self.after_task:
            hook(state.session_id)

    async def _finish_error(self, state: TaskState, message: str) -> None:
        state.error = message
        error_event = ErrorEvent(session_id=state.session_id, message=message)
        items = await self.store.finish_run(
            RunRecord(state.session_id, state.task_hash, state.text, "", state.tool_results),
            "",
            sender=self.agent.name,
            outbox=[self._outbox_entry(state, error_event)] if self._pushed(state) else [],
        )
        await self._emit(state, error_event, item=items[0] if items else None)
        self.counters["tasks_failed"] += 1
        await self._drop_journal(state)  # before waiters hear of the end
        await self._set_status(state, "error")

    async def _finish_canceled(self, state: TaskState) -> None:
        if state.prompt is not None and not state.prompt.future.done():
            state.prompt.future.cancel()
        state.prompt = None
        await self._emit(state, CanceledEvent(session_id=state.session_id, by=state.canceled_by))
        self.counters["tasks_canceled"] += 1
        await self._drop_journal(state)  # before waiters hear of the end
        await self._set_status(state, "canceled")

    # -- prompts ---------------------------------------------------------------------------

    async def ask(
        self,
        state: TaskState,
        kind: PromptKind,
        *,
        tool: str = "",
        args: dict[str, Any] | None = None,
        question: str = "",
        options: Sequence[str] = (),
        auto_approve: bool = False,
    ) -> Answer:
        ordinal = state.prompts_asked
        state.prompts_asked += 1
        recorded = [step for step in state.replay if step.get("type") == "prompt"]
        if ordinal < len(recorded) and recorded[ordinal].get("answer") is not None:
            # Answered before a restart: the answer stands, nobody is asked twice.
            state.steps.append(recorded[ordinal])
            given = recorded[ordinal]["answer"]
            if given.get("by") != ALLOW_LIST and self._pushed(state):
                # The first life sent this prompt through the outbox: keep chunk numbers where
                # they were then.
                state.next_chunk()
            return Answer(
                approved=given.get("approved"), text=given.get("text"), by=given.get("by", "")
            )
        if kind == "confirm" and auto_approve:
            # Allowed for this session (`/allow <tool>`): nobody is asked, the audit trail still
            # shows the approval and who granted it.
            given = Answer(approved=True, by=ALLOW_LIST)
            state.steps.append(
                {"type": "prompt", "kind": kind, "answer": {"approved": True, "by": ALLOW_LIST}}
            )
            await self._emit(
                state,
                AnswerEvent(
                    session_id=state.session_id,
                    prompt=kind,
                    approved=True,
                    answered_by=ALLOW_LIST,
                ),
            )
            await self._journal(state)
            return given
        timeout = self.settings.confirm_timeout_seconds
        prompt = Prompt(
            kind=kind,
            session_id=state.session_id,
            task_hash=state.task_hash,
            origin=state.origin,
            expires_at=now_ms() + int(timeout * 1000),
            tool=tool,
            args=dict(args or {}),
            question=question,
            options=tuple(options),
        )
        state.prompt = prompt
        step: dict[str, Any] = {"type": "prompt", "kind": kind, "answer": None}
        state.steps.append(step)
        state.status = "waiting"
        await self._journal(state)
        requester = state.origin.sender_name or state.origin.sender_id
        sid = state.session_id
        if kind == "confirm":
            await self._emit(
                state,
                ConfirmEvent(
                    session_id=sid,
                    tool=tool,
                    args=prompt.args,
                    requester=requester,
                    expires_at=prompt.expires_at,
                ),
            )
        else:
            await self._emit(
                state,
                AskUserEvent(
                    session_id=sid,
                    question=question,
                    options=list(options),
                    requester=requester,
                    expires_at=prompt.expires_at,
                ),
            )
        # A parked task gives its slot back, so prompts left open cannot starve other sessions.
        if state.holds_slot:
            state.holds_slot = False
            self._slots.release()
        try:
            answer = await asyncio.wait_for(asyncio.shield(prompt.future), timeout)
        except TimeoutError:
            answer = Answer(approved=False if kind == "confirm" else None, by="timeout")
            if not prompt.future.done():
                prompt.future.set_result(answer)
            what = "confirmation" if kind == "confirm" else "question"
            outcome = "treated as denied" if kind == "confirm" else "left unanswered"
            await self._notice(state.origin, f"The {what} expired and was {outcome}.")
        finally:
            await self._slots.acquire()
            state.holds_slot = True
        state.prompt = None
        step["answer"] = {"approved": answer.approved, "text": answer.text, "by": answer.by}
        await self._emit(
            state,
            AnswerEvent(
                session_id=sid,
                prompt=kind,
                approved=answer.approved,
                answer=answer.text,
                answered_by=answer.by,
            ),
        )
        await self._set_status(state, "running")
        await self._journal(state)
        return answer

    # -- tools -----------------------------------------------------------------------------

    async def run_tool(
        self, state: TaskState, call: ToolCall, execute: Callable[[], Awaitable[str]]
    ) -> ToolResult:
        """Run a tool once per task, journaled around the call.

        On a task replayed after a restart, a call that had finished returns its recorded
        result, and one that had started but not finished is not run again: it is reported to
        the agent as interrupted.
        """
        before = [
            s for s in state.replay if s.get("type") == "tool" and s.get("call_id") == call.call_id
        ]
        finished = [s for s in before if s.get("state") == "finished"]
        if finished:
            state.steps.extend(before)
            done = finished[-1]
            replayed = ToolResult(
                call.call_id, call.tool, done.get("status", "ok"), done.get("result", "")
            )
            state.tool_results.append(
                {
                    "call_id": call.call_id,
                    "tool": call.tool,
                    "status": replayed.status,
                    "result": replayed.result,
                }
            )
            return replayed
        if before:
            result = ToolResult(
                call.call_id,
                call.tool,
                "interrupted",
                "the gateway restarted while this tool was running",
            )
        else:
            await self._tool_started(state, call)
            try:
                result = ToolResult(call.call_id, call.tool, "ok", await execute())
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                result = ToolResult(
                    call.call_id, call.tool, "error", f"{type(exc).__name__}: {exc}"
                )
        await self._tool_finished(state, result)
        return result

    async def _tool_started(self, state: TaskState, call: ToolCall) -> None:
        state.steps.append(
            {
                "type": "tool",
                "call_id": call.call_id,
                "tool": call.tool,
                "args": call.args,
                "state": "started",
            }
        )
        await self._journal(state)
        await self._emit(
            state,
            ToolCallEvent(
                session_id=state.session_id, call_id=call.call_id, tool=call.tool, args=call.args
            ),
        )

    async def _tool_finished(self, state: TaskState, result: ToolResult) -> None:
        record = {
            "call_id": result.call_id,
            "tool": result.tool,
            "status": result.status,
            "result": result.result,
        }
        state.tool_results.append(record)
        state.steps.append({"type": "tool", "state": "finished", **record})
        await self._journal(state)
        await self._emit(
            state,
            ToolResultEvent(
                session_id=state.session_id,
                call_id=result.call_id,
                tool=result.tool,
                status=result.status,
                result=result.result,
            ),
        )

    # -- restart ---------------------------------------------------------------------------

    async def recover(self) -> int:
        """Take up the tasks a previous process left unfinished; returns how many.

        A journal whose presence key is gone belongs to a task that died with its process.
        Finished ones (their run is recorded) only lose the journal; the rest are queued again,
        in their original order, and replay from their journal.
        """
        found: list[TaskState] = []
        for sid in await asyncio.to_thread(self.store.dirs.list_ids):
            files = self.store.files(sid)
            journals = await asyncio.to_thread(_journals_of, files)
            if not journals:
                continue
            alive = {h for _, h in await self.presence.running_tasks(sid)}
            for task_hash, journal in journals:
                if task_hash in alive or task_hash in self._tasks:
                    continue
                if await self.store.run_recorded(sid, task_hash):
                    await asyncio.to_thread(files.remove_pending, task_hash)
                    continue
                try:
                    state = TaskState(
                        sid,
                        task_hash,
                        Origin.from_json(journal["origin"]),
                        str(journal["text"]),
                        (),
                        int(journal["user_message_id"]),
                        user_sent_at=int(journal.get("user_sent_at", 0)),
                        submitted_at=int(journal.get("submitted_at", 0)),
                        replay=list(journal.get("steps") or []),
                    )
                except (KeyError, TypeError, ValueError):
                    log.warning("unreadable journal set aside", session=sid, task=task_hash)
                    continue
                found.append(state)
        found.sort(key=lambda t: t.submitted_at)
        for state in found:
            self._remember(state)
            lane = self._lanes.setdefault(state.session_id, _Lane())
            lane.waiting.append(state)
            if lane.worker is None or lane.worker.done():
                lane.worker = asyncio.create_task(self._drain(state.session_id, lane))
        if found:
            log.info("resuming tasks left by a previous run", count=len(found))
        return len(found)

    # -- plumbing --------------------------------------------------------------------------

    def _remember(self, state: TaskState) -> None:
        self._tasks[state.task_hash] = state
        while len(self._tasks) > FINISHED_TASKS_KEPT:
            oldest_hash, oldest = next(iter(self._tasks.items()))
            if not oldest.finished:
                break
            del self._tasks[oldest_hash]

    async def _set_status(self, state: TaskState, status: TaskStatus) -> None:
        async with state.changed:
            state.status = status
            state.changed.notify_all()

    async def _emit(
        self, state: TaskState, event: Event, *, item: OutboxItem | None = None
    ) -> None:
        event = event.model_copy(
            update={"task_hash": state.task_hash, "window_hash": state.origin.window_hash}
        )
        self.counters["events"] += 1
        async with state.changed:
            state.events.append(event)
            state.changed.notify_all()
        body = event.model_dump_json(
            exclude={"kind", "session_id", "task_hash", "window_hash", "at"}
        )
        try:
            await self.store.log_action(
                state.session_id,
                event.kind,
                body,
                window_hash=state.origin.window_hash,
                task_hash=state.task_hash,
            )
        except FileNotFoundError:
            log.warning("session gone while its task ran", session=state.session_id)
        for sub in self._subscribers.get(state.session_id, ()):
            sub.offer(event)
        if event.kind in OUTBOX_KINDS and self._pushed(state):
            if item is None:
                item = await outbox_table.claim(self.store.db, self._outbox_entry(state, event))
            await self.courier.send(item)
            return
        sink = self._sinks.get(state.origin.platform)
        if sink is not None:
            try:
                await sink.deliver(state.origin, event, Progress())
            except Exception:
                self.counters["sink_errors"] += 1
                log.exception("delivery failed", platform=state.origin.platform, kind=event.kind)

    def _outbox_entry(self, state: TaskState, event: Event) -> OutboxEntry:
        event = event.model_copy(
            update={"task_hash": state.task_hash, "window_hash": state.origin.window_hash}
        )
        # The timestamp is left out of the identity: the same chunk made again after a restart
        # must be recognised as the one already recorded.
        payload = {
            "origin": state.origin.to_json(),
            "event": event.model_dump(mode="json", exclude={"at"}),
        }
        return OutboxEntry(
            state.session_id,
            state.task_hash,
            state.next_chunk(),
            event.kind,
            state.origin.platform,
            payload,
        )

    async def _log_for_courier(self, session_id: str, kind: str, body: str, task_hash: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await self.store.log_action(session_id, kind, body, task_hash=task_hash)

    async def _notice(self, origin: Origin, text: str) -> None:
        sink = self._sinks.get(origin.platform)
        if sink is None:
            return
        try:
            await sink.notice(origin, text)
        except Exception:
            self.counters["sink_errors"] += 1
            log.exception("notice failed", platform=origin.platform)

    async def _journal(self, state: TaskState) -> None:
        data = {
            "session_id": state.session_id,
            "task_hash": state.task_hash,
            "status": state.status,
            "origin": state.origin.to_json(),
            "text": state.text,
            "user_message_id": state.user_message_id,
            "user_sent_at": state.user_sent_at,
            "submitted_at": state.submitted_at,
            "steps": state.steps,
            "prompt": state.prompt.to_json() if state.prompt else None,
            "updated_at": now_ms(),
        }
        if state.journal_closed:
            return
        files = self.store.files(state.session_id)
        # The write runs on in its thread even if this task is canceled meanwhile; remembering
        # it lets the removal wait for it, so a late write cannot bring a journal back.
        write = asyncio.ensure_future(asyncio.to_thread(files.write_pending, state.task_hash, data))
        state.journal_io = write
        try:
            await asyncio.shield(write)
        except FileNotFoundError:
            log.warning("session gone while its task ran", session=state.session_id)

    async def _drop_journal(self, state: TaskState) -> None:
        state.journal_closed = True
        if state.journal_io is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await state.journal_io
        files = self.store.files(state.session_id)
        await asyncio.to_thread(files.remove_pending, state.task_hash)


@contextlib.asynccontextmanager
async def _closing(steps: AsyncIterator[Step]) -> AsyncIterator[AsyncIterator[Step]]:
    """Close the agent's run on the way out, cancel included, so its own clean-up (stopping a
    subprocess, closing a stream) runs now rather than whenever the generator is collected."""
    try:
        yield steps
    finally:
        aclose = getattr(steps, "aclose", None)
        if aclose is not None:
            await aclose()


def _journals_of(files: SessionFiles) -> list[tuple[str, dict[str, Any]]]:
    return list(files.list_pending())


class _Context:
    """What the agent sees of a run."""

    def __init__(self, router: Router, state: TaskState, history: Sequence[StoredMessage]) -> None:
        self._router = router
        self._state = state
        self.session_id = state.session_id
        self.task_hash = state.task_hash
        self.origin = state.origin
        self.text = state.text
        self.attachments = state.attachments
        self.history: Sequence[StoredMessage] = history
        self.workspace = router.store.files(state.session_id).dir / "workspace"
        self.persona = ""
        self.model = ""
        self.summary = ""
        self.reasoning = ""
        self.allowed_tools: frozenset[str] = frozenset()

    async def confirm(self, tool: str, args: dict[str, Any]) -> bool:
        answer = await self._router.ask(
            self._state, "confirm", tool=tool, args=args, auto_approve=tool in self.allowed_tools
        )
        return bool(answer.approved)

    async def ask_user(self, question: str, options: Sequence[str] = ()) -> str | None:
        answer = await self._router.ask(self._state, "ask_user", question=question, options=options)
        return answer.text

    async def run_tool(self, call: ToolCall, execute: Callable[[], Awaitable[str]]) -> ToolResult:
        return await self._router.run_tool(self._state, call, execute)

    async def search_history(self, query: str) -> list[dict[str, object]]:
        hits = await search_messages(self._router.store.db, query, session_id=self.session_id)
        return [
            {
                "id": h.id,
                "role": h.role,
                "sender": h.sender,
                "content": h.content,
                "send_at": h.send_at,
            }
            for h in hits
        ]

    async def record_file_version(self, directory: str, name: str, content: str) -> None:
        await self._router.store.record_file_version(
            self.session_id, self.task_hash, directory, name, content
        )

    async def read_resume_state(
        self, model: str, system_prompt: str, *, with_tools: bool
    ) -> dict[str, Any] | None:
        files = self._router.store.files(self.session_id)
        return await asyncio.to_thread(
            files.read_resume_state, model, system_prompt, with_tools=with_tools
        )

    async def write_resume_state(
        self, model: str, system_prompt: str, state: dict[str, Any], *, with_tools: bool
    ) -> None:
        files = self._router.store.files(self.session_id)
        await asyncio.to_thread(
            files.write_resume_state, model, system_prompt, state, with_tools=with_tools
        )
