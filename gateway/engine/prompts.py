"""Confirmations and questions a running task puts to the person who started it.

A prompt goes only to the task's origin, is journaled before it is shown, and parks the task
without holding a concurrency slot. It is answered by the requester or an admin (`auth`), or
expires after `confirm_timeout_seconds`: a confirmation then counts as denied, a question as
unanswered. A prompt answered before a restart is not asked again.

With several instances (`answers` given), an answer may be given on any of them: it is claimed
in the shared archive first, and the first claim for a prompt stands wherever it was made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.auth import Authority
from gateway.clock import Clock
from gateway.crash import NO_CRASH, CrashPoints
from gateway.engine.dispatch import Dispatch
from gateway.engine.journal import Answer, PromptAsked, PromptKind
from gateway.engine.scheduler import Scheduler
from gateway.engine.task import Task, TaskState
from gateway.engine.views import Prompt
from gateway.events import AnswerEvent, AskUserEvent, ConfirmEvent, Origin
from gateway.store.journals import PromptAnswers
from gateway.text import check_storable

# Who "answered" a confirmation that the session allow-list approved without asking.
ALLOW_LIST = "allow-list"


class PromptError(Exception):
    """An answer that cannot be taken; `code` tells adapters which status to show."""

    code = "invalid"


class PromptNotFound(PromptError):
    code = "not_found"


class AlreadyAnswered(PromptError):
    code = "already_answered"


def no_such_task(task_hash: str, session_id: str | None) -> PromptNotFound:
    where = f" in session {session_id}" if session_id else ""
    return PromptNotFound(f"no task {task_hash}{where}")


class Prompts:
    def __init__(
        self,
        dispatch: Dispatch,
        scheduler: Scheduler[Task],
        authority: Authority,
        clock: Clock,
        timeout_seconds: float,
        crash: CrashPoints = NO_CRASH,
        answers: PromptAnswers | None = None,
    ) -> None:
        self.dispatch = dispatch
        self.scheduler = scheduler
        self.authority = authority
        self.clock = clock
        self.timeout_seconds = timeout_seconds
        self.crash = crash
        # Shared with other instances: answers are claimed there before they count.
        self.answers = answers

    async def ask(
        self,
        task: Task,
        kind: PromptKind,
        *,
        tool: str = "",
        args: dict[str, Any] | None = None,
        question: str = "",
        options: Sequence[str] = (),
        auto_approve: bool = False,
    ) -> Answer:
        """Ask the task's origin, wait for the answer (or the expiry), and return it."""
        number = sum(isinstance(step, PromptAsked) for step in task.journal.steps)
        answered_before = task.journal.replay.next_prompt()
        if answered_before is not None and answered_before.answer is not None:
            # Answered before a restart: the answer stands, nobody is asked twice.
            task.journal.steps.append(answered_before)
            if answered_before.answer.by != ALLOW_LIST and self.dispatch.pushed(task.origin):
                # The first life sent this prompt through the outbox: keep chunk numbers where
                # they were then.
                task.next_chunk()
            return answered_before.answer
        if kind == "confirm" and auto_approve:
            return await self._allow_listed(task)
        if self.answers is not None:
            # Answered on another instance while the one that asked was dying.
            stored = await self.answers.stored_answer(task.task_hash, number)
            if stored is not None:
                answer = Answer.from_json(stored)
                task.journal.steps.append(PromptAsked(kind, answer))
                await task.save_journal()
                return answer

        prompt = Prompt(
            kind=kind,
            session_id=task.session_id,
            task_hash=task.task_hash,
            origin=task.origin,
            expires_at=self.clock.now_ms() + int(self.timeout_seconds * 1000),
            tool=tool,
            args=dict(args or {}),
            question=question,
            options=tuple(options),
            number=number,
        )
        step = PromptAsked(kind)
        task.journal.steps.append(step)
        # Journaled before anyone can see it open: a prompt shown is a prompt a restart asks.
        await task.journal.save("waiting", prompt.to_json())
        answered = await task.ask(prompt, step)
        await self.dispatch.emit(task, _prompt_event(prompt))
        async with self.scheduler.parked(task):
            answer = await self._wait(task, prompt, answered)
        await task.close_prompt()
        await self.dispatch.emit(
            task,
            AnswerEvent(
                session_id=task.session_id,
                prompt=kind,
                approved=answer.approved,
                answer=answer.text,
                answered_by=answer.by,
            ),
        )
        await task.set_status("running")
        await task.save_journal()
        return answer

    async def _allow_listed(self, task: Task) -> Answer:
        """Allowed for this session (`/allow <tool>`): nobody is asked, the audit trail still
        shows the approval and who granted it."""
        answer = Answer(approved=True, by=ALLOW_LIST)
        task.journal.steps.append(PromptAsked("confirm", answer))
        await self.dispatch.emit(
            task,
            AnswerEvent(
                session_id=task.session_id, prompt="confirm", approved=True, answered_by=ALLOW_LIST
            ),
        )
        await task.save_journal()
        return answer

    async def _wait(self, task: Task, prompt: Prompt, future: asyncio.Future[Answer]) -> Answer:
        try:
            return await self.clock.wait_for(asyncio.shield(future), self.timeout_seconds)
        except TimeoutError:
            pass
        confirm = prompt.kind == "confirm"
        async with task.prompt_lock:
            if future.done():  # answered as the time ran out: the answer counts
                return future.result()
            expired = await self._settle(
                task, Answer(approved=False if confirm else None, by="timeout")
            )
            if expired.by != "timeout":  # answered on another instance as the time ran out
                return expired
        what, outcome = (
            ("confirmation", "treated as denied") if confirm else ("question", "left unanswered")
        )
        await self.dispatch.notice(task.origin, f"The {what} expired and was {outcome}.", task)
        return expired

    async def _settle(self, task: Task, answer: Answer) -> Answer:
        """Journal the answer, then wake the task: an answer acknowledged stands after a
        crash. With several instances the answer is claimed first, and the one that stands
        (this one, or one given elsewhere) is returned. The caller holds the prompt lock."""
        assert task.prompt is not None
        if self.answers is not None:
            _, standing = await self.answers.claim_answer(
                task.session_id, task.task_hash, task.prompt.number, answer.to_json()
            )
            answer = Answer.from_json(standing)
        task.record_answer(answer)
        await task.journal.save("waiting", None)
        self.crash.reach("answered")
        task.wake(answer)
        return answer

    async def take_stored(self, task: Task) -> None:
        """Another instance recorded an answer to the task's open prompt: give it to the task."""
        if self.answers is None:
            return
        async with task.prompt_lock:
            prompt = task.prompt
            if prompt is None or not task.waiting_for_answer():
                return
            stored = await self.answers.stored_answer(task.task_hash, prompt.number)
            if stored is not None:
                await self._settle(task, Answer.from_json(stored))

    def check(self, task: Task, responder: Origin) -> Prompt:
        """The task's open prompt, if `responder` may answer it; raises otherwise."""
        prompt = task.prompt
        if prompt is None or not task.waiting_for_answer():
            if any(isinstance(step, PromptAsked) for step in task.journal.steps):
                raise AlreadyAnswered(f"the prompt of task {task.task_hash} was already answered")
            raise PromptNotFound(f"task {task.task_hash} is not waiting for an answer")
        return self._allowed(prompt, responder)

    def check_followed(self, followed: TaskState, responder: Origin) -> Prompt:
        """`check`, for a task another instance runs, by what this instance sees of it."""
        prompt = followed.prompt
        if prompt is None or not followed.prompt_open():
            raise PromptNotFound(f"task {followed.task_hash} is not waiting for an answer")
        return self._allowed(prompt, responder)

    def _allowed(self, prompt: Prompt, responder: Origin) -> Prompt:
        self.authority.require_requester(responder, prompt.origin, "answer this prompt")
        return prompt

    async def answer(self, task: Task, responder: Origin, reply: Reply) -> Answer:
        """Take an answer: checked, journaled, then given to the task. Once this returns, the
        answer survives a crash."""
        async with task.prompt_lock:
            prompt = self.check(task, responder)
            answer = make_answer(prompt, responder, reply)
            standing = await self._settle(task, answer)
        if standing != answer:
            raise AlreadyAnswered(f"the prompt of task {task.task_hash} was already answered")
        return answer


@dataclass(frozen=True, slots=True)
class Reply:
    """What someone answered: `approve` to a confirmation; `text`, or one of its options by
    index (`option`), to a question."""

    approve: bool | None = None
    text: str | None = None
    option: int | None = None


def make_answer(prompt: Prompt, responder: Origin, reply: Reply) -> Answer:
    """`responder`'s answer to `prompt`; raises PromptError when it does not fit the prompt."""
    text = reply.text
    if reply.option is not None:
        if not 0 <= reply.option < len(prompt.options):
            raise PromptError("that option does not exist")
        text = prompt.options[reply.option]
    if text is not None:
        check_storable(text, "the answer")
    by = responder.sender_name or responder.sender_id or responder.platform
    if prompt.kind == "confirm":
        if reply.approve is None:
            raise PromptError("a confirmation is answered with approve: true or false")
        return Answer(approved=reply.approve, by=by)
    if text is None:
        raise PromptError("a question is answered with a text answer")
    return Answer(text=text, by=by)


def _prompt_event(prompt: Prompt) -> ConfirmEvent | AskUserEvent:
    requester = prompt.origin.sender_name or prompt.origin.sender_id
    if prompt.kind == "confirm":
        return ConfirmEvent(
            session_id=prompt.session_id,
            tool=prompt.tool,
            args=prompt.args,
            requester=requester,
            expires_at=prompt.expires_at,
        )
    return AskUserEvent(
        session_id=prompt.session_id,
        question=prompt.question,
        options=list(prompt.options),
        requester=requester,
        expires_at=prompt.expires_at,
    )
