"""Webhook mode: Telegram posts each update to the gateway's own HTTP server.

An update is handled (stored) before it is answered: 200 only once that is done, 500 when it
failed, so Telegram delivers it again (its `source_key` makes a repeat store nothing). A body
that is not an update is a client error, 400, whatever it holds: it is never handed on, and
Telegram, which does not send such bodies, is not asked for it again.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from telegram import Bot, Update

from gateway.logs import get_logger

log = get_logger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"


class Webhook:
    def __init__(
        self, secret: str, bot: Callable[[], Bot], handle: Callable[[Update], Awaitable[bool]]
    ) -> None:
        self.secret = secret.encode()
        self._bot = bot
        self._handle = handle

    async def on_post(self, request: web.Request) -> web.Response:
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not self.secret or not hmac.compare_digest(given, self.secret):
            return _error(403, "forbidden", "wrong webhook secret")
        update = await self._read(request)
        if update is None:
            return _error(400, "bad_json", "not a Telegram update")
        try:
            handled = await self._handle(update)
        except Exception:  # not started yet, shutting down: Telegram tries again later
            log.exception("telegram webhook update failed", update_id=update.update_id)
            handled = False
        if not handled:
            return _error(500, "update_failed", "the update could not be handled; send it again")
        return web.Response(status=200)

    async def _read(self, request: web.Request) -> Update | None:
        try:
            data = json.loads(await request.read())
        except (ValueError, RecursionError):  # not JSON, not UTF-8, nested too deep
            return None
        update_id = data.get("update_id") if isinstance(data, dict) else None
        if not isinstance(update_id, int) or isinstance(update_id, bool):
            return None
        try:
            return Update.de_json(data, self._bot())
        except Exception as exc:
            # Whatever a malformed field makes the parser raise, the body is not an update.
            log.info("telegram webhook body refused", error=repr(exc))
            return None


def _error(status: int, code: str, message: str) -> web.Response:
    body: dict[str, Any] = {"error": {"code": code, "message": message}}
    return web.json_response(body, status=status)
