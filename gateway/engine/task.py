"""A task: one user message being answered, from submission to its end.

`Task` is the engine's own mutable state. Everything outside the engine sees a `TaskView`, a
snapshot taken when it was asked for: adapters read it, none changes a task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gateway.engine.journal import Answer, Journal, PromptAsked, PromptKind
from gateway.events import Attachment, Event, Origin

if TYPE_CHECKING:
    from gateway.commands.registry import CommandReply

TaskStatus = Literal["queued", "running", "waiting", "done", "error", "canceled", "interrupted"]
FINISHED: frozenset[str] = frozenset({"done", "error", "canceled", "interrupted"})


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

    def to_json(self) -> dict[str, Any]:
        return {
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

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def sender(self) -> str:
        """Who the task counts against (`platform:sender id`)."""
        return self.origin.sender_key

    def next_chunk(self) -> int:
        """The outbox chunk number of the next entry this task records."""
        self.outbox_chunks += 1
        return self.outbox_chunks - 1

    def waiting_for_answer(self) -> bool:
        return self.prompt is not None and self.answer is not None and not self.answer.done()

    async def set_status(self, status: TaskStatus) -> None:
        async with self.changed:
            self.status = status
            self.changed.notify_all()

    async def add_event(self, event: Event) -> None:
        async with self.changed:
            self.events.append(event)
            self.changed.notify_all()

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
        )
