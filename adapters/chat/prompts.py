"""Prompts on a chat platform: where each open one was posted (every asking of it, those from
before a restart included), so its answer can close them all, and answering them from a
button or a reply.

The router checks every answer; a refusal comes back with a reason to show: who may answer
(worth an alert), or a plain "already answered".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from gateway.auth import NotAllowed
from gateway.engine import AlreadyAnswered, PromptError, PromptNotFound, Router, TaskNotFound
from gateway.events import Origin
from gateway.text import UnstorableText

ALREADY_ANSWERED: Final = "already answered"
# What an asking from before a restart says once the prompt is asked again after it.
ASKED_AGAIN: Final = "asked again below"


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


@dataclass(slots=True)
class _Open:
    # Every asking of the prompt, oldest first: the newest has the live buttons; the earlier
    # ones (posted before a restart) had theirs taken away, but a reply to them still counts.
    asked: list[Posted]
    by_reply: bool  # answered by replying to the prompt message


class OpenPrompts:
    def __init__(self, router: Router) -> None:
        self.router = router
        self._open: dict[str, _Open] = {}  # by task
        # By task: the message the platform closed itself when it took the answer (the one
        # whose button was pressed).
        self._closed_here: dict[str, Posted] = {}

    def opened(self, task_hash: str, asked: Sequence[Posted], *, by_reply: bool) -> None:
        """The task's prompt is (or was, before a restart) posted as `asked`, oldest first."""
        known = self._open.get(task_hash)
        every = [*(known.asked if known else ()), *asked]
        self._open[task_hash] = _Open(list(dict.fromkeys(every)), by_reply)

    def answered_by(self, replied_to: Posted | None) -> str | None:
        """The task whose prompt a reply to `replied_to` answers, if it is such a prompt."""
        for task_hash, prompt in self._open.items():
            if prompt.by_reply and replied_to in prompt.asked:
                return task_hash
        return None

    def closing(self, task_hash: str) -> list[Posted]:
        """The prompt messages to close now that the task's prompt is answered: every asking
        of it but the one the platform closed already."""
        prompt = self._open.pop(task_hash, None)
        closed = self._closed_here.pop(task_hash, None)
        return [posted for posted in (prompt.asked if prompt else ()) if posted != closed]

    async def answer(
        self,
        task_hash: str,
        responder: Origin,
        *,
        approve: bool | None = None,
        option: int | None = None,
        text: str | None = None,
        closes: Posted | None = None,
    ) -> Answered | Refused:
        """Answer a task's open prompt for `responder`.

        `option` picks one of the question's options by index. `closes`: the prompt message
        on which the platform shows the outcome itself, which `closing` leaves alone."""
        if closes is not None:
            # Before the answer: its event may close the other askings before `answer` returns.
            self._closed_here[task_hash] = closes
        try:
            answer = await self.router.answer(
                None, task_hash, responder, approve=approve, text=text, option=option
            )
        except (NotAllowed, PromptError, TaskNotFound, UnstorableText) as exc:
            self._forget_closed(task_hash, closes)
            return _refused(exc)
        except BaseException:
            self._forget_closed(task_hash, closes)
            raise
        return Answered(outcome(answer.approved, answer.text, answer.by))

    def _forget_closed(self, task_hash: str, closes: Posted | None) -> None:
        if closes is not None and self._closed_here.get(task_hash) == closes:
            del self._closed_here[task_hash]

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
