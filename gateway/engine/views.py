"""What the engine shows of its tasks: read-only views, prompts and submissions.

Everything outside the engine sees these, snapshots taken when they were asked for; none of
them changes a task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gateway.engine.journal import PromptKind
from gateway.events import Event, Origin

if TYPE_CHECKING:
    from gateway.commands.registry import CommandReply

TaskStatus = Literal[
    "queued", "running", "waiting", "done", "error", "canceled", "interrupted", "collected"
]
# "collected": answered by another task of its session, which took this message in with its
# own (the `collect` and `steer` queue modes); `collected_into` names that task.
FINISHED: frozenset[str] = frozenset({"done", "error", "canceled", "interrupted", "collected"})


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
