"""The terminal chat window, driven headless by Textual's pilot against a real gateway."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest
from clock import FakeClock
from support import wait_until
from test_http import Server, bearer, serving
from textual import events
from textual.errors import NoWidget
from textual.pilot import Pilot
from textual.widgets import Button, Markdown, OptionList, Static, TabPane
from typer.testing import CliRunner

from adapters.http import start_http
from adapters.http_client import GatewayClient
from adapters.terminal.app import ChatApp, ChatConfig
from adapters.terminal.completion import CommandHint, Completer
from adapters.terminal.history import InputHistory
from adapters.terminal.launch import GatewayNotRunning, ensure_gateway
from adapters.terminal.link import STREAM_RETRY_SECONDS
from adapters.terminal.picker import SessionPicker, SessionRow, short_id
from adapters.terminal.widgets import MessageInput, PromptPanel
from adapters.terminal.windows import claim_window
from gateway.agents.offline import OfflineAgent
from gateway.cli import app as cli_app
from gateway.client_settings import read_client_settings
from gateway.credentials import read_terminal_credential
from gateway.ids import Prefix, new_session_id
from gateway.runtime import Runtime
from gateway.settings import Settings

SIZE = (100, 32)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    async with serving(tmp_path, confirm_timeout_seconds=30) as srv:
        yield srv


def local(settings: Settings) -> str:
    """The local credential the gateway wrote into its home, as `agenvoy chat` reads it."""
    return read_terminal_credential(settings.store_dir)


def config(server: Server, tmp_path: Path, session_id: str | None = None) -> ChatConfig:
    return ChatConfig(
        base_url=server.base,
        token=local(server.runtime.settings),
        sender="ann",
        session_id=session_id,
        state_file=tmp_path / "terminal.json",
    )


def texts(app: ChatApp, selector: str = "#conversation > *") -> list[str]:
    """What the conversation shows, one string per widget."""
    shown = []
    for widget in app.query(selector):
        if isinstance(widget, Markdown):
            shown.append(widget.source)
        elif isinstance(widget, Static):
            shown.append(str(widget.render()))
    return shown


def _shows(app: ChatApp, text: str) -> bool:
    return text in texts(app)


async def until(pilot: Pilot[None], check: Callable[[], bool], within: float = 10.0) -> None:
    async def done() -> bool:
        # What the window has been sent so far is handled; no guessing from idle CPU time.
        await pilot.pause(0)
        return check()

    if not await wait_until(done, within):
        # What the window showed last says where a run that missed stood.
        shown = texts(pilot.app) if isinstance(pilot.app, ChatApp) else []
        raise AssertionError(f"condition not met within {within}s; last shown: {shown[-6:]}")


async def opened(pilot: Pilot[None]) -> ChatApp:
    app = pilot.app
    assert isinstance(app, ChatApp)
    await until(pilot, lambda: bool(app.session_id) and app.live.is_set())
    return app


async def press(pilot: Pilot[None], *keys: str) -> None:
    """Keys as the terminal sends them, each handled before the next one goes.

    `Pilot.press` also waits for the process to look idle, which with the gateway serving in
    the same process takes long and proves nothing; what a key leads to is waited for with
    `until`.
    """
    for key in keys:
        pilot.app.post_message(events.Key(key, key if len(key) == 1 else None))
        await pilot.pause(0)  # the app passes it to the focused widget, or runs its binding
        await pilot.pause(0)  # the widget handles it


async def click(pilot: Pilot[None], selector: str) -> None:
    """Click `selector` once the screen has it where the click lands.

    `Pilot.click` aims at the widget's region as it is: a panel only just shown may not have
    its place on screen yet, and the click would land on whatever is there.
    """
    app = pilot.app

    def placed() -> bool:
        widget = app.screen.query_one(selector)
        if not widget.region.area:
            return False
        try:
            at, _ = app.get_widget_at(*widget.region.offset)
        except NoWidget:
            return False
        return at is widget

    await until(pilot, placed)
    assert await pilot.click(selector)


async def type_and_send(pilot: Pilot[None], text: str) -> None:
    box = pilot.app.query_one(MessageInput)
    box.focus()
    box.load_text(text)
    await press(pilot, "enter")


async def test_message_reply_and_input_history_across_restarts(
    server: Server, tmp_path: Path
) -> None:
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        sid = app.session_id
        assert sid.startswith("cli-")
        await type_and_send(pilot, "hello gateway")
        await until(pilot, lambda: "echo: hello gateway" in texts(app))
        assert "You: hello gateway" in texts(app)
        await type_and_send(pilot, "second\nline two")
        await until(pilot, lambda: "echo: second\nline two" in texts(app))
        assert app.query_one(MessageInput).text == ""

    # A new window opens the last session and remembers what was typed there.
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        assert app.session_id == sid
        box = app.query_one(MessageInput)
        await press(pilot, "up")
        assert box.text == "second\nline two"  # multi-line entry kept intact
        await press(pilot, "up")
        assert box.text == "hello gateway"
        await press(pilot, "down")
        assert box.text == "second\nline two"
        await press(pilot, "down")
        assert box.text == ""
    assert server.runtime.store.files(sid).read_cmd_history() == [
        "hello gateway",
        "second\nline two",
    ]


def test_input_history_walk_keeps_the_draft() -> None:
    history = InputHistory(["a", "b"])
    assert history.next() is None
    assert history.previous("draft") == "b"
    assert history.previous("b") == "a"
    assert history.previous("a") is None
    assert history.next() == "b"
    assert history.next() == "draft"
    assert history.next() is None


async def test_picker_tabs_and_current_first(server: Server, tmp_path: Path) -> None:
    store = server.runtime.store
    older = new_session_id(Prefix.cli)
    await store.ensure(older)
    await store.update(older, name="older work")
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        current = app.session_id

        # Only cli-* sessions: one list, no tabs, the current one first and marked.
        await press(pilot, "ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, SessionPicker))
        assert not app.screen.query(TabPane)
        options = app.screen.query_one("#list-all", OptionList)
        first = options.get_option_at_index(0)
        assert first.id == current and str(first.prompt).startswith("▶")
        assert options.option_count == 2
        await press(pilot, "escape")
        await until(pilot, lambda: not isinstance(app.screen, SessionPicker))

        # A second prefix (and a hidden temp-* one) brings tabs: all, cli, tg.
        await store.ensure("tg-1001")
        await store.update("tg-1001", name="family chat")
        await store.ensure(new_session_id(Prefix.temp))
        await type_and_send(pilot, "/switch")
        await until(pilot, lambda: isinstance(app.screen, SessionPicker))
        tabs = [pane.id for pane in app.screen.query(TabPane)]
        assert tabs == ["tab-all", "tab-cli", "tab-tg"]
        everything = app.screen.query_one("#list-all", OptionList)
        assert everything.get_option_at_index(0).id == current
        assert everything.option_count == 3  # temp-* hidden
        await press(pilot, "t")
        await until(pilot, lambda: bool(app.screen.query("#tab-temp")))
        assert app.screen.query_one("#list-all", OptionList).option_count == 4
        # Choosing a row opens that session.
        listing = app.screen.query_one("#list-all", OptionList)
        index = next(
            i for i in range(listing.option_count) if listing.get_option_at_index(i).id == "tg-1001"
        )
        listing.focus()
        listing.highlighted = index
        await press(pilot, "enter")
        await until(pilot, lambda: app.session_id == "tg-1001" and app.live.is_set())
        assert app.title == "family chat"

        await type_and_send(pilot, f"/switch {short_id(older)[:7]}")  # "cli-" + 3: ambiguous
        await type_and_send(pilot, "/switch older work")
        await until(pilot, lambda: app.session_id == older)


async def test_new_and_name(server: Server, tmp_path: Path) -> None:
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        first = app.session_id
        await type_and_send(pilot, "/new")
        await until(pilot, lambda: app.session_id != first and app.live.is_set())
        await type_and_send(pilot, "/name release planning")
        await until(pilot, lambda: app.title == "release planning")
        row = await server.runtime.store.require(app.session_id)
        assert row.name == "release planning"


async def test_confirm_is_asked_only_in_the_window_that_started_it(
    server: Server, tmp_path: Path
) -> None:
    sid = new_session_id(Prefix.cli)
    await server.runtime.store.ensure(sid)
    window_a = ChatApp(config(server, tmp_path, sid), window_hash="aaaa")
    window_b = ChatApp(config(server, tmp_path, sid), window_hash="bbbb")
    async with window_a.run_test(size=SIZE) as a, window_b.run_test(size=SIZE) as b:
        await opened(a)
        await opened(b)
        await type_and_send(a, "!confirm ship it")
        panel_a = window_a.query_one(PromptPanel)
        await until(a, lambda: panel_a.display and panel_a.prompt is not None)
        assert "demo_action" in str(window_a.query_one("#prompt-text", Static).render())
        # B sees A's message as foreign activity but never the prompt.
        await until(b, lambda: any("ship it" in t for t in texts(window_b, ".foreign")))
        assert not window_b.query_one(PromptPanel).display
        assert window_b.query_one(PromptPanel).prompt is None
        assert not await _prompt_shown_in(b, window_b)

        # B cannot answer it through the API either; A can, with its button.
        (prompt,) = server.runtime.router.pending(sid)
        await click(a, "#approve")
        await until(a, lambda: "approved: ship it" in texts(window_a))
        await until(b, lambda: "approved: ship it" in texts(window_b, ".foreign"))
        assert not panel_a.display
        assert prompt.origin.window_hash == "aaaa"
        assert not await _prompt_shown_in(b, window_b)


async def _prompt_shown_in(pilot: Pilot[None], app: ChatApp) -> bool:
    """Whether the window shows a prompt, once it has handled what it was sent so far."""
    await pilot.pause(0)
    panel = app.query_one(PromptPanel)
    return bool(panel.display) or any(b.display for b in panel.query(Button) if panel.display)


async def test_task_started_over_http_shows_as_foreign(server: Server, tmp_path: Path) -> None:
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        # The window's session is its user's: a script's token writes to it once shared in.
        await server.share(app.session_id, "bot", by=bearer("root"))
        status, body = await server.call(
            "POST",
            "/v1/send",
            json_body={"content": "from a script", "session_id": app.session_id, "wait": 10},
            headers=bearer("bot"),
        )
        assert status == 200 and body["text"] == "echo: from a script"
        await until(pilot, lambda: "echo: from a script" in texts(app, ".foreign"))
        assert "Build Bot (elsewhere): from a script" in texts(app, ".foreign")
        assert not any(v.mine for v in app.tasks.values())


async def test_cancel_and_pending(server: Server, tmp_path: Path) -> None:
    agent = server.runtime.agent
    assert isinstance(agent, OfflineAgent)
    agent.clock = clock = FakeClock()
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        await type_and_send(pilot, "/cancel")
        await until(pilot, lambda: "no task of this window is running" in texts(app))
        await type_and_send(pilot, "!sleep 60")
        await clock.until_sleeping(seconds=1)
        await clock.advance(1)
        # The reply streams in while the task still runs.
        await until(pilot, lambda: any(v.text.startswith("1s") for v in app.tasks.values()))
        assert any(v.mine and not v.finished for v in app.tasks.values())
        # The picker marks the session as running.
        await press(pilot, "ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, SessionPicker))
        first = app.screen.query_one("#list-all", OptionList).get_option_at_index(0)
        assert "● running" in str(first.prompt)
        await press(pilot, "escape")
        await until(pilot, lambda: not isinstance(app.screen, SessionPicker))
        await type_and_send(pilot, "/cancel")
        await until(pilot, lambda: any(t.startswith("canceled") for t in texts(app)))
        assert all(v.finished for v in app.tasks.values())

        await type_and_send(pilot, "/pending")
        await until(pilot, lambda: "nothing is waiting for you" in texts(app))
        await type_and_send(pilot, "!ask favourite colour?")
        await until(pilot, lambda: app.query_one(PromptPanel).display)
        await type_and_send(pilot, "/pending")
        await until(pilot, lambda: any("favourite colour?" in t for t in texts(app)))
        # Away to another session and back: the open question is asked again.
        asking = app.session_id
        await type_and_send(pilot, "/new")
        await until(pilot, lambda: app.session_id != asking and app.live.is_set())
        assert not app.query_one(PromptPanel).display
        await type_and_send(pilot, f"/switch {asking}")
        await until(pilot, lambda: app.session_id == asking and app.query_one(PromptPanel).display)
        answer = app.query_one("#prompt-answer")
        answer.focus()
        await press(pilot, *"teal", "enter")
        await until(pilot, lambda: "answer: teal" in texts(app))


async def test_gateway_commands_and_help(server: Server, tmp_path: Path) -> None:
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        await type_and_send(pilot, "/status")
        await until(
            pilot, lambda: any(t.startswith(f"session: {app.session_id}") for t in texts(app))
        )
        await type_and_send(pilot, "/help")
        await until(pilot, lambda: any("/switch" in t for t in texts(app)))
        # The help lists the gateway's commands as its registry describes them.
        (shown,) = [t for t in texts(app) if "/switch" in t]
        for command in server.runtime.commands.menu("terminal"):
            if command.name not in ("new", "cancel", "help"):  # the window answers these
                assert f"`/{command.name} {command.usage}`".replace(" `", "`") in shown


async def test_tab_completes_commands_of_the_window_and_the_gateway(
    server: Server, tmp_path: Path
) -> None:
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        box = app.query_one(MessageInput)
        box.focus()
        await until(pilot, lambda: bool(app.completer.gateway_hints()))
        box.load_text("/mo")
        await press(pilot, "tab")
        assert box.text == "/model "  # a gateway command
        box.load_text("/sw")
        await press(pilot, "tab")
        assert box.text == "/switch "  # one of the window's own
        box.load_text("/re")
        await press(pilot, "tab")
        assert box.text == "/re"  # /reasoning or /reset: both are offered
        await until(pilot, lambda: any("`/reasoning" in t and "`/reset`" in t for t in texts(app)))
        box.load_text("hello /mo")
        await press(pilot, "tab")
        assert "/model" not in box.text  # only a lone /word is completed


def test_completion_rules() -> None:
    completer = Completer([CommandHint("switch", "pick"), CommandHint("status", "mine")])
    completer.learn(
        [
            {"name": "status", "summary": "the gateway's", "usage": ""},
            {"name": "allow", "summary": "a", "usage": "[tool]"},
            {"name": "answer", "summary": "b", "usage": ""},
        ]
    )
    assert completer.complete("/sw") == ("/switch ", [CommandHint("switch", "pick")])
    text, hints = completer.complete("/s")
    assert text == "/s" and [h.name for h in hints] == ["status", "switch"]
    assert hints[0].summary == "mine"  # the window's own wins where both have a name
    assert completer.complete("/a")[0] == "/a"
    assert completer.complete("/al") == ("/allow ", [CommandHint("allow", "a", "[tool]")])
    assert completer.complete("/zz") == ("/zz", [])
    assert completer.complete("/allow x") == ("/allow x", [])
    assert [h.name for h in completer.gateway_hints()] == ["allow", "answer"]


async def test_unknown_session_is_a_clear_exit(server: Server, tmp_path: Path) -> None:
    app = ChatApp(config(server, tmp_path, "cli-does-not-exist"))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.return_code is not None)
    assert app.return_code == 1


def test_session_rows_order_and_short_ids() -> None:
    rows = [
        SessionRow("cli-0123456789abcdef", "", 5, False),
        SessionRow("tg-42", "", 9, True),
        SessionRow("temp-aaaaaaaabbbb", "", 1, False),
    ]
    picker = SessionPicker(rows, current="cli-0123456789abcdef")
    assert [r.session_id for r in picker.rows] == ["cli-0123456789abcdef", "tg-42"]
    assert short_id("cli-0123456789abcdef") == "cli-01234567"
    assert short_id("dc-123456789012345678") == "dc-123456789012345678"


async def test_chat_without_a_gateway_says_how_to_start_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway_proc import free_port

    monkeypatch.setenv("AGENVOY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AGENVOY_HTTP_PORT", str(free_port()))
    with pytest.raises(GatewayNotRunning) as caught:
        await ensure_gateway(read_client_settings(env_file=None), start=False)
    assert "agenvoy run" in str(caught.value) and "--start" in str(caught.value)

    result = await asyncio.to_thread(CliRunner().invoke, cli_app, ["chat"])
    assert result.exit_code == 1
    assert "agenvoy chat --start" in result.output


@pytest.mark.slow
async def test_start_launches_a_gateway_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway_proc import free_port

    monkeypatch.setenv("AGENVOY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AGENVOY_HTTP_PORT", str(free_port()))
    settings = read_client_settings(env_file=None)
    started = await ensure_gateway(settings, start=True)
    assert started is not None
    try:
        assert await ensure_gateway(settings, start=False) is None  # now it answers
        async with GatewayClient(settings.gateway_url) as client:
            sid = await client.create_session()
        assert (settings.home / "sessions" / sid).is_dir()
        assert started.log_file == settings.home / "gateway.log"
    finally:
        os.kill(started.pid, signal.SIGTERM)
        _pid, status = await asyncio.wait_for(asyncio.to_thread(os.waitpid, started.pid, 0), 30)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.slow
async def test_screenshots_render(tmp_path: Path) -> None:
    """docs/make_screenshots.py still drives the window to what the docs show."""
    import importlib.util

    script = Path(__file__).parent.parent / "docs" / "make_screenshots.py"
    spec = importlib.util.spec_from_file_location("make_screenshots", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    chat, picker = await module.render(tmp_path)
    chat_svg = chat.read_text()
    assert "Approve" in chat_svg and "CI&#160;bot&#160;(elsewhere)" in chat_svg
    assert "family&#160;chat" in picker.read_text()


async def test_prompt_of_a_window_on_a_discord_session_stays_out_of_discord(
    tmp_path: Path,
) -> None:
    """A window on dc-<channel> asks its confirmation in the window, never in the channel."""
    from discord_rig import contents, reply_in, start_rig, stop_rig
    from fakes.discord import FakeDiscord, point_discord_py_at, text_channel, user

    channel, member = 901, user(11, "ann")
    async with FakeDiscord() as fake:
        fake.add_guild(900, "guild", channels=[text_channel(channel, "general")], members=[member])
        with point_discord_py_at(fake):
            rig = await start_rig(fake, tmp_path / "home")
            try:
                runner = await start_http(rig.runtime, "127.0.0.1", 0)
                try:
                    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
                    sid = f"dc-{channel}"
                    await rig.runtime.store.ensure(sid)
                    token = local(rig.runtime.settings)
                    chat = ChatApp(
                        ChatConfig(base_url=base, token=token, sender="ann", session_id=sid)
                    )
                    async with chat.run_test(size=SIZE) as pilot:
                        await opened(pilot)
                        await type_and_send(pilot, "!confirm restart the build")
                        panel = chat.query_one(PromptPanel)
                        await until(pilot, lambda: panel.prompt is not None)
                        # Someone in the channel meanwhile: queued behind the window's task.
                        fake.inject_message(channel, member, "status?", mentions_bot=True)
                        await until(pilot, lambda: "status?" in str(texts(chat, ".foreign")))
                        await click(pilot, "#approve")
                        await until(pilot, lambda: "approved: restart the build" in texts(chat))
                        await reply_in(fake, channel, "echo: status?")
                        await until(pilot, lambda: "echo: status?" in texts(chat, ".foreign"))
                    # The channel got its own task's notice and reply, nothing of the window's.
                    sent = contents(fake, channel)
                    assert sent[-1] == "echo: status?" and len(sent) <= 2, sent
                    assert not any("restart" in m or "demo_action" in m for m in sent), sent
                    log_text = rig.runtime.store.files(sid).action_log.path.read_text()
                    assert f"[{chat.window_hash}][confirm]" in log_text
                finally:
                    await runner.cleanup()
            finally:
                await stop_rig(rig)


async def retry_after_backoff(app: ChatApp, clock: FakeClock) -> None:
    """The window reconnects only once its backoff is over: move time past it."""
    await clock.until_sleeping(seconds=STREAM_RETRY_SECONDS)
    assert not app.live.is_set()
    await clock.advance(STREAM_RETRY_SECONDS)


async def test_window_reconnects_when_the_gateway_comes_back(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", _env_file=None)
    runtime = await Runtime.start(settings)
    try:
        runner = await start_http(runtime, "127.0.0.1", 0)
        port = runner.addresses[0][1]
        clock = FakeClock()
        url = f"http://127.0.0.1:{port}"
        config = ChatConfig(base_url=url, token=local(settings), sender="ann")
        chat = ChatApp(config, clock=clock)
        notes: list[str] = []
        async with chat.run_test(size=SIZE) as pilot:
            await opened(pilot)
            chat.notify = lambda message, **_: notes.append(message)  # type: ignore[method-assign]
            await runner.cleanup()
            await until(pilot, lambda: not chat.live.is_set())
            # The gateway said why the stream ended.
            assert notes == ["the gateway is restarting; reconnecting…"]
            # Typed while the gateway is away: an error, and the text stays in the box.
            await type_and_send(pilot, "still there?")
            box = chat.query_one(MessageInput)
            await until(pilot, lambda: box.text == "still there?")
            assert any("not running" in t or "lost" in t for t in texts(chat, ".error"))
            runner = await start_http(runtime, "127.0.0.1", port)
            await retry_after_backoff(chat, clock)
            await until(pilot, lambda: chat.live.is_set())
            box.focus()
            await press(pilot, "enter")
            await until(pilot, lambda: "echo: still there?" in texts(chat))
        await runner.cleanup()
    finally:
        await runtime.close()


async def test_open_prompt_comes_back_after_a_gateway_restart(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", confirm_timeout_seconds=60, _env_file=None)
    runtime = await Runtime.start(settings)
    runner = await start_http(runtime, "127.0.0.1", 0)
    port = runner.addresses[0][1]
    try:
        clock = FakeClock()
        url = f"http://127.0.0.1:{port}"
        # The credential outlives the restart: the window signs in again with what it holds.
        config = ChatConfig(base_url=url, token=local(settings), sender="ann")
        chat = ChatApp(config, clock=clock)
        async with chat.run_test(size=SIZE) as pilot:
            await opened(pilot)
            await type_and_send(pilot, "!confirm survive a restart")
            panel = chat.query_one(PromptPanel)
            await until(pilot, lambda: panel.prompt is not None)
            await runner.cleanup()
            await runtime.close()
            await until(pilot, lambda: not chat.live.is_set())
            panel.close()  # forget it here: the window must learn it again from the gateway

            runtime = await Runtime.start(settings)
            assert await runtime.router.recover() == 1
            runner = await start_http(runtime, "127.0.0.1", port)
            await retry_after_backoff(chat, clock)
            await until(pilot, lambda: chat.live.is_set() and panel.prompt is not None)
            await click(pilot, "#approve")
            await until(pilot, lambda: "approved: survive a restart" in texts(chat))
    finally:
        await runner.cleanup()
        await runtime.close()


def test_window_claims(tmp_path: Path) -> None:
    first = claim_window(tmp_path)
    second = claim_window(tmp_path)
    assert not first.adopted and not second.adopted
    assert first.window_hash != second.window_hash  # two open windows never share a hash
    first.release()
    third = claim_window(tmp_path)
    assert third.adopted and third.window_hash == first.window_hash
    (tmp_path / "not a hash!.lock").touch()  # stray files are skipped
    fourth = claim_window(tmp_path)
    assert fourth.window_hash not in {second.window_hash, third.window_hash}
    for claim in (second, third, fourth):
        claim.release()


async def window_left_with_a_prompt(server: Server, tmp_path: Path, text: str) -> ChatApp:
    """A window (holding its hash under tmp_path/windows) that starts a prompt, then closes."""
    closed = ChatApp(replace(config(server, tmp_path), windows_dir=tmp_path / "windows"))
    async with closed.run_test(size=SIZE) as pilot:
        await opened(pilot)
        await type_and_send(pilot, text)
        await until(pilot, lambda: closed.query_one(PromptPanel).prompt is not None)
    return closed


async def test_a_new_window_takes_over_the_prompt_of_a_closed_one(
    server: Server, tmp_path: Path
) -> None:
    windows = tmp_path / "windows"
    closed = await window_left_with_a_prompt(server, tmp_path, "!confirm after the crash")
    # The terminal is gone; the prompt still waits in the gateway.
    assert len(server.runtime.router.pending(closed.session_id)) == 1

    again = ChatApp(replace(config(server, tmp_path), windows_dir=windows))
    async with again.run_test(size=SIZE) as pilot:
        await opened(pilot)
        assert again.window_hash == closed.window_hash
        panel = again.query_one(PromptPanel)
        await until(pilot, lambda: panel.prompt is not None)
        await click(pilot, "#approve")
        await until(pilot, lambda: "approved: after the crash" in texts(again, ".reply"))

        # While it is open, another window gets a hash of its own and sees no prompt of it.
        await type_and_send(pilot, "!confirm only here")
        await until(pilot, lambda: panel.prompt is not None)
        other = ChatApp(replace(config(server, tmp_path), windows_dir=windows))
        async with other.run_test(size=SIZE) as other_pilot:
            await opened(other_pilot)
            assert other.window_hash != again.window_hash
            assert other.query_one(PromptPanel).prompt is None


async def test_adopted_prompt_in_another_session_is_pointed_at(
    server: Server, tmp_path: Path
) -> None:
    windows = tmp_path / "windows"
    closed = await window_left_with_a_prompt(server, tmp_path, "!ask still there?")
    elsewhere = new_session_id(Prefix.cli)
    await server.runtime.store.ensure(elsewhere)
    again = ChatApp(replace(config(server, tmp_path, elsewhere), windows_dir=windows))
    async with again.run_test(size=SIZE) as pilot:
        await opened(pilot)
        wanted = f"/switch {closed.session_id}"
        await until(pilot, lambda: any(wanted in t for t in texts(again, ".note")))
        await type_and_send(pilot, wanted)
        await until(pilot, lambda: again.query_one(PromptPanel).prompt is not None)


async def test_admin_answers_prompts_from_the_pending_list(tmp_path: Path) -> None:
    async with serving(tmp_path, admins="terminal:root", confirm_timeout_seconds=30) as server:
        ann = bearer("ann")
        status, first = await server.call(
            "POST",
            "/v1/send",
            json_body={"content": "!confirm deploy", "persist": True},
            headers=ann,
        )
        status, second = await server.call(
            "POST", "/v1/send", json_body={"content": "!ask colour?", "persist": True}, headers=ann
        )
        assert status == 202 and first["pending"] and second["pending"]

        token = local(server.runtime.settings)
        outsider = ChatApp(ChatConfig(base_url=server.base, token=token, sender="eve"))
        async with outsider.run_test(size=SIZE) as pilot:
            await opened(pilot)
            await type_and_send(pilot, "/pending")
            await until(pilot, lambda: "nothing is waiting for you" in texts(outsider))

        admin = ChatApp(ChatConfig(base_url=server.base, token=token, sender="root"))
        async with admin.run_test(size=SIZE) as pilot:
            await opened(pilot)
            await type_and_send(pilot, "/pending")
            await until(pilot, lambda: len(admin.listed_prompts) == 2)
            order = [p["task_hash"] for p in admin.listed_prompts]
            confirm = order.index(first["task_hash"]) + 1
            question = order.index(second["task_hash"]) + 1
            await type_and_send(pilot, f"/answer {confirm} yes please")
            await until(pilot, lambda: any("takes /approve or /deny" in t for t in texts(admin)))
            await type_and_send(pilot, "/approve 9")
            await until(pilot, lambda: any("usage: /approve N" in t for t in texts(admin)))
            await type_and_send(pilot, f"/approve {confirm}")
            await type_and_send(pilot, f"/answer {question} teal")
            await until(pilot, lambda: texts(admin).count("answered prompt 1") == 1)
            await until(pilot, lambda: texts(admin).count("answered prompt 2") == 1)

        for body, reply in ((first, "approved: deploy"), (second, "answer: teal")):
            state = await server.runtime.router.wait(body["task_hash"], 10)
            assert (state.status, state.reply) == ("done", reply)


async def test_a_long_conversation_keeps_only_the_latest_lines(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("adapters.terminal.conversation.MAX_SHOWN", 6)
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        for n in range(6):
            await type_and_send(pilot, f"message {n}")
            await until(pilot, partial(_shows, app, f"echo: message {n}"))
        shown = texts(app)
        assert len(shown) <= 6
        assert shown[-2:] == ["You: message 5", "echo: message 5"]
        assert "You: message 0" not in shown


async def test_a_session_opens_with_its_latest_messages_and_the_picker_previews_them(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        talked = app.session_id
        for n in range(4):
            await type_and_send(pilot, f"message {n}")
            await until(pilot, partial(_shows, app, f"echo: message {n}"))
        await type_and_send(pilot, "/new")
        await until(pilot, lambda: app.session_id != talked and app.live.is_set())
        # The picker previews the highlighted session: the new one is empty, the other not.
        await press(pilot, "ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, SessionPicker))

        def preview() -> str:
            return str(app.screen.query_one("#picker-preview", Static).render())

        await until(pilot, lambda: preview() == "no messages yet")
        await press(pilot, "down")
        await until(pilot, lambda: "agent: echo: message 3" in preview())
        assert preview().splitlines()[0] == "ann: message 1"  # the latest six, oldest first
        await press(pilot, "escape")

    # A window opened on it shows its latest messages (here the last three), not a blank.
    monkeypatch.setattr("adapters.terminal.app.HISTORY_SHOWN", 3)
    async with ChatApp(config(server, tmp_path, talked)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        await until(pilot, partial(_shows, app, "echo: message 3"))
        assert texts(app)[1:] == ["echo: message 2", "ann: message 3", "echo: message 3"]
        await type_and_send(pilot, "and now")
        await until(pilot, partial(_shows, app, "echo: and now"))
        assert texts(app)[-2:] == ["You: and now", "echo: and now"]


async def test_a_queued_message_says_what_it_waits_behind(server: Server, tmp_path: Path) -> None:
    async with ChatApp(config(server, tmp_path)).run_test(size=SIZE) as pilot:
        app = await opened(pilot)
        await type_and_send(pilot, "!confirm deploy")
        await until(pilot, lambda: app.query_one(PromptPanel).display)
        asking = next(iter(app.tasks))
        await type_and_send(pilot, "then this")
        behind = (
            "waiting behind a task that waits for an answer: "
            f"agenvoy approve|deny {app.session_id} {asking} (or /pending here)"
        )
        await until(pilot, partial(_shows, app, behind))
        assert texts(app).index("queued (1 ahead)") < texts(app).index(behind)
        await click(pilot, "#approve")
        await until(pilot, partial(_shows, app, "echo: then this"))
