"""A small client of the gateway's HTTP API, used by the `agenvoy` command line and the
terminal chat client.

Given the local credential (`<home>/.store/terminal.token`, see gateway/credentials.py) it signs
in as that user, in its window if it has one; given any other token, it sends it as it is.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp
from yarl import URL

from gateway.credentials import is_local_credential, local_token

if TYPE_CHECKING:
    from gateway.events import Event


class GatewayUnavailable(RuntimeError):
    pass


class AnswerLost(GatewayUnavailable):
    """The connection ended after the request went out, before its answer: the gateway may
    have acted on it."""


class GatewayRestarting(GatewayUnavailable):
    """The gateway ended a stream because it is shutting down; it asks to be asked again."""


class GatewayError(RuntimeError):
    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(f"{message} ({status} {code})")
        self.status, self.code = status, code
        self.headers: Mapping[str, str] = headers or {}

    @property
    def restarting_task(self) -> tuple[str, str] | None:
        """(session id, task hash) of the task a shutdown cut this request off from: ask for
        it again once the gateway is back."""
        if self.status != 503 or self.code != "restarting":
            return None
        session, task = self.headers.get("X-Agenvoy-Session"), self.headers.get("X-Agenvoy-Task")
        return (session, task) if session and task else None

    @property
    def may_send_again(self) -> bool:
        """Whether the request may be sent again with its Idempotency-Key, which makes that
        safe: nothing was stored (`unavailable`), or nobody knows yet (`outcome_unknown`)."""
        return self.status == 503 and self.code in {"unavailable", "outcome_unknown"}

    @property
    def retry_after(self) -> float:
        try:
            return max(0.0, float(self.headers.get("Retry-After", "1")))
        except ValueError:
            return 1.0


@dataclass
class Reply:
    status: int
    body: dict[str, Any]


class GatewayClient:
    """One client identity: what its token says, and a window's own hash."""

    def __init__(
        self, base_url: str, token: str = "", sender: str = "", *, window_hash: str = ""
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers: dict[str, str] = {}
        if is_local_credential(token):
            token = local_token(token, sender or getpass.getuser(), window_hash)
        elif window_hash:
            # Not a credential: only a label on this client's events, to tell its own tasks.
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

    async def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        assert self._session is not None, "use the client as `async with`"
        try:
            url = URL(self.base_url + path, encoded=True)
            async with self._session.request(method, url, json=body, headers=headers) as resp:
                data = await resp.json(content_type=None)
        except aiohttp.ClientConnectorError as exc:
            raise GatewayUnavailable(
                f"the gateway is not running at {self.base_url}; start it with `agenvoy run`"
            ) from exc
        except aiohttp.ClientConnectionError as exc:
            raise AnswerLost(
                f"the gateway at {self.base_url} ended the connection before it answered"
            ) from exc
        if resp.status >= 400:
            error = (data or {}).get("error", {})
            raise GatewayError(
                resp.status, error.get("code", "?"), error.get("message", ""), resp.headers
            )
        return Reply(resp.status, data or {})

    async def send(
        self,
        content: str,
        *,
        session_id: str | None,
        persist: bool,
        wait: float,
        idempotency_key: str | None = None,
    ) -> Reply:
        """`idempotency_key`: the same for every sending of one message, so that sending it
        again never makes a second task."""
        body: dict[str, Any] = {"content": content, "persist": persist, "wait": wait}
        if session_id:
            body["session_id"] = session_id
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return await self.call("POST", "/v1/send", body, headers)

    async def task(self, session_id: str, task_hash: str, wait: float) -> Reply:
        path = f"/v1/session/{_segment(session_id)}/task/{_segment(task_hash)}?wait={wait}"
        return await self.call("GET", path)

    async def answer(
        self,
        session_id: str,
        task_hash: str,
        *,
        approve: bool | None = None,
        text: str | None = None,
    ) -> Reply:
        body: dict[str, Any] = {"approve": approve} if text is None else {"answer": text}
        path = f"/v1/session/{_segment(session_id)}/pending/{_segment(task_hash)}"
        return await self.call("POST", path, body)

    async def pending(self, session_id: str | None = None) -> list[dict[str, Any]]:
        """The open prompts this client may answer, of one session or of all."""
        path = f"/v1/session/{_segment(session_id)}/pending" if session_id else "/v1/pending"
        return list((await self.call("GET", path)).body.get("pending", []))

    # -- what the terminal client needs ------------------------------------------------------

    async def healthy(self) -> bool:
        """True when a gateway answers at the base URL, ready or not: one whose database is out
        of reach (503) is still running, and starting another on its home would be refused."""
        try:
            await self.call("GET", "/healthz")
        except GatewayUnavailable:
            return False
        except GatewayError as exc:
            return exc.status == 503
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

    async def history(self, session_id: str, limit: int) -> list[dict[str, Any]]:
        """The session's latest `limit` messages, oldest first."""
        path = f"/v1/session/{_segment(session_id)}/history?limit={limit}"
        return list((await self.call("GET", path)).body.get("messages", []))

    async def inputs(self, session_id: str) -> list[str]:
        reply = await self.call("GET", f"/v1/session/{_segment(session_id)}/inputs")
        return [str(e) for e in reply.body.get("inputs", [])]

    async def add_input(self, session_id: str, entry: str) -> list[str]:
        path = f"/v1/session/{_segment(session_id)}/inputs"
        reply = await self.call("POST", path, {"entry": entry})
        return [str(e) for e in reply.body.get("inputs", [])]

    async def submit(
        self, session_id: str, content: str, attachments: Sequence[dict[str, str]] = ()
    ) -> dict[str, Any]:
        """Hand a message to the session without waiting; events follow on `events()`.
        `attachments`: `{"name", "mime", "data"}` each, the data base64 (`Upload`)."""
        body: dict[str, Any] = {"content": content, "session_id": session_id, "wait": 0}
        if attachments:
            body["attachments"] = list(attachments)
        return (await self.call("POST", "/v1/send", body)).body

    async def cancel(self, session_id: str, task_hash: str) -> bool:
        path = f"/v1/session/{_segment(session_id)}/cancel/{_segment(task_hash)}"
        return bool((await self.call("POST", path)).body.get("canceled"))

    async def commands(self) -> list[dict[str, Any]]:
        """The gateway commands this client's front-end offers: name, summary, usage, access."""
        return list((await self.call("GET", "/v1/commands")).body.get("commands", []))

    async def events(
        self, session_id: str, *, on_live: Callable[[], None] | None = None
    ) -> AsyncIterator[Event]:
        """The session's events from now on (its log stream), until the server ends it;
        `GatewayRestarting` when it ends it to shut down.

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
                kind = ""
                async for raw in resp.content:
                    line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    if line == ": live" and on_live is not None:
                        on_live()
                    elif line.startswith("event:"):
                        kind = line[6:].strip()
                    elif line.startswith("data:"):
                        data_lines.append(line[5:].removeprefix(" "))
                    elif not line and data_lines:
                        if kind == "restarting":
                            raise GatewayRestarting("the gateway is restarting")
                        event = _parse_event("\n".join(data_lines))
                        data_lines, kind = [], ""
                        if event is not None:
                            yield event
        except aiohttp.ClientConnectionError as exc:
            raise GatewayUnavailable(
                f"lost the connection to the gateway at {self.base_url}"
            ) from exc


def _segment(value: str) -> str:
    """`value` as one path segment: `../x` stays inside it instead of climbing the path."""
    return quote(value, safe="").replace(".", "%2E")


def _parse_event(data: str) -> Event | None:
    """One SSE data block as an event; log records and unknown kinds are skipped."""
    # Only the chat window reads events: `agenvoy send` is spared building their models.
    from gateway.events import EVENT_ADAPTER

    try:
        return EVENT_ADAPTER.validate_python(json.loads(data))
    except ValueError:  # pydantic's ValidationError included
        return None
