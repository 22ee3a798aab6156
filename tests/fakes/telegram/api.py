"""What a Bot API request and answer are made of: form decoding, the ``{"ok": false}`` error
body, and the record of one call."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from ..base import JSON, CallRecord, Upload

# Form fields whose value is JSON-encoded by the client.
_JSON_FIELDS = frozenset(
    {
        "allowed_updates",
        "caption_entities",
        "commands",
        "entities",
        "link_preview_options",
        "media",
        "message_ids",
        "permissions",
        "reaction",
        "reply_markup",
        "reply_parameters",
        "scope",
    }
)

_INT_FIELDS = frozenset(
    {
        "cache_time",
        "duration",
        "height",
        "limit",
        "max_connections",
        "message_id",
        "message_thread_id",
        "offset",
        "reply_to_message_id",
        "timeout",
        "user_id",
        "width",
    }
)

_CHAT_ID_FIELDS = frozenset({"chat_id", "from_chat_id"})

_BOOL_FIELDS = frozenset(
    {
        "allow_paid_broadcast",
        "allow_sending_without_reply",
        "disable_content_type_detection",
        "disable_notification",
        "disable_web_page_preview",
        "drop_pending_updates",
        "has_spoiler",
        "protect_content",
        "show_alert",
        "show_caption_above_media",
    }
)

INT_RE = re.compile(r"-?\d+")


DEFAULT_DESCRIPTIONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
}

MIGRATED = "Bad Request: group chat was upgraded to a supergroup chat"


class ApiError(Exception):
    """An error answer of the Bot API: HTTP status, description and optional parameters."""

    def __init__(self, status: int, description: str, parameters: JSON | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.parameters = parameters or {}


class BotApiCall(CallRecord):
    """One Bot API request; its route is the method name as the fake spells it."""

    @property
    def method(self) -> str:
        return self.route

    @property
    def description(self) -> str:
        """The error's description, ``""`` for a successful call."""
        return str(self.response.get("description", "")) if self.response else ""


def decode_params(raw: dict[str, Any]) -> JSON:
    params: JSON = {}
    for name, value in raw.items():
        if isinstance(value, web.FileField):
            params[name] = Upload(name, value.filename, value.content_type, value.file.read())
        elif not isinstance(value, str):
            params[name] = value
        elif name in _JSON_FIELDS:
            try:
                params[name] = json.loads(value)
            except ValueError:
                raise ApiError(400, f"Bad Request: can't parse {name} JSON object") from None
        elif name in _CHAT_ID_FIELDS:
            params[name] = int(value) if INT_RE.fullmatch(value) else value
        elif name in _INT_FIELDS:
            if not INT_RE.fullmatch(value.strip()):
                raise ApiError(400, f"Bad Request: invalid {name} specified")
            params[name] = int(value)
        elif name in _BOOL_FIELDS:
            params[name] = value.strip().lower() in ("true", "1")
        else:
            params[name] = value
    return params


def error_body(status: int, description: str, parameters: JSON | None = None) -> JSON:
    body: JSON = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return body


def error_response(status: int, description: str, parameters: JSON | None = None) -> web.Response:
    return web.json_response(error_body(status, description, parameters), status=status)
