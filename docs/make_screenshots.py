"""Render the SVG screenshots of the terminal client shown in README.md.

    .venv/bin/python docs/make_screenshots.py [output-dir]

A gateway with the offline agent runs in this process on a free loopback port, in a temporary
home; the chat window is driven headless, as in the tests.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from adapters.http import start_http
from adapters.terminal.app import ChatApp, ChatConfig
from adapters.terminal.picker import SessionPicker
from adapters.terminal.widgets import MessageInput, PromptPanel
from gateway.app import Runtime
from gateway.events import Inbound, Origin
from gateway.settings import Settings

SIZE = (110, 34)
STEP_TIMEOUT = 15.0


async def _until(pause: Callable[[], object], check: Callable[[], bool]) -> None:
    async with asyncio.timeout(STEP_TIMEOUT):
        while not check():
            await pause()  # type: ignore[misc]


async def render(out_dir: Path) -> list[Path]:
    await asyncio.to_thread(out_dir.mkdir, parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as home:
        settings = Settings(home=Path(home), _env_file=None)  # type: ignore[call-arg]
        runtime = await Runtime.start(settings)
        runner = await start_http(runtime, "127.0.0.1", 0)
        try:
            port = runner.addresses[0][1]
            await runtime.store.ensure("tg-1001")
            await runtime.store.update("tg-1001", name="family chat")
            config = ChatConfig(base_url=f"http://127.0.0.1:{port}", sender="ann")
            app = ChatApp(config, window_hash="5e1f0a9c3b2d")
            async with app.run_test(size=SIZE) as pilot:
                await _until(pilot.pause, lambda: bool(app.session_id) and app.live.is_set())
                sid = app.session_id

                async def say(text: str) -> None:
                    box = app.query_one(MessageInput)
                    box.load_text(text)
                    box.focus()
                    await pilot.press("enter")

                await say("/name release planning")
                await say("What is on the **release** list?")
                await _until(pilot.pause, lambda: len(app.tasks) == 1 and _all_done(app))
                # Someone else on the same session, over the HTTP API.
                bot = Origin("http", sender_id="ci", sender_name="CI bot", window_hash="c1")
                sub = await runtime.router.submit(Inbound(bot, sid, "nightly build passed"))
                await runtime.router.wait(sub.task_hash, STEP_TIMEOUT)
                await say("!confirm tag v1.4.0")
                panel = app.query_one(PromptPanel)
                await _until(pilot.pause, lambda: bool(panel.display))
                await pilot.pause()
                chat = out_dir / "terminal-chat.svg"
                app.save_screenshot(filename=chat.name, path=str(out_dir))

                await pilot.click("#approve")
                await _until(pilot.pause, lambda: _all_done(app))
                await pilot.press("ctrl+s")
                await _until(pilot.pause, lambda: isinstance(app.screen, SessionPicker))
                await pilot.pause()
                picker = out_dir / "terminal-picker.svg"
                app.save_screenshot(filename=picker.name, path=str(out_dir))
            return [chat, picker]
        finally:
            await runner.cleanup()
            await runtime.close()


def _all_done(app: ChatApp) -> bool:
    return all(view.finished for view in app.tasks.values())


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    for written in asyncio.run(render(target)):
        print(written)  # noqa: T201
