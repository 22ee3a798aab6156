"""Any text in any text field of every JSON route, query string or header: never a 5xx, never a
hang, and a refusal stores nothing."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_http import Server, serving

T = TypeVar("T")
ANSWER_WITHIN = 15.0

# Text no client should send but any may: NUL, lone surrogates (sent as JSON escapes), control
# characters, and a megabyte.
hostile = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=()), max_size=50),
    st.text(alphabet=st.characters(max_codepoint=0x1F), min_size=1, max_size=20),
    st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfff", "\ud83d", "\u2028", "\ufeff", ""]),
    st.builds(lambda c: c * 1_000_000, st.sampled_from(["a", "\x00", "\u00e9"])),
)


class Running:
    """A test server on an event loop of its own thread, so that a synchronous property test
    can call it."""

    def __init__(self, tmp_path: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready: Future[Server] = Future()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(
            target=self.loop.run_until_complete, args=(self._run(tmp_path),)
        )
        self._thread.start()
        self.server = self._ready.result(timeout=30)

    async def _run(self, tmp_path: Path) -> None:
        try:
            async with serving(tmp_path) as srv:
                self._ready.set_result(srv)
                await self._stop.wait()
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise

    def run(self, work: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(ANSWER_WITHIN)  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        self.loop.close()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    rig = Running(tmp_path_factory.mktemp("hostile"))
    try:
        yield rig
    finally:
        rig.close()


@pytest.fixture(scope="module")
def sid(running: Running) -> str:
    status, body = running.run(running.server.call("POST", "/v1/session"))
    assert status == 201
    return str(body["session_id"])


# Every text field of every route's body: (method, path, the rest of a valid body, field).
def body_fields(sid: str) -> list[tuple[str, str, dict[str, Any], str]]:
    return [
        ("POST", "/v1/session", {}, "prefix"),
        ("POST", "/v1/send", {"wait": 0}, "content"),
        ("POST", "/v1/send", {"content": "x", "wait": 0}, "session_id"),
        ("PUT", f"/v1/session/{sid}", {}, "name"),
        ("PUT", f"/v1/session/{sid}", {}, "persona"),
        ("PUT", f"/v1/session/{sid}", {}, "model"),
        ("PUT", f"/v1/session/{sid}", {}, "reasoning"),
        ("PUT", f"/v1/session/{sid}", {}, "allowed_tools"),
        ("POST", f"/v1/session/{sid}/inputs", {}, "entry"),
        ("POST", f"/v1/session/{sid}/pending/abc", {}, "answer"),
    ]


async def _sessions(server: Server) -> int:
    return len(await server.runtime.store.list_sessions())


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), text=hostile)
def test_hostile_text_in_bodies(running: Running, sid: str, data: st.DataObject, text: str) -> None:
    method, path, base, field = data.draw(st.sampled_from(body_fields(sid)))
    value: Any = [text] if field == "allowed_tools" else text
    # ensure_ascii: a lone surrogate goes out as the JSON escape a client would send.
    raw = json.dumps({**base, field: value}, ensure_ascii=True).encode()
    server = running.server
    before = running.run(_sessions(server))
    status, body = running.run(server.call(method, path, data=raw))
    assert status < 500, (method, path, field, body)
    if status >= 400:
        assert set(body) == {"error"}, body
        assert running.run(_sessions(server)) == before
    if status < 400 and ("\x00" in text or any("\ud800" <= c <= "\udfff" for c in text)):
        pytest.fail(f"{method} {path} took {field}={text[:20]!r}")


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), text=hostile)
def test_hostile_text_in_queries_and_headers(
    running: Running, sid: str, data: st.DataObject, text: str
) -> None:
    from urllib.parse import quote

    shown = text[:20_000]  # a query past the request-line limit is the parser's business
    where = data.draw(st.sampled_from(["q", "session_id", "prefix", "window"]))
    server = running.server
    encoded = quote(shown.encode("utf-8", "surrogatepass"), safe="")
    if where == "window":
        header = shown.encode("utf-8", "surrogatepass").decode("latin-1")
        # The client library sends no control character in a header at all.
        assume(not any(ord(c) < 0x20 or ord(c) == 0x7F for c in header))
        request = server.call("GET", "/v1/commands", headers={"X-Agenvoy-Window": header})
    elif where == "prefix":
        request = server.call("GET", f"/v1/sessions?prefix={encoded}")
    else:
        request = server.call("GET", f"/v1/search?q=a&{where}={encoded}")
    status, body = running.run(request)
    assert status < 500, (where, body)
