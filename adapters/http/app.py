"""The aiohttp application: middlewares, the route table, start-up and the adapter."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Sequence
from typing import Final

from aiohttp import web

from adapters.http.binding import api_token, check_binding
from adapters.http.context import Context
from adapters.http.errors import errors
from adapters.http.guard import Guard
from adapters.http.identity import Authenticate
from adapters.http.models import CLIENT_PLATFORMS
from adapters.http.openapi import openapi_document
from adapters.http.replies import OpenApiDocument
from adapters.http.routes import ROUTES
from adapters.http.server import ApiRunner
from adapters.http.sse import KEEPALIVE_SECONDS
from adapters.mcp.endpoint import MCP_PATH, McpEndpoint
from adapters.web.app import CONSOLE_PREFIX, ENTRY_PATHS, add_entry_redirects, build_console
from gateway.access import SessionAccess
from gateway.adapter import HttpRoute
from gateway.client_settings import PORT_FILE
from gateway.credentials import WATCH_SECONDS, Credentials
from gateway.logs import get_logger
from gateway.runtime import Runtime
from gateway.store.fslock import atomic_write
from gateway.store.tokens import TokenStore

log = get_logger(__name__)
CREDENTIALS: Final = web.AppKey("credentials", Credentials)

MAX_BODY_BYTES: Final = 1024 * 1024
CONTEXT_KEY: Final = web.AppKey("agenvoy_http_context", Context)


@functools.cache
def _document(token_required: bool, tools: frozenset[str] | None) -> OpenApiDocument:
    document = openapi_document(ROUTES, token_required=token_required)
    if tools is not None:
        # The agent names its tools: the document can say which ones a session may allow.
        update = document["components"]["schemas"]["UpdateSessionRequest"]["properties"]
        update["allowed_tools"]["anyOf"][0]["items"]["enum"] = sorted(tools)
    return OpenApiDocument(document)


def build_app(
    runtime: Runtime,
    credentials: Credentials,
    *,
    host: str,
    keepalive_seconds: float = KEEPALIVE_SECONDS,
) -> web.Application:
    """The aiohttp application for `runtime` bound to `host`, with the routes other adapters
    contributed.

    HTTP and terminal clients read their events from the gateway, so the router is told to
    push nothing to them."""
    contributed = runtime.http_routes
    contributed_paths = {route.path for route in contributed}
    open_paths = {route.path for route in ROUTES if route.public} | contributed_paths
    open_paths |= set(ENTRY_PATHS)  # redirects to the console, which signs its viewers in
    ctx = Context(
        runtime,
        SessionAccess(
            runtime.store.ownership,
            runtime.authority,
            open_gateway=credentials.admits_anonymous,
        ),
        keepalive_seconds=keepalive_seconds,
        # Whether a token is required changes as tokens are issued and revoked.
        document=lambda: _document(credentials.required, runtime.session_settings.known_tools),
        http_identities=credentials.http_identities,
    )
    for platform in CLIENT_PLATFORMS:
        runtime.router.register_pulled(platform)
    guard = Guard(runtime.settings, host, contributed_paths, forms_under=CONSOLE_PREFIX)
    # The console signs its viewers in itself, with a cookie (adapters/web/auth.py).
    authenticate = Authenticate(credentials, frozenset(open_paths), open_prefix=CONSOLE_PREFIX)
    app = web.Application(
        middlewares=[ctx.metrics.measure, errors, guard.check, authenticate.check],
        client_max_size=MAX_BODY_BYTES,
    )
    app[CONTEXT_KEY] = ctx
    app.on_shutdown.append(ctx.on_shutdown)
    app.on_response_prepare.append(guard.cors_headers)
    for route in ROUTES:
        handler = route.serve(ctx)
        if route.method == "GET":
            app.router.add_get(route.path, handler, allow_head=route.allow_head)
        else:
            app.router.add_route(route.method, route.path, handler)
    for extra in contributed:
        app.router.add_route(extra.method, extra.path, extra.handler)
    mcp = McpEndpoint(ctx)
    # Stateless: no event stream to open (GET) and no session to end (DELETE).
    app.router.add_post(MCP_PATH, mcp.handle)
    app.on_cleanup.append(mcp.close)
    add_entry_redirects(app)
    app[CREDENTIALS] = credentials
    app.add_subapp(CONSOLE_PREFIX, build_console(ctx, credentials))
    app.cleanup_ctx.append(functools.partial(_watch_credentials, runtime, credentials))
    return app


async def _watch_credentials(
    runtime: Runtime, credentials: Credentials, app: web.Application
) -> AsyncIterator[None]:
    """While the app serves: the schedules of a creator whose token was removed while no
    gateway ran are suspended now, and those of one removed later as soon as it is seen."""
    await runtime.schedules.suspend_orphans(credentials.http_identities())
    watching = asyncio.create_task(
        credentials.watch(runtime.schedules.suspend_creators, every=WATCH_SECONDS)
    )
    try:
        yield
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching


async def start_http(
    runtime: Runtime,
    host: str | None = None,
    port: int | None = None,
    *,
    keepalive_seconds: float = KEEPALIVE_SECONDS,
) -> web.AppRunner:
    """Serve the API on host:port (default: the settings'); the caller ends it with cleanup().

    Raises `InsecureBinding` for a non-loopback host while no API token is set or issued.
    Writes the local credential into the home first (see gateway/credentials.py).
    """
    settings = runtime.settings
    host = settings.http_host if host is None else host
    port = settings.http_port if port is None else port
    tokens = TokenStore(runtime.store.db)
    await tokens.import_file(settings.store_dir, at=runtime.clock.now_ms())
    credentials = await Credentials.load(
        shared=api_token(settings),
        store_dir=settings.store_dir,
        source=tokens,
        clock=runtime.clock,
    )
    check_binding(host, credentials)
    app = build_app(runtime, credentials, host=host, keepalive_seconds=keepalive_seconds)
    runner = ApiRunner(app, idle_timeout=settings.http_idle_timeout_seconds)
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
        port = self._runner.addresses[0][1]
        # The clients of this home find the API there, also on a port the system chose.
        port_file = settings.store_dir / PORT_FILE
        await asyncio.to_thread(atomic_write, port_file, f"{port}\n".encode(), durable=False)
        credentials = self._runner.app[CREDENTIALS]
        for address in self._runner.addresses:
            log.info(
                "adapter started",
                adapter=self.name,
                url=f"http://{address[0]}:{address[1]}",
                # A token is asked for once one is set or issued (per-user tokens too).
                auth=credentials.required,
            )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            port_file = self.runtime.settings.store_dir / PORT_FILE
            await asyncio.to_thread(port_file.unlink, missing_ok=True)


def create(runtime: Runtime) -> HttpAdapter:
    return HttpAdapter(runtime)
