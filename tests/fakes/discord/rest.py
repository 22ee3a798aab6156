"""The fake's REST API: routing, request bodies, error injection and the channel endpoints.

Routes are matched against ``"METHOD /template"`` keys. Bot routes need ``Authorization: Bot
<token>``; interaction and webhook routes carry their token in the URL instead. A known path
with another method answers 405 and an unknown path 404 JSON, so a missing endpoint fails
loudly.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ..base import JSON, BodyPredicate, Upload
from .api import DEFAULT_ERRORS, ApiError, RestCall, json_response, unknown
from .gateway import portal_flags
from .messages import DiscordMessages
from .payloads import CHANNEL_DM, application, thread

NONCE_WINDOW_SECONDS = 300.0

_PLACEHOLDER_RE = re.compile(r"\{[^}/]*\}")

Handler = Callable[..., Awaitable[Any]]
# (HTTP method, path template, handler, whether the bot token is required)
RouteRow = tuple[str, str, Handler, bool]


@dataclass
class _Route:
    method: str
    template: str
    regex: re.Pattern[str]
    handler: Handler
    bot_auth: bool


def normalise_key(key: str) -> str:
    method, _, path = key.strip().partition(" ")
    path = path.strip()
    if path.startswith("/api/v10"):
        path = path[len("/api/v10") :]
    return f"{method.upper()} {_PLACEHOLDER_RE.sub('{}', path).rstrip('/')}"


def compile_template(template: str) -> re.Pattern[str]:
    pattern = ""
    for part in re.split(r"(\{[^}]+\})", template):
        if part.startswith("{"):
            pattern += r"([^/]+)"
        else:
            pattern += re.escape(part)
    return re.compile(f"^{pattern}/?$")


class DiscordRest(DiscordMessages):
    """Answers REST calls through the shared recording, with queued failures first."""

    def __init__(self) -> None:
        super().__init__()
        self.uploads: list[Upload] = []
        self.reactions: list[JSON] = []
        self._nonces: dict[tuple[str, str], tuple[str, float]] = {}
        self._routes = [
            _Route(method, template, compile_template(template), handler, bot_auth)
            for method, template, handler, bot_auth in self._route_table()
        ]

    # -- test side -----------------------------------------------------------------------------

    @property
    def calls(self) -> list[tuple[str, str, str, JSON | None]]:
        """``(method, route, path, body)`` of every recorded call, in order."""
        return [(r.method, r.route, r.path, r.body) for r in self.call_log]

    def fail_next(
        self,
        route_key: str,
        status: int,
        body: JSON | None = None,
        *,
        retry_after: float = 1.0,
        is_global: bool = False,
        headers: dict[str, str] | None = None,
        times: int = 1,
        when: BodyPredicate | None = None,
    ) -> None:
        """Make the next ``times`` calls matching ``route_key`` answer this error.

        ``route_key`` is ``"METHOD /template"`` (placeholder names do not matter, e.g.
        ``"POST /channels/{id}/messages"``) or a concrete ``"METHOD /channels/10/messages"``,
        as for :meth:`wait_for_call`. Failures queue up; ``when`` limits this one to calls
        whose body it accepts. A 429 gets ``{"retry_after", "global"}`` and a ``Via`` header
        (without ``Via`` discord.py treats it as a Cloudflare ban). 403 defaults to 50013
        Missing Permissions. ``body`` replaces the default JSON body.
        """
        extra_headers = dict(headers or {})
        if body is None:
            if status == 429:
                body = {
                    "message": "You are being rate limited.",
                    "retry_after": retry_after,
                    "global": is_global,
                    "code": 0,
                }
            else:
                message, code = DEFAULT_ERRORS.get(status, (f"{status}: Error", 0))
                body = {"message": message, "code": code}
        if status == 429:
            extra_headers.setdefault("Via", "1.1 google")
            extra_headers.setdefault("Retry-After", str(max(1, round(retry_after))))
            extra_headers.setdefault("X-RateLimit-Scope", "shared" if not is_global else "global")
            if is_global:
                extra_headers.setdefault("X-RateLimit-Global", "true")
        error = ApiError.from_body(status, body, extra_headers)
        self._queue_failure(route_key, error, times=times, when=when)

    # -- internals -----------------------------------------------------------------------------

    def _route_table(self) -> list[RouteRow]:
        """The endpoints; where two templates match a path, the first listed wins."""
        return [
            ("GET", "/users/@me", self._get_me, True),
            ("GET", "/users/{uid}", self._get_user, True),
            ("GET", "/guilds/{gid}/members/{uid}", self._get_member, True),
            ("POST", "/users/@me/channels", self._create_dm, True),
            ("GET", "/oauth2/applications/@me", self._get_application, True),
            ("GET", "/applications/@me", self._get_application, True),
            ("GET", "/gateway", self._get_gateway, False),
            ("GET", "/gateway/bot", self._get_gateway_bot, True),
            ("GET", "/channels/{id}", self._get_channel, True),
            ("POST", "/channels/{id}/messages", self._create_message, True),
            ("GET", "/channels/{id}/messages", self._get_messages, True),
            ("GET", "/channels/{cid}/messages/{mid}", self._get_message, True),
            ("PATCH", "/channels/{cid}/messages/{mid}", self._edit_message, True),
            ("DELETE", "/channels/{cid}/messages/{mid}", self._delete_message, True),
            ("POST", "/channels/{id}/typing", self._typing, True),
            (
                "PUT",
                "/channels/{cid}/messages/{mid}/reactions/{emoji}/@me",
                self._add_reaction,
                True,
            ),
            (
                "DELETE",
                "/channels/{cid}/messages/{mid}/reactions/{emoji}/@me",
                self._remove_reaction,
                True,
            ),
            ("POST", "/channels/{cid}/messages/{mid}/threads", self._thread_from_message, True),
            ("POST", "/channels/{id}/threads", self._thread_without_message, True),
        ]

    def _route_matches(self, route: str, record: RestCall) -> bool:
        # A route names the endpoint by template or by concrete path; placeholder names and
        # the API prefix do not matter.
        return normalise_key(route) in (
            normalise_key(record.route),
            normalise_key(f"{record.method} {record.path}"),
        )

    def _match_route(self, method: str, path: str) -> tuple[_Route, tuple[str, ...]] | None:
        path_matched = False
        for route in self._routes:
            match = route.regex.match(path)
            if match is None:
                continue
            path_matched = True
            if route.method == method:
                return route, match.groups()
        if path_matched:
            raise ApiError(405, "405: Method Not Allowed", 0)
        return None

    async def _handle_not_found(self, request: web.Request) -> web.Response:
        return json_response(404, {"message": "404: Not Found", "code": 0})

    async def _handle_attachment(self, request: web.Request) -> web.Response:
        data = self._attachments.get(request.match_info["aid"])
        if data is None:
            return json_response(404, {"message": "404: Not Found", "code": 0})
        return web.Response(body=data, headers={"Content-Type": "application/octet-stream"})

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"].lstrip("/")
        method = request.method.upper()
        try:
            matched = self._match_route(method, path)
            body, files = await self._read_body(request)
        except ApiError as exc:
            return json_response(exc.status, exc.body)
        route_key = f"{method} {matched[0].template}" if matched else f"{method} {path}"
        record = RestCall(route_key, body, method=method, path=path, query=dict(request.query))
        return await self._answer(
            request, record, lambda record: self._respond(request, record, matched, files)
        )

    async def _respond(
        self,
        request: web.Request,
        record: RestCall,
        matched: tuple[_Route, tuple[str, ...]] | None,
        files: list[Upload],
    ) -> web.Response:
        try:
            if matched is None:
                raise ApiError(404, "404: Not Found", 0)
            route, args = matched
            if route.bot_auth and request.headers.get("Authorization") != f"Bot {self.token}":
                raise ApiError(401, "401: Unauthorized", 0)
            self._fail_if_queued(record)
            result = await route.handler(*args, body=record.data, files=files, query=request.query)
        except ApiError as exc:
            record.response = copy.deepcopy(exc.body)
            return json_response(exc.status, exc.body, exc.headers)
        if result is None:
            return web.Response(status=204)
        record.response = copy.deepcopy(result)
        return json_response(200, result)

    async def _read_body(self, request: web.Request) -> tuple[JSON | None, list[Upload]]:
        if not request.can_read_body:
            return None, []
        files: list[Upload] = []
        if request.content_type == "multipart/form-data":
            form = await request.post()
            body: Any = {}
            for name, value in form.items():
                if isinstance(value, web.FileField):
                    files.append(
                        Upload(name, value.filename, value.content_type, value.file.read())
                    )
                elif name == "payload_json":
                    body = json.loads(str(value))
            self.uploads.extend(files)
        else:
            raw = await request.read()
            if not raw:
                return None, []
            try:
                body = json.loads(raw)
            except ValueError:
                raise ApiError(400, "400: Bad Request", 50109) from None
        if not isinstance(body, dict | list):
            raise ApiError(400, "400: Bad Request", 50109)
        return (body if isinstance(body, dict) else {"_list": body}), files

    async def _get_me(self, **_: Any) -> JSON:
        return copy.deepcopy(self.bot_user)

    async def _get_user(self, uid: str, **_: Any) -> JSON:
        found = self._users.get(uid)
        if found is None:
            raise unknown("User", 10013)
        return copy.deepcopy(found)

    async def _get_member(self, gid: str, uid: str, **_: Any) -> JSON:
        known = self._guilds.get(gid)
        for entry in known["members"] if known else []:
            if entry["user"]["id"] == uid:
                return copy.deepcopy(entry)
        raise unknown("Member", 10007)

    async def _create_dm(self, *, body: JSON, **_: Any) -> JSON:
        recipient = str(body.get("recipient_id", ""))
        for channel in self._channels.values():
            if channel["type"] == CHANNEL_DM and channel["recipients"][0]["id"] == recipient:
                return copy.deepcopy(channel)
        recipient_user = self._users.get(recipient)
        if recipient_user is None:
            raise unknown("User", 10013)
        return self.dm_channel(self._snowflake(), recipient_user)

    async def _get_application(self, **_: Any) -> JSON:
        return application(self.application_id, self.bot_user, portal_flags(self.enabled_intents))

    async def _get_gateway(self, **_: Any) -> JSON:
        return {"url": self.gateway_url}

    async def _get_gateway_bot(self, **_: Any) -> JSON:
        return {
            "url": self.gateway_url,
            "shards": 1,
            "session_start_limit": {
                "total": 1000,
                "remaining": 999,
                "reset_after": 14_400_000,
                "max_concurrency": 1,
            },
        }

    async def _get_channel(self, id: str, **_: Any) -> JSON:
        return copy.deepcopy(self._channel_or_404(id))

    async def _create_message(self, id: str, *, body: JSON, files: list[Upload], **_: Any) -> JSON:
        channel = self._channel_or_404(id)
        self._check_content(body, require=True, files=files)
        nonce = body.get("nonce")
        now = time.monotonic()
        if nonce is not None and body.get("enforce_nonce"):
            seen = self._nonces.get((id, str(nonce)))
            if seen is not None and now - seen[1] <= NONCE_WINDOW_SECONDS:
                existing = self._messages.get((id, seen[0]))
                if existing is not None:
                    return copy.deepcopy(existing)
        message = self._bot_message(id, channel.get("guild_id"), body, files)
        reference = body.get("message_reference")
        if reference and reference.get("message_id"):
            self._set_reference(
                message,
                {
                    "channel_id": reference.get("channel_id", id),
                    "message_id": reference["message_id"],
                },
                fail_if_missing=reference.get("fail_if_not_exists", True) is not False,
            )
        if nonce is not None:
            self._nonces[(id, str(nonce))] = (message["id"], now)
        self._messages[(id, message["id"])] = message
        self._bot_sent.append((id, message["id"]))
        self._dispatch("MESSAGE_CREATE", message)
        return copy.deepcopy(message)

    async def _get_messages(self, id: str, *, query: Any, **_: Any) -> list[JSON]:
        self._channel_or_404(id)
        limit = int(query.get("limit", 50))
        found = [m for (cid, _mid), m in self._messages.items() if cid == id]
        found.sort(key=lambda m: int(m["id"]), reverse=True)
        if query.get("before"):
            found = [m for m in found if int(m["id"]) < int(query["before"])]
        if query.get("after") and not query.get("before"):
            # As Discord answers: the `limit` messages just after `after`, newest first
            # (discord.py reads the first one as where the next page starts).
            found = [m for m in found if int(m["id"]) > int(query["after"])][-limit:]
        elif query.get("after"):
            found = [m for m in found if int(m["id"]) > int(query["after"])]
        return copy.deepcopy(found[:limit])

    async def _get_message(self, cid: str, mid: str, **_: Any) -> JSON:
        return copy.deepcopy(self._message_or_404(cid, mid))

    async def _edit_message(
        self, cid: str, mid: str, *, body: JSON, files: list[Upload], **_: Any
    ) -> JSON:
        message = self._message_or_404(cid, mid)
        if message["author"]["id"] != self.bot_id:
            raise ApiError(403, "Cannot edit a message authored by another user", 50005)
        return self._edit(message, body, files)

    async def _delete_message(self, cid: str, mid: str, **_: Any) -> None:
        self._message_or_404(cid, mid)
        self._delete(cid, mid)

    async def _typing(self, id: str, **_: Any) -> None:
        self._channel_or_404(id)

    async def _add_reaction(self, cid: str, mid: str, emoji: str, **_: Any) -> None:
        self._message_or_404(cid, mid)
        self.reactions.append({"channel_id": cid, "message_id": mid, "emoji": emoji, "added": True})

    async def _remove_reaction(self, cid: str, mid: str, emoji: str, **_: Any) -> None:
        self._message_or_404(cid, mid)
        self.reactions.append(
            {"channel_id": cid, "message_id": mid, "emoji": emoji, "added": False}
        )

    def _create_thread(self, parent_id: str, name: str, thread_id: str | None = None) -> JSON:
        parent = self._channel_or_404(parent_id)
        if parent.get("guild_id") is None:
            raise ApiError(400, "Cannot execute action on a DM channel", 50003)
        stored = self.add_channel(
            parent["guild_id"], thread(thread_id or self._snowflake(), parent_id, name)
        )
        self._dispatch("THREAD_CREATE", {**stored, "newly_created": True})
        return stored

    async def _thread_from_message(self, cid: str, mid: str, *, body: JSON, **_: Any) -> JSON:
        self._message_or_404(cid, mid)
        return self._create_thread(cid, str(body.get("name", "thread")), thread_id=mid)

    async def _thread_without_message(self, id: str, *, body: JSON, **_: Any) -> JSON:
        return self._create_thread(id, str(body.get("name", "thread")))
