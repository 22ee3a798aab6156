"""The chat window shows what people, chats and tools wrote as text: Rich markup in a message or
a session's name neither crashes the window nor becomes an action, and a control sequence
never reaches the operator's terminal. Driven by Textual's pilot against a real gateway."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from test_http import Server, serving
from test_terminal import SIZE, click, config, opened, press, texts, type_and_send, until
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Input, Markdown, OptionList, Static

from adapters.terminal.app import ChatApp
from adapters.terminal.picker import SessionPicker
from adapters.terminal.widgets import PromptPanel
from gateway.ids import Prefix, new_session_id

CLOSE = "hello [/b] world"
CLICK = "[@click=app.quit]go[/]"  # short enough for the picker to show whole
TITLE = "\x1b]0;PWNED\x07"
# What the window shows of TITLE: the escape and the bell as escapes, nothing sent to the
# terminal.
TITLE_SHOWN = "\\x1b]0;PWNED\\x07"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(tmp_path, confirm_timeout_seconds=30) as srv:
        yield srv


def reaches_the_terminal(app: ChatApp) -> bool:
    """Whether the screen as drawn holds a control character: an escape sequence or a bell
    that the terminal would act on."""
    drawn = app.export_screenshot()
    return any(ord(c) < 0x20 and c not in "\n\t" for c in drawn) or "\x9b" in drawn


async def still_running(pilot: Pilot[None], app: ChatApp) -> bool:
    await pilot.pause(0)
    return app.is_running and app.return_code is None


async def click_on(pilot: Pilot[None], widget: Widget, start: int) -> None:
    """Click the columns of the widget's first line from `start` on, where `CLICK` shows: read
    as markup, its `[@click=app.quit]` would be a link there that ends the app."""
    for column in range(start, start + 6):
        await pilot.click(widget, offset=(column, 0))


async def test_hostile_messages_and_names_show_as_text(server: Server, tmp_path: Path) -> None:
    store = server.runtime.store
    sid, other = new_session_id(Prefix.cli), new_session_id(Prefix.cli)
    await store.ensure(sid)
    await store.update(sid, name=f"[/b]{TITLE}")
    await store.ensure(other)
    await store.update(other, name=CLICK)
    async with ChatApp(config(server, tmp_path, sid)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        assert app.title == f"[/b]{TITLE_SHOWN}"

        for message in (CLOSE, CLICK, f"set the {TITLE} title"):
            await type_and_send(pilot, message)
        shown = f"You: set the {TITLE_SHOWN} title"
        await until(pilot, lambda: f"echo: set the {TITLE_SHOWN} title" in texts(app))
        assert {f"You: {CLOSE}", f"You: {CLICK}", shown} <= set(texts(app))
        assert {f"echo: {CLOSE}", f"echo: {CLICK}"} <= set(texts(app))
        assert not reaches_the_terminal(app)
        (clickable,) = [w for w in app.query(".user").results(Static) if CLICK in str(w.render())]
        await click_on(pilot, clickable, len("You: "))
        (echoed,) = [w for w in app.query(Markdown) if w.source == f"echo: {CLICK}"]
        await click_on(pilot, echoed, len("echo: "))
        assert await still_running(pilot, app)

        # The picker: both names as typed, nothing to click but the rows.
        await press(pilot, "ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, SessionPicker))
        listing = app.screen.query_one("#list-all", OptionList)
        labels = [str(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)]
        assert any(f"[/b]{TITLE_SHOWN}" in label for label in labels)
        assert any(CLICK in label for label in labels)
        assert not reaches_the_terminal(app)
        await press(pilot, "escape")
        await until(pilot, lambda: not isinstance(app.screen, SessionPicker))

        # The prompt panel: the tool's arguments and a question, as typed.
        await type_and_send(pilot, f"!confirm {CLOSE} {CLICK} {TITLE}")
        panel = app.query_one(PromptPanel)
        await until(pilot, lambda: panel.display and panel.prompt is not None)
        prompt_text = app.query_one("#prompt-text", Static)
        assert f"{CLOSE} {CLICK} " in str(prompt_text.render())
        assert "\\u001b]0;PWNED\\u0007" in str(prompt_text.render())  # as JSON shows it
        assert not reaches_the_terminal(app)
        await click_on(pilot, prompt_text, str(prompt_text.render()).index(CLICK))
        assert await still_running(pilot, app)
        await click(pilot, "#deny")
        await until(pilot, lambda: not panel.display)

        await type_and_send(pilot, f"!ask {CLICK} {TITLE}?")
        await until(pilot, lambda: panel.display and panel.prompt is not None)
        assert f"{CLICK} {TITLE_SHOWN}?" in str(prompt_text.render())
        assert not reaches_the_terminal(app)
        answer = app.query_one("#prompt-answer", Input)
        answer.value = CLOSE
        await answer.action_submit()
        await until(pilot, lambda: f"answer: {CLOSE}" in texts(app))
        assert await still_running(pilot, app)
