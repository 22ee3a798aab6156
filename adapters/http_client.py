"""A small client of the gateway's HTTP API, used by the `agenvoy` command line and the
terminal chat client."""

from __future__ import annotations

import getpass
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp
from pydantic import ValidationError

if TYPE_CHECKING:
    from gateway.events import Event


class GatewayUnavailable(RuntimeError):
    pass


class GatewayError(RuntimeError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{message} ({status} {code})")
        self.status, self.code = status, code


@dataclass
class Reply:
    status: int
    body: dict[str, Any]


class GatewayClient:
    """One client identity: a sender, and for terminal windows the window's own hash."""

    def __init__(
        self,
        base_url: str,
        token: str = "",
        sender: str = "",
        *,
        window_hash: str = "",
        client: str = "http",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"X-Agenvoy-Sender": sender or getpass.getuser(), "X-Agenvoy-Client": client}
        if window_hash:
            self.headers["X-Agenvoy-Window"] = window_hash
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> GatewayClient:
        self._session = aiohttp.ClientSession(
            headers=self.headers, timeout=aiohttp.ClientTimeout(total=None, connect=5)
        )
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Reply:
        assert self._session is not None, "use the client as `async with`"
        try:
            async with self._session.request(method, self.base_url + path, json=body) as resp:
                data = await resp.json(content_type=None)
        except aiohttp.ClientConnectionError as exc:
            raise GatewayUnavailable(
                f"the gateway is not running at {self.base_url}; start it with `agenvoy run`"
            ) from exc
        if resp.status >= 400:
            error = (data or {}).get("error", {})
            raise GatewayError(resp.status, error.get("code", "?"), error.get("message", ""))
        return Reply(resp.status, data or {})

    async def send(
        self, content: str, *, session_id: str | None, persist: bool, wait: float
    ) -> Reply:
        body: dict[str, Any] = {"content": content, "persist": persist, "wait": wait}
        if session_id:
            body["session_id"] = session_id
        return await self.call("POST", "/v1/send", body)

    async def task(self, session_id: str, task_hash: str, wait: float) -> Reply:
        return await self.call("GET", f"/v1/session/{session_id}/task/{task_hash}?wait={wait}")

    async def answer(
        self,
        session_id: str,
        task_hash: str,
        *,
        approve: bool | None = None,
        text: str | None = None,
    ) -> Reply:
        body: dict[str, Any] = {"approve": approve} if text is None else {"answer": text}
        return await self.call("POST", f"/v1/session/{session_id}/pending/{task_hash}", body)

    async def pending(self, session_id: str | None = None) -> list[dict[str, Any]]:
        if session_id:
            sessions = [session_id]
        else:
            listing = await self.call("GET", "/v1/sessions")
            sessions = [s["session_id"] for s in listing.body.get("sessions", [])]
        prompts: list[dict[str, Any]] = []
        for sid in sessions:
            reply = await self.call("GET", f"/v1/session/{sid}/pending")
            prompts.extend(reply.body.get("pending", []))
        return prompts

    # -- what the terminal client needs ------------------------------------------------------

    async def healthy(self) -> bool:
        """True when a gateway answers at the base URL."""
        try:
            await self.call("GET", "/healthz")
        except (GatewayUnavailable, GatewayError):
            return False
        return True

    async def create_session(self, prefix: str = "cli") -> str:
        reply = await self.call("POST", "/v1/session", {"prefix": prefix})
        return str(reply.body["session_id"])

    async def session(self, session_id: str) -> dict[str, Any] | None:
        try:
            return (await self.call("GET", f"/v1/session/{_segment(session_id)}")).body
        except GatewayError as exc:
            if exc.status in (400, 404):
                return None
            raise

    async def sessions(self) -> list[dict[str, Any]]:
        return list((await self.call("GET", "/v1/sessions")).body.get("sessions", []))

    async def update_session(self, session_id: str, **fields: Any) -> dict[str, Any]:
        return (await self.call("PUT", f"/v1/session/{_segment(session_id)}", fields)).body

    async def inputs(self, session_id: str) -> list[str]:
        reply = await self.call("GET", f"/v1/session/{_segment(session_id)}/inputs")
        return [str(e) for e in reply.body.get("inputs", [])]

    async def add_input(self, session_id: str, entry: str) -> list[str]:
        path = f"/v1/session/{_segment(session_id)}/inputs"
        reply = await self.call("POST", path, {"entry": entry})
        return [str(e) for e in reply.body.get("inputs", [])]

    async def submit(self, session_id: str, content: str) -> dict[str, Any]:
        """Hand a message to the session without waiting; events follow on `events()`."""
        body = {"content": content, "session_id": session_id, "wait": 0}
        return (await self.call("POST", "/v1/send", body)).body

    async def cancel(self, session_id: str, task_hash: str) -> bool:
        path = f"/v1/session/{_segment(session_id)}/cancel/{_segment(task_hash)}"
        return bool((await self.call("POST", path)).body.get("canceled"))

    async def commands(self) -> list[dict[str, Any]]:
        """The gateway commands this client's front-end offers: name, summary, usage, access."""
        return list((await self.call("GET", "/v1/commands")).body.get("commands", []))

    async def pending_everywhere(self) -> list[dict[str, Any]]:
        return list((await self.call("GET", "/v1/pending")).body.get("pending", []))

    async def events(
        self, session_id: str, *, on_live: Callable[[], None] | None = None
    ) -> AsyncIterator[Event]:
        """The session's events from now on (its log stream), until the server ends it.

        `on_live` runs once the gateway has subscribed the stream: from then on no event of
        the session is missed, so a message sent after it shows up in full.
        """
        assert self._session is not None, "use the client as `async with`"
        url = f"{self.base_url}/v1/session/{_segment(session_id)}/log?tail=0"
        try:
            async with self._session.get(url) as resp:
                if resp.status >= 400:
                    data = await resp.json(content_type=None)
                    error = (data or {}).get("error", {})
                    raise GatewayError(
                        resp.status, error.get("code", "?"), error.get("message", "")
                    )
                data_lines: list[str] = []
                async for raw in resp.content:
                    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    if line == ": live" and on_live is not None:
                        on_live()
                    elif line.startswith("data:"):
                        data_lines.append(line[5:].removeprefix(" "))
                    elif not line and data_lines:
                        event = _parse_event("\n".join(data_lines))
                        data_lines = []
                        if event is not None:
                            yield event
        except aiohttp.ClientConnectionError as exc:
            raise GatewayUnavailable(
                f"lost the connection to the gateway at {self.base_url}"
            ) from exc


def _segment(value: str) -> str:
    return quote(value, safe="")


def _parse_event(data: str) -> Event | None:
    """One SSE data block as an event; log records and unknown kinds are skipped."""
    # Only the chat window reads events: `agenvoy send` is spared building their models.
    from gateway.events import EVENT_ADAPTER

    try:
        return EVENT_ADAPTER.validate_python(json.loads(data))
    except (ValueError, ValidationError):
        return None
