"""The chat window: one session's conversation, live, with this window's prompts."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.widget import Widget
from textual.widgets import Footer, Header, Markdown, Static

from adapters.http_client import GatewayError, GatewayUnavailable
from adapters.terminal import last_session
from adapters.terminal.attach import Attached, AttachRefused
from adapters.terminal.completion import Completer
from adapters.terminal.conversation import Conversation, TaskView
from adapters.terminal.history import InputHistory
from adapters.terminal.link import GatewayLink
from adapters.terminal.picker import SessionPicker, SessionRow, find_session, short_id
from adapters.terminal.plain import line, plain
from adapters.terminal.recent import HISTORY_SHOWN
from adapters.terminal.widgets import MessageInput, OpenPrompt, PromptPanel, describe_confirm
from adapters.terminal.window_commands import WINDOW_COMMANDS, help_text, pending_list
from adapters.terminal.windows import WindowClaim, claim_window
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.events import (
    AnswerEvent,
    AskUserEvent,
    CanceledEvent,
    ConfirmEvent,
    Event,
    NoticeEvent,
)
from gateway.ids import new_window_hash


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
    CSS_PATH = "app.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "switch", "Sessions"),
        Binding("ctrl+n", "new_session", "New"),
        Binding("ctrl+q", "quit", "Quit"),
    ]

    def __init__(
        self, config: ChatConfig, *, window_hash: str | None = None, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        super().__init__()
        self.config = config
        self.window_hash = window_hash or new_window_hash()
        self._fixed_hash = window_hash is not None
        self._claim: WindowClaim | None = None
        self.session_id = ""
        self.inputs = InputHistory()
        self.completer = Completer(WINDOW_COMMANDS)
        self.link = GatewayLink(config.base_url, config.token, config.sender, clock)
        self.listed_prompts: list[dict[str, Any]] = []  # the last /pending list, numbered
        self.attached = Attached()  # `/attach`: files for the next message

    @property
    def live(self) -> asyncio.Event:
        """Set while the shown session's events stream in."""
        return self.link.live

    @property
    def tasks(self) -> dict[str, TaskView]:
        return self.conversation.tasks

    @property
    def conversation(self) -> Conversation:
        return self.query_one("#conversation", Conversation)

    def compose(self) -> ComposeResult:
        yield Header()
        yield Conversation(id="conversation")
        yield PromptPanel(id="prompt")
        yield MessageInput(self.inputs, self.completer, id="input")
        yield Footer()

    async def on_mount(self) -> None:
        if self.config.windows_dir is not None and not self._fixed_hash:
            self._claim = await asyncio.to_thread(claim_window, self.config.windows_dir)
            self.window_hash = self._claim.window_hash
        await self.link.open(self.window_hash)
        self.query_one(MessageInput).focus()
        try:
            session_id = await self._first_session()
        except (GatewayUnavailable, GatewayError) as exc:
            # Printed on the operator's terminal once the window is gone: as text.
            self.exit(return_code=1, message=Text(line(str(exc))))
            return
        await self.open_session(session_id)
        self.completer.learn(await self.link.client.commands())
        if self._claim is not None and self._claim.adopted:
            # Prompts a closed window left open in other sessions are this window's now.
            for sid in await self.link.waiting_elsewhere(self.session_id):
                await self.conversation.note(
                    f"a prompt from an earlier window waits in {sid}: /switch {sid}"
                )

    async def on_unmount(self) -> None:
        await self.link.close()
        if self._claim is not None:
            self._claim.release()

    async def _first_session(self) -> str:
        client = self.link.client
        wanted = self.config.session_id
        if not wanted and self.config.state_file is not None:
            wanted = await asyncio.to_thread(last_session.recall, self.config.state_file)
        if wanted and await client.session(wanted) is not None:
            return wanted
        if self.config.session_id:
            raise GatewayError(404, "not_found", f"no such session: {self.config.session_id}")
        return await client.create_session("cli")

    # -- sessions ------------------------------------------------------------------------------

    async def open_session(self, session_id: str) -> None:
        """Show `session_id`: a fresh view, its input history, its live events."""
        self.session_id = session_id
        self.live.clear()
        self.query_one(PromptPanel).close()
        await self.conversation.clear()
        meta = await self.link.client.session(session_id) or {}
        self._set_title(meta)
        self.inputs.reset(await self.link.client.inputs(session_id))
        state_file = self.config.state_file
        if state_file is not None and not await asyncio.to_thread(
            last_session.remember, state_file, session_id
        ):
            self.notify("could not remember the session for next time", severity="warning")
        self.follow(session_id)
        opening = await self.conversation.note(f"session {session_id} · window {self.window_hash}")
        self._show_earlier(session_id, opening)
        await self._reopen_prompts()

    @work(exclusive=True, group="earlier")
    async def _show_earlier(self, session_id: str, opening: Widget) -> None:
        failed: Exception | None = None
        try:
            messages = await self.link.earlier(session_id, HISTORY_SHOWN)
        except (GatewayUnavailable, GatewayError) as exc:
            messages, failed = [], exc
        with contextlib.suppress(NoMatches):  # the window may have closed meanwhile
            conversation = self.conversation
            if failed is not None:
                await conversation.error(f"could not read the session's messages: {failed}")
            elif session_id == self.session_id:
                await conversation.earlier(messages, opening)

    async def _reopen_prompts(self) -> None:
        """A prompt of this window left open while another session was shown is asked again."""
        for prompt in await self.link.open_prompts(self.session_id):
            self.conversation.view(prompt.task_hash, mine=True)
            self.query_one(PromptPanel).ask(prompt)

    def _set_title(self, meta: dict[str, Any]) -> None:
        name = str(meta.get("name") or "")
        self.title = line(name) or short_id(self.session_id)
        self.sub_title = self.session_id

    @work(exclusive=True, group="events")
    async def follow(self, session_id: str) -> None:
        await self.link.follow(session_id, self)

    async def stream_refused(self, error: GatewayError) -> None:
        await self.conversation.error(f"cannot follow the session: {error}")

    def connection_lost(self, why: str) -> None:
        self.notify(f"{why}; reconnecting…", severity="warning")

    def connection_back(self) -> None:
        self.notify("connected to the gateway again")
        # A restarted gateway asks open prompts again before this window is back.
        self.run_worker(self._reopen_prompts(), group="prompts", exclusive=True)

    # -- input ---------------------------------------------------------------------------------

    async def on_message_input_submitted(self, message: MessageInput.Submitted) -> None:
        text = message.text
        try:
            self.inputs.reset(await self.link.client.add_input(self.session_id, text))
            await self.handle_input(text)
        except GatewayUnavailable as exc:
            await self.conversation.error(str(exc))
            self._give_back(text)
        except GatewayError as exc:
            await self.conversation.error(f"the gateway refused: {exc}")
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
            "/attach": self._cmd_attach,
            "/help": self._cmd_help,
        }
        if name == "/quit":
            self.exit()
            return
        handler = local.get(name.lower())
        if handler is not None:
            await handler(args)
            return
        # A gateway command takes no files: they wait for the next message.
        files = [] if stripped.startswith("/") else self.attached.take()
        try:
            reply = await self.link.submit(self.session_id, text, files)
        except (GatewayUnavailable, GatewayError):
            self.attached.give_back(files)
            raise
        if "command" in reply:
            # Plain, as every front-end sends it: it may echo a name or a persona.
            await self.conversation.add(Static(plain(str(reply.get("text", ""))), classes="note"))
        elif reply.get("task_hash"):
            self.conversation.view(str(reply["task_hash"]), mine=True)

    async def _cmd_attach(self, path: str) -> None:
        try:
            attached = await self.attached.add(path)
        except AttachRefused as exc:
            await self.conversation.error(str(exc))
            return
        await self.conversation.note(attached)

    async def _cmd_help(self, _args: str) -> None:
        await self.conversation.add(Markdown(help_text(self.completer), classes="note"))

    async def on_message_input_hints(self, message: MessageInput.Hints) -> None:
        shown = "  ".join(f"`{hint.shown}`" for hint in message.hints)
        await self.conversation.add(Markdown(shown, classes="note"))

    async def _cmd_switch(self, wanted: str) -> None:
        rows = [SessionRow.from_json(s) for s in await self.link.client.sessions()]
        if not wanted:
            picker = SessionPicker(rows, self.session_id, self.link.client.history)
            self.push_screen(picker, self._picked)
            return
        match = find_session(rows, wanted)
        if match is None:
            await self.conversation.error(f"no session named {wanted!r}")
            return
        await self.open_session(match)

    async def _picked(self, session_id: str | None) -> None:
        if session_id and session_id != self.session_id:
            await self.open_session(session_id)

    async def _cmd_new(self, _args: str) -> None:
        await self.open_session(await self.link.client.create_session("cli"))

    async def _cmd_name(self, name: str) -> None:
        if not name:
            await self.conversation.error("usage: /name <text>")
            return
        self._set_title(await self.link.client.update_session(self.session_id, name=name))
        await self.conversation.note(f"session renamed to {name!r}")

    async def _cmd_pending(self, _args: str) -> None:
        self.listed_prompts = await self.link.client.pending()
        if not self.listed_prompts:
            await self.conversation.note("nothing is waiting for you")
            return
        await self.conversation.note(pending_list(self.listed_prompts, self.window_hash))

    async def _why_waiting(self, task_hash: str) -> None:
        with contextlib.suppress(GatewayUnavailable, GatewayError):
            behind = await self.link.waiting_behind(self.session_id, task_hash)
            if behind and not self.conversation.view(task_hash, mine=True).finished:
                await self.conversation.note(f"{behind} (or /pending here)")

    async def _cmd_approve(self, args: str) -> None:
        await self._answer_listed("/approve", args, approve=True)

    async def _cmd_deny(self, args: str) -> None:
        await self._answer_listed("/deny", args, approve=False)

    async def _cmd_answer(self, args: str) -> None:
        number, _, text = args.partition(" ")
        if not text.strip():
            await self.conversation.error("usage: /answer N your answer")
            return
        await self._answer_listed("/answer", number, text=text.strip())

    async def _answer_listed(
        self, command: str, number: str, *, approve: bool | None = None, text: str | None = None
    ) -> None:
        """Answer prompt N of the last /pending list (the gateway checks who may)."""
        index = int(number) - 1 if number.strip().isdigit() else -1
        if not 0 <= index < len(self.listed_prompts):
            await self.conversation.error(f"usage: {command} N, N from the /pending list")
            return
        prompt = self.listed_prompts[index]
        kind = prompt.get("kind")
        if (kind == "confirm") != (text is None):
            right = "/approve or /deny" if kind == "confirm" else "/answer"
            await self.conversation.error(f"prompt {number} takes {right}")
            return
        await self.link.client.answer(
            str(prompt["session_id"]), str(prompt["task_hash"]), approve=approve, text=text
        )
        await self.conversation.note(f"answered prompt {number}")

    async def _cmd_cancel(self, _args: str) -> None:
        running = [v for v in self.tasks.values() if v.mine and not v.finished]
        if not running:
            await self.conversation.note("no task of this window is running")
            return
        for view in running:
            await self.link.client.cancel(self.session_id, view.task_hash)

    async def action_switch(self) -> None:
        await self._cmd_switch("")

    async def action_new_session(self) -> None:
        await self._cmd_new("")

    async def on_prompt_panel_answered(self, message: PromptPanel.Answered) -> None:
        panel = self.query_one(PromptPanel)
        try:
            await self.link.client.answer(
                self.session_id, message.task_hash, approve=message.approve, text=message.text
            )
        except GatewayError as exc:
            await self.conversation.error(f"the answer was not taken: {exc}")
        panel.close(message.task_hash)
        self.query_one(MessageInput).focus()

    # -- events --------------------------------------------------------------------------------

    async def show_event(self, event: Event) -> None:
        if event.session_id != self.session_id:
            return
        mine = event.window_hash == self.window_hash
        await self.conversation.show(event, mine=mine)
        if mine and isinstance(event, NoticeEvent) and event.text.startswith("queued ("):
            self.run_worker(self._why_waiting(event.task_hash), group="notices")
        if not (mine and event.task_hash):
            return
        panel = self.query_one(PromptPanel)
        match event:
            case ConfirmEvent():
                text = describe_confirm(event.tool, event.args)
                panel.ask(OpenPrompt(event.task_hash, "confirm", text))
            case AskUserEvent():
                panel.ask(
                    OpenPrompt(event.task_hash, "ask_user", event.question, tuple(event.options))
                )
            case AnswerEvent():
                panel.close(event.task_hash)
                self.query_one(MessageInput).focus()
            case CanceledEvent():
                panel.close(event.task_hash)
