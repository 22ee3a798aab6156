"""Every error answer is `{"error": {"code": ..., "message": ...}}` with a matching status.

Handlers raise `ApiError` (or let the core's own exceptions through); the middleware here turns
those, and aiohttp's own HTTP errors, into that shape, and anything unexpected into a logged 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NoReturn

from aiohttp import web
from aiohttp.typedefs import Handler

from adapters.http.paging import BadCursor
from adapters.http.replies import Error, ErrorDetail, json_reply
from gateway.auth import NotAllowed
from gateway.engine import (
    AlreadyAnswered,
    MessageTooLong,
    PromptError,
    PromptNotFound,
    TaskNotFound,
    TooManyTasks,
)
from gateway.ids import InvalidHash, InvalidSessionId
from gateway.logs import get_logger
from gateway.store.errors import DatabaseUnavailable
from gateway.store.sessions import UnknownSession
from gateway.store.space import is_storage_full
from gateway.text import UnstorableText

log = get_logger(__name__)

# The codes of aiohttp's own answers (no route, wrong method, body too large).
_STATUS_CODES: Final = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    408: "timeout",
    413: "too_large",
    414: "too_long",
    415: "unsupported_media_type",
    431: "too_large",
}
_PROMPT_STATUS: Final[dict[type[PromptError], int]] = {
    PromptNotFound: 404,
    AlreadyAnswered: 409,
}


UNAVAILABLE: Final = "the archive is unreachable for now; try again shortly"
STORAGE_FULL: Final = (
    "the gateway's storage is full: nothing was stored; try again once space is freed"
)


class ApiError(Exception):
    """An error answer: status, machine-readable code and a message for people."""

    def __init__(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = dict(headers or {})


def bad(message: str) -> NoReturn:
    raise ApiError(400, "bad_request", message)


def no_session(session_id: str) -> ApiError:
    return ApiError(404, "not_found", f"no such session: {session_id}")


def error_reply(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> web.Response:
    # A message may quote what the caller sent; a lone surrogate in it could not be encoded.
    shown = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return json_reply(Error(error=ErrorDetail(code=code, message=shown)), status, headers)


def _from_aiohttp(exc: web.HTTPException) -> web.Response:
    code = _STATUS_CODES.get(exc.status, f"http_{exc.status}")
    headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
    # aiohttp's own texts are "404: Not Found"; the reason says the same, plainer.
    text = exc.text or ""
    message = text if text and not text.startswith(f"{exc.status}:") else exc.reason
    return error_reply(exc.status, code, message, headers)


def known_error(exc: Exception) -> ApiError | None:
    """The answer to an error the caller caused, as the core or a handler raised it; None for
    anything unexpected. The MCP tools (adapters/mcp/) answer with the same codes."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, InvalidSessionId):
        return ApiError(400, "bad_session_id", str(exc))
    if isinstance(exc, InvalidHash):
        return ApiError(400, "bad_request", str(exc))
    if isinstance(exc, MessageTooLong):
        return ApiError(413, "too_long", str(exc))
    if isinstance(exc, TooManyTasks):
        wait = exc.retry_after
        return ApiError(429, exc.code, str(exc), {"Retry-After": str(wait)} if wait else None)
    if isinstance(exc, BadCursor):
        return ApiError(400, "bad_request", f"query parameter 'cursor': {exc}")
    if isinstance(exc, UnstorableText):
        return ApiError(400, "bad_text", str(exc))
    if isinstance(exc, TaskNotFound | UnknownSession):
        return ApiError(404, "not_found", str(exc.args[0]) if exc.args else "not found")
    if isinstance(exc, PromptError):
        return ApiError(_PROMPT_STATUS.get(type(exc), 400), exc.code, str(exc))
    if isinstance(exc, NotAllowed):
        return ApiError(403, exc.code, str(exc))
    if is_storage_full(exc):
        # Nothing of the request was stored (the write that failed was its transaction).
        log.warning("storage full", error=str(exc))
        return ApiError(507, "storage_full", STORAGE_FULL)
    if isinstance(exc, DatabaseUnavailable):
        # The cause (which may name the server) goes to the log, not to the caller.
        log.warning("database unavailable", error=str(exc))
        return ApiError(503, "unavailable", UNAVAILABLE, {"Retry-After": "5"})
    return None


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _from_aiohttp(exc)
    except Exception as exc:
        known = known_error(exc)
        if known is not None:
            return error_reply(known.status, known.code, known.message, known.headers)
        log.exception("http request failed", method=request.method, path=request.path)
        return error_reply(500, "internal", "internal error")
