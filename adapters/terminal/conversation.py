"""The conversation pane: a session's messages, streamed replies and tool activity.

Tasks this window started show plainly; those started elsewhere on the same session (another
window, a script over HTTP, a Discord channel) are marked as foreign. What people and tools
wrote shows as text (`adapters.terminal.plain`); only the agent's replies are Markdown.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from adapters.terminal.plain import body, plain
from adapters.terminal.recent import is_reply, widget_of
from gateway.events import (
    AnswerEvent,
    CanceledEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    NoticeEvent,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UserEvent,
)

MAX_SHOWN = 500  # conversation lines kept on screen


@dataclass
class TaskView:
    """How one task shows in the conversation."""

    task_hash: str
    mine: bool
    reply: Markdown | None = None
    # Coalesces streamed pieces, so a fast model does not re-render the reply per token.
    stream: MarkdownStream | None = None
    text: str = ""
    finished: bool = False
    asked: bool = False  # its message is shown (live, so the history leaves it out)


class Conversation(VerticalScroll):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.tasks: dict[str, TaskView] = {}

    async def clear(self) -> None:
        for view in self.tasks.values():
            await self._end_stream(view)
        self.tasks.clear()
        await self.remove_children()

    def view(self, task_hash: str, *, mine: bool) -> TaskView:
        view = self.tasks.get(task_hash)
        if view is None:
            view = self.tasks[task_hash] = TaskView(task_hash, mine)
        return view

    async def note(self, text: str) -> Static:
        shown = Static(plain(text), classes="note")
        await self.add(shown)
        return shown

    async def earlier(self, messages: Sequence[dict[str, Any]], after: Widget) -> None:
        """The session's archived messages, oldest first, shown after `after` (the window's
        opening line) and before what streamed in meanwhile, which they leave out."""
        widgets = []
        for message in messages:
            view = self.tasks.get(str(message.get("task_hash") or ""))
            if view is not None and (view.reply is not None if is_reply(message) else view.asked):
                continue
            widgets.append(widget_of(message))
        if widgets and after.parent is self:
            await self.mount_all(widgets, after=after)
            self._scroll()

    async def error(self, text: str) -> None:
        await self.add(Static(plain(text), classes="error"))

    async def show(self, event: Event, *, mine: bool) -> None:
        """Render one event of the session; `mine`: of a task this window started."""
        view = self.view(event.task_hash, mine=mine) if event.task_hash else None
        foreign = "" if mine else " foreign"
        match event:
            case UserEvent():
                if view is not None:
                    view.asked = True
                who = "You" if mine else f"{event.sender or 'someone'} (elsewhere)"
                await self.add(Static(plain(f"{who}: {event.text}"), classes="user" + foreign))
            case TextDeltaEvent() if view is not None:
                await self._stream(view, event.text)
            case TextEvent() if view is not None:
                await self._reply(view, event.text)
            case DoneEvent() if view is not None:
                view.finished = True
                if event.text and event.text != view.text:
                    await self._reply(view, event.text)
                await self._end_stream(view)
            case ToolCallEvent() if view is not None:
                args = json.dumps(event.args, ensure_ascii=False)[:200]
                await self.add(Static(plain(f"⚙ {event.tool} {args}"), classes="tool" + foreign))
            case ToolResultEvent() if view is not None:
                shown = event.result if len(event.result) <= 200 else event.result[:199] + "…"
                line = plain(f"  ↳ {event.status}: {shown}")
                await self.add(Static(line, classes="tool" + foreign))
            case AnswerEvent() if mine and view is not None and event.prompt == "confirm":
                verdict = "approved" if event.approved else "denied"
                await self.add(Static(plain(f"{verdict} by {event.answered_by}"), classes="tool"))
            case ErrorEvent() if view is not None:
                view.finished = True
                await self._end_stream(view)
                await self.add(Static(plain(f"error: {event.message}"), classes="error" + foreign))
            case CanceledEvent() if view is not None:
                view.finished = True
                await self._end_stream(view)
                by = f" by {event.by}" if event.by else ""
                await self.add(Static(plain(f"canceled{by}"), classes="note" + foreign))
            case NoticeEvent() if mine:
                await self.add(Static(plain(event.text), classes="note"))
            case _:
                pass

    async def _reply_widget(self, view: TaskView, text: str) -> Markdown | None:
        """The task's reply widget; mounted with `text` (and None returned) the first time."""
        if view.reply is not None:
            return view.reply
        # Markdown on purpose, with its control characters shown like everyone else's.
        view.reply = Markdown(body(text), classes="reply" + ("" if view.mine else " foreign"))
        await self.add(view.reply)
        return None

    async def _stream(self, view: TaskView, piece: str) -> None:
        view.text += piece
        widget = await self._reply_widget(view, view.text)
        if widget is None:
            return
        if view.stream is None:
            view.stream = Markdown.get_stream(widget)
        await view.stream.write(body(piece))
        self._scroll()

    async def _end_stream(self, view: TaskView) -> None:
        if view.stream is not None:
            stream, view.stream = view.stream, None
            await stream.stop()

    async def _reply(self, view: TaskView, text: str) -> None:
        """The whole reply text: replaces what was streamed when it differs."""
        if text == view.text and view.reply is not None:
            return
        view.text = text
        widget = await self._reply_widget(view, text)
        if widget is not None:
            await self._end_stream(view)
            await widget.update(body(text))
            self._scroll()

    async def add(self, widget: Widget) -> None:
        await self.mount(widget)
        # A window left open for days stays light: the oldest lines go (the archive has them),
        # but never the reply of a task still running.
        excess = len(self.children) - MAX_SHOWN
        if excess > 0:
            live = {id(v.reply) for v in self.tasks.values() if not v.finished}
            old = [w for w in self.children if id(w) not in live][:excess]
            await self.remove_children(old)
        self._scroll()

    def _scroll(self) -> None:
        self.scroll_end(animate=False)
