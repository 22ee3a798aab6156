"""The HTTP front-end: a JSON API and server-sent event streams on aiohttp.web.

Every route is under `/v1/` except `/healthz`, `/metrics` and `/openapi.json`. Bodies and
answers are JSON; an error is always `{"error": {"code": ..., "message": ...}}` with a
matching status. When `AGENVOY_API_TOKEN` is set every route but `/healthz` needs
`Authorization: Bearer <token>`; `start_http` refuses to listen beyond loopback without one.

Who is asking comes from request headers: `X-Agenvoy-Sender` (default `http`),
`X-Agenvoy-Sender-Name` (default: the sender id) and `X-Agenvoy-Window` (the client's window
hash, minted per request when absent). They are claims, not credentials: anyone holding the
token may send any of them, so an `http:<id>` entry in AGENVOY_ADMINS grants admin rights to
every token holder who names that id.

Events reach HTTP clients through the task stream (`POST /v1/send` with `stream`), the task
route and the session log stream: the router pushes nothing to `http` and `terminal`
origins. The event contract and the SSE framing are in docs/events.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any, Final, NoReturn, TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler

from adapters.http_openapi import openapi_document
from gateway.adapter import HttpRoute
from gateway.auth import NotAllowed
from gateway.clock import now_ms
from gateway.engine.prompts import AlreadyAnswered, PromptError, PromptNotFound
from gateway.engine.router import Router
from gateway.engine.task import MessageTooLong, Submission, TaskNotFound, TaskView
from gateway.events import Event, Inbound, Origin, event_to_json
from gateway.ids import (
    InvalidHash,
    InvalidSessionId,
    Prefix,
    new_session_id,
    new_window_hash,
    validate_hash,
    validate_session_id,
)
from gateway.logs import get_logger
from gateway.runtime import Runtime
from gateway.session_settings import SettingsChange, SettingsRefused
from gateway.settings import Settings
from gateway.store.actionlog import ActionRecord
from gateway.store.fslock import SessionDirectoryMissing
from gateway.store.search import MAX_PAGE, search_messages
from gateway.store.sessions import UnknownSession
from gateway.store.usage import DAY_MS, usage_summary

log = get_logger(__name__)

T = TypeVar("T")

MAX_BODY_BYTES: Final = 1024 * 1024
# Room for a path carrying a 10 KB session id, so even that gets a JSON error from the app
# rather than the HTTP parser's plain-text one.
MAX_REQUEST_LINE: Final = 16 * 1024
MAX_WAIT_SECONDS: Final = 300.0
HISTORY_DEFAULT: Final = 50
HISTORY_MAX: Final = 500
LOG_TAIL_DEFAULT: Final = 100
LOG_TAIL_MAX: Final = 1000
SEARCH_DEFAULT: Final = 20
SEARCH_MAX_OFFSET: Final = 10_000
USAGE_DEFAULT_DAYS: Final = 28
USAGE_MAX_DAYS: Final = 3650
MAX_HEADER_CHARS: Final = 128
KEEPALIVE_SECONDS: Final = 15.0
# How often an idle stream checks that its client is still there and the server still up.
POLL_SECONDS: Final = 1.0
# How long deleting a session waits for its running task to wind down after the cancel.
DELETE_GRACE_SECONDS: Final = 5.0
UPDATABLE_FIELDS: Final = frozenset({"name", "persona", "model", "reasoning", "allowed_tools"})
DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SSE_HEADERS: Final = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # a buffering proxy would hold frames back
}
SENDER_HEADER: Final = "X-Agenvoy-Sender"
SENDER_NAME_HEADER: Final = "X-Agenvoy-Sender-Name"
WINDOW_HEADER: Final = "X-Agenvoy-Window"
# `terminal` for the full-screen client (`agenvoy chat`); anything else is plain HTTP.
CLIENT_HEADER: Final = "X-Agenvoy-Client"
CLIENT_PLATFORMS: Final = frozenset({"http", "terminal"})
OPEN_PATHS: Final = frozenset({"/healthz"})
CREATABLE_PREFIXES: Final = (Prefix.cli, Prefix.chat)

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")
_STATUS_CODES: Final = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
}
_PROMPT_STATUS: Final[dict[type[PromptError], int]] = {
    PromptNotFound: 404,
    AlreadyAnswered: 409,
}


class InsecureBinding(RuntimeError):
    """Listening beyond loopback without an API token would open the API to the network."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"refusing to serve the HTTP API on {host!r} without a token: set AGENVOY_API_TOKEN "
            "or bind to 127.0.0.1"
        )
        self.host = host


class ApiError(Exception):
    """An error answer: status, machine-readable code and a message for people."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


# -- binding -----------------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost`; anything else (including "" = every interface) is not."""
    name = host.strip().lower()
    if name == "localhost":
        return True
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return address in ipaddress.IPv4Network("127.0.0.0/8")
    return address == ipaddress.IPv6Address("::1")


def api_token(settings: Settings) -> str:
    """The configured token; an empty AGENVOY_API_TOKEN counts as none."""
    return settings.api_token.get_secret_value() if settings.api_token is not None else ""


def check_binding(host: str, settings: Settings) -> None:
    if not is_loopback(host) and not api_token(settings):
        raise InsecureBinding(host)


# -- metrics -----------------------------------------------------------------------------------


class _Histogram:
    __slots__ = ("count", "counts", "total")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets  # per bucket, not cumulative
        self.total = 0.0
        self.count = 0


class RequestMetrics:
    """Request durations per route and method, and responses per status."""

    def __init__(self, buckets: tuple[float, ...] = DURATION_BUCKETS) -> None:
        self.buckets = buckets
        self._durations: dict[tuple[str, str], _Histogram] = {}
        self._responses: dict[tuple[str, str, int], int] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        series = self._durations.get((method, route))
        if series is None:
            series = self._durations[(method, route)] = _Histogram(len(self.buckets))
        for i, bound in enumerate(self.buckets):
            if seconds <= bound:
                series.counts[i] += 1
                break
        series.total += seconds
        series.count += 1
        key = (method, route, status)
        self._responses[key] = self._responses.get(key, 0) + 1

    def exposition(self) -> list[str]:
        name = "agenvoy_http_request_duration_seconds"
        lines = [
            f"# HELP {name} Time to answer an HTTP request (a stream counts until it ends).",
            f"# TYPE {name} histogram",
        ]
        for (method, route), series in sorted(self._durations.items()):
            labels = f'method="{_label(method)}",route="{_label(route)}"'
            cumulative = 0
            for bound, count in zip(self.buckets, series.counts, strict=True):
                cumulative += count
                lines.append(f'{name}_bucket{{{labels},le="{_number(bound)}"}} {cumulative}')
            lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {series.count}')
            lines.append(f"{name}_sum{{{labels}}} {_number(series.total)}")
            lines.append(f"{name}_count{{{labels}}} {series.count}")
        name = "agenvoy_http_responses_total"
        lines += [
            f"# HELP {name} HTTP responses by route, method and status.",
            f"# TYPE {name} counter",
        ]
        for (method, route, status), count in sorted(self._responses.items()):
            labels = f'method="{_label(method)}",route="{_label(route)}",status="{status}"'
            lines.append(f"{name}{{{labels}}} {count}")
        return lines


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value))


def _gauge(name: str, help_text: str, value: int) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value}"]


def render_metrics(router: Router, requests: RequestMetrics) -> str:
    running, queued = router.load()
    lines = _gauge("agenvoy_tasks_running", "Tasks running now, across sessions.", running)
    lines += _gauge("agenvoy_tasks_queued", "Tasks waiting for their session's turn.", queued)
    lines += _gauge(
        "agenvoy_tasks_waiting",
        "Tasks parked on a confirmation or question.",
        len(router.pending()),
    )
    for key, value in sorted(router.counters.items()):
        name = f"agenvoy_{key}_total"
        lines += [
            f"# HELP {name} Router counter {key}.",
            f"# TYPE {name} counter",
            f"{name} {value}",
        ]
    lines += requests.exposition()
    return "\n".join(lines) + "\n"


# -- request helpers -----------------------------------------------------------------------------


def _bad(message: str) -> NoReturn:
    raise ApiError(400, "bad_request", message)


async def _json_body(request: web.Request) -> dict[str, Any]:
    """The body as a JSON object; an empty body is `{}`. Over the size cap: 413."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "bad_json", f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        _bad("the request body must be a JSON object")
    return data


def _str_field(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        _bad(f"field '{name}' must be a string")
    return value


def _bool_field(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        _bad(f"field '{name}' must be true or false")
    return value


def _seconds_field(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        _bad(f"field '{name}' must be a number of seconds")
    return _seconds(float(value), f"field '{name}'")


def _seconds(value: float, what: str) -> float:
    if not math.isfinite(value) or not 0 <= value <= MAX_WAIT_SECONDS:
        _bad(f"{what} must be between 0 and {MAX_WAIT_SECONDS:g} seconds")
    return value


def _int_query(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        _bad(f"query parameter '{name}' must be a whole number")
    if not low <= value <= high:
        _bad(f"query parameter '{name}' must be between {low} and {high}")
    return value


def _seconds_query(request: web.Request, name: str) -> float | None:
    raw = request.query.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        _bad(f"query parameter '{name}' must be a number of seconds")
    return _seconds(value, f"query parameter '{name}'")


def _header(request: web.Request, name: str) -> str:
    value = request.headers.get(name, "").strip()
    if len(value) > MAX_HEADER_CHARS:
        _bad(f"header {name} is longer than {MAX_HEADER_CHARS} characters")
    if not value.isprintable():
        _bad(f"header {name} holds characters that are not printable")
    return value


def _session_id(request: web.Request) -> str:
    return validate_session_id(request.match_info["sid"])


def _prefix_query(request: web.Request) -> str | None:
    raw = request.query.get("prefix", "").strip()
    if not raw:
        return None
    if raw not in {p.value for p in Prefix}:
        known = ", ".join(p.value for p in Prefix)
        _bad(f"query parameter 'prefix' must be one of {known}")
    return raw


def _error(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    body = {"error": {"code": code, "message": message}}
    return web.json_response(body, status=status, headers=headers)


def _is_hash(value: str) -> bool:
    try:
        validate_hash(value)
    except InvalidHash:
        return False
    return True


def _route_label(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def _event_json(event: Event) -> dict[str, Any]:
    return event.model_dump(mode="json")


def _record_json(record: ActionRecord) -> dict[str, Any]:
    return {
        "at": (record.at - _EPOCH) // timedelta(milliseconds=1),
        "window_hash": record.window_hash,
        "kind": str(record.kind),
        "task_hash": record.task_hash,
        "body": record.body,
    }


def sse_frame(kind: str, data: str, frame_id: int | None = None) -> bytes:
    """One server-sent event: `event:`, `id:` and `data:` lines, then a blank line."""
    lines = [f"event: {kind}"]
    if frame_id is not None:
        lines.append(f"id: {frame_id}")
    lines.extend(f"data: {part}" for part in _LINE_BREAK.split(data))
    return ("\n".join(lines) + "\n\n").encode()


class _StreamClosed(Exception):
    """The client went away, or the server is shutting down: stop writing."""


class _EventStream:
    """Writes SSE frames to one response and notices when to stop."""

    def __init__(
        self,
        request: web.Request,
        response: web.StreamResponse,
        closing: asyncio.Event,
        keepalive: float,
    ) -> None:
        self._request = request
        self._response = response
        self._closing = closing
        self._keepalive = keepalive
        self._poll = min(POLL_SECONDS, keepalive)
        self._last_write = time.monotonic()

    def _check_open(self) -> None:
        transport = self._request.transport
        if self._closing.is_set() or transport is None or transport.is_closing():
            raise _StreamClosed

    async def start(self) -> None:
        """Send the status line and headers."""
        self._check_open()
        try:
            await self._response.prepare(self._request)
        except ConnectionError:
            raise _StreamClosed from None
        self._last_write = time.monotonic()

    async def _write(self, data: bytes) -> None:
        self._check_open()
        try:
            await self._response.write(data)
        except ConnectionError:
            raise _StreamClosed from None
        self._last_write = time.monotonic()

    async def frame(self, kind: str, data: str, frame_id: int | None = None) -> None:
        await self._write(sse_frame(kind, data, frame_id))

    async def comment(self, text: str) -> None:
        await self._write(f": {text}\n\n".encode())

    async def receive(self, get: Callable[[], Awaitable[T]]) -> T:
        """The next item from `get`, writing keep-alive comments while there is none."""
        while True:
            self._check_open()
            try:
                return await asyncio.wait_for(get(), self._poll)
            except TimeoutError:
                if time.monotonic() - self._last_write >= self._keepalive:
                    await self.comment("keepalive")


# -- the API -------------------------------------------------------------------------------------


class HttpApi:
    """The route handlers and middlewares, around one runtime."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        keepalive_seconds: float = KEEPALIVE_SECONDS,
        open_paths: frozenset[str] = OPEN_PATHS,
    ) -> None:
        self.open_paths = open_paths
        self.runtime = runtime
        self.router = runtime.router
        self.store = runtime.store
        self.settings = runtime.settings
        self.metrics = RequestMetrics()
        self.keepalive_seconds = keepalive_seconds
        self.closing = asyncio.Event()
        self._token = api_token(runtime.settings).encode()

    # -- middlewares -------------------------------------------------------------------------

    @web.middleware
    async def measure(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = 499  # the request ended before an answer (server shutdown)
            raise
        finally:
            elapsed = time.perf_counter() - started
            self.metrics.observe(request.method, _route_label(request), status, elapsed)

    @web.middleware
    async def errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(exc.status, exc.code, exc.message, exc.headers)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            code = _STATUS_CODES.get(exc.status, f"http_{exc.status}")
            headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
            # aiohttp's own texts are "404: Not Found"; the reason says the same, plainer.
            text = exc.text or ""
            message = text if text and not text.startswith(f"{exc.status}:") else exc.reason
            return _error(exc.status, code, message, headers)
        except InvalidSessionId as exc:
            return _error(400, "bad_session_id", str(exc))
        except InvalidHash as exc:
            return _error(400, "bad_request", str(exc))
        except MessageTooLong as exc:
            return _error(413, "too_long", str(exc))
        except (TaskNotFound, UnknownSession) as exc:
            return _error(404, "not_found", str(exc.args[0]) if exc.args else "not found")
        except PromptError as exc:
            return _error(_PROMPT_STATUS.get(type(exc), 400), exc.code, str(exc))
        except NotAllowed as exc:
            return _error(403, exc.code, str(exc))
        except Exception:
            log.exception("http request failed", method=request.method, path=request.path)
            return _error(500, "internal", "internal error")

    @web.middleware
    async def authenticate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._token and request.path not in self.open_paths:
            scheme, _, given = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not given.strip():
                raise ApiError(
                    401,
                    "unauthorized",
                    "this API needs an Authorization: Bearer <token> header",
                    {"WWW-Authenticate": 'Bearer realm="agenvoy"'},
                )
            if not hmac.compare_digest(given.strip().encode(), self._token):
                raise ApiError(403, "forbidden", "the bearer token is not valid")
        return await handler(request)

    async def on_shutdown(self, app: web.Application) -> None:
        self.closing.set()

    # -- shared pieces -----------------------------------------------------------------------

    def origin(self, request: web.Request) -> Origin:
        sender_id = _header(request, SENDER_HEADER) or "http"
        sender_name = _header(request, SENDER_NAME_HEADER) or sender_id
        window = _header(request, WINDOW_HEADER)
        window_hash = validate_hash(window, "window hash") if window else new_window_hash()
        platform = _header(request, CLIENT_HEADER) or "http"
        if platform not in CLIENT_PLATFORMS:
            _bad(f"header {CLIENT_HEADER} must be one of: {', '.join(sorted(CLIENT_PLATFORMS))}")
        return Origin(
            platform, sender_id=sender_id, sender_name=sender_name, window_hash=window_hash
        )

    async def require_session(self, session_id: str) -> None:
        if await self.store.get(session_id) is None:
            raise ApiError(404, "not_found", f"no such session: {session_id}")

    def task_of(self, request: web.Request) -> TaskView:
        session_id = _session_id(request)
        task_hash = request.match_info["task_hash"]
        try:
            state = self.router.task(task_hash)
        except TaskNotFound:
            state = None
        if state is None or state.session_id != session_id:
            shown = task_hash if len(task_hash) <= 64 else task_hash[:64] + "…"
            raise ApiError(404, "not_found", f"no task {shown} in session {session_id}")
        return state

    async def until_closing(self, work: Awaitable[T]) -> T | None:
        """Await `work` unless the server starts shutting down first (then None)."""
        job = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(self.closing.wait())
        try:
            await asyncio.wait({job, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not job.done():
                job.cancel()
        if job.done() and not job.cancelled():
            return job.result()
        with contextlib.suppress(asyncio.CancelledError):
            await job
        return None

    def sse_response(self, extra: dict[str, str] | None = None) -> web.StreamResponse:
        return web.StreamResponse(status=200, headers={**SSE_HEADERS, **(extra or {})})

    # -- sessions ----------------------------------------------------------------------------

    async def create_session(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        prefix = _str_field(body, "prefix") or Prefix.cli.value
        if prefix not in {p.value for p in CREATABLE_PREFIXES}:
            _bad("field 'prefix' must be 'cli' or 'chat'")
        session_id = new_session_id(prefix)
        await self.store.ensure(session_id)
        return web.json_response({"session_id": session_id}, status=201)

    async def list_sessions(self, request: web.Request) -> web.Response:
        prefix = _prefix_query(request)
        sessions = []
        for info in await self.store.list_sessions():
            if prefix is not None and not info.id.startswith(f"{prefix}-"):
                continue
            sessions.append(
                {
                    "session_id": info.id,
                    "name": info.name,
                    "updated_at": info.updated_at,
                    "message_count": info.message_count,
                    "running": self.router.running_task(info.id) is not None,
                }
            )
        return web.json_response({"sessions": sessions})

    async def get_session(self, request: web.Request) -> web.Response:
        session_id = _session_id(request)
        row = await self.store.get(session_id)
        if row is None:
            raise ApiError(404, "not_found", f"no such session: {session_id}")
        return web.json_response(
            {
                "session_id": row.id,
                "name": row.name,
                "persona": row.persona,
                "model": row.model,
                "reasoning": row.reasoning,
                "allowed_tools": sorted(row.allowed_tools),
                "created_at": row.created_at,
                "updated_at": row.updated_at,
                "running": self.router.running_task(session_id) is not None,
                "queued": self.router.queue_length(session_id),
            }
        )

    async def update_session(self, request: web.Request) -> web.Response:
        session_id = _session_id(request)
        body = await _json_body(request)
        unknown = set(body) - UPDATABLE_FIELDS
        if unknown:
            _bad(
                f"unknown fields: {', '.join(sorted(unknown))}; "
                f"updatable: {', '.join(sorted(UPDATABLE_FIELDS))}"
            )
        tools = body.get("allowed_tools")
        if tools is not None and not (
            isinstance(tools, list) and all(isinstance(t, str) for t in tools)
        ):
            _bad("field 'allowed_tools' must be a list of tool names")
        change = SettingsChange(
            name=_str_field(body, "name"),
            persona=_str_field(body, "persona"),
            model=_str_field(body, "model"),
            reasoning=_str_field(body, "reasoning"),
            allowed_tools=tools,
        )
        await self.require_session(session_id)
        origin = self.origin(request)
        try:
            await self.runtime.session_settings.change(session_id, origin, change)
        except SettingsRefused as exc:
            _bad(str(exc))
        except UnknownSession:
            raise ApiError(404, "not_found", f"no such session: {session_id}") from None
        log.info(
            "session updated over http",
            session=session_id,
            by=origin.sender_key,
            fields=sorted(body),
        )
        return await self.get_session(request)

    async def delete_session(self, request: web.Request) -> web.Response:
        session_id = _session_id(request)
        await self.require_session(session_id)
        origin = self.origin(request)
        running = self.router.running_task(session_id)
        await self.router.cancel_all(session_id, by=origin.sender_name)
        if running is not None:
            # Let the canceled run write its last events before its directory goes.
            await self.router.wait(running.task_hash, DELETE_GRACE_SECONDS)
        if not await self.store.delete(session_id):
            raise ApiError(404, "not_found", f"no such session: {session_id}")
        log.info("session deleted over http", session=session_id, by=origin.sender_key)
        return web.json_response({"deleted": True})

    async def history(self, request: web.Request) -> web.Response:
        session_id = _session_id(request)
        limit = _int_query(request, "limit", HISTORY_DEFAULT, 1, HISTORY_MAX)
        await self.require_session(session_id)
        messages = await self.store.recent_messages(session_id, limit)
        return web.json_response({"messages": [asdict(m) for m in messages]})

    async def session_log(self, request: web.Request) -> web.StreamResponse:
        session_id = _session_id(request)
        tail = _int_query(request, "tail", LOG_TAIL_DEFAULT, 0, LOG_TAIL_MAX)
        await self.require_session(session_id)
        action_log = self.store.files(session_id).action_log
        response = self.sse_response()
        # Subscribed before the tail is read: an event can then show up twice, never not at all.
        with self.router.subscribe(session_id) as sub:
            records = await asyncio.to_thread(action_log.tail, tail)
            stream = _EventStream(request, response, self.closing, self.keepalive_seconds)
            frame_id = 0
            reported = 0
            try:
                await stream.start()
                for record in records:
                    frame_id += 1
                    await stream.frame("log", json.dumps(_record_json(record)), frame_id)
                await stream.comment("live")
                while True:
                    event = await stream.receive(sub.get)
                    if sub.dropped > reported:
                        await stream.comment(f"dropped {sub.dropped - reported}")
                        reported = sub.dropped
                    frame_id += 1
                    await stream.frame(event.kind, event_to_json(event), frame_id)
            except _StreamClosed:
                pass
        return response

    # -- sending -----------------------------------------------------------------------------

    async def send(self, request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        content = _str_field(body, "content")
        if content is None:
            _bad("field 'content' is required")
        if not content.strip():
            _bad("field 'content' must not be empty")
        given = _str_field(body, "session_id")
        persist = _bool_field(body, "persist", False)
        stream = _bool_field(body, "stream", False)
        wait = _seconds_field(body, "wait", MAX_WAIT_SECONDS)
        if given is not None:
            session_id = validate_session_id(given)
        else:
            session_id = new_session_id(Prefix.chat if persist else Prefix.temp)
        origin = self.origin(request)
        submission = await self.router.submit(Inbound(origin, session_id, content))
        if submission.command is not None:
            command = submission.command
            return web.json_response(
                {
                    "session_id": submission.session_id,
                    "command": command.name,
                    "ok": command.ok,
                    "text": command.text,
                }
            )
        if stream:
            return await self.stream_task(request, submission)
        waited = await self.until_closing(
            self.router.wait(submission.task_hash, wait, until_prompt=True)
        )
        state = waited or self.router.task(submission.task_hash)
        head = {"session_id": state.session_id, "task_hash": state.task_hash}
        prompt = state.prompt
        if state.finished:
            return web.json_response(
                {
                    **head,
                    "status": state.status,
                    "text": state.reply,
                    "error": state.error,
                    "events": [_event_json(e) for e in state.events],
                }
            )
        if prompt is not None:
            return web.json_response(
                {**head, "status": state.status, "pending": prompt.to_json()}, status=202
            )
        return web.json_response({**head, "status": state.status}, status=202)

    async def stream_task(self, request: web.Request, submission: Submission) -> web.StreamResponse:
        """The task's events as SSE until it ends; a client leaving does not cancel the task."""
        response = self.sse_response(
            {"X-Agenvoy-Session": submission.session_id, "X-Agenvoy-Task": submission.task_hash}
        )
        queue: asyncio.Queue[Event | None] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for event in self.router.stream(submission.task_hash):
                    queue.put_nowait(event)
            finally:
                queue.put_nowait(None)

        pumping = asyncio.create_task(pump())
        stream = _EventStream(request, response, self.closing, self.keepalive_seconds)
        frame_id = 0
        try:
            await stream.start()
            while (event := await stream.receive(queue.get)) is not None:
                frame_id += 1
                await stream.frame(event.kind, event_to_json(event), frame_id)
            await response.write_eof()
        except _StreamClosed:
            log.info(
                "task stream ended before the task; the task goes on",
                session=submission.session_id,
                task=submission.task_hash,
            )
        except ConnectionError:
            pass  # the client left between the last frame and the end of the body
        finally:
            pumping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pumping
        return response

    # -- prompts and tasks -------------------------------------------------------------------

    async def pending(self, request: web.Request) -> web.Response:
        session_id = _session_id(request)
        await self.require_session(session_id)
        prompts = self.router.pending(session_id)
        return web.json_response({"pending": [p.to_json() for p in prompts]})

    async def pending_everywhere(self, request: web.Request) -> web.Response:
        """Open prompts in every session that the asking sender may answer."""
        origin = self.origin(request)
        authority = self.runtime.authority
        prompts = [p for p in self.router.pending() if authority.may_act_for(origin, p.origin)]
        return web.json_response({"pending": [p.to_json() for p in prompts]})

    async def inputs(self, request: web.Request) -> web.Response:
        session_id = _session_id(request)
        await self.require_session(session_id)
        files = self.store.files(session_id)
        return web.json_response({"inputs": await asyncio.to_thread(files.read_cmd_history)})

    async def add_input(self, request: web.Request) -> web.Response:
        """Remember a line typed in a terminal window (`.cmd_history`: last 50, no repeats)."""
        session_id = _session_id(request)
        body = await _json_body(request)
        entry = _str_field(body, "entry")
        if not entry or not entry.strip():
            _bad("field 'entry' must be a non-empty string")
        if len(entry) > self.settings.max_message_chars:
            raise ApiError(
                413, "too_large", f"entry is longer than {self.settings.max_message_chars} chars"
            )
        await self.require_session(session_id)
        files = self.store.files(session_id)
        try:
            entries = await asyncio.to_thread(files.add_cmd_history, entry)
        except (FileNotFoundError, SessionDirectoryMissing):
            raise ApiError(404, "not_found", f"no such session: {session_id}") from None
        return web.json_response({"inputs": entries})

    async def answer(self, request: web.Request) -> web.Response:
        session_id = _session_id(request)
        task_hash = request.match_info["task_hash"]
        body = await _json_body(request)
        approve = body.get("approve")
        text = body.get("answer")
        if approve is not None and not isinstance(approve, bool):
            _bad("field 'approve' must be true or false")
        if text is not None and not isinstance(text, str):
            _bad("field 'answer' must be a string")
        if (approve is None) == (text is None):
            _bad("send either 'approve' (a confirmation) or 'answer' (a question)")
        origin = self.origin(request)
        result = await self.router.answer(session_id, task_hash, origin, approve=approve, text=text)
        reply: dict[str, Any] = {"answered": True, "by": result.by}
        if approve is not None:
            reply["approved"] = result.approved
        else:
            reply["answer"] = result.text
        return web.json_response(reply)

    async def task(self, request: web.Request) -> web.Response:
        """The task's view and events; `?wait=` long-polls until it ends or starts waiting.

        A task already waiting on a prompt is waited on until it ends, so a client polling
        after it saw the prompt does not spin.
        """
        wait = _seconds_query(request, "wait")
        try:
            state = self.task_of(request)
        except ApiError as missing:
            # Not in this process's memory (finished before a restart, or long ago): the
            # archive still knows how it ended.
            session_id = _session_id(request)
            task_hash = request.match_info["task_hash"]
            if missing.status != 404 or not _is_hash(task_hash):
                raise
            run = await self.store.finished_run(session_id, task_hash)
            if run is None:
                raise
            return web.json_response(
                {
                    "session_id": session_id,
                    "task_hash": task_hash,
                    "status": "done" if run["reply"] else "error",
                    "text": run["reply"],
                    "error": "" if run["reply"] else "the task ended without a reply",
                    "pending": None,
                    "events": [],
                }
            )
        if wait:
            until_prompt = state.prompt is None
            waited = await self.until_closing(
                self.router.wait(state.task_hash, wait, until_prompt=until_prompt)
            )
            state = waited or state
        return web.json_response(
            {**state.to_json(), "events": [_event_json(e) for e in state.events]}
        )

    async def cancel(self, request: web.Request) -> web.Response:
        state = self.task_of(request)
        origin = self.origin(request)
        canceled = await self.router.cancel_for(origin, state.session_id, state.task_hash)
        return web.json_response({"canceled": canceled})

    # -- archive -----------------------------------------------------------------------------

    async def search(self, request: web.Request) -> web.Response:
        query = request.query.get("q", "").strip()
        if not query:
            _bad("query parameter 'q' is required")
        raw_sid = request.query.get("session_id", "").strip()
        session_id = validate_session_id(raw_sid) if raw_sid else None
        limit = _int_query(request, "limit", SEARCH_DEFAULT, 1, MAX_PAGE)
        offset = _int_query(request, "offset", 0, 0, SEARCH_MAX_OFFSET)
        found = await search_messages(
            self.store.db, query, session_id=session_id, limit=limit, offset=offset
        )
        return web.json_response({"results": [asdict(m) for m in found]})

    async def usage(self, request: web.Request) -> web.Response:
        days = _int_query(request, "days", USAGE_DEFAULT_DAYS, 1, USAGE_MAX_DAYS)
        rows = await usage_summary(self.store.db, since_ms=now_ms() - days * DAY_MS)
        return web.json_response({"models": [asdict(r) for r in rows]})

    # -- operations --------------------------------------------------------------------------

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def prometheus(self, request: web.Request) -> web.Response:
        text = render_metrics(self.router, self.metrics)
        response = web.Response(text=text)
        # aiohttp refuses a content_type with parameters, so the header is set whole.
        response.headers["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
        return response

    async def openapi(self, request: web.Request) -> web.Response:
        return web.json_response(openapi_document())


API_KEY: Final = web.AppKey("agenvoy_http_api", HttpApi)


def build_app(runtime: Runtime, *, keepalive_seconds: float = KEEPALIVE_SECONDS) -> web.Application:
    """The aiohttp application for `runtime`, with the routes other adapters contributed.

    HTTP and terminal clients read their events from the gateway, so the router is told to
    push nothing to them."""
    contributed = runtime.http_routes
    open_paths = OPEN_PATHS | {route.path for route in contributed}
    api = HttpApi(runtime, keepalive_seconds=keepalive_seconds, open_paths=open_paths)
    for platform in CLIENT_PLATFORMS:
        runtime.router.register_pulled(platform)
    app = web.Application(
        middlewares=[api.measure, api.errors, api.authenticate],
        client_max_size=MAX_BODY_BYTES,
    )
    app[API_KEY] = api
    app.on_shutdown.append(api.on_shutdown)
    add = app.router
    add.add_post("/v1/session", api.create_session)
    add.add_post("/v1/send", api.send)
    add.add_get("/v1/sessions", api.list_sessions)
    add.add_get("/v1/session/{sid}", api.get_session)
    add.add_put("/v1/session/{sid}", api.update_session)
    add.add_delete("/v1/session/{sid}", api.delete_session)
    add.add_get("/v1/session/{sid}/history", api.history)
    # No HEAD: it would hold an endless stream open with nothing to send.
    add.add_get("/v1/session/{sid}/log", api.session_log, allow_head=False)
    add.add_get("/v1/session/{sid}/pending", api.pending)
    add.add_get("/v1/pending", api.pending_everywhere)
    add.add_get("/v1/session/{sid}/inputs", api.inputs)
    add.add_post("/v1/session/{sid}/inputs", api.add_input)
    add.add_post("/v1/session/{sid}/pending/{task_hash}", api.answer)
    add.add_get("/v1/session/{sid}/task/{task_hash}", api.task)
    add.add_post("/v1/session/{sid}/cancel/{task_hash}", api.cancel)
    add.add_get("/v1/search", api.search)
    add.add_get("/v1/usage", api.usage)
    add.add_get("/healthz", api.healthz)
    add.add_get("/metrics", api.prometheus)
    add.add_get("/openapi.json", api.openapi)
    for route in contributed:
        add.add_route(route.method, route.path, route.handler)
    return app


async def start_http(
    runtime: Runtime,
    host: str | None = None,
    port: int | None = None,
    *,
    keepalive_seconds: float = KEEPALIVE_SECONDS,
) -> web.AppRunner:
    """Serve the API on host:port (default: the settings'); the caller ends it with cleanup().

    Raises `InsecureBinding` for a non-loopback host while no API token is set.
    """
    settings = runtime.settings
    host = settings.http_host if host is None else host
    port = settings.http_port if port is None else port
    check_binding(host, settings)
    app = build_app(runtime, keepalive_seconds=keepalive_seconds)
    runner = web.AppRunner(app, max_line_size=MAX_REQUEST_LINE, shutdown_timeout=10.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


class HttpAdapter:
    """The HTTP API as one of the gateway's front-ends."""

    name = "http"

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._runner: web.AppRunner | None = None

    def routes(self) -> Sequence[HttpRoute]:
        return ()

    async def start(self) -> None:
        self._runner = await start_http(self.runtime)
        settings = self.runtime.settings
        for address in self._runner.addresses:
            log.info(
                "adapter started",
                adapter=self.name,
                url=f"http://{address[0]}:{address[1]}",
                auth=bool(api_token(settings)),
            )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def create(runtime: Runtime) -> HttpAdapter:
    return HttpAdapter(runtime)
