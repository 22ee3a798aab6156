"""``FakeTelegram``: the server that routes Bot API requests to the methods and records them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ..base import JSON, BodyPredicate, Upload
from .api import (
    DEFAULT_DESCRIPTIONS,
    INT_RE,
    MIGRATED,
    ApiError,
    BotApiCall,
    decode_params,
    error_body,
    error_response,
)
from .members import TelegramMembers

DEFAULT_TOKEN = "123456:TEST-TOKEN"
MAX_UPLOAD_BYTES = 50 * 1024 * 1024

Handler = Callable[[JSON], Awaitable[Any]]


class FakeTelegram(TelegramMembers):
    """A fake Telegram Bot API on ``127.0.0.1``; see the package docstring."""

    # The client long-polls all the time; listing those calls would bury the rest.
    _unlisted_routes = frozenset({"getUpdates"})

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        bot_username: str = "agenvoy_test_bot",
        bot_first_name: str = "Agenvoy Test Bot",
    ) -> None:
        super().__init__()
        self.token = token
        bot_id = int(token.split(":", 1)[0]) if INT_RE.fullmatch(token.split(":", 1)[0]) else 1
        self.bot_user = {
            "id": bot_id,
            "is_bot": True,
            "first_name": bot_first_name,
            "username": bot_username,
        }
        self.uploads: list[Upload] = []
        # Test side: awaited once a call succeeded, before it is answered (the sender waits).
        self.before_answer: Callable[[BotApiCall], Awaitable[None]] | None = None
        self._methods: dict[str, tuple[str, Handler]] = {
            name.lower(): (name, handler)
            for name, handler in {
                "getMe": self._get_me,
                "logOut": self._true,
                "close": self._true,
                "getUpdates": self._get_updates,
                "setWebhook": self._set_webhook,
                "deleteWebhook": self._delete_webhook,
                "getWebhookInfo": self._get_webhook_info,
                "sendMessage": self._send_message,
                "editMessageText": self._edit_message_text,
                "editMessageReplyMarkup": self._edit_message_reply_markup,
                "deleteMessage": self._delete_message,
                "answerCallbackQuery": self._answer_callback_query,
                "sendChatAction": self._send_chat_action,
                "setMyCommands": self._set_my_commands,
                "getMyCommands": self._get_my_commands,
                "deleteMyCommands": self._delete_my_commands,
                "getFile": self._get_file,
                "sendDocument": self._send_document,
                "sendPhoto": self._send_photo,
                "getChat": self._get_chat,
                "getChatAdministrators": self._get_chat_administrators,
                "getChatMember": self._get_chat_member,
            }.items()
        }

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_UPLOAD_BYTES)
        app.router.add_route("*", "/bot{token}/{method}", self._handle_api)
        app.router.add_get("/file/bot{token}/{file_path:.+}", self._handle_download)
        return app

    # -- test side -----------------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        status: int,
        description: str = "",
        *,
        times: int = 1,
        when: BodyPredicate | None = None,
        **parameters: Any,
    ) -> None:
        """Make the next ``times`` calls of ``method`` answer this error; failures queue up.

        ``parameters`` become the error's ``parameters`` (``retry_after``,
        ``migrate_to_chat_id``). Without a description a standard one is used. ``when``
        limits the failure to calls whose parameters it accepts.
        """
        if not description:
            if "migrate_to_chat_id" in parameters:
                description = MIGRATED
            elif status == 429 and "retry_after" in parameters:
                description = f"Too Many Requests: retry after {parameters['retry_after']}"
            else:
                description = DEFAULT_DESCRIPTIONS.get(status, "Error")
        error = ApiError(status, description, parameters)
        self._queue_failure(method, error, times=times, when=when)

    # -- internals -----------------------------------------------------------------------------

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return error_response(401, "Unauthorized")
        raw_method = request.match_info["method"]
        try:
            params = await self._read_params(request)
        except ApiError as exc:
            return error_response(exc.status, exc.description, exc.parameters)
        entry = self._methods.get(raw_method.lower())
        method, handler = entry if entry else (raw_method, None)
        return await self._answer(
            request, BotApiCall(method, params), lambda record: self._respond(record, handler)
        )

    async def _respond(self, record: BotApiCall, handler: Handler | None) -> web.Response:
        try:
            if handler is None:
                raise ApiError(404, "Not Found")
            self._fail_if_queued(record)
            status, body = 200, {"ok": True, "result": await handler(record.data)}
            if self.before_answer is not None:
                await self.before_answer(record)
        except ApiError as exc:
            status, body = exc.status, error_body(exc.status, exc.description, exc.parameters)
        record.response = body
        return web.json_response(body, status=status)

    def _route_matches(self, route: str, record: BotApiCall) -> bool:
        # Method names are case-insensitive in the Bot API.
        return route.lower() == record.route.lower()

    async def _read_params(self, request: web.Request) -> JSON:
        raw: dict[str, Any] = dict(request.query)
        if request.method == "POST":
            if request.content_type == "application/json":
                body = await request.json()
                if not isinstance(body, dict):
                    raise ApiError(400, "Bad Request: parameters must be a JSON object")
                raw.update(body)
            else:
                raw.update(await request.post())
        params = decode_params(raw)
        for value in params.values():
            if isinstance(value, Upload):
                self.uploads.append(value)
        return params
