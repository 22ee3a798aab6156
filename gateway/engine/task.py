"""A task: one user message being answered, from submission to its end.

`Task` is the engine's own mutable state. Everything outside the engine sees a `TaskView`, a
snapshot taken when it was asked for: adapters read it, none changes a task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gateway.clock import Clock
from gateway.engine.journal import Answer, Journal, PromptAsked, PromptKind
from gateway.events import Attachment, Event, Origin
from gateway.store.usage import UsageRecord

if TYPE_CHECKING:
    from gateway.commands.registry import CommandReply

TaskStatus = Literal[
    "queued", "running", "waiting", "done", "error", "canceled", "interrupted", "collected"
]
# "collected": answered by another task of its session, which took this message in with its
# own (the `collect` and `steer` queue modes); `collected_into` names that task.
FINISHED: frozenset[str] = frozenset({"done", "error", "canceled", "interrupted", "collected"})


class MessageTooLong(ValueError):
    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"message is {length} characters; the limit is {limit}")
        self.length, self.limit = length, limit


class TaskNotFound(LookupError):
    pass


class TooManyTasks(RuntimeError):
    """The sender has as many tasks waiting or running as one sender may; nothing was stored."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"too many requests: you have {limit} tasks waiting or running; "
            "send more once some are answered"
        )
        self.limit = limit


class QueueFull(TooManyTasks):
    """The session has as many tasks waiting as one session may; nothing was stored."""

    def __init__(self, limit: int) -> None:
        RuntimeError.__init__(
            self,
            f"this conversation has {limit} messages waiting for the bot already; "
            "send more once some are answered",
        )
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Prompt:
    """A confirmation or question a task waits on, and where it must be answered."""

    kind: PromptKind
    session_id: str
    task_hash: str
    origin: Origin
    expires_at: int
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    question: str = ""
    options: tuple[str, ...] = ()
    number: int = 0  # which of the task's prompts (0 for its first): the same on a replay

    def to_json(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "kind": self.kind,
            "session_id": self.session_id,
            "task_hash": self.task_hash,
            "origin": self.origin.to_json(),
            "expires_at": self.expires_at,
            "tool": self.tool,
            "args": dict(self.args),
            "question": self.question,
            "options": list(self.options),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Prompt:
        """A prompt as journaled (raises KeyError, TypeError or ValueError when damaged)."""
        kind = data["kind"]
        if kind not in ("confirm", "ask_user"):
            raise ValueError(f"unknown prompt kind {kind!r}")
        return cls(
            kind=kind,
            session_id=str(data["session_id"]),
            task_hash=str(data["task_hash"]),
            origin=Origin.from_json(dict(data["origin"])),
            expires_at=int(data["expires_at"]),
            tool=str(data.get("tool", "")),
            args=dict(data.get("args") or {}),
            question=str(data.get("question", "")),
            options=tuple(str(o) for o in data.get("options") or ()),
            number=int(data.get("number", 0)),
        )


@dataclass(frozen=True, slots=True)
class Submission:
    session_id: str
    task_hash: str = ""  # empty when the text was a gateway command
    position: int = 0  # tasks ahead of this one in the session
    command: CommandReply | None = None
    duplicate: bool = False  # the platform delivered this message before: nothing was done


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task as it was when the view was taken."""

    session_id: str
    task_hash: str
    origin: Origin
    text: str
    status: TaskStatus
    reply: str
    error: str
    prompt: Prompt | None
    events: tuple[Event, ...]
    collected_into: str = ""

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "task_hash": self.task_hash,
            "status": self.status,
            "text": self.reply,
            "error": self.error,
            "pending": self.prompt.to_json() if self.prompt else None,
            "collected_into": self.collected_into,
        }


@dataclass(eq=False)
class Task:
    session_id: str
    task_hash: str
    origin: Origin
    text: str
    attachments: Sequence[Attachment]
    user_message_id: int
    user_sent_at: int  # send_at of the user message, to find it in history.json
    submitted_at: int
    journal: Journal
    status: TaskStatus = "queued"
    reply: str = ""
    error: str = ""
    events: list[Event] = field(default_factory=list)
    prompt: Prompt | None = None
    answer: asyncio.Future[Answer] | None = None  # set while `prompt` waits
    prompt_step: PromptAsked | None = None  # the journal step of `prompt`
    # Held while a prompt is being settled (an answer, or its expiry), so only one settles it.
    prompt_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    canceled_by: str = ""
    runner: asyncio.Task[None] | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    holds_slot: bool = False
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    outbox_chunks: int = 0
    # The last model call's usage, recorded with the step that follows it.
    usage: UsageRecord | None = None
    # Its end is recorded (reply or error); what is left is delivery and bookkeeping.
    recorded: bool = False
    # Stored here, run by another instance (which holds the session): this task is a view
    # of that one.
    elsewhere: bool = False
    collected_into: str = ""

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def sender(self) -> str:
        """Who the task counts against (`platform:sender id`)."""
        return self.origin.sender_key

    @property
    def order(self) -> int:
        return self.user_message_id

    def next_chunk(self) -> int:
        """The outbox chunk number of the next entry this task records."""
        self.outbox_chunks += 1
        return self.outbox_chunks - 1

    def waiting_for_answer(self) -> bool:
        if self.elsewhere:  # what the running instance said last
            return self.prompt is not None and self.status == "waiting"
        return self.prompt is not None and self.answer is not None and not self.answer.done()

    async def set_status(self, status: TaskStatus) -> None:
        async with self.changed:
            self.status = status
            self.changed.notify_all()

    async def add_event(self, event: Event) -> None:
        async with self.changed:
            self.events.append(event)
            self.changed.notify_all()

    async def settled(self, clock: Clock, within: float, *, until_prompt: bool) -> TaskView:
        """The task once it finishes (or parks on a prompt, if asked), or after `within`."""

        def ready() -> bool:
            return self.finished or (until_prompt and self.waiting_for_answer())

        async with self.changed:
            with contextlib.suppress(TimeoutError):
                await clock.wait_for(self.changed.wait_for(ready), within)
        return self.view()

    async def follow(self) -> AsyncIterator[Event]:
        """Every event of the task so far, then live ones until it finishes."""
        sent = 0
        while True:
            async with self.changed:
                await self.changed.wait_for(
                    lambda n=sent: len(self.events) > n or self.finished  # type: ignore[misc]
                )
                batch = self.events[sent:]
                done = self.finished
            for event in batch:
                yield event
            sent += len(batch)
            if done and sent >= len(self.events):
                return

    async def save_journal(self) -> None:
        prompt = self.prompt.to_json() if self.prompt else None
        await self.journal.save(self.status, prompt)

    def view(self) -> TaskView:
        return TaskView(
            session_id=self.session_id,
            task_hash=self.task_hash,
            origin=self.origin,
            text=self.text,
            status=self.status,
            reply=self.reply,
            error=self.error,
            prompt=self.prompt,
            events=tuple(self.events),
            collected_into=self.collected_into,
        )
