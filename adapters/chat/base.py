"""The chat adapter base: takes messages in and shows a task's events, on top of the few
primitives a platform implements (send a part, edit, delete, typing, a prompt with buttons).

- Intake: a message takes its session's turn before anything is awaited, so one that needs a
  download cannot be overtaken by a later one. Its text is checked before anything is written
  (too long, not storable: a short refusal), and its attachments land in the session
  workspace only once the whole message passed. The platform's id of the delivery
  (`source_key`) makes a repeated delivery store nothing.
- Replies are split at the platform's limit; each part is recorded in the outbox entry's
  `Progress` as handed over and as accepted, so a retried delivery (also after a restart) goes
  on from the next part, and a part that may be out already is known as such (`repeat`).
- Streamed text shows as one preview message, edited at most once a second and deleted when
  the final reply arrives; previews a crash left are deleted at the next start (`previews`).
  Typing is shown at most once per platform-specific interval, and for a message only once
  its task has worked a moment (`indicator`).
- Prompts remember where they were posted, so the answer can close them (`prompts`); one
  asked again after a restart takes the buttons off its earlier askings (`ask`).
"""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final

from adapters.attachments import Download, Staged, describe, stage_downloads
from adapters.chat.arrival import Arrival
from adapters.chat.indicator import TypingSoon
from adapters.chat.previews import PreviewNotes
from adapters.chat.prompts import OpenPrompts, Posted, Refused, outcome
from adapters.chat.throttle import Throttle
from adapters.voice import with_transcripts
from gateway.adapter import HttpRoute, Progress, Undeliverable
from gateway.bans import Banned
from gateway.engine import MessageTooLong, Submission, TooManyTasks
from gateway.events import (
    AnswerEvent,
    AskUserEvent,
    CanceledEvent,
    ConfirmEvent,
    ErrorEvent,
    Event,
    Inbound,
    Origin,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UserEvent,
)
from gateway.logs import get_logger
from gateway.runtime import Runtime
from gateway.text import UnstorableText

log = get_logger(__name__)

STREAM_EDIT_SECONDS: Final = 1.0
# At stop, messages being taken in get this long to be stored before they are given up.
ARRIVAL_GRACE_SECONDS: Final = 5.0


@dataclass
class _Preview:
    text: str = ""
    posted: Posted | None = None


class ChatAdapter(ABC):
    """A chat front-end, and the `Sink` the router delivers its origins' events to."""

    name: str
    # The platform's API errors: a best-effort call (typing, a preview) swallows them.
    errors: ClassVar[tuple[type[Exception], ...]]
    # The error that says the bot may no longer post where the origin is.
    forbidden: ClassVar[type[Exception]]
    typing_every: ClassVar[float]
    preview_chars: ClassVar[int]
    preview_replies: ClassVar[bool]  # whether the preview answers the triggering message
    # Whether the platform delivers a message again when taking it in failed (Telegram: an
    # update not confirmed). One that does not (Discord) waits out an unreachable database.
    redelivers: ClassVar[bool]
    # Whether it refuses a second copy of a reply's part itself (Discord's nonce): no write
    # need say, before an attempt's first part goes out, that it may be out after a crash.
    refuses_repeats: ClassVar[bool] = False

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.router = runtime.router
        self._typing = Throttle(runtime.clock, self.typing_every)
        self._typing_soon = TypingSoon(runtime.clock, self.typing)
        self._edits = Throttle(runtime.clock, STREAM_EDIT_SECONDS)
        self._previews: dict[str, _Preview] = {}
        self._preview_notes = PreviewNotes(runtime.kv, self.name, runtime.settings.instance_id)
        self.prompts = OpenPrompts(self.router)
        self._arriving: set[asyncio.Task[object]] = set()
        self.arrival_grace = ARRIVAL_GRACE_SECONDS

    def routes(self) -> list[HttpRoute]:
        return []

    # -- primitives ------------------------------------------------------------------------

    @property
    @abstractmethod
    def max_download_bytes(self) -> int: ...

    @abstractmethod
    def split(self, text: str) -> list[str]:
        """A reply as the parts the platform takes, each within its size limit."""

    @abstractmethod
    async def send_part(
        self, origin: Origin, part: str, *, index: int, key: str, repeat: bool
    ) -> Posted:
        """Send part `index` of the reply identified by `key` (the same on a retry). With
        `repeat`, an earlier attempt handed this part over and heard nothing back: the
        platform may show it already."""

    def may_have_arrived(self, exc: Exception) -> bool:
        """Whether a part whose sending failed with `exc` may be on the platform anyway (no
        answer came back), rather than refused."""
        return True

    @abstractmethod
    async def send_text(self, origin: Origin, text: str, *, reply: bool) -> Posted:
        """Send a plain line, answering the triggering message when `reply`."""

    @abstractmethod
    async def edit_text(self, posted: Posted, text: str) -> None: ...

    @abstractmethod
    async def delete(self, posted: Posted) -> None: ...

    @abstractmethod
    async def send_typing(self, origin: Origin) -> None: ...

    @abstractmethod
    async def post_prompt(self, origin: Origin, event: ConfirmEvent | AskUserEvent) -> Posted:
        """Ask a confirmation or question, with the platform's buttons."""

    @abstractmethod
    async def retire_prompt(self, posted: Posted, event: ConfirmEvent | AskUserEvent) -> None:
        """Take the buttons off an earlier asking of `event`, saying it is asked again."""

    @abstractmethod
    async def show_outcome(self, posted: Posted, outcome: str) -> None:
        """Close a prompt message once it is answered: no buttons, and what became of it."""

    def posted_at(self, origin: Origin, message_id: str) -> Posted:
        """The message `message_id` the bot posted to answer `origin`."""
        return Posted(origin.channel_id, message_id)

    @abstractmethod
    async def unreachable(self, origin: Origin, event: Event, exc: Exception) -> str | None:
        """The platform said `forbidden` while showing `event`: return (as shown), raise
        `Undeliverable` (never to be shown), or raise anything else to try again."""

    # -- intake ----------------------------------------------------------------------------

    async def arrive(self, arrival: Arrival) -> Submission | None:
        """Store a message (and start a task when it is addressed to the bot), in the order
        messages arrived. Call it before awaiting anything for the message. The submission of
        an addressed message (a gateway command's reply); None when it was kept as context,
        answered a prompt, or was refused (and told so)."""
        me = asyncio.current_task()
        if me is not None:
            self._arriving.add(me)
        try:
            return await self._arrive(arrival)
        finally:
            self._arriving.discard(me)

    async def end_arrivals(self) -> None:
        """At stop, once the platform sends no more: messages still being taken in (one that
        waits for an unreachable database) get `arrival_grace` seconds, then are given up.
        A platform that does not deliver them again loses them: that is logged."""
        await self._typing_soon.close()
        left = {task for task in self._arriving if task is not asyncio.current_task()}
        if left:
            _, left = await asyncio.wait(left, timeout=self.arrival_grace)
        for task in left:
            task.cancel()
        if left:
            await asyncio.gather(*left, return_exceptions=True)
            log.warning("stopped while messages were being taken in: lost", count=len(left))

    async def _arrive(self, arrival: Arrival) -> Submission | None:
        with self.router.take_turn(arrival.session_id) as turn:
            self.runtime.crash.reach("received")
            staged = Staged()
            try:
                self.check_text(arrival.text)  # before a file is fetched for it
                staged = await self.stage(arrival.session_id, arrival.downloads)
                text = arrival.text
                if staged.attachments:
                    described = describe(staged.attachments)
                    text = f"{text}\n{described}" if text else described
                    text = await with_transcripts(self.runtime.settings, text, staged)
                    self.check_text(text)  # grown by what the attachments are
                await staged.keep()
                if not text:
                    return None
                answered = self.prompts.answered_by(arrival.replied_to)
                if answered is not None:
                    await self._answer_by_reply(answered, arrival.origin, text)
                    return None
                inbound = Inbound(
                    arrival.origin,
                    arrival.session_id,
                    text,
                    staged.attachments,
                    source_key=arrival.source_key,
                    wait_for_store=not self.redelivers,
                )
                if arrival.addressed:
                    return await self.router.submit(inbound, turn=turn)
                await self.router.record(inbound, turn=turn)
            except (MessageTooLong, UnstorableText, TooManyTasks, Banned) as exc:
                await staged.drop()
                if arrival.refuse is not None:
                    await arrival.refuse(f"⚠️ {exc}")
                elif not isinstance(exc, Banned):  # never said in the chat: gateway/bans.py
                    await self.say(arrival.origin, f"⚠️ {exc}")
        return None

    def check_text(self, text: str) -> None:
        """Refuse what the intake would refuse, before anything is written for the message."""
        self.router.check_text(text)

    async def stage(self, session_id: str, downloads: Sequence[Download]) -> Staged:
        return await stage_downloads(
            self.runtime.store, session_id, downloads, self.max_download_bytes, self.errors
        )

    # -- the sink --------------------------------------------------------------------------

    async def deliver(self, origin: Origin, event: Event, progress: Progress) -> str | None:
        try:
            return await self._show(origin, event, progress)
        except self.forbidden as exc:
            return await self.unreachable(origin, event, exc)
        except self.errors as exc:
            if self.refused_for_good(exc):
                raise Undeliverable(str(exc)) from exc
            raise

    def refused_for_good(self, exc: Exception) -> bool:
        """Whether the platform's error says it will never take this message (a request it
        rejects as such): the outbox then stops trying it. Anything else is tried again."""
        return False

    async def _show(self, origin: Origin, event: Event, progress: Progress) -> str | None:
        if isinstance(event, UserEvent):
            self._typing_soon.after_a_moment(origin, event.task_hash)
            return None
        self._typing_soon.answered(event.task_hash)  # the task shows itself at work from here
        if isinstance(event, TextDeltaEvent):
            await self.typing(origin)
            await self.stream(origin, event)
        elif isinstance(event, TextEvent):
            reply_id = await self.send_reply(origin, event, progress)
            await self.end_stream(event.task_hash)
            return reply_id
        elif isinstance(event, ConfirmEvent | AskUserEvent):
            return await self.ask(origin, event, progress.earlier)
        elif isinstance(event, AnswerEvent):
            await self.close_prompt(event)
        elif isinstance(event, ErrorEvent):
            # The partial text stays up: it is all the person gets of this reply.
            await self._forget_stream(event.task_hash)
            return (await self.send_text(origin, f"⚠️ {event.message}", reply=False)).message_id
        elif isinstance(event, CanceledEvent):
            await self.end_stream(event.task_hash)
            await self.send_text(origin, f"canceled by {event.by}", reply=False)
        elif isinstance(event, ToolCallEvent | ToolResultEvent):  # at work, yet to answer
            await self.typing(origin)
        return None

    async def notice(self, origin: Origin, text: str) -> None:
        await self.say(origin, text)

    async def say(self, origin: Origin, text: str) -> None:
        """A line in answer to the person at `origin`; a failure is logged, not raised."""
        try:
            await self.send_text(origin, text, reply=True)
        except self.errors as exc:
            log.warning("could not post a notice", platform=self.name, error=str(exc))

    async def send_reply(self, origin: Origin, event: TextEvent, progress: Progress) -> str:
        """The reply in parts, from the first one an earlier attempt did not get out."""
        parts, last, first = self.split(event.text or "(empty reply)"), "", progress.sent
        for index in range(first, len(parts)):
            repeat = progress.maybe_sent
            marked = not self.refuses_repeats or index > first  # it carries the earlier parts
            if marked:
                await progress.part_started(index)
            try:
                posted = await self.send_part(
                    origin, parts[index], index=index, key=event.task_hash, repeat=repeat
                )
            except Exception as exc:
                if marked and not self.may_have_arrived(exc):
                    await progress.part_refused(index)
                raise
            self.runtime.crash.reach("part_sent")
            last = posted.message_id
            await progress.part_sent(index + 1)
        return last

    async def typing(self, origin: Origin) -> None:
        if not self._typing.ready(origin.channel_id):
            return
        with self._best_effort():
            await self.send_typing(origin)

    # -- the streamed preview --------------------------------------------------------------

    async def stream(self, origin: Origin, event: TextDeltaEvent) -> None:
        preview = self._previews.setdefault(event.task_hash, _Preview())
        preview.text += event.text
        if not self._edits.ready(event.task_hash):
            return
        shown = preview.text[-self.preview_chars :] or "…"
        with self._best_effort():
            if preview.posted is None:
                preview.posted = await self.send_text(origin, shown, reply=self.preview_replies)
                await self._preview_notes.shown(event.task_hash, preview.posted)
            else:
                await self.edit_text(preview.posted, shown)

    async def end_stream(self, task_hash: str) -> None:
        """The final reply (or a cancel) replaces the preview."""
        preview = await self._forget_stream(task_hash)
        if preview is not None and preview.posted is not None:
            with self._best_effort():
                await self.delete(preview.posted)

    async def _forget_stream(self, task_hash: str) -> _Preview | None:
        self._edits.forget(task_hash)
        preview = self._previews.pop(task_hash, None)
        if preview is not None and preview.posted is not None:
            await self._preview_notes.gone(task_hash)
        return preview

    async def clear_left_previews(self) -> int:
        """Delete the previews an earlier life of this adapter left in chats (a crash came
        before their final replies); call at start, once the platform can be reached."""
        left = await self._preview_notes.left_behind()
        for task_hash, posted in left.items():
            if posted is not None:
                with self._best_effort():
                    await self.delete(posted)
            await self._preview_notes.gone(task_hash)
        if left:
            log.info("deleted stream previews left by a crash", platform=self.name, count=len(left))
        return len(left)

    # -- prompts ---------------------------------------------------------------------------

    async def ask(
        self, origin: Origin, event: ConfirmEvent | AskUserEvent, earlier: Sequence[str]
    ) -> str:
        """Post a prompt. Its askings before a restart (`earlier`) lose their buttons first,
        so that once this one shows, it is the only one open; each still closes with the
        answer, and a reply to one still answers it."""
        by_reply = self.answered_by_reply(event)
        before = [self.posted_at(origin, message_id) for message_id in earlier]
        self.prompts.opened(event.task_hash, before, by_reply=by_reply)
        for posted in before:
            with self._best_effort():  # one retired already (a second restart) is refused
                await self.retire_prompt(posted, event)
        posted = await self.post_prompt(origin, event)
        self.prompts.opened(event.task_hash, [posted], by_reply=by_reply)
        return posted.message_id

    def answered_by_reply(self, event: ConfirmEvent | AskUserEvent) -> bool:
        """Whether the platform asks `event` as a message answered by replying to it."""
        return False

    async def _answer_by_reply(self, task_hash: str, responder: Origin, text: str) -> None:
        result = await self.prompts.answer(task_hash, responder, text=text)
        if isinstance(result, Refused):
            await self.say(responder, f"⚠️ {result.reason}" if result.alert else result.reason)

    async def close_prompt(self, event: AnswerEvent) -> None:
        said = outcome(event.approved, event.answer, event.answered_by)
        for posted in self.prompts.closing(event.task_hash):
            with self._best_effort():
                await self.show_outcome(posted, said)

    @contextlib.contextmanager
    def _best_effort(self) -> Iterator[None]:
        try:
            yield
        except self.errors as exc:
            log.info("best-effort call failed", platform=self.name, error=str(exc))
