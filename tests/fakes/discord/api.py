"""What the fake's REST answers are made of: error bodies, JSON responses with the exact
content type discord.py expects, and the record of one REST call."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ..base import JSON, CallRecord

DEFAULT_ERRORS: dict[int, tuple[str, int]] = {
    400: ("400: Bad Request", 0),
    401: ("401: Unauthorized", 0),
    403: ("Missing Permissions", 50013),
    404: ("404: Not Found", 0),
    405: ("405: Method Not Allowed", 0),
    500: ("500: Internal Server Error", 0),
    502: ("502: Bad Gateway", 0),
    503: ("503: Service Unavailable", 0),
}


class ApiError(Exception):
    """An error answer of the REST API: HTTP status and a JSON body with message and code."""

    def __init__(
        self,
        status: int,
        message: str,
        code: int = 0,
        *,
        errors: JSON | None = None,
        extra: JSON | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body: JSON = {"message": message, "code": code}
        if errors:
            self.body["errors"] = errors
        if extra:
            self.body.update(extra)
        self.headers = headers or {}

    @classmethod
    def from_body(cls, status: int, body: JSON, headers: dict[str, str] | None = None) -> ApiError:
        error = cls(status, str(body.get("message", "")), int(body.get("code", 0) or 0))
        error.body = copy.deepcopy(body)
        error.headers = headers or {}
        return error


def unknown(what: str, code: int) -> ApiError:
    return ApiError(404, f"Unknown {what}", code)


def invalid_form(field_name: str, error_code: str, message: str) -> ApiError:
    return ApiError(
        400,
        "Invalid Form Body",
        50035,
        errors={field_name: {"_errors": [{"code": error_code, "message": message}]}},
    )


def json_response(status: int, data: Any, headers: dict[str, str] | None = None) -> web.Response:
    # discord.py compares the Content-Type with "==": no charset suffix allowed.
    all_headers = {"Content-Type": "application/json"}
    all_headers.update(headers or {})
    return web.Response(status=status, body=json.dumps(data).encode(), headers=all_headers)


@dataclass
class RestCall(CallRecord):
    """One REST request; its route is ``"METHOD /template"`` of the endpoint it hit.

    ``body`` is the JSON body (``payload_json`` for multipart), None without a body; a JSON
    array body (``PUT .../commands``) is stored as ``{"_list": [...]}``.
    """

    method: str = field(kw_only=True)
    path: str = field(kw_only=True)
    query: dict[str, str] = field(kw_only=True)

    def summary(self) -> str:
        return f"{self.method} {self.path}->{self.outcome}"
