"""One operation of the API as the route table lists it: what it reads, what it answers, and
the handler that serves it.

A handler receives a `Call` and returns a reply model, whose status the route's `replies` give,
or a response it wrote itself (the event streams, the metrics text). It reads its body, query
string and identity headers through the `Call`, which refuses what the route does not declare:
the OpenAPI document is generated from the routes, so it cannot leave out what a handler uses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel

from adapters.http.context import Context
from adapters.http.inputs import read_body, read_headers, read_query
from adapters.http.models import Idempotency
from adapters.http.replies import Media, json_reply
from gateway.auth import Access
from gateway.events import Origin
from gateway.ids import validate_session_id
from gateway.ownership import Need

M = TypeVar("M", bound=BaseModel)
Result = BaseModel | web.StreamResponse
Handler = Callable[["Call"], Awaitable[Result]]
ReplyKind = type[BaseModel] | Media


class RouteMisuse(RuntimeError):
    """A handler read or answered something its route does not declare."""


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    replies: Mapping[int, ReplyKind | tuple[ReplyKind, ...]]
    errors: tuple[int, ...] = ()  # besides 401, 403 and 500, which any route but a public one has
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    caller: bool = False  # acts as the caller (whom their credential names)
    idempotent: bool = False  # reads an Idempotency-Key header (a caller route)
    public: bool = False  # answers without the API token
    allow_head: bool = True
    # Who may call it (gateway/auth.py). `shared_admin` is checked here before the handler
    # runs, unless `checked_by` names the part of the core that checks it with what only it
    # knows (whose task it is, which settings change).
    access: Access = Access.anyone
    checked_by: str = ""
    # What a route on one session needs of it (gateway/ownership.py), checked here for every
    # caller before the handler runs: a session the caller may not read answers 404.
    need: Need | None = None

    def reply_kinds(self) -> Iterator[tuple[int, ReplyKind]]:
        for status, kinds in self.replies.items():
            for kind in kinds if isinstance(kinds, tuple) else (kinds,):
                yield status, kind

    def serve(self, ctx: Context) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        """The aiohttp handler of this route in the app of `ctx`."""
        status_of = {kind: status for status, kind in self.reply_kinds() if isinstance(kind, type)}
        has_session = "{sid}" in self.path
        need = self.need
        if has_session and need is None:
            raise RouteMisuse(f"{self.method} {self.path}: a route on a session names its need")
        checked_here = self.access is Access.shared_admin and not self.checked_by
        if checked_here and not (has_session and self.caller):
            raise RouteMisuse(f"{self.method} {self.path}: a shared_admin route acts on a session")
        action = self.summary.split(" ", 1)[0].lower()

        async def handle(request: web.Request) -> web.StreamResponse:
            if has_session:
                # Before anything else: the id becomes a directory name further on.
                sid = validate_session_id(request.match_info["sid"])
                assert need is not None
                await ctx.access.require(ctx.caller(request), sid, need)
                if checked_here:
                    who = ctx.origin(request)
                    ctx.runtime.authority.require_shared_admin(who, sid, action)
            result = await self.handler(Call(ctx, request, self))
            if isinstance(result, web.StreamResponse):
                return result
            status = status_of.get(type(result))
            if status is None:
                raise RouteMisuse(f"{self.method} {self.path} answered {type(result).__name__}")
            return json_reply(result, status)

        return handle


@dataclass(frozen=True, slots=True)
class Call:
    """One request as its handler sees it."""

    ctx: Context
    request: web.Request
    route: Route

    @property
    def session_id(self) -> str:
        """The path's session id, already checked."""
        return self.request.match_info["sid"]

    @property
    def task_hash(self) -> str:
        return self.request.match_info["task_hash"]

    async def body(self, model: type[M]) -> M:
        self._declared("body", self.route.body, model)
        return await read_body(self.request, model, self.ctx.settings.http_body_timeout_seconds)

    def query(self, model: type[M]) -> M:
        self._declared("query", self.route.query, model)
        return read_query(self.request, model)

    def origin(self) -> Origin:
        if not self.route.caller:
            raise RouteMisuse(f"{self.route.method} {self.route.path} reads undeclared headers")
        return self.ctx.origin(self.request)

    def idempotency_key(self) -> str | None:
        if not (self.route.idempotent and self.route.caller):
            raise RouteMisuse(f"{self.route.method} {self.route.path} reads an undeclared key")
        return read_headers(self.request, Idempotency).key

    def _declared(self, what: str, declared: type[BaseModel] | None, model: type[M]) -> None:
        if declared is not model:
            route = f"{self.route.method} {self.route.path}"
            raise RouteMisuse(f"{route} reads its {what} as {model.__name__}, not as declared")
