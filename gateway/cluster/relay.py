"""Tasks that run on another instance, as seen from this one: their events, answers to their
prompts, and cancels.

The instance running a task publishes each of its events on the bus. Every other instance
hands them to its live subscribers of the session, and to its view of the task when it has
one (it received the message, or someone asked it about the task): waiting on a task, or
streaming it, works on any instance. An answer given on any instance is recorded in the
archive first — the first answer to a prompt stands, wherever it was given — and then
signalled to the instance running the task. A gateway that runs alone has
`gateway.cluster.one.SingleInstance` instead.

While the bus may be losing signals (a Redis cut, and a moment after it), the archive stands
in for them: each task followed here is brought up to what its journal and its recorded run
say, and tasks running here take answers recorded elsewhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from gateway.auth import Authority
from gateway.bus import Bus
from gateway.cluster.followed import Followed
from gateway.engine.dispatch import Dispatch
from gateway.engine.journal import Answer, JournalHead
from gateway.engine.prompts import (
    AlreadyAnswered,
    PromptNotFound,
    Prompts,
    Reply,
    make_answer,
    no_such_task,
)
from gateway.engine.task import KEEP, Task, TaskState
from gateway.engine.tasks import TaskTable
from gateway.engine.views import Prompt
from gateway.events import (
    AnswerEvent,
    AskUserEvent,
    CanceledEvent,
    ConfirmEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    NoticeEvent,
    Origin,
    TextEvent,
    UserEvent,
    event_from_json,
    event_to_json,
)
from gateway.ids import HASH_RE
from gateway.logs import get_logger
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

EVENT = "event"  # {"from", "task", "event"}: an event of a task running on "from"
ANSWER = "answer"  # {"task"}: the task's open prompt has an answer in the archive
CANCEL = "cancel"  # {"session_id", "task", "by"}: cancel the task wherever it runs

ENDS = (DoneEvent, ErrorEvent, CanceledEvent)

CancelHere = Callable[[str, str, str], Awaitable[bool]]


class Relay:
    def __init__(
        self,
        bus: Bus,
        *,
        tasks: TaskTable,
        dispatch: Dispatch,
        prompts: Prompts,
        store: SessionStore,
        authority: Authority,
        cancel_here: CancelHere,
    ) -> None:
        self.bus = bus
        # Tells this instance's own messages apart when the bus echoes them back.
        self.instance = uuid.uuid4().hex
        self.tasks = tasks
        self.dispatch = dispatch
        self.asker = prompts
        self.store = store
        self.authority = authority
        self._cancel_here = cancel_here
        self._followed = Followed()
        bus.on(EVENT, self._on_event)
        bus.on(ANSWER, self._on_answer)
        bus.on(CANCEL, self._on_cancel)
        bus.on_gap(self._look)

    # -- the instance running the task -----------------------------------------------------

    async def publish(self, task: Task, event: Event) -> None:
        if not self.bus.reaches_others:
            # Only this instance would hear it, and its own events are not news to it: on a
            # local bus that was a task per event for nothing.
            return
        message = {"from": self.instance, "task": task.task_hash, "event": event_to_json(event)}
        # An end sent late still ends a wait elsewhere; a late step would only confuse it.
        await self.bus.publish(EVENT, message, keep=isinstance(event, ENDS))

    async def _on_answer(self, message: dict[str, Any]) -> None:
        task = self.tasks.find(str(message.get("task", "")))
        if task is not None:
            await self.asker.take_stored(task)

    async def _on_cancel(self, message: dict[str, Any]) -> None:
        task = self.tasks.find(str(message.get("task", "")))
        if task is not None:
            await self._cancel_here(task.session_id, task.task_hash, str(message.get("by", "")))

    # -- every other instance --------------------------------------------------------------

    async def _on_event(self, message: dict[str, Any]) -> None:
        if message.get("from") == self.instance:
            return
        try:
            event = event_from_json(str(message.get("event", "")))
        except ValidationError:
            log.warning("unreadable event from another instance", sender=message.get("from"))
            return
        self.dispatch.offer(event)
        followed = self._followed.find(str(message.get("task", "")))
        if followed is not None:
            await _follow(followed, event)

    async def follow(self, task_hash: str) -> TaskState | None:
        """What this instance sees of a task another instance runs (made from its journal the
        first time it is asked for); None if no instance runs it."""
        followed = self._followed.find(task_hash)
        if HASH_RE.fullmatch(task_hash) is None:
            return followed
        if followed is not None and followed.finished:
            return followed
        # Unknown here, or followed but perhaps past its end unheard (the bus drops messages
        # while disconnected): the journal says whether it still runs.
        record = await self.store.journal(task_hash)
        if followed is not None:
            if record is None:  # it ended elsewhere (its last events may still be on their way)
                await self._ended(followed)
            return followed
        if record is None:
            return None
        try:
            head = JournalHead.of(record)
            prompt = Prompt.from_json(record.prompt) if record.prompt else None
        except (KeyError, TypeError, ValueError):
            log.warning("unreadable journal", task=task_hash)
            return None
        followed = self._followed.add(TaskState(head.session_id, task_hash, head.origin, head.text))
        await followed.update(status="waiting" if prompt else "running", prompt=prompt)
        return followed

    async def _look(self) -> None:
        """Signals may have been lost: what they would have said is in the archive."""
        for followed in self._followed.unfinished():
            await self._catch_up(followed)
        for task in list(self.tasks):
            if task.waiting_for_answer():
                await self.asker.take_stored(task)

    async def _catch_up(self, followed: TaskState) -> None:
        """Bring a followed task up to its journal: ended, asking, or running."""
        record = await self.store.journal(followed.task_hash)
        if record is None:
            await self._ended(followed)
            return
        try:
            prompt = Prompt.from_json(record.prompt) if record.prompt else None
        except (KeyError, TypeError, ValueError):
            return
        if prompt is not None and not followed.prompt_open():
            await followed.update(prompt=prompt, status="waiting")
        elif prompt is None and followed.status == "waiting":
            await followed.update(prompt=None, status="running")
        elif followed.status == "queued" and record.status == "running":
            await followed.update(status="running")

    def watch(self, state: TaskState) -> None:
        self._followed.add(state)

    def release(self, task_hash: str) -> TaskState | None:
        return self._followed.pop(task_hash)

    async def _ended(self, followed: TaskState) -> None:
        """Bring a followed task up to the end the archive recorded: a reply (or the error's
        empty one) when the run was recorded, canceled when the journal went without one."""
        run = await self.store.finished_run(followed.session_id, followed.task_hash)
        if followed.finished:
            return
        if run is None:
            await followed.update(prompt=None, status="canceled")
        elif run["reply"]:
            await followed.update(prompt=None, reply=run["reply"], status="done")
        else:
            error = followed.error or "the task ended without a reply"
            await followed.update(prompt=None, error=error, status="error")

    async def prompts(self, session_id: str | None = None) -> list[Prompt]:
        """Open prompts journaled by any instance (of one session, when given)."""
        found = []
        for record in await self.store.prompting(session_id):
            try:
                prompt = Prompt.from_json(record.prompt or {})
            except (KeyError, TypeError, ValueError):
                log.warning("unreadable prompt in a journal", task=record.task_hash)
                continue
            # Answered already, and the answer on its way to the task.
            if await self.store.stored_answer(prompt.task_hash, prompt.number) is None:
                found.append(prompt)
        return found

    async def answer(
        self, session_id: str | None, task_hash: str, responder: Origin, reply: Reply
    ) -> Answer:
        """Answer the open prompt of a task another instance runs: checked against its
        journal, recorded (unless someone answered first), then signalled to that instance."""
        record = await self.store.journal(task_hash) if HASH_RE.fullmatch(task_hash) else None
        if record is None or session_id not in (None, record.session_id):
            raise no_such_task(task_hash, session_id)
        if not record.prompt:
            raise PromptNotFound(f"task {task_hash} is not waiting for an answer")
        prompt = Prompt.from_json(record.prompt)
        self.authority.require_requester(responder, prompt.origin, "answer this prompt")
        answer = make_answer(prompt, responder, reply)
        taken, _ = await self.store.claim_answer(
            record.session_id, task_hash, prompt.number, answer.to_json()
        )
        if not taken:
            raise AlreadyAnswered(f"the prompt of task {task_hash} was already answered")
        await self.bus.publish(ANSWER, {"task": task_hash}, keep=True)
        return answer

    async def cancel(self, task: TaskState, by: str) -> bool:
        """Ask the instance running `task` to cancel it."""
        message = {"session_id": task.session_id, "task": task.task_hash, "by": by}
        await self.bus.publish(CANCEL, message, keep=True)
        return True


async def _follow(followed: TaskState, event: Event) -> None:
    """Bring what this instance shows of a task another one runs up to `event`."""
    if isinstance(event, ConfirmEvent | AskUserEvent):
        await followed.update(event=event, prompt=_prompt_of(followed, event), status="waiting")
    elif isinstance(event, AnswerEvent):
        await followed.update(event=event, prompt=None, status="running")
    elif isinstance(event, DoneEvent):
        await followed.update(event=event, reply=event.text, status="done")
    elif isinstance(event, ErrorEvent):
        await followed.update(event=event, error=event.message, status="error")
    elif isinstance(event, CanceledEvent):
        await followed.update(event=event, prompt=None, status="canceled")
    elif isinstance(event, TextEvent):
        await followed.update(event=event, reply=event.text)
    else:
        # A notice ("queued (1 ahead)") is about a task still waiting its turn.
        started = not isinstance(event, UserEvent | NoticeEvent) and followed.status == "queued"
        await followed.update(event=event, status="running" if started else KEEP)


def _prompt_of(task: TaskState, event: ConfirmEvent | AskUserEvent) -> Prompt:
    if isinstance(event, ConfirmEvent):
        return Prompt(
            "confirm",
            task.session_id,
            task.task_hash,
            task.origin,
            event.expires_at,
            tool=event.tool,
            args=dict(event.args),
        )
    return Prompt(
        "ask_user",
        task.session_id,
        task.task_hash,
        task.origin,
        event.expires_at,
        question=event.question,
        options=tuple(event.options),
    )
