"""The input box and the prompt panel of the chat window."""

from __future__ import annotations

import json
from dataclasses import dataclass

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Static, TextArea

from adapters.terminal.completion import CommandHint, Completer
from adapters.terminal.history import InputHistory
from adapters.terminal.plain import line, plain

# Keys that add a line break instead of sending: terminals report Shift+Enter only sometimes,
# Ctrl+J (line feed) always.
NEWLINE_KEYS = frozenset({"ctrl+j", "shift+enter", "alt+enter"})


class MessageInput(TextArea):
    """Enter sends; Ctrl+J adds a line; Up on the first line and Down on the last walk history;
    Tab completes a `/command`."""

    @dataclass
    class Submitted(Message):
        text: str

    @dataclass
    class Hints(Message):
        """Tab found several commands the input could still become."""

        hints: list[CommandHint]

    def __init__(
        self, inputs: InputHistory, completer: Completer, *, id: str | None = None
    ) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, id=id)
        # Not `history`: TextArea keeps its undo history under that name.
        self.inputs = inputs
        self.completer = completer

    async def _on_key(self, event: events.Key) -> None:
        key = event.key
        if key == "enter":
            self._claim(event)
            text = self.text
            if text.strip():
                self.clear()
                self.post_message(self.Submitted(text))
            return
        if key in NEWLINE_KEYS:
            self._claim(event)
            self.insert("\n")
            return
        if key == "up" and self.cursor_at_first_line:
            self._claim(event)
            self._show(self.inputs.previous(self.text), at_top=True)
            return
        if key == "down" and self.cursor_at_last_line:
            self._claim(event)
            self._show(self.inputs.next())
            return
        if key == "tab" and self.text.startswith("/"):
            self._claim(event)
            self._complete()
            return
        await super()._on_key(event)

    def _complete(self) -> None:
        completed, hints = self.completer.complete(self.text)
        if completed != self.text:
            self.load_text(completed)
            self.move_cursor(self.document.end)
        if len(hints) > 1:
            self.post_message(self.Hints(hints))

    def _claim(self, event: events.Key) -> None:
        event.stop()
        event.prevent_default()

    def _show(self, entry: str | None, *, at_top: bool = False) -> None:
        if entry is None:
            return
        self.load_text(entry)
        # Walking up leaves the cursor on the first line, so the next Up goes on walking;
        # walking down leaves it at the end, so Down does.
        first_line = entry.split("\n", 1)[0]
        self.move_cursor((0, len(first_line)) if at_top else self.document.end)


@dataclass(frozen=True)
class OpenPrompt:
    """A confirmation or question of a task this window started."""

    task_hash: str
    kind: str  # confirm | ask_user
    text: str
    options: tuple[str, ...] = ()


class PromptPanel(Vertical):
    """Shown while a task of this window waits for an answer; hidden otherwise."""

    @dataclass
    class Answered(Message):
        task_hash: str
        approve: bool | None = None
        text: str | None = None

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.prompt: OpenPrompt | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="prompt-text")
        with Horizontal(id="prompt-buttons"):
            yield Button("Approve", id="approve", variant="success")
            yield Button("Deny", id="deny", variant="error")
        yield Input(placeholder="your answer, then Enter", id="prompt-answer")

    def ask(self, prompt: OpenPrompt) -> None:
        self.prompt = prompt
        self.query_one("#prompt-text", Static).update(plain(prompt.text))
        confirm = prompt.kind == "confirm"
        self.query_one("#prompt-buttons").display = confirm
        answer = self.query_one("#prompt-answer", Input)
        answer.display = not confirm
        answer.value = ""
        if prompt.options:
            answer.placeholder = "one of: " + ", ".join(line(o) for o in prompt.options)
        self.display = True
        if confirm:
            self.query_one("#approve", Button).focus()
        else:
            answer.focus()

    def close(self, task_hash: str | None = None) -> None:
        if task_hash is None or (self.prompt is not None and self.prompt.task_hash == task_hash):
            self.prompt = None
            self.display = False

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if self.prompt is not None and event.button.id in ("approve", "deny"):
            event.stop()
            self.post_message(self.Answered(self.prompt.task_hash, event.button.id == "approve"))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if self.prompt is not None and event.value.strip():
            event.stop()
            self.post_message(self.Answered(self.prompt.task_hash, text=event.value.strip()))


def describe_confirm(tool: str, args: dict[str, object]) -> str:
    shown = json.dumps(args, ensure_ascii=False)
    if len(shown) > 300:
        shown = shown[:299] + "…"
    return f"Allow {tool} {shown}?"
