"""A task's journal: what it has done so far, kept in `pending/<task_hash>.json`.

The journal is written when a task is submitted and after every step (a tool started, a tool
finished, a prompt asked, a prompt answered), and removed when the task ends. A process that
dies leaves it behind; the next start replays the task from it (`Replay`): a finished tool is
not run again, a tool cut off mid-call is reported as interrupted, an answered prompt stands.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.clock import now_ms
from gateway.events import Origin
from gateway.logs import get_logger
from gateway.store.files import SessionFiles

log = get_logger(__name__)

PromptKind = Literal["confirm", "ask_user"]


@dataclass(frozen=True, slots=True)
class Answer:
    approved: bool | None = None
    text: str | None = None
    by: str = ""  # display name of who answered, "timeout", or the allow-list

    def to_json(self) -> dict[str, Any]:
        return {"approved": self.approved, "text": self.text, "by": self.by}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Answer:
        approved = data.get("approved")
        text = data.get("text")
        return cls(
            approved=approved if isinstance(approved, bool) else None,
            text=text if isinstance(text, str) else None,
            by=str(data.get("by", "")),
        )


@dataclass(slots=True)
class ToolStarted:
    call_id: str
    tool: str
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ToolFinished:
    call_id: str
    tool: str
    status: str
    result: str

    def record(self) -> dict[str, Any]:
        """The form kept in `action_history.tool_results`."""
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "status": self.status,
            "result": self.result,
        }


@dataclass(slots=True)
class PromptAsked:
    kind: PromptKind
    answer: Answer | None = None  # filled in when answered


JournalStep = ToolStarted | ToolFinished | PromptAsked


def step_to_json(step: JournalStep) -> dict[str, Any]:
    if isinstance(step, ToolStarted):
        return {
            "type": "tool",
            "state": "started",
            "call_id": step.call_id,
            "tool": step.tool,
            "args": step.args,
        }
    if isinstance(step, ToolFinished):
        return {"type": "tool", "state": "finished", **step.record()}
    answer = step.answer.to_json() if step.answer is not None else None
    return {"type": "prompt", "kind": step.kind, "answer": answer}


def step_from_json(data: object) -> JournalStep | None:
    """A step as written by `step_to_json`; None for anything else (skipped on replay)."""
    if not isinstance(data, dict):
        return None
    kind = data.get("type")
    if kind == "tool":
        call_id, tool = str(data.get("call_id", "")), str(data.get("tool", ""))
        if data.get("state") == "finished":
            status = str(data.get("status", "ok"))
            return ToolFinished(call_id, tool, status, str(data.get("result", "")))
        args = data.get("args")
        return ToolStarted(call_id, tool, args if isinstance(args, dict) else {})
    if kind == "prompt" and data.get("kind") in ("confirm", "ask_user"):
        given = data.get("answer")
        answer = Answer.from_json(given) if isinstance(given, dict) else None
        return PromptAsked(data["kind"], answer)
    return None


class Replay:
    """The steps a previous life of a task recorded, looked up as the task runs again."""

    def __init__(self, steps: Sequence[JournalStep] = ()) -> None:
        self._steps = list(steps)
        self._prompts = [s for s in self._steps if isinstance(s, PromptAsked)]
        self._prompts_seen = 0

    def tool(self, call_id: str) -> list[ToolStarted | ToolFinished]:
        """What was recorded of the tool call `call_id`, in order (empty if never started)."""
        return [
            s
            for s in self._steps
            if isinstance(s, ToolStarted | ToolFinished) and s.call_id == call_id
        ]

    def next_prompt(self) -> PromptAsked | None:
        """The recorded prompt at this point of the run, if it was answered then."""
        ordinal = self._prompts_seen
        self._prompts_seen += 1
        if ordinal < len(self._prompts) and self._prompts[ordinal].answer is not None:
            return self._prompts[ordinal]
        return None


@dataclass(frozen=True, slots=True)
class JournalHead:
    """What a journal must hold to take the task up again after a restart."""

    session_id: str
    task_hash: str
    origin: Origin
    text: str
    user_message_id: int
    user_sent_at: int
    submitted_at: int

    @classmethod
    def from_json(cls, data: dict[str, Any], session_id: str, task_hash: str) -> JournalHead:
        """The head of the journal found at `session_id`'s `pending/<task_hash>.json`.

        Raises KeyError, TypeError or ValueError for a journal that cannot be used."""
        return cls(
            session_id=session_id,
            task_hash=task_hash,
            origin=Origin.from_json(data["origin"]),
            text=str(data["text"]),
            user_message_id=int(data["user_message_id"]),
            user_sent_at=int(data.get("user_sent_at", 0)),
            submitted_at=int(data.get("submitted_at", 0)),
        )


class Journal:
    """The journal file of one task. Writes are whole-file atomic replaces off the loop."""

    def __init__(
        self, files: SessionFiles, head: JournalHead, replay: Replay | None = None
    ) -> None:
        self.files = files
        self.head = head
        self.steps: list[JournalStep] = []
        self.replay = replay or Replay()
        self._io: asyncio.Future[None] | None = None
        self._closed = False

    def document(self, status: str, prompt: dict[str, Any] | None) -> dict[str, Any]:
        head = self.head
        return {
            "session_id": head.session_id,
            "task_hash": head.task_hash,
            "status": status,
            "origin": head.origin.to_json(),
            "text": head.text,
            "user_message_id": head.user_message_id,
            "user_sent_at": head.user_sent_at,
            "submitted_at": head.submitted_at,
            "steps": [step_to_json(s) for s in self.steps],
            "prompt": prompt,
            "updated_at": now_ms(),
        }

    async def save(self, status: str, prompt: dict[str, Any] | None = None) -> None:
        if self._closed:
            return
        data = self.document(status, prompt)
        # The write runs on in its thread even if the task is canceled meanwhile; remembering
        # it lets `close` wait for it, so a late write cannot bring a journal back.
        write = asyncio.ensure_future(
            asyncio.to_thread(self.files.write_pending, self.head.task_hash, data)
        )
        self._io = write
        try:
            await asyncio.shield(write)
        except FileNotFoundError:
            log.warning("session gone while its task ran", session=self.head.session_id)

    async def close(self) -> None:
        """The task ended: remove the journal, and write no more."""
        self._closed = True
        if self._io is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._io
        await asyncio.to_thread(self.files.remove_pending, self.head.task_hash)


def read_journals(files: SessionFiles, session_id: str) -> list[tuple[JournalHead, Replay] | str]:
    """The journals left in a session folder: head and replay of each, or the task hash of
    one that cannot be used (set aside with a warning by the caller)."""
    found: list[tuple[JournalHead, Replay] | str] = []
    for task_hash, data in files.list_pending():
        try:
            head = JournalHead.from_json(data, session_id, task_hash)
        except (KeyError, TypeError, ValueError):
            found.append(task_hash)
            continue
        steps = [s for s in map(step_from_json, data.get("steps") or []) if s is not None]
        found.append((head, Replay(steps)))
    return found
