"""Confirmations and questions a running task puts to the user who started it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.events import Origin

PromptKind = Literal["confirm", "ask_user"]


class PromptError(Exception):
    """An answer that cannot be taken; `code` tells adapters which status to show."""

    code = "invalid"


class PromptNotFound(PromptError):
    code = "not_found"


class NotAllowed(PromptError):
    code = "not_allowed"


class AlreadyAnswered(PromptError):
    code = "already_answered"


@dataclass(frozen=True, slots=True)
class Answer:
    approved: bool | None = None
    text: str | None = None
    by: str = ""  # display name of who answered, or "timeout"


@dataclass(slots=True)
class Prompt:
    kind: PromptKind
    session_id: str
    task_hash: str
    origin: Origin
    expires_at: int
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    question: str = ""
    options: Sequence[str] = ()
    future: asyncio.Future[Answer] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "session_id": self.session_id,
            "task_hash": self.task_hash,
            "origin": self.origin.to_json(),
            "expires_at": self.expires_at,
            "tool": self.tool,
            "args": self.args,
            "question": self.question,
            "options": list(self.options),
        }

    def may_answer(self, responder: Origin, admins: frozenset[str]) -> bool:
        """The sender who started the task, or an admin.

        A terminal prompt belongs to the window that started the task: the same person in
        another window watches it but cannot answer it.
        """
        if responder.is_admin or responder.sender_key in admins:
            return True
        same_sender = (
            responder.platform == self.origin.platform
            and responder.sender_id == self.origin.sender_id
        )
        if same_sender and self.origin.platform == "terminal":
            return responder.window_hash == self.origin.window_hash
        return same_sender

    def resolve(self, approved: bool | None, text: str | None, by: str) -> Answer:
        if self.future.done():
            raise AlreadyAnswered(f"the prompt of task {self.task_hash} was already answered")
        if self.kind == "confirm":
            if approved is None:
                raise PromptError("a confirmation is answered with approve: true or false")
            answer = Answer(approved=approved, by=by)
        else:
            if text is None:
                raise PromptError("a question is answered with a text answer")
            answer = Answer(text=text, by=by)
        self.future.set_result(answer)
        return answer
