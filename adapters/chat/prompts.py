"""Prompts on a chat platform: where each open one was posted, so its answer can close it, and
answering them from a button or a reply.

The router checks every answer; a refusal comes back with a reason to show: who may answer
(worth an alert), or a plain "already answered".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gateway.auth import NotAllowed
from gateway.engine import AlreadyAnswered, PromptError, PromptNotFound, Router, TaskNotFound
from gateway.events import Origin
from gateway.text import UnstorableText

ALREADY_ANSWERED: Final = "already answered"


@dataclass(frozen=True, slots=True)
class Posted:
    """A message the bot posted: the chat or channel the platform put it in, and its id."""

    channel: str
    message_id: str


@dataclass(frozen=True, slots=True)
class Answered:
    outcome: str  # "approved by Ann"


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str
    alert: bool  # worth interrupting the person for (not a mere "already answered")


def outcome(approved: bool | None, text: str | None, by: str) -> str:
    """What became of a prompt, for the message that asked it."""
    who = "nobody (expired)" if by == "timeout" else by
    if text is not None:
        return f"answered “{text}” by {who}"
    if approved is None:
        return f"not answered ({who})"
    return f"{'approved' if approved else 'denied'} by {who}"


@dataclass(frozen=True, slots=True)
class _Open:
    posted: Posted
    by_reply: bool  # answered by replying to the prompt message


class OpenPrompts:
    def __init__(self, router: Router) -> None:
        self.router = router
        self._open: dict[str, _Open] = {}  # by task
        self._closed_here: set[str] = set()  # closed by the platform when it took the answer

    def opened(self, task_hash: str, posted: Posted, *, by_reply: bool) -> None:
        self._open[task_hash] = _Open(posted, by_reply)

    def answered_by(self, replied_to: Posted | None) -> str | None:
        """The task whose prompt a reply to `replied_to` answers, if it is such a prompt."""
        for task_hash, prompt in self._open.items():
            if prompt.by_reply and prompt.posted == replied_to:
                return task_hash
        return None

    def closing(self, task_hash: str) -> Posted | None:
        """The prompt message to close now that the task's prompt is answered; None when
        there is none, or the platform closed it already."""
        prompt = self._open.pop(task_hash, None)
        if task_hash in self._closed_here:
            self._closed_here.discard(task_hash)
            return None
        return prompt.posted if prompt else None

    async def answer(
        self,
        task_hash: str,
        responder: Origin,
        *,
        approve: bool | None = None,
        option: int | None = None,
        text: str | None = None,
        closes_message: bool = False,
    ) -> Answered | Refused:
        """Answer a task's open prompt for `responder`.

        `option` picks one of the question's options by index. With `closes_message` the
        platform shows the outcome on the prompt message itself, so `closing` leaves that
        message alone."""
        try:
            answer = await self.router.answer(
                None, task_hash, responder, approve=approve, text=text, option=option
            )
        except (NotAllowed, PromptError, TaskNotFound, UnstorableText) as exc:
            return _refused(exc)
        if closes_message:
            self._closed_here.add(task_hash)
        return Answered(outcome(answer.approved, answer.text, answer.by))

    async def refusal(self, task_hash: str, responder: Origin) -> Refused | None:
        """Why `responder` may not answer the task's prompt, if they may not (for a platform
        that asks for the answer in a second step)."""
        try:
            await self.router.may_answer(task_hash, responder)
        except (NotAllowed, PromptError) as exc:
            return _refused(exc)
        return None


def _refused(exc: Exception) -> Refused:
    if isinstance(exc, AlreadyAnswered | PromptNotFound | TaskNotFound):
        return Refused(ALREADY_ANSWERED, alert=False)
    return Refused(str(exc), alert=True)
