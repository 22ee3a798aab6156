"""A task's journal: what it has done so far, kept in the archive (`task_journal`).

The journal is stored with the task's message, in one transaction, updated after every step
(a tool started, a tool finished, a prompt asked, a prompt answered, a message steered in),
and taken out with the record of the task's end. A process that dies leaves it behind; the
next start replays the task from it (`Replay`): a finished tool is not run again, a tool cut
off mid-call is run again if it is idempotent and reported as interrupted otherwise, an
answered prompt stands, a message steered in is handed to the agent again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from gateway.clock import now_ms
from gateway.events import Attachment, Origin
from gateway.ids import validate_hash
from gateway.logs import get_logger
from gateway.store.journals import JournalRecord
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

PromptKind = Literal["confirm", "ask_user"]

# The key of a journal's origin that names the instance the message reached, where several
# share the archive: its `action.log` line belongs in that instance's home.
RECEIVED_BY: Final = "received_by"


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


@dataclass(frozen=True, slots=True)
class Steered:
    """A message the run took in while it ran (the `steer` queue mode): the task that brought
    it ends as collected in the transaction that records this step, so from then on this run
    answers it, and a replay hands it to the agent again."""

    head: JournalHead
    attachments: tuple[Attachment, ...] = ()


JournalStep = ToolStarted | ToolFinished | PromptAsked | Steered


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
    if isinstance(step, Steered):
        files = [
            {"name": a.name, "mime": a.mime, "size": a.size, "path": a.path}
            for a in step.attachments
        ]
        return {"type": "steered", "head": step.head.to_json(), "attachments": files}
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
    if kind == "steered":
        return _steered_from_json(data)
    return None


def _steered_from_json(data: dict[str, Any]) -> Steered | None:
    head, files = data.get("head"), data.get("attachments")
    if not isinstance(head, dict):
        return None
    try:
        attachments = tuple(
            Attachment(str(f["name"]), str(f["mime"]), int(f["size"]), str(f["path"]))
            for f in (files if isinstance(files, list) else [])
        )
        return Steered(JournalHead.from_json(head), attachments)
    except (KeyError, TypeError, ValueError):
        return None


class Replay:
    """The steps a previous life of a task recorded, looked up as the task runs again.

    `started`: that life may have begun to run it, even without a step (it ran, or it was its
    session's oldest unfinished task: a session runs its tasks one at a time in archive order,
    so no younger one can have begun)."""

    def __init__(self, steps: Sequence[JournalStep] = (), *, started: bool = False) -> None:
        self._steps = list(steps)
        self._prompts = [s for s in self._steps if isinstance(s, PromptAsked)]
        self._prompts_seen = 0
        self._steered = [s for s in self._steps if isinstance(s, Steered)]
        self._steered_handed = False
        self._started = started or bool(self._steps)

    @property
    def empty(self) -> bool:
        """Nothing was recorded: the task never got to a step."""
        return not self._steps

    @property
    def started(self) -> bool:
        """A previous life may have run the task: it keeps its own run (never collected)."""
        return self._started

    @property
    def steered(self) -> list[Steered]:
        """The messages a previous life took in, in the order it took them."""
        return list(self._steered)

    def take_steered(self) -> list[Steered]:
        """`steered`, the first time it is asked (when the run asks for messages again);
        empty after that."""
        if self._steered_handed:
            return []
        self._steered_handed = True
        return list(self._steered)

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

    def record(self) -> JournalRecord:
        """The journal of a task not started yet, as the archive keeps it."""
        return JournalRecord(
            task_hash=self.task_hash,
            session_id=self.session_id,
            origin=self.origin.to_json(),
            text=self.text,
            user_message_id=self.user_message_id,
            user_sent_at=self.user_sent_at,
            submitted_at=self.submitted_at,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "task_hash": self.task_hash,
            "origin": self.origin.to_json(),
            "text": self.text,
            "user_message_id": self.user_message_id,
            "user_sent_at": self.user_sent_at,
            "submitted_at": self.submitted_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JournalHead:
        """A head as written by `to_json` (KeyError, TypeError or ValueError if it is not)."""
        origin = data["origin"]
        if not isinstance(origin, dict):
            raise TypeError("origin is not an object")
        return cls(
            session_id=str(data["session_id"]),
            task_hash=validate_hash(str(data["task_hash"])),
            origin=Origin.from_json(origin),
            text=str(data["text"]),
            user_message_id=int(data["user_message_id"]),
            user_sent_at=int(data["user_sent_at"]),
            submitted_at=int(data["submitted_at"]),
        )

    @classmethod
    def of(cls, record: JournalRecord) -> JournalHead:
        return cls(
            session_id=record.session_id,
            task_hash=record.task_hash,
            origin=Origin.from_json(record.origin),
            text=record.text,
            user_message_id=record.user_message_id,
            user_sent_at=record.user_sent_at,
            submitted_at=record.submitted_at,
        )


def replay_of(record: JournalRecord, *, oldest: bool = False) -> Replay:
    """The replay of a journal; `oldest`: its task was the oldest unfinished one of its
    session when it was taken up (so it may have run, as far as anyone can tell)."""
    steps = [s for s in map(step_from_json, record.steps) if s is not None]
    return Replay(steps, started=oldest or record.status != "queued")


class Journal:
    """The journal of one task, in the archive; while it waits on a prompt, the prompt is also
    in `pending/<task_hash>.json` (the session folder's view of what is waiting, as the session
    layout has it)."""

    def __init__(
        self,
        store: SessionStore,
        head: JournalHead,
        replay: Replay | None = None,
    ) -> None:
        self.store = store
        self.head = head
        self.replay = replay or Replay()
        # Whatever the run does again, the messages it took in before stay its own: a save
        # before the run asks for them again must not leave them out.
        self.steps: list[JournalStep] = list(self.replay.steered)
        self._file_io: asyncio.Future[None] | None = None
        self._file_written = False
        self._closed = False

    async def save(
        self,
        status: str,
        prompt: dict[str, Any] | None = None,
        *,
        collected: Sequence[str] = (),
    ) -> None:
        """Record the steps so far; `collected`: tasks whose messages this one answers from
        now on, whose journals go in the same transaction."""
        if self._closed:
            return
        await self.store.save_journal(
            self.head.task_hash,
            status=status,
            steps=[step_to_json(s) for s in self.steps],
            prompt=prompt,
            collected=collected,
        )
        if prompt is not None:
            await self._write_file(prompt)
        elif self._file_written:
            await self._remove_file()

    async def close(self, *, recorded: bool) -> None:
        """The task ended: write no more. `recorded`: its end was stored with its run, which
        took the journal out of the archive; otherwise (canceled) it is taken out here."""
        self._closed = True
        if not recorded:
            await self.store.drop_journal(self.head.task_hash)
        if self._file_written:
            await self._remove_file()

    async def _write_file(self, prompt: dict[str, Any]) -> None:
        head = self.head
        data = {
            "session_id": head.session_id,
            "task_hash": head.task_hash,
            "origin": head.origin.to_json(),
            "prompt": prompt,
            "updated_at": now_ms(),
        }
        files = self.store.files(head.session_id)
        # The write runs on in its thread even if the task is canceled meanwhile; remembering
        # it lets the removal wait for it, so a late write cannot bring the file back.
        write = asyncio.ensure_future(asyncio.to_thread(files.write_pending, head.task_hash, data))
        self._file_io = write
        self._file_written = True
        try:
            await asyncio.shield(write)
        except FileNotFoundError:
            log.warning("session gone while its task ran", session=head.session_id)

    async def _remove_file(self) -> None:
        if self._file_io is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._file_io
        files = self.store.files(self.head.session_id)
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(files.remove_pending, self.head.task_hash)
        self._file_written = False
