"""The HTTP server under the app, as the API needs it: a request the HTTP parser cannot read
(a 16 KiB path, a header over the limit, bytes that are not HTTP) gets the API's JSON error,
logged in one line, rather than aiohttp's plain text and a traceback; idle connections, and
those that send their headers too slowly, are closed.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from adapters.http.errors import error_reply
from gateway.logs import get_logger

log = get_logger(__name__)

# Room for a path carrying a 10 KB session id, so even that reaches the app.
MAX_REQUEST_LINE: Final = 16 * 1024
SHUTDOWN_TIMEOUT: Final = 10.0


class _JsonErrorHandler(RequestHandler):
    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500 or not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        if request.writer.output_size > 0:
            raise ConnectionError("the answer had begun; no error can follow it")
        if isinstance(exc, LineTooLong):
            text = "a line of the request (its path or a header) is too long"
        else:
            text = f"malformed HTTP request: {exc.message}"
        log.info("unreadable request", remote=request.remote, status=status, reason=text)
        response = error_reply(status, "bad_request", text)
        response.force_close()
        return response


class _JsonErrorServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _JsonErrorHandler(self, loop=self._loop, **self._kwargs)


class ApiRunner(web.AppRunner):
    """An AppRunner whose connections answer parse errors the API's way."""

    def __init__(self, app: web.Application, *, idle_timeout: float, **kwargs: Any) -> None:
        super().__init__(
            app,
            max_line_size=MAX_REQUEST_LINE,
            shutdown_timeout=SHUTDOWN_TIMEOUT,
            # Runs from the moment a connection opens until a whole request has arrived, and
            # again between requests: it closes idle and slow-header connections alike.
            keepalive_timeout=idle_timeout,
            **kwargs,
        )

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # aiohttp has no setting for the protocol class; the subclass only adds a method.
        server.__class__ = _JsonErrorServer
        return server
