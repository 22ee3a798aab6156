"""The aiohttp application: middlewares, the route table, start-up and the adapter."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Final

from aiohttp import web

from adapters.http.binding import BearerToken, api_token, check_binding
from adapters.http.context import Context
from adapters.http.errors import errors
from adapters.http.models import CLIENT_PLATFORMS
from adapters.http.openapi import openapi_document
from adapters.http.replies import OpenApiDocument
from adapters.http.routes import ROUTES
from adapters.http.sse import KEEPALIVE_SECONDS
from gateway.adapter import HttpRoute
from gateway.logs import get_logger
from gateway.runtime import Runtime

log = get_logger(__name__)

MAX_BODY_BYTES: Final = 1024 * 1024
# Room for a path carrying a 10 KB session id, so even that gets a JSON error from the app
# rather than the HTTP parser's plain-text one.
MAX_REQUEST_LINE: Final = 16 * 1024
CONTEXT_KEY: Final = web.AppKey("agenvoy_http_context", Context)


@functools.cache
def _document() -> OpenApiDocument:
    return OpenApiDocument(openapi_document(ROUTES))


def build_app(runtime: Runtime, *, keepalive_seconds: float = KEEPALIVE_SECONDS) -> web.Application:
    """The aiohttp application for `runtime`, with the routes other adapters contributed.

    HTTP and terminal clients read their events from the gateway, so the router is told to
    push nothing to them."""
    contributed = runtime.http_routes
    open_paths = {route.path for route in ROUTES if route.public}
    open_paths |= {route.path for route in contributed}
    ctx = Context(runtime, keepalive_seconds=keepalive_seconds, document=_document)
    for platform in CLIENT_PLATFORMS:
        runtime.router.register_pulled(platform)
    token = BearerToken(runtime.settings, frozenset(open_paths))
    app = web.Application(
        middlewares=[ctx.metrics.measure, errors, token.check],
        client_max_size=MAX_BODY_BYTES,
    )
    app[CONTEXT_KEY] = ctx
    app.on_shutdown.append(ctx.on_shutdown)
    for route in ROUTES:
        handler = route.serve(ctx)
        if route.method == "GET":
            app.router.add_get(route.path, handler, allow_head=route.allow_head)
        else:
            app.router.add_route(route.method, route.path, handler)
    for extra in contributed:
        app.router.add_route(extra.method, extra.path, extra.handler)
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
