"""A task: one user message being answered, from submission to its end.

Its state is changed here only. `TaskState` is what anyone may watch (status, reply, prompt,
events); `Task` is a task this instance runs, with what its run holds between steps. Both
change through their own methods; everything outside the engine sees `TaskView` snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from gateway.clock import Clock
from gateway.engine.journal import Answer, Journal, JournalHead, PromptAsked
from gateway.engine.views import FINISHED, Prompt, TaskStatus, TaskView
from gateway.events import Attachment, Event, Origin
from gateway.store.usage import UsageRecord


class _Keep:
    """Marks a field `TaskState.update` leaves as it is (None is a value: no prompt)."""


KEEP: Any = _Keep()


class TaskState:
    """What anyone may watch of a task: its status, reply, error, open prompt and events.

    Changed only through `update`, which wakes whoever waits on the task or streams it. A task
    run here holds one (`Task.state`); a task another instance runs is followed through one of
    its own (`gateway.cluster.relay`), and hands it to the `Task` made here if this instance
    takes the task up, so whoever waits or streams keeps following the same state.
    """

    def __init__(self, session_id: str, task_hash: str, origin: Origin, text: str) -> None:
        self.session_id = session_id
        self.task_hash = task_hash
        self.origin = origin
        self.text = text
        self._status: TaskStatus = "queued"
        self._reply = ""
        self._error = ""
        self._prompt: Prompt | None = None
        self._collected_into = ""
        self._events: list[Event] = []
        self._changed = asyncio.Condition()

    @property
    def status(self) -> TaskStatus:
        return self._status

    @property
    def reply(self) -> str:
        return self._reply

    @property
    def error(self) -> str:
        return self._error

    @property
    def prompt(self) -> Prompt | None:
        return self._prompt

    @property
    def collected_into(self) -> str:
        return self._collected_into

    @property
    def events(self) -> tuple[Event, ...]:
        return tuple(self._events)

    @property
    def finished(self) -> bool:
        return self._status in FINISHED

    def prompt_open(self) -> bool:
        """Whether the task waits for an answer, as far as its state shows."""
        return self._prompt is not None and self._status == "waiting"

    async def update(
        self,
        *,
        status: TaskStatus = KEEP,
        reply: str = KEEP,
        error: str = KEEP,
        prompt: Prompt | None = KEEP,
        collected_into: str = KEEP,
        event: Event | None = None,
    ) -> None:
        """Change what is given, all at once, and wake the watchers."""
        async with self._changed:
            if status is not KEEP:
                self._status = status
            if reply is not KEEP:
                self._reply = reply
            if error is not KEEP:
                self._error = error
            if prompt is not KEEP:
                self._prompt = prompt
            if collected_into is not KEEP:
                self._collected_into = collected_into
            if event is not None:
                self._events.append(event)
            self._changed.notify_all()

    def run_here(self) -> None:
        """The task runs here from now on, from its journal: what the other instance's run
        showed is over. Synchronous, so it can happen as the task is queued; the watchers
        hear of it with the run's first change."""
        self._status, self._prompt = "queued", None

    def forget_events(self) -> None:
        """Let the events go (a finished task kept for its outcome only)."""
        self._events.clear()

    async def settled(
        self,
        clock: Clock,
        within: float,
        *,
        until_prompt: bool,
        prompt_open: Callable[[], bool] | None = None,
    ) -> TaskView:
        """The task once it finishes (or parks on a prompt, if asked), or after `within`;
        `prompt_open` says whether it waits for an answer, when its state alone cannot."""
        parked = prompt_open or self.prompt_open

        def ready() -> bool:
            return self.finished or (until_prompt and parked())

        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await clock.wait_for(self._changed.wait_for(ready), within)
        return self.view()

    async def follow(self) -> AsyncIterator[Event]:
        """Every event of the task so far, then live ones until it finishes."""
        sent = 0
        while True:
            async with self._changed:
                await self._changed.wait_for(
                    lambda n=sent: len(self._events) > n or self.finished  # type: ignore[misc]
                )
                batch = self._events[sent:]
                done = self.finished
            for event in batch:
                yield event
            sent += len(batch)
            if done and sent >= len(self._events):
                return

    def view(self) -> TaskView:
        return TaskView(
            session_id=self.session_id,
            task_hash=self.task_hash,
            origin=self.origin,
            text=self.text,
            status=self._status,
            reply=self._reply,
            error=self._error,
            prompt=self._prompt,
            events=tuple(self._events),
            collected_into=self._collected_into,
        )


class Task:
    """A task this instance runs: its state (`TaskState`), its journal, and what its run holds
    between steps. Its fields change only through the methods below."""

    def __init__(
        self,
        head: JournalHead,
        attachments: Sequence[Attachment],
        journal: Journal,
        state: TaskState | None = None,
    ) -> None:
        self.session_id = head.session_id
        self.task_hash = head.task_hash
        self.origin = head.origin
        self.text = head.text
        self.attachments: Sequence[Attachment] = tuple(attachments)
        self.user_message_id = head.user_message_id
        self.user_sent_at = head.user_sent_at  # send_at of the user message, in history.json
        self.submitted_at = head.submitted_at
        self.journal = journal
        self.state = state or TaskState(head.session_id, head.task_hash, head.origin, head.text)
        self._answer: asyncio.Future[Answer] | None = None  # set while a prompt waits
        self._prompt_step: PromptAsked | None = None  # the journal step of the open prompt
        # Held while a prompt is being settled (an answer, or its expiry), so only one settles it.
        self.prompt_lock = asyncio.Lock()
        self._canceled_by = ""
        self._tool_results: list[dict[str, Any]] = []
        self._outbox_chunks = 0
        # The last model call's usage, recorded with the step that follows it.
        self._usage: UsageRecord | None = None
        # Its end is recorded (reply or error); what is left is delivery and bookkeeping.
        self._recorded = False

    # -- reading ---------------------------------------------------------------------------

    @property
    def status(self) -> TaskStatus:
        return self.state.status

    @property
    def reply(self) -> str:
        return self.state.reply

    @property
    def error(self) -> str:
        return self.state.error

    @property
    def prompt(self) -> Prompt | None:
        return self.state.prompt

    @property
    def prompt_step(self) -> PromptAsked | None:
        return self._prompt_step

    @property
    def collected_into(self) -> str:
        return self.state.collected_into

    @property
    def events(self) -> tuple[Event, ...]:
        return self.state.events

    @property
    def finished(self) -> bool:
        return self.state.finished

    @property
    def canceled_by(self) -> str:
        return self._canceled_by

    @property
    def tool_results(self) -> list[dict[str, Any]]:
        return list(self._tool_results)

    @property
    def usage(self) -> UsageRecord | None:
        return self._usage

    @property
    def recorded(self) -> bool:
        return self._recorded

    @property
    def sender(self) -> str:
        """Who the task counts against (`platform:sender id`)."""
        return self.origin.sender_key

    @property
    def order(self) -> int:
        return self.user_message_id

    def waiting_for_answer(self) -> bool:
        return self.state.prompt_open() and self._answer is not None and not self._answer.done()

    async def settled(self, clock: Clock, within: float, *, until_prompt: bool) -> TaskView:
        return await self.state.settled(
            clock, within, until_prompt=until_prompt, prompt_open=self.waiting_for_answer
        )

    def follow(self) -> AsyncIterator[Event]:
        return self.state.follow()

    def view(self) -> TaskView:
        return self.state.view()

    # -- its run ---------------------------------------------------------------------------

    async def set_status(self, status: TaskStatus) -> None:
        await self.state.update(status=status)

    async def add_event(self, event: Event) -> None:
        await self.state.update(event=event)

    async def set_reply(self, text: str) -> None:
        await self.state.update(reply=text)

    async def fail(self, message: str) -> None:
        """The run ends in an error (its status follows once the end is recorded)."""
        await self.state.update(error=message)

    def next_chunk(self) -> int:
        """The outbox chunk number of the next entry this task records."""
        self._outbox_chunks += 1
        return self._outbox_chunks - 1

    def add_tool_result(self, record: dict[str, Any]) -> None:
        self._tool_results.append(record)

    def hold_usage(self, record: UsageRecord | None) -> None:
        self._usage = record

    def take_usage(self) -> UsageRecord | None:
        """The usage held, which the caller records now."""
        record, self._usage = self._usage, None
        return record

    def mark_recorded(self) -> None:
        """Its end (and the usage held) went into the archive."""
        self._usage = None
        self._recorded = True

    def cancel_as(self, by: str) -> None:
        """It is to be canceled, by `by` (its run ends as canceled, not interrupted)."""
        self._canceled_by = by

    async def collect_into(self, into: str) -> None:
        """Its message is answered by task `into`: it ends as collected."""
        await self.state.update(collected_into=into, status="collected")

    # -- its prompt ------------------------------------------------------------------------

    async def ask(self, prompt: Prompt, step: PromptAsked) -> asyncio.Future[Answer]:
        """Park on `prompt` (journaled as `step`); the future is its answer."""
        self._prompt_step = step
        self._answer = asyncio.get_running_loop().create_future()
        await self.state.update(prompt=prompt, status="waiting")
        return self._answer

    def record_answer(self, answer: Answer) -> None:
        """The open prompt's answer, into its journal step (saved by the caller)."""
        assert self._prompt_step is not None
        self._prompt_step.answer = answer

    def wake(self, answer: Answer) -> None:
        """Give the answer to the run waiting on the prompt."""
        assert self._answer is not None
        self._answer.set_result(answer)

    async def close_prompt(self) -> None:
        """The prompt is answered or expired, or the run ends without it."""
        if self._answer is not None and not self._answer.done():
            self._answer.cancel()
        self._answer = self._prompt_step = None
        await self.state.update(prompt=None)

    async def save_journal(self, *, collected: Sequence[str] = ()) -> None:
        """Record its journal; `collected`: tasks whose messages it now answers (their
        journals go in the same transaction)."""
        prompt = self.prompt.to_json() if self.prompt else None
        await self.journal.save(self.status, prompt, collected=collected)
