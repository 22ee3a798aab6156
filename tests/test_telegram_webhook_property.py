"""Whatever reaches the Telegram webhook with the right secret — any JSON at all, or an update
whose text is hostile (NUL, lone surrogates, control characters, a megabyte) — gets an answer
that is not a 5xx, and in time."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from concurrent.futures import Future
from contextlib import asynccontextmanager
from itertools import count
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest
from fakes.telegram import FakeTelegram
from gateway_proc import free_port
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_http_hostile_text import hostile
from test_telegram_durability import SECRET, update_from

from adapters.http import start_http
from adapters.telegram import TelegramAdapter
from gateway.runtime import Runtime
from gateway.settings import Settings

T = TypeVar("T")
ANSWER_WITHIN = 15.0

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
# Keys a Telegram update has, so that the values under them are tried too, not only shapes the
# parser turns away at the first look.
update_like = st.fixed_dictionaries(
    {"update_id": st.integers(min_value=-5, max_value=2**40)},
    optional={
        "message": json_values | st.fixed_dictionaries({}, optional={"text": json_values}),
        "callback_query": json_values,
        "edited_message": json_values,
    },
)


@asynccontextmanager
async def webhook(home: Path) -> AsyncIterator[str]:
    async with FakeTelegram() as fake:
        port = free_port()
        url = f"http://127.0.0.1:{port}/tg-hook"
        runtime = await Runtime.start(
            Settings(
                home=home,
                telegram_token=fake.token,
                telegram_api_url=fake.url,
                telegram_mode="webhook",
                telegram_webhook_url=url,
                telegram_webhook_secret=SECRET,
                _env_file=None,
            )
        )
        adapter = TelegramAdapter.build(runtime)
        runtime.http_routes.extend(adapter.routes())
        http = await start_http(runtime, port=port)
        try:
            await adapter.start()
            yield url
        finally:
            await adapter.stop()
            await http.cleanup()
            await runtime.close()


class Running:
    """The webhook on an event loop of its own thread, for a synchronous property test."""

    def __init__(self, home: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self._url: Future[str] = Future()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(
            target=self.loop.run_until_complete, args=(self._run(home),)
        )
        self._thread.start()
        self.url = self._url.result(timeout=30)

    async def _run(self, home: Path) -> None:
        try:
            async with webhook(home) as url:
                self._url.set_result(url)
                await self._stop.wait()
        except BaseException as exc:
            if not self._url.done():
                self._url.set_exception(exc)
            raise

    def run(self, work: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(ANSWER_WITHIN)  # type: ignore[arg-type]

    def post(self, body: bytes) -> int:
        async def send() -> int:
            headers = {
                "X-Telegram-Bot-Api-Secret-Token": SECRET,
                "Content-Type": "application/json",
            }
            async with (
                aiohttp.ClientSession() as client,
                client.post(self.url, data=body, headers=headers) as response,
            ):
                await response.read()
                return response.status

        return self.run(send())

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        self.loop.close()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    rig = Running(tmp_path_factory.mktemp("webhook"))
    try:
        yield rig
    finally:
        rig.close()


ids = count(1)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=json_values | update_like)
def test_any_json_gets_an_answer_that_is_not_a_5xx(running: Running, body: Any) -> None:
    status = running.post(json.dumps(body).encode())
    assert status < 500, body


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=hostile)
def test_any_text_in_an_update_gets_an_answer_that_is_not_a_5xx(
    running: Running, text: str
) -> None:
    # Sent as JSON escapes, as Telegram would: a lone surrogate survives the trip.
    body = json.dumps(update_from(4242, text, update_id=next(ids))).encode()
    assert running.post(body) < 500


@pytest.mark.parametrize("body", [b"", b"\x00", b"{", b"[" * 100_000, b"\xff\xfe", b"null"])
def test_bytes_that_are_not_json_are_refused(running: Running, body: bytes) -> None:
    assert running.post(body) == 400
