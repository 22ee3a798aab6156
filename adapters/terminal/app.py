"""The chat window: one session's conversation, live, with this window's prompts."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Footer, Header, Markdown, Static
from textual.widgets.markdown import MarkdownStream

from adapters.http_client import GatewayClient, GatewayError, GatewayUnavailable
from adapters.terminal.history import InputHistory
from adapters.terminal.picker import SessionPicker, SessionRow, short_id
from adapters.terminal.widgets import MessageInput, OpenPrompt, PromptPanel, describe_confirm
from adapters.terminal.windows import WindowClaim, claim_window
from gateway.events import (
    AnswerEvent,
    AskUserEvent,
    CanceledEvent,
    ConfirmEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    UserEvent,
)
from gateway.ids import InvalidSessionId, new_window_hash, validate_session_id

CLIENT_HELP = """**Window commands**

- `/switch [name]` or Ctrl+S: pick another session (by name or id when given)
- `/new`: start a new terminal session
- `/name <text>`: rename this session
- `/pending`: prompts waiting for you in any session; `/approve N`, `/deny N`,
  `/answer N text` answer one of them
- `/cancel`: cancel the running task started from this window
- `/quit` or Ctrl+Q: leave (tasks go on in the gateway)

Other `/commands` (`/status`, `/model`, `/persona`, `/allow`…) go to the gateway.
Enter sends; Ctrl+J adds a line; Up and Down walk your input history."""

STREAM_RETRY_SECONDS = 1.0
MAX_SHOWN = 500  # conversation lines kept on screen
LIVE_TIMEOUT_SECONDS = 10.0


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


@dataclass(frozen=True)
class ChatConfig:
    base_url: str
    token: str = ""
    sender: str = ""
    session_id: str | None = None
    # Where the window remembers the last session it showed; None keeps nothing.
    state_file: Path | None = None
    # Where windows hold their hashes, so a new window takes over a closed one's prompts;
    # None gives every window a fresh hash.
    windows_dir: Path | None = None


class ChatApp(App[None]):
    TITLE = "agenvoy"
    CSS = """
    #conversation { height: 1fr; padding: 0 1; }
    .user { margin-top: 1; color: $text; text-style: bold; }
    .reply { margin: 0 0 0 2; }
    .tool { margin-left: 2; color: $text-muted; }
    .note { color: $text-muted; margin-top: 1; }
    .error { color: $error; margin-left: 2; }
    .foreign { color: $text-muted; border-left: outer $secondary; padding-left: 1; }
    PromptPanel { height: auto; border: round $warning; padding: 0 1; display: none; }
    #prompt-buttons { height: auto; }
    #prompt-buttons Button { margin-right: 2; }
    MessageInput { height: auto; max-height: 10; border: round $accent; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "switch", "Sessions"),
        Binding("ctrl+n", "new_session", "New"),
        Binding("ctrl+q", "quit", "Quit"),
    ]

    def __init__(self, config: ChatConfig, *, window_hash: str | None = None) -> None:
        super().__init__()
        self.config = config
        self.window_hash = window_hash or new_window_hash()
        self._fixed_hash = window_hash is not None
        self._claim: WindowClaim | None = None
        self.session_id = ""
        self.inputs = InputHistory()
        self.tasks: dict[str, TaskView] = {}
        self.live = asyncio.Event()
        self._reconnecting = False
        self.listed_prompts: list[dict[str, Any]] = []  # the last /pending list, numbered
        self._client: GatewayClient | None = None

    # -- plumbing ------------------------------------------------------------------------------

    @property
    def client(self) -> GatewayClient:
        assert self._client is not None, "the client opens when the app mounts"
        return self._client

    def compose(self) -> ComposeResult:
        yield Header()
        yield VerticalScroll(id="conversation")
        yield PromptPanel(id="prompt")
        yield MessageInput(self.inputs, id="input")
        yield Footer()

    async def on_mount(self) -> None:
        if self.config.windows_dir is not None and not self._fixed_hash:
            self._claim = await asyncio.to_thread(claim_window, self.config.windows_dir)
            self.window_hash = self._claim.window_hash
        self._client = GatewayClient(
            self.config.base_url,
            self.config.token,
            self.config.sender,
            window_hash=self.window_hash,
            client="terminal",
        )
        await self._client.__aenter__()
        self.query_one(MessageInput).focus()
        try:
            session_id = await self._first_session()
        except (GatewayUnavailable, GatewayError) as exc:
            self.exit(return_code=1, message=str(exc))
            return
        await self.open_session(session_id)
        if self._claim is not None and self._claim.adopted:
            await self._point_at_orphans()

    async def on_unmount(self) -> None:
        if self._client is not None:
            await self._client.__aexit__(None, None, None)
        if self._claim is not None:
            self._claim.release()

    async def _point_at_orphans(self) -> None:
        """Prompts a closed window left open in other sessions are this window's now."""
        for prompt in await self.client.pending_everywhere():
            sid = str(prompt.get("session_id", ""))
            if prompt["origin"].get("window_hash") == self.window_hash and sid != self.session_id:
                note = f"a prompt from an earlier window waits in {sid}: /switch {sid}"
                await self._add(Static(note, classes="note"))

    async def _first_session(self) -> str:
        wanted = self.config.session_id or await asyncio.to_thread(self._remembered)
        if wanted and await self.client.session(wanted) is not None:
            return wanted
        if self.config.session_id:
            raise GatewayError(404, "not_found", f"no such session: {self.config.session_id}")
        return await self.client.create_session("cli")

    def _remembered(self) -> str | None:
        path = self.config.state_file
        if path is None:
            return None
        try:
            value = json.loads(path.read_text()).get("last_session")
            return validate_session_id(value) if isinstance(value, str) else None
        except (OSError, ValueError, AttributeError, InvalidSessionId):
            return None

    def _remember(self) -> bool:
        path = self.config.state_file
        if path is None:
            return True
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"last_session": self.session_id}))
            tmp.replace(path)
        except OSError:
            return False
        return True

    # -- sessions ------------------------------------------------------------------------------

    async def open_session(self, session_id: str) -> None:
        """Show `session_id`: a fresh view, its input history, its live events."""
        self.session_id = session_id
        for view in self.tasks.values():
            await self._end_stream(view)
        self.tasks.clear()
        self.live = asyncio.Event()
        self.query_one(PromptPanel).close()
        conversation = self.query_one("#conversation", VerticalScroll)
        await conversation.remove_children()
        meta = await self.client.session(session_id) or {}
        self._set_title(meta)
        self.inputs.reset(await self.client.inputs(session_id))
        if not await asyncio.to_thread(self._remember):
            self.notify("could not remember the session for next time", severity="warning")
        self.follow(session_id)
        await self._add(Static(f"session {session_id} · window {self.window_hash}", classes="note"))
        await self._reopen_prompts()

    async def _reopen_prompts(self) -> None:
        """A prompt of this window left open while another session was shown is asked again."""
        for prompt in await self.client.pending(self.session_id):
            if prompt.get("origin", {}).get("window_hash") != self.window_hash:
                continue
            task_hash = str(prompt["task_hash"])
            self._view(task_hash, mine=True)
            if prompt.get("kind") == "confirm":
                text = describe_confirm(str(prompt.get("tool", "")), prompt.get("args") or {})
                self.query_one(PromptPanel).ask(OpenPrompt(task_hash, "confirm", text))
            else:
                options = tuple(str(o) for o in prompt.get("options") or ())
                question = str(prompt.get("question", ""))
                self.query_one(PromptPanel).ask(
                    OpenPrompt(task_hash, "ask_user", question, options)
                )

    def _set_title(self, meta: dict[str, Any]) -> None:
        name = str(meta.get("name") or "")
        self.title = name or short_id(self.session_id)
        self.sub_title = self.session_id

    @work(exclusive=True, group="events")
    async def follow(self, session_id: str) -> None:
        """The session's events, for as long as it is shown; reconnects when the gateway blinks."""
        while session_id == self.session_id:
            try:
                async for event in self.client.events(session_id, on_live=self._on_live):
                    await self.show_event(event)
            except GatewayUnavailable:
                pass
            except GatewayError as exc:
                await self._add(Static(f"cannot follow the session: {exc}", classes="error"))
                return
            if not self._reconnecting:
                self._reconnecting = True
                self.notify("lost the gateway; reconnecting…", severity="warning")
            self.live.clear()
            await asyncio.sleep(STREAM_RETRY_SECONDS)

    def _on_live(self) -> None:
        self.live.set()
        if self._reconnecting:
            self._reconnecting = False
            self.notify("connected to the gateway again")
            # A restarted gateway asks open prompts again before this window is back.
            self.run_worker(self._reopen_prompts(), group="prompts", exclusive=True)

    # -- input ---------------------------------------------------------------------------------

    async def on_message_input_submitted(self, message: MessageInput.Submitted) -> None:
        text = message.text
        try:
            self.inputs.reset(await self.client.add_input(self.session_id, text))
            await self.handle_input(text)
        except GatewayUnavailable as exc:
            await self._add(Static(str(exc), classes="error"))
            self._give_back(text)
        except GatewayError as exc:
            await self._add(Static(f"the gateway refused: {exc}", classes="error"))
            self._give_back(text)

    def _give_back(self, text: str) -> None:
        """What could not be sent goes back into the input box, unless something new is there."""
        box = self.query_one(MessageInput)
        if not box.text:
            box.load_text(text)
            box.move_cursor(box.document.end)

    async def handle_input(self, text: str) -> None:
        stripped = text.strip()
        name, _, args = stripped.partition(" ")
        args = args.strip()
        local = {
            "/switch": self._cmd_switch,
            "/new": self._cmd_new,
            "/name": self._cmd_name,
            "/pending": self._cmd_pending,
            "/approve": self._cmd_approve,
            "/deny": self._cmd_deny,
            "/answer": self._cmd_answer,
            "/cancel": self._cmd_cancel,
            "/help": self._cmd_help,
        }
        if name == "/quit":
            self.exit()
            return
        handler = local.get(name.lower())
        if handler is not None:
            await handler(args)
            return
        # Subscribed first, so no event of the task can slip by before the stream is up.
        try:
            await asyncio.wait_for(self.live.wait(), LIVE_TIMEOUT_SECONDS)
        except TimeoutError:
            raise GatewayUnavailable(
                "not connected to the gateway; the message was not sent (Up brings it back)"
            ) from None
        reply = await self.client.submit(self.session_id, text)
        if "command" in reply:
            await self._add(Markdown(str(reply.get("text", "")), classes="note"))
        elif reply.get("task_hash"):
            self._view(str(reply["task_hash"]), mine=True)

    async def _cmd_help(self, _args: str) -> None:
        await self._add(Markdown(CLIENT_HELP, classes="note"))

    async def _cmd_switch(self, wanted: str) -> None:
        rows = [SessionRow.from_json(s) for s in await self.client.sessions()]
        if not wanted:
            self.push_screen(SessionPicker(rows, self.session_id), self._picked)
            return
        match = _find_session(rows, wanted)
        if match is None:
            await self._add(Static(f"no session named {wanted!r}", classes="error"))
            return
        await self.open_session(match)

    async def _picked(self, session_id: str | None) -> None:
        if session_id and session_id != self.session_id:
            await self.open_session(session_id)

    async def _cmd_new(self, _args: str) -> None:
        await self.open_session(await self.client.create_session("cli"))

    async def _cmd_name(self, name: str) -> None:
        if not name:
            await self._add(Static("usage: /name <text>", classes="error"))
            return
        self._set_title(await self.client.update_session(self.session_id, name=name))
        await self._add(Static(f"session renamed to {name!r}", classes="note"))

    async def _cmd_pending(self, _args: str) -> None:
        self.listed_prompts = await self.client.pending_everywhere()
        if not self.listed_prompts:
            await self._add(Static("nothing is waiting for you", classes="note"))
            return
        lines = ["**Waiting for you** (`/approve N`, `/deny N`, `/answer N text`)", ""]
        for number, prompt in enumerate(self.listed_prompts, 1):
            what = (
                describe_confirm(prompt.get("tool", ""), prompt.get("args", {}))
                if prompt.get("kind") == "confirm"
                else prompt.get("question", "")
            )
            origin = prompt.get("origin", {})
            here = origin.get("window_hash") == self.window_hash
            who = "this window" if here else origin.get("sender_name") or origin.get("platform")
            lines.append(f"{number}. `{short_id(prompt['session_id'])}` {what} ({who})")
        await self._add(Markdown("\n".join(lines), classes="note"))

    async def _cmd_approve(self, args: str) -> None:
        await self._answer_listed("/approve", args, approve=True)

    async def _cmd_deny(self, args: str) -> None:
        await self._answer_listed("/deny", args, approve=False)

    async def _cmd_answer(self, args: str) -> None:
        number, _, text = args.partition(" ")
        if not text.strip():
            await self._add(Static("usage: /answer N your answer", classes="error"))
            return
        await self._answer_listed("/answer", number, text=text.strip())

    async def _answer_listed(
        self, command: str, number: str, *, approve: bool | None = None, text: str | None = None
    ) -> None:
        """Answer prompt N of the last /pending list (the gateway checks who may)."""
        index = int(number) - 1 if number.strip().isdigit() else -1
        if not 0 <= index < len(self.listed_prompts):
            await self._add(
                Static(f"usage: {command} N, N from the /pending list", classes="error")
            )
            return
        prompt = self.listed_prompts[index]
        kind = prompt.get("kind")
        if (kind == "confirm") != (text is None):
            right = "/approve or /deny" if kind == "confirm" else "/answer"
            await self._add(Static(f"prompt {number} takes {right}", classes="error"))
            return
        await self.client.answer(
            str(prompt["session_id"]), str(prompt["task_hash"]), approve=approve, text=text
        )
        await self._add(Static(f"answered prompt {number}", classes="note"))

    async def _cmd_cancel(self, _args: str) -> None:
        running = [v for v in self.tasks.values() if v.mine and not v.finished]
        if not running:
            await self._add(Static("no task of this window is running", classes="note"))
            return
        for view in running:
            await self.client.cancel(self.session_id, view.task_hash)

    async def action_switch(self) -> None:
        await self._cmd_switch("")

    async def action_new_session(self) -> None:
        await self._cmd_new("")

    async def on_prompt_panel_answered(self, message: PromptPanel.Answered) -> None:
        panel = self.query_one(PromptPanel)
        try:
            await self.client.answer(
                self.session_id, message.task_hash, approve=message.approve, text=message.text
            )
        except GatewayError as exc:
            await self._add(Static(f"the answer was not taken: {exc}", classes="error"))
        panel.close(message.task_hash)
        self.query_one(MessageInput).focus()

    # -- events --------------------------------------------------------------------------------

    def _view(self, task_hash: str, *, mine: bool) -> TaskView:
        view = self.tasks.get(task_hash)
        if view is None:
            view = self.tasks[task_hash] = TaskView(task_hash, mine)
        return view

    async def show_event(self, event: Event) -> None:
        if event.session_id != self.session_id:
            return
        mine = event.window_hash == self.window_hash
        view = self._view(event.task_hash, mine=mine) if event.task_hash else None
        foreign = "" if mine else " foreign"
        match event:
            case UserEvent():
                who = "You" if mine else f"{event.sender or 'someone'} (elsewhere)"
                await self._add(Static(f"{who}: {event.text}", classes="user" + foreign))
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
                await self._add(Static(f"⚙ {event.tool} {args}", classes="tool" + foreign))
            case ToolResultEvent() if view is not None:
                shown = event.result if len(event.result) <= 200 else event.result[:199] + "…"
                await self._add(Static(f"  ↳ {event.status}: {shown}", classes="tool" + foreign))
            case ConfirmEvent() if mine and view is not None:
                text = describe_confirm(event.tool, event.args)
                self.query_one(PromptPanel).ask(OpenPrompt(view.task_hash, "confirm", text))
            case AskUserEvent() if mine and view is not None:
                prompt = OpenPrompt(
                    view.task_hash, "ask_user", event.question, tuple(event.options)
                )
                self.query_one(PromptPanel).ask(prompt)
            case AnswerEvent() if mine and view is not None:
                self.query_one(PromptPanel).close(view.task_hash)
                self.query_one(MessageInput).focus()
                if event.prompt == "confirm":
                    verdict = "approved" if event.approved else "denied"
                    await self._add(Static(f"{verdict} by {event.answered_by}", classes="tool"))
            case ErrorEvent() if view is not None:
                view.finished = True
                await self._end_stream(view)
                await self._add(Static(f"error: {event.message}", classes="error" + foreign))
            case CanceledEvent() if view is not None:
                view.finished = True
                await self._end_stream(view)
                if mine:
                    self.query_one(PromptPanel).close(view.task_hash)
                by = f" by {event.by}" if event.by else ""
                await self._add(Static(f"canceled{by}", classes="note" + foreign))
            case _:
                pass

    async def _reply_widget(self, view: TaskView, text: str) -> Markdown | None:
        """The task's reply widget; mounted with `text` (and None returned) the first time."""
        if view.reply is not None:
            return view.reply
        view.reply = Markdown(text, classes="reply" + ("" if view.mine else " foreign"))
        await self._add(view.reply)
        return None

    async def _stream(self, view: TaskView, piece: str) -> None:
        view.text += piece
        widget = await self._reply_widget(view, view.text)
        if widget is None:
            return
        if view.stream is None:
            view.stream = Markdown.get_stream(widget)
        await view.stream.write(piece)
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
            await widget.update(text)
            self._scroll()

    async def _add(self, widget: Widget) -> None:
        conversation = self.query_one("#conversation", VerticalScroll)
        await conversation.mount(widget)
        # A window left open for days stays light: the oldest lines go (the archive has them),
        # but never the reply of a task still running.
        excess = len(conversation.children) - MAX_SHOWN
        if excess > 0:
            live = {id(v.reply) for v in self.tasks.values() if not v.finished}
            old = [w for w in conversation.children if id(w) not in live][:excess]
            await conversation.remove_children(old)
        self._scroll()

    def _scroll(self) -> None:
        self.query_one("#conversation", VerticalScroll).scroll_end(animate=False)


def _find_session(rows: list[SessionRow], wanted: str) -> str | None:
    """By exact name first, then by id, then by a unique id prefix."""
    for row in rows:
        if row.name == wanted:
            return row.session_id
    for row in rows:
        if row.session_id == wanted:
            return row.session_id
    prefixed = [r for r in rows if r.session_id.startswith(wanted)]
    return prefixed[0].session_id if len(prefixed) == 1 else None
