"""A fake Discord REST API and gateway websocket for tests that drive the real discord.py client.

Point discord.py at it with :func:`point_discord_py_at`::

    async with FakeDiscord() as fake:
        fake.add_guild(1, "Guild", channels=[fake.text_channel(10, "general")])
        with point_discord_py_at(fake):
            client = discord.Client(intents=intents, guild_ready_timeout=0.05)
            task = asyncio.create_task(client.start(fake.token))

The server listens on 127.0.0.1 on a free port. REST lives under ``/api/v10`` and the gateway
websocket under ``/gateway`` (and ``/gateway/``). Tests feed gateway events with the
``inject_*`` helpers and inspect what the bot did through ``calls``, ``sent_messages()``,
``ephemeral_responses``, ``modals`` and ``wait_for_call()``.

Frames are plain JSON text frames: discord.py asks for ``zlib-stream`` but parses text frames
as JSON, so compression is not needed. Sequence numbers count per session; a RESUME replays the
dispatches after the client's ``seq``.

Not simulated: permissions (inject ``403`` with ``fail_next``), rate-limit buckets (inject
``429`` with ``fail_next``), presences, voice, and endpoints not listed in
``FakeDiscord._build_routes``: those answer 404 JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime as dt
import itertools
import json
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import discord
import discord.gateway
import discord.http
import yarl
from aiohttp import web

from .base import (
    DEFAULT_TIMEOUT,
    JSON,
    BodyPredicate,
    CallRecord,
    RecordingServer,
    Upload,
)

Snowflake = int | str

DEFAULT_TOKEN = "fake-bot-token.agenvoy.test"
DEFAULT_BOT_ID = 1_100_000_000_000_000_001
DISCORD_EPOCH_MS = 1_420_070_400_000
MAX_CONTENT_LENGTH = 2000
ATTACHMENT_SIZE_LIMIT = 25 * 1024 * 1024
NONCE_WINDOW_SECONDS = 300.0

# Gateway opcodes.
OP_DISPATCH = 0
OP_HEARTBEAT = 1
OP_IDENTIFY = 2
OP_PRESENCE = 3
OP_VOICE_STATE = 4
OP_RESUME = 6
OP_RECONNECT = 7
OP_REQUEST_MEMBERS = 8
OP_INVALID_SESSION = 9
OP_HELLO = 10
OP_HEARTBEAT_ACK = 11

# Intents.
INTENT_GUILDS = 1 << 0
INTENT_MEMBERS = 1 << 1
INTENT_PRESENCES = 1 << 8
INTENT_MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = INTENT_MEMBERS | INTENT_PRESENCES | INTENT_MESSAGE_CONTENT

# Channel types.
CHANNEL_TEXT = 0
CHANNEL_DM = 1
CHANNEL_PUBLIC_THREAD = 11

# Interaction types and callback types.
INTERACTION_COMMAND = 2
INTERACTION_COMPONENT = 3
INTERACTION_AUTOCOMPLETE = 4
INTERACTION_MODAL_SUBMIT = 5
CALLBACK_MESSAGE = 4
CALLBACK_DEFERRED_MESSAGE = 5
CALLBACK_DEFERRED_UPDATE = 6
CALLBACK_UPDATE_MESSAGE = 7
CALLBACK_AUTOCOMPLETE = 8
CALLBACK_MODAL = 9

FLAG_EPHEMERAL = 1 << 6
FLAG_LOADING = 1 << 7

_MENTION_RE = re.compile(r"<@!?(\d+)>")
_PLACEHOLDER_RE = re.compile(r"\{[^}/]*\}")

_DEFAULT_ERRORS: dict[int, tuple[str, int]] = {
    400: ("400: Bad Request", 0),
    401: ("401: Unauthorized", 0),
    403: ("Missing Permissions", 50013),
    404: ("404: Not Found", 0),
    405: ("405: Method Not Allowed", 0),
    500: ("500: Internal Server Error", 0),
    502: ("502: Bad Gateway", 0),
    503: ("503: Service Unavailable", 0),
}


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


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


def _unknown(what: str, code: int) -> ApiError:
    return ApiError(404, f"Unknown {what}", code)


def _invalid_form(field_name: str, error_code: str, message: str) -> ApiError:
    return ApiError(
        400,
        "Invalid Form Body",
        50035,
        errors={field_name: {"_errors": [{"code": error_code, "message": message}]}},
    )


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
        return f"{self.method} {self.path}->{self.status}"


@dataclass
class _Session:
    session_id: str
    intents: int
    shard: tuple[int, int]
    seq: int = 0
    log: list[JSON] = field(default_factory=list)
    conn: _Connection | None = None
    alive: bool = True


class _Connection:
    """One websocket; a single writer task sends queued frames in order."""

    def __init__(self, ws: web.WebSocketResponse, query: dict[str, str]) -> None:
        self.ws = ws
        self.query = query
        self.lock = asyncio.Lock()
        self.queue: asyncio.Queue[JSON | tuple[str, int]] = asyncio.Queue()
        self.session: _Session | None = None
        self.identified = False
        self.closed_by_server = False
        self.writer: asyncio.Task[None] | None = None

    def send(self, payload: JSON) -> None:
        self.queue.put_nowait(payload)

    def close(self, code: int) -> None:
        self.closed_by_server = True
        self.queue.put_nowait(("close", code))

    async def run_writer(self) -> None:
        while True:
            item = await self.queue.get()
            async with self.lock:
                if isinstance(item, tuple):
                    with contextlib.suppress(Exception):
                        await self.ws.close(code=item[1])
                    return
                if self.ws.closed:
                    return
                try:
                    await self.ws.send_str(json.dumps(item))
                except (ConnectionError, RuntimeError):
                    return


@dataclass
class _Interaction:
    id: str
    token: str
    type: int
    payload: JSON
    channel_id: str
    guild_id: str | None
    user: JSON
    created: float = field(default_factory=time.monotonic)
    response_type: int | None = None
    original: str | None = None  # message id behind "@original"
    original_ephemeral: bool = False
    followup_used_loading: bool = False


Handler = Callable[..., Awaitable[Any]]


@dataclass
class _Route:
    method: str
    template: str
    regex: re.Pattern[str]
    handler: Handler
    bot_auth: bool


def _sid(value: Snowflake) -> str:
    return str(int(value))


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def _json_response(status: int, data: Any, headers: dict[str, str] | None = None) -> web.Response:
    # discord.py compares the Content-Type with "==": no charset suffix allowed.
    all_headers = {"Content-Type": "application/json"}
    all_headers.update(headers or {})
    return web.Response(status=status, body=json.dumps(data).encode(), headers=all_headers)


def _normalise_key(key: str) -> str:
    method, _, path = key.strip().partition(" ")
    path = path.strip()
    if path.startswith("/api/v10"):
        path = path[len("/api/v10") :]
    return f"{method.upper()} {_PLACEHOLDER_RE.sub('{}', path).rstrip('/')}"


def _compile_template(template: str) -> re.Pattern[str]:
    pattern = ""
    for part in re.split(r"(\{[^}]+\})", template):
        if part.startswith("{"):
            pattern += r"([^/]+)"
        else:
            pattern += re.escape(part)
    return re.compile(f"^{pattern}/?$")


# ---------------------------------------------------------------------------------------------
# builders


def user(
    id: Snowflake, username: str, *, bot: bool = False, global_name: str | None = None
) -> JSON:
    """A Discord ``User`` object."""
    data: JSON = {
        "id": _sid(id),
        "username": username,
        "discriminator": "0",
        "global_name": global_name if global_name is not None else username,
        "avatar": None,
        "public_flags": 0,
    }
    if bot:
        data["bot"] = True
    return data


def text_channel(id: Snowflake, name: str, *, position: int = 0, topic: str | None = None) -> JSON:
    """A guild text channel (type 0); ``guild_id`` is filled in by ``add_guild``."""
    return {
        "id": _sid(id),
        "type": CHANNEL_TEXT,
        "name": name,
        "position": position,
        "topic": topic,
        "nsfw": False,
        "permission_overwrites": [],
        "parent_id": None,
        "last_message_id": None,
        "rate_limit_per_user": 0,
    }


def thread(id: Snowflake, parent_id: Snowflake, name: str, *, owner_id: Snowflake = 0) -> JSON:
    """A public thread (type 11) under ``parent_id``."""
    return {
        "id": _sid(id),
        "type": CHANNEL_PUBLIC_THREAD,
        "name": name,
        "parent_id": _sid(parent_id),
        "owner_id": _sid(owner_id),
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "message_count": 0,
        "member_count": 1,
        "flags": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": _now_iso(),
            "locked": False,
        },
    }


def role(id: Snowflake, name: str, *, permissions: int = 0, position: int = 1) -> JSON:
    """A guild ``Role``; the ``@everyone`` role (id = guild id) is added by ``add_guild``."""
    return {
        "id": _sid(id),
        "name": name,
        "color": 0,
        "hoist": False,
        "icon": None,
        "unicode_emoji": None,
        "position": position,
        "permissions": str(permissions),
        "managed": False,
        "mentionable": False,
        "flags": 0,
    }


def member(
    user_obj: JSON, roles: list[Snowflake] | None = None, *, nick: str | None = None
) -> JSON:
    """A guild ``Member`` wrapping ``user_obj``."""
    return {
        "user": copy.deepcopy(user_obj),
        "roles": [_sid(r) for r in roles or []],
        "nick": nick,
        "avatar": None,
        "joined_at": _now_iso(),
        "premium_since": None,
        "deaf": False,
        "mute": False,
        "pending": False,
        "flags": 0,
    }


# ---------------------------------------------------------------------------------------------
# pointing discord.py at the fake


@contextlib.contextmanager
def point_discord_py_at(fake: FakeDiscord) -> Iterator[FakeDiscord]:
    """Route discord.py's REST and gateway to ``fake`` while the block runs.

    Sets ``discord.http.Route.BASE`` and ``DiscordWebSocket.DEFAULT_GATEWAY``; both are
    restored on exit. Routes read ``BASE`` when they are built, so build the client inside.
    """
    old_base = discord.http.Route.BASE
    old_gateway = discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    discord.http.Route.BASE = fake.api_base
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(fake.gateway_url)
    try:
        yield fake
    finally:
        discord.http.Route.BASE = old_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = old_gateway


# ---------------------------------------------------------------------------------------------
# the fake


class FakeDiscord(RecordingServer[RestCall]):
    """A fake Discord REST API and gateway on ``127.0.0.1``; see the module docstring."""

    text_channel = staticmethod(text_channel)
    thread = staticmethod(thread)
    user = staticmethod(user)
    role = staticmethod(role)
    member = staticmethod(member)

    def __init__(
        self,
        token: str = DEFAULT_TOKEN,
        *,
        bot_id: int = DEFAULT_BOT_ID,
        bot_username: str = "agenvoy-test",
        application_id: int | None = None,
        heartbeat_interval: int = 41_250,
        enabled_intents: int = PRIVILEGED_INTENTS,
        interaction_timeout: float | None = None,
    ) -> None:
        """``heartbeat_interval`` is in milliseconds. ``enabled_intents`` are the privileged
        intents switched on "in the developer portal": asking for others closes with 4014.
        ``interaction_timeout`` (seconds, None = never) makes late first responses 10062.
        """
        super().__init__()
        self.token = token
        self.bot_user: JSON = user(bot_id, bot_username, bot=True)
        self.bot_user["global_name"] = None
        self.application_id = str(application_id or bot_id)
        self.heartbeat_interval = heartbeat_interval
        self.enabled_intents = enabled_intents
        self.interaction_timeout = interaction_timeout

        self.uploads: list[Upload] = []
        self.gateway_received: list[JSON] = []
        self.identifies: list[JSON] = []
        self.resumes: list[JSON] = []
        self.modals: list[JSON] = []
        self.autocomplete_results: list[JSON] = []
        self.reactions: list[JSON] = []
        self.commands_synced: list[JSON] = []

        self._consumed_resumes = 0
        self._consumed_identifies = 0
        self._ids = itertools.count(((int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22) + 1)
        self._users: dict[str, JSON] = {self.bot_user["id"]: self.bot_user}
        self._guilds: dict[str, JSON] = {}
        self._channels: dict[str, JSON] = {}
        self._messages: dict[tuple[str, str], JSON] = {}
        self._bot_sent: list[tuple[str, str]] = []
        self._ephemeral: list[tuple[str, str]] = []
        self._nonces: dict[tuple[str, str], tuple[str, float]] = {}
        self._interactions: dict[str, _Interaction] = {}
        self._commands: dict[str | None, list[JSON]] = {}
        self._attachments: dict[str, bytes] = {}
        self._sessions: dict[str, _Session] = {}
        self._early: list[tuple[str, JSON]] = []
        self._connections: list[_Connection] = []
        self._routes = self._build_routes()

    # -- lifecycle -----------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=ATTACHMENT_SIZE_LIMIT + 1024 * 1024)
        app.router.add_get("/gateway", self._handle_ws)
        app.router.add_get("/gateway/", self._handle_ws)
        app.router.add_get("/attachments/{cid}/{aid}/{filename}", self._handle_attachment)
        app.router.add_route("*", "/api/v10{tail:.*}", self._handle_api)
        app.router.add_route("*", "/{tail:.*}", self._handle_not_found)
        return app

    async def _stopping(self) -> None:
        await self.disconnect(1001)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``; only valid after :meth:`start`."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        """Value for ``discord.http.Route.BASE``."""
        return f"{self.url}/api/v10"

    @property
    def gateway_url(self) -> str:
        """Value for ``DiscordWebSocket.DEFAULT_GATEWAY`` and READY's ``resume_gateway_url``."""
        return f"ws://127.0.0.1:{self.port}/gateway/"

    @property
    def bot_id(self) -> str:
        return str(self.bot_user["id"])

    # -- test-side model -----------------------------------------------------------------------

    def add_guild(
        self,
        guild_id: Snowflake,
        name: str = "Test Guild",
        channels: list[JSON] | tuple[JSON, ...] = (),
        roles: list[JSON] | tuple[JSON, ...] = (),
        members: list[JSON] | tuple[JSON, ...] = (),
        *,
        owner_id: Snowflake | None = None,
    ) -> JSON:
        """Register a guild; sent in READY (unavailable) and GUILD_CREATE on IDENTIFY.

        ``channels`` may mix text channels and threads; ``members`` may be users or members.
        The @everyone role and the bot's own member are always included.
        """
        gid = _sid(guild_id)
        everyone = role(gid, "@everyone", permissions=1071698660929, position=0)
        all_roles = [everyone, *(copy.deepcopy(r) for r in roles if _sid(r["id"]) != gid)]
        all_members = [member(self.bot_user)]
        for item in members:
            entry = copy.deepcopy(item) if "user" in item else member(item)
            if entry["user"]["id"] != self.bot_id:
                all_members.append(entry)
            self._users[entry["user"]["id"]] = copy.deepcopy(entry["user"])
        guild: JSON = {
            "id": gid,
            "name": name,
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "owner_id": _sid(owner_id) if owner_id is not None else all_members[-1]["user"]["id"],
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "roles": all_roles,
            "emojis": [],
            "stickers": [],
            "features": [],
            "mfa_level": 0,
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "vanity_url_code": None,
            "description": None,
            "banner": None,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "public_updates_channel_id": None,
            "nsfw_level": 0,
            "premium_progress_bar_enabled": False,
            "large": False,
            "unavailable": False,
            "member_count": len(all_members),
            "joined_at": _now_iso(),
            "voice_states": [],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
            "members": all_members,
            "channels": [],
            "threads": [],
        }
        self._guilds[gid] = guild
        for channel in channels:
            self.add_channel(gid, channel)
        return copy.deepcopy(guild)

    def add_channel(self, guild_id: Snowflake, channel: JSON) -> JSON:
        """Add a text channel or thread to a registered guild (no CHANNEL_CREATE is sent)."""
        guild = self._guilds[_sid(guild_id)]
        stored = copy.deepcopy(channel)
        stored["guild_id"] = guild["id"]
        if stored["type"] in (10, 11, 12):
            if stored.get("owner_id") in (None, "0"):
                stored["owner_id"] = self.bot_id
            guild["threads"].append(stored)
        else:
            guild["channels"].append(stored)
        self._channels[stored["id"]] = stored
        return copy.deepcopy(stored)

    def dm_channel(self, id: Snowflake, recipient_user: JSON) -> JSON:
        """Register a DM channel (type 1) between the bot and ``recipient_user``."""
        channel: JSON = {
            "id": _sid(id),
            "type": CHANNEL_DM,
            "last_message_id": None,
            "recipients": [copy.deepcopy(recipient_user)],
            "flags": 0,
        }
        self._users[recipient_user["id"]] = copy.deepcopy(recipient_user)
        self._channels[channel["id"]] = channel
        return copy.deepcopy(channel)

    def channel(self, channel_id: Snowflake) -> JSON | None:
        found = self._channels.get(_sid(channel_id))
        return copy.deepcopy(found) if found is not None else None

    # -- test-side injection -------------------------------------------------------------------

    def inject_message(
        self,
        channel_id: Snowflake,
        author_user: JSON,
        content: str = "",
        *,
        guild_id: Snowflake | None = MISSING,
        mentions_bot: bool = False,
        reply_to_message: JSON | None = None,
        attachments: list[JSON | tuple[str, bytes] | tuple[str, bytes, str]] | None = None,
        embeds: list[JSON] | None = None,
    ) -> JSON:
        """Dispatch MESSAGE_CREATE from ``author_user`` and return the message.

        ``guild_id`` defaults to the channel's guild; None (or an unknown channel) makes a DM,
        which has no ``guild_id`` and no ``member``. ``mentions_bot`` puts ``<@bot_id>`` in
        front of ``content`` unless it is already there; every ``<@id>`` of a known user
        lands in ``mentions``. ``attachments`` are Attachment dicts or ``(filename, data[,
        content_type])``: bytes are served at the attachment ``url``.
        """
        cid = _sid(channel_id)
        gid = self._guild_of(cid) if guild_id is MISSING else guild_id
        gid = _sid(gid) if gid is not None else None
        if gid is None and cid not in self._channels:
            self.dm_channel(cid, author_user)
        self._users.setdefault(author_user["id"], copy.deepcopy(author_user))
        bot_mention = f"<@{self.bot_id}>"
        if mentions_bot and bot_mention not in content and f"<@!{self.bot_id}>" not in content:
            content = f"{bot_mention} {content}".rstrip()
        message = self._new_message(cid, gid, author_user, content)
        message["mentions"] = self._mentions_in(content, gid)
        message["embeds"] = copy.deepcopy(embeds or [])
        message["attachments"] = [self._attachment(cid, item) for item in attachments or []]
        if reply_to_message is not None:
            self._set_reference(message, reply_to_message)
        if gid is not None:
            message["member"] = self._member_without_user(gid, author_user["id"])
        self._messages[(cid, message["id"])] = message
        self._dispatch("MESSAGE_CREATE", message)
        return copy.deepcopy(message)

    def inject_component(
        self,
        user: JSON,
        message: JSON,
        custom_id: str,
        *,
        component_type: int = 2,
        values: list[str] | None = None,
    ) -> JSON:
        """Dispatch INTERACTION_CREATE type 3: ``user`` clicked/selected on ``message``.

        ``message`` is a bot message (from ``sent_messages()`` or a recorded response); its
        latest stored state is sent. ``values`` is for select menus.
        """
        stored = self._stored(message)
        data: JSON = {"custom_id": custom_id, "component_type": component_type}
        if values is not None or component_type != 2:
            data["values"] = list(values or [])
        return self._inject_interaction(
            INTERACTION_COMPONENT, user, stored["channel_id"], data, message=stored
        )

    def inject_modal_submit(
        self,
        user: JSON,
        message: JSON | None,
        custom_id: str,
        fields: dict[str, str],
        *,
        channel_id: Snowflake | None = None,
    ) -> JSON:
        """Dispatch INTERACTION_CREATE type 5: ``user`` submitted a modal with text inputs.

        ``fields`` maps each text input's ``custom_id`` to its value. ``message`` is the
        message whose component opened the modal, or None for a modal opened by a command
        (then ``channel_id`` is needed).
        """
        stored = self._stored(message) if message is not None else None
        if stored is None and channel_id is None:
            raise ValueError("a modal submit needs a message or a channel_id")
        cid = stored["channel_id"] if stored is not None else _sid(channel_id)  # type: ignore[arg-type]
        data: JSON = {
            "custom_id": custom_id,
            "components": [
                {"type": 1, "components": [{"type": 4, "custom_id": key, "value": value}]}
                for key, value in fields.items()
            ],
        }
        return self._inject_interaction(INTERACTION_MODAL_SUBMIT, user, cid, data, message=stored)

    def inject_command(
        self,
        user: JSON,
        channel_id: Snowflake,
        name: str,
        options: list[JSON] | None = None,
        *,
        guild_id: Snowflake | None = MISSING,
        command_type: int = 1,
        resolved: JSON | None = None,
    ) -> JSON:
        """Dispatch INTERACTION_CREATE type 2 for the slash command ``name``.

        ``options`` are raw option dicts (``{"name", "type", "value"}``). The command id is
        taken from the synced commands when ``name`` was synced.
        """
        cid = _sid(channel_id)
        gid = self._guild_of(cid) if guild_id is MISSING else guild_id
        gid = _sid(gid) if gid is not None else None
        command_id = None
        for scope in (gid, None):
            for command in self._commands.get(scope, []):
                if command["name"] == name and command.get("type", 1) == command_type:
                    command_id = command["id"]
        data: JSON = {
            "id": command_id or self._snowflake(),
            "name": name,
            "type": command_type,
            "options": copy.deepcopy(options or []),
        }
        if resolved:
            data["resolved"] = copy.deepcopy(resolved)
        if gid is not None:
            data["guild_id"] = gid
        return self._inject_interaction(INTERACTION_COMMAND, user, cid, data, guild_id=gid)

    def inject_event(self, event: str, data: JSON) -> None:
        """Dispatch any other gateway event as is."""
        self._dispatch(event, copy.deepcopy(data))

    # -- test-side gateway control -------------------------------------------------------------

    async def disconnect(self, code: int = 4000) -> None:
        """Close every live gateway socket with ``code``; the client should RESUME."""
        for conn in list(self._connections):
            conn.close(code)
        writers = [c.writer for c in self._connections if c.writer is not None]
        if writers:
            await asyncio.wait(writers, timeout=2.0)

    def request_reconnect(self) -> None:
        """Send op 7 RECONNECT on every live socket."""
        for conn in self._connections:
            conn.send({"op": OP_RECONNECT, "d": None, "s": None, "t": None})

    def invalidate_sessions(self, resumable: bool = False) -> None:
        """Send op 9 INVALID_SESSION on every live socket; the sessions are dropped."""
        for conn in self._connections:
            if conn.session is not None and not resumable:
                conn.session.alive = False
            conn.send({"op": OP_INVALID_SESSION, "d": resumable, "s": None, "t": None})

    async def wait_for_identify(self, timeout: float = DEFAULT_TIMEOUT) -> JSON:  # noqa: ASYNC109
        """Wait until READY (and the GUILD_CREATEs) went out for an IDENTIFY; handed out once."""
        await self._wait_until(
            lambda: len(self.identifies) > self._consumed_identifies, timeout, "READY"
        )
        self._consumed_identifies += 1
        return self.identifies[self._consumed_identifies - 1]

    async def wait_for_resume(self, timeout: float = DEFAULT_TIMEOUT) -> JSON:  # noqa: ASYNC109
        """Wait until a RESUME was accepted (RESUMED sent); returns its payload, once each."""
        await self._wait_until(
            lambda: len(self.resumes) > self._consumed_resumes, timeout, "RESUME"
        )
        self._consumed_resumes += 1
        return self.resumes[self._consumed_resumes - 1]

    # -- test-side inspection ------------------------------------------------------------------

    def sent_messages(self, channel_id: Snowflake | None = None) -> list[JSON]:
        """Non-ephemeral messages the bot sent (oldest first), latest state, deleted left out."""
        return self._collect(self._bot_sent, channel_id)

    @property
    def ephemeral_responses(self) -> list[JSON]:
        """Ephemeral interaction responses and followups (latest state)."""
        return self._collect(self._ephemeral, None)

    def message(self, channel_id: Snowflake, message_id: Snowflake) -> JSON | None:
        """The stored state of any message, or None if unknown or deleted."""
        found = self._messages.get((_sid(channel_id), _sid(message_id)))
        return copy.deepcopy(found) if found is not None else None

    def registered_commands(self, guild_id: Snowflake | None = None) -> list[JSON]:
        """The application commands as last synced (global, or for ``guild_id``)."""
        return copy.deepcopy(self._commands.get(_sid(guild_id) if guild_id else None, []))

    @property
    def calls(self) -> list[tuple[str, str, str, JSON | None]]:
        """``(method, route, path, body)`` of every recorded call, in order."""
        return [(r.method, r.route, r.path, r.body) for r in self.call_log]

    # -- test-side control ---------------------------------------------------------------------

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
                message, code = _DEFAULT_ERRORS.get(status, (f"{status}: Error", 0))
                body = {"message": message, "code": code}
        if status == 429:
            extra_headers.setdefault("Via", "1.1 google")
            extra_headers.setdefault("Retry-After", str(max(1, round(retry_after))))
            extra_headers.setdefault("X-RateLimit-Scope", "shared" if not is_global else "global")
            if is_global:
                extra_headers.setdefault("X-RateLimit-Global", "true")
        error = ApiError.from_body(status, body, extra_headers)
        self._queue_failure(route_key, error, times=times, when=when)

    # -- internals: ids, model helpers ---------------------------------------------------------

    def _snowflake(self) -> str:
        return str(next(self._ids))

    def _guild_of(self, channel_id: str) -> str | None:
        channel = self._channels.get(channel_id)
        return channel.get("guild_id") if channel is not None else None

    def _collect(self, keys: list[tuple[str, str]], channel_id: Snowflake | None) -> list[JSON]:
        wanted = _sid(channel_id) if channel_id is not None else None
        result = []
        for key in keys:
            message = self._messages.get(key)
            if message is not None and (wanted is None or key[0] == wanted):
                result.append(copy.deepcopy(message))
        return result

    def _stored(self, message: JSON) -> JSON:
        key = (_sid(message["channel_id"]), _sid(message["id"]))
        found = self._messages.get(key)
        if found is None:
            raise ValueError(f"unknown message {key}")
        return copy.deepcopy(found)

    def _member_without_user(self, guild_id: str, user_id: str) -> JSON:
        guild = self._guilds.get(guild_id)
        for entry in guild["members"] if guild else []:
            if entry["user"]["id"] == user_id:
                copied: JSON = copy.deepcopy(entry)
                copied.pop("user")
                return copied
        found = member({"id": user_id})
        found.pop("user")
        return found

    def _member_with_user(self, guild_id: str, user_obj: JSON) -> JSON:
        result = self._member_without_user(guild_id, user_obj["id"])
        result["user"] = copy.deepcopy(user_obj)
        result["permissions"] = "2248473465835073"
        return result

    def _mentions_in(
        self, content: str, guild_id: str | None, allowed: JSON | None = None
    ) -> list[JSON]:
        mentions: list[JSON] = []
        seen: set[str] = set()
        for match in _MENTION_RE.finditer(content):
            uid = match.group(1)
            if uid in seen or uid not in self._users:
                continue
            if allowed is not None:
                parse = allowed.get("parse", [])
                users = [str(u) for u in allowed.get("users", [])]
                if "users" not in parse and uid not in users:
                    continue
            seen.add(uid)
            entry = copy.deepcopy(self._users[uid])
            if guild_id is not None:
                entry["member"] = self._member_without_user(guild_id, uid)
            mentions.append(entry)
        return mentions

    def _new_message(
        self, channel_id: str, guild_id: str | None, author: JSON, content: str
    ) -> JSON:
        message: JSON = {
            "id": self._snowflake(),
            "channel_id": channel_id,
            "author": copy.deepcopy(author),
            "content": content,
            "timestamp": _now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "type": 0,
            "flags": 0,
        }
        if guild_id is not None:
            message["guild_id"] = guild_id
        channel = self._channels.get(channel_id)
        if channel is not None:
            channel["last_message_id"] = message["id"]
        return message

    def _set_reference(self, message: JSON, target: JSON, *, fail_if_missing: bool = True) -> None:
        key = (
            _sid(target.get("channel_id") or message["channel_id"]),
            _sid(target["message_id"] if "message_id" in target else target["id"]),
        )
        found = self._messages.get(key)
        if found is None and fail_if_missing:
            raise _invalid_form(
                "message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message"
            )
        reference: JSON = {"type": 0, "message_id": key[1], "channel_id": key[0]}
        if message.get("guild_id"):
            reference["guild_id"] = message["guild_id"]
        message["type"] = 19
        message["message_reference"] = reference
        if found is not None:
            referenced = copy.deepcopy(found)
            referenced.pop("referenced_message", None)
            message["referenced_message"] = referenced

    def _attachment(
        self, channel_id: str, item: JSON | tuple[Any, ...], data: bytes | None = None
    ) -> JSON:
        aid = self._snowflake()
        if isinstance(item, tuple):
            filename, data = item[0], item[1]
            content_type = item[2] if len(item) > 2 else "application/octet-stream"
            info: JSON = {"filename": filename, "content_type": content_type}
        else:
            info = copy.deepcopy(item)
        filename = str(info.get("filename", "file.bin"))
        url = f"{self.url}/attachments/{channel_id}/{aid}/{filename}"
        if data is not None:
            self._attachments[aid] = data
        attachment: JSON = {
            "id": aid,
            "filename": filename,
            "size": len(data) if data is not None else int(info.get("size", 0)),
            "url": url,
            "proxy_url": url,
        }
        attachment.update({k: v for k, v in info.items() if k not in ("id", "filename")})
        if not attachment.get("content_type"):
            attachment["content_type"] = "application/octet-stream"
        return attachment

    # -- internals: gateway --------------------------------------------------------------------

    def _dispatch(self, event: str, data: JSON) -> None:
        """Send a dispatch to every live session (buffered until a session exists); a guild's
        events go only to the shard that guild lives on, as Discord routes them."""
        sessions = [s for s in self._sessions.values() if s.alive]
        if not sessions:
            self._early.append((event, copy.deepcopy(data)))
            return
        guild_id = data.get("guild_id")
        for session in sessions:
            if guild_id is not None:
                shard_id, shard_count = session.shard
                if (int(guild_id) >> 22) % shard_count != shard_id:
                    continue
            self._dispatch_to(session, event, data)

    def _dispatch_to(self, session: _Session, event: str, data: JSON) -> None:
        payload = copy.deepcopy(data)
        if event in ("MESSAGE_CREATE", "MESSAGE_UPDATE"):
            self._apply_content_intent(session, payload)
        session.seq += 1
        frame = {"op": OP_DISPATCH, "t": event, "s": session.seq, "d": payload}
        session.log.append(frame)
        if session.conn is not None:
            session.conn.send(frame)

    def _apply_content_intent(self, session: _Session, message: JSON) -> None:
        if session.intents & INTENT_MESSAGE_CONTENT or not message.get("guild_id"):
            return
        if message.get("author", {}).get("id") == self.bot_id:
            return
        if any(m.get("id") == self.bot_id for m in message.get("mentions", [])):
            return
        for key in ("content",):
            if key in message:
                message[key] = ""
        for key in ("embeds", "attachments", "components"):
            if key in message:
                message[key] = []

    async def _handle_ws(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        conn = _Connection(ws, dict(request.query))
        self._connections.append(conn)
        conn.writer = asyncio.create_task(conn.run_writer())
        try:
            if request.query.get("encoding", "json") != "json":
                conn.close(4002)
            else:
                conn.send(
                    {
                        "op": OP_HELLO,
                        "d": {"heartbeat_interval": self.heartbeat_interval},
                        "s": None,
                        "t": None,
                    }
                )
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    try:
                        payload = json.loads(msg.data)
                    except ValueError:
                        conn.close(4002)
                        continue
                    await self._on_gateway_payload(conn, payload)
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    conn.close(4002)
        finally:
            if conn in self._connections:
                self._connections.remove(conn)
            session = conn.session
            if session is not None and session.conn is conn:
                session.conn = None
                if not conn.closed_by_server and ws.close_code in (1000, 1001):
                    # A normal close ends the session, as on Discord.
                    session.alive = False
            if not conn.writer.done():
                conn.queue.put_nowait(("close", 1000))
        return ws

    async def _on_gateway_payload(self, conn: _Connection, payload: JSON) -> None:
        op = payload.get("op")
        data = payload.get("d")
        async with self._cond:
            self.gateway_received.append(payload)
            self._cond.notify_all()
        if op == OP_HEARTBEAT:
            conn.send({"op": OP_HEARTBEAT_ACK, "d": None, "s": None, "t": None})
        elif op == OP_IDENTIFY:
            await self._identify(conn, data or {})
        elif op == OP_RESUME:
            await self._resume(conn, data or {})
        elif op == OP_REQUEST_MEMBERS:
            self._members_chunk(conn, data or {})
        elif op in (OP_PRESENCE, OP_VOICE_STATE):
            pass
        else:
            conn.close(4001)

    def _token_ok(self, token: Any) -> bool:
        token = str(token or "")
        return token in (self.token, f"Bot {self.token}")

    async def _identify(self, conn: _Connection, data: JSON) -> None:
        if conn.identified:
            conn.close(4005)
            return
        if not self._token_ok(data.get("token")):
            conn.close(4004)
            return
        intents = int(data.get("intents", 0))
        if intents & PRIVILEGED_INTENTS & ~self.enabled_intents:
            conn.close(4014)
            return
        shard_id, shard_count = (data.get("shard") or [0, 1])[:2]
        session = _Session(secrets.token_hex(16), intents, (int(shard_id), int(shard_count)))
        session.conn = conn
        conn.session = session
        conn.identified = True
        guilds = [
            g
            for g in self._guilds.values()
            if (int(g["id"]) >> 22) % session.shard[1] == session.shard[0]
        ]
        ready: JSON = {
            "v": 10,
            "user": copy.deepcopy(self.bot_user),
            "guilds": [{"id": g["id"], "unavailable": True} for g in guilds],
            "session_id": session.session_id,
            "resume_gateway_url": self.gateway_url,
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "user_settings": {},
            "application": {"id": self.application_id, "flags": 0},
        }
        if data.get("shard"):
            ready["shard"] = [session.shard[0], session.shard[1]]
        self._sessions[session.session_id] = session
        self._dispatch_to(session, "READY", ready)
        if intents & INTENT_GUILDS:
            for guild in guilds:
                self._dispatch_to(session, "GUILD_CREATE", guild)
        early, self._early = self._early, []
        for event, payload in early:
            self._dispatch(event, payload)
        async with self._cond:
            self.identifies.append(copy.deepcopy(data))
            self._cond.notify_all()

    async def _resume(self, conn: _Connection, data: JSON) -> None:
        if not self._token_ok(data.get("token")):
            conn.close(4004)
            return
        session = self._sessions.get(str(data.get("session_id")))
        if session is None or not session.alive:
            conn.send({"op": OP_INVALID_SESSION, "d": False, "s": None, "t": None})
            return
        old = session.conn
        if old is not None and old is not conn:
            old.session = None
            old.close(4009)
        session.conn = conn
        conn.session = session
        conn.identified = True
        last = int(data.get("seq") or 0)
        for frame in session.log:
            if frame["s"] > last:
                conn.send(frame)
        self._dispatch_to(session, "RESUMED", {})
        async with self._cond:
            self.resumes.append(copy.deepcopy(data))
            self._cond.notify_all()

    def _members_chunk(self, conn: _Connection, data: JSON) -> None:
        if conn.session is None:
            return
        guild_ids = data.get("guild_id")
        for gid in guild_ids if isinstance(guild_ids, list) else [guild_ids]:
            guild = self._guilds.get(str(gid))
            if guild is None:
                continue
            members = guild["members"]
            if data.get("user_ids"):
                wanted = {str(u) for u in data["user_ids"]}
                members = [m for m in members if m["user"]["id"] in wanted]
            elif data.get("query"):
                prefix = str(data["query"]).lower()
                members = [m for m in members if m["user"]["username"].lower().startswith(prefix)]
            chunk: JSON = {
                "guild_id": guild["id"],
                "members": copy.deepcopy(members),
                "chunk_index": 0,
                "chunk_count": 1,
            }
            if data.get("nonce") is not None:
                chunk["nonce"] = data["nonce"]
            self._dispatch_to(conn.session, "GUILD_MEMBERS_CHUNK", chunk)

    def _interaction_payload(
        self,
        itype: int,
        user_obj: JSON,
        channel_id: str,
        data: JSON,
        guild_id: str | None,
        message: JSON | None,
    ) -> JSON:
        iid = self._snowflake()
        token = f"aW50ZXJhY3Rpb246{iid}.{secrets.token_urlsafe(32)}"
        payload: JSON = {
            "id": iid,
            "application_id": self.application_id,
            "type": itype,
            "token": token,
            "version": 1,
            "data": data,
            "channel_id": channel_id,
            "locale": "en-US",
            "app_permissions": "2248473465835073",
            "entitlements": [],
            "attachment_size_limit": ATTACHMENT_SIZE_LIMIT,
        }
        channel = self._channels.get(channel_id)
        if channel is not None:
            payload["channel"] = copy.deepcopy(channel)
        else:
            payload["channel"] = {"id": channel_id, "type": CHANNEL_DM}
        if guild_id is not None:
            payload["guild_id"] = guild_id
            payload["guild"] = {"id": guild_id, "locale": "en-US", "features": []}
            payload["guild_locale"] = "en-US"
            payload["member"] = self._member_with_user(guild_id, user_obj)
            payload["authorizing_integration_owners"] = {"0": guild_id}
            payload["context"] = 0
        else:
            payload["user"] = copy.deepcopy(user_obj)
            payload["authorizing_integration_owners"] = {"1": user_obj["id"]}
            payload["context"] = 1
        if message is not None:
            payload["message"] = copy.deepcopy(message)
        return payload

    def _inject_interaction(
        self,
        itype: int,
        user_obj: JSON,
        channel_id: str,
        data: JSON,
        *,
        message: JSON | None = None,
        guild_id: str | None = MISSING,
    ) -> JSON:
        gid = self._guild_of(channel_id) if guild_id is MISSING else guild_id
        if message is not None and guild_id is MISSING:
            gid = message.get("guild_id", gid)
        self._users.setdefault(user_obj["id"], copy.deepcopy(user_obj))
        payload = self._interaction_payload(itype, user_obj, channel_id, data, gid, message)
        self._interactions[payload["id"]] = _Interaction(
            id=payload["id"],
            token=payload["token"],
            type=itype,
            payload=payload,
            channel_id=channel_id,
            guild_id=gid,
            user=copy.deepcopy(user_obj),
        )
        self._dispatch("INTERACTION_CREATE", payload)
        return copy.deepcopy(payload)

    # -- internals: REST -----------------------------------------------------------------------

    def _build_routes(self) -> list[_Route]:
        table: list[tuple[str, str, Handler, bool]] = [
            ("GET", "/users/@me", self._get_me, True),
            ("GET", "/users/{uid}", self._get_user, True),
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
            ("POST", "/interactions/{iid}/{token}/callback", self._interaction_callback, False),
            ("GET", "/webhooks/{app}/{token}/messages/@original", self._get_original, False),
            ("PATCH", "/webhooks/{app}/{token}/messages/@original", self._edit_original, False),
            ("DELETE", "/webhooks/{app}/{token}/messages/@original", self._delete_original, False),
            ("POST", "/webhooks/{app}/{token}", self._followup, False),
            ("GET", "/webhooks/{app}/{token}/messages/{mid}", self._get_followup, False),
            ("PATCH", "/webhooks/{app}/{token}/messages/{mid}", self._edit_followup, False),
            ("DELETE", "/webhooks/{app}/{token}/messages/{mid}", self._delete_followup, False),
            ("GET", "/applications/{app}/commands", self._get_commands, True),
            ("PUT", "/applications/{app}/commands", self._put_commands, True),
            ("GET", "/applications/{app}/guilds/{gid}/commands", self._get_commands, True),
            ("PUT", "/applications/{app}/guilds/{gid}/commands", self._put_commands, True),
        ]
        return [_Route(m, t, _compile_template(t), h, auth) for m, t, h, auth in table]

    def _route_matches(self, route: str, record: RestCall) -> bool:
        # A route names the endpoint by template or by concrete path; placeholder names and
        # the API prefix do not matter.
        return _normalise_key(route) in (
            _normalise_key(record.route),
            _normalise_key(f"{record.method} {record.path}"),
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
        return _json_response(404, {"message": "404: Not Found", "code": 0})

    async def _handle_attachment(self, request: web.Request) -> web.Response:
        data = self._attachments.get(request.match_info["aid"])
        if data is None:
            return _json_response(404, {"message": "404: Not Found", "code": 0})
        return web.Response(body=data, headers={"Content-Type": "application/octet-stream"})

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        path = "/" + request.match_info["tail"].lstrip("/")
        method = request.method.upper()
        try:
            matched = self._match_route(method, path)
            body, files = await self._read_body(request)
        except ApiError as exc:
            return _json_response(exc.status, exc.body)
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
            return _json_response(exc.status, exc.body, exc.headers)
        if result is None:
            return web.Response(status=204)
        record.response = copy.deepcopy(result)
        return _json_response(200, result)

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

    def _channel_or_404(self, channel_id: str) -> JSON:
        channel = self._channels.get(channel_id)
        if channel is None:
            raise _unknown("Channel", 10003)
        return channel

    def _message_or_404(self, channel_id: str, message_id: str) -> JSON:
        message = self._messages.get((channel_id, message_id))
        if message is None:
            raise _unknown("Message", 10008)
        return message

    # users, application, gateway

    async def _get_me(self, **_: Any) -> JSON:
        return copy.deepcopy(self.bot_user)

    async def _get_user(self, uid: str, **_: Any) -> JSON:
        found = self._users.get(uid)
        if found is None:
            raise _unknown("User", 10013)
        return copy.deepcopy(found)

    async def _create_dm(self, *, body: JSON, **_: Any) -> JSON:
        recipient = str(body.get("recipient_id", ""))
        for channel in self._channels.values():
            if channel["type"] == CHANNEL_DM and channel["recipients"][0]["id"] == recipient:
                return copy.deepcopy(channel)
        recipient_user = self._users.get(recipient)
        if recipient_user is None:
            raise _unknown("User", 10013)
        return self.dm_channel(self._snowflake(), recipient_user)

    async def _get_application(self, **_: Any) -> JSON:
        owner = user(1, "owner")
        return {
            "id": self.application_id,
            "name": self.bot_user["username"],
            "description": "",
            "icon": None,
            "bot_public": True,
            "bot_require_code_grant": False,
            "owner": owner,
            "verify_key": "0" * 64,
            "team": None,
            "flags": 0,
            "bot": copy.deepcopy(self.bot_user),
            "interactions_endpoint_url": None,
            "redirect_uris": [],
            "tags": [],
        }

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

    # channels and messages

    async def _get_channel(self, id: str, **_: Any) -> JSON:
        return copy.deepcopy(self._channel_or_404(id))

    def _check_content(self, body: JSON, *, require: bool, files: list[Upload]) -> None:
        content = body.get("content")
        if content is not None and len(str(content)) > MAX_CONTENT_LENGTH:
            raise _invalid_form(
                "content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length."
            )
        if require and not (
            content
            or body.get("embeds")
            or body.get("components")
            or files
            or body.get("sticker_ids")
            or body.get("poll")
        ):
            raise ApiError(400, "Cannot send an empty message", 50006)

    def _bot_message(
        self, channel_id: str, guild_id: str | None, body: JSON, files: list[Upload]
    ) -> JSON:
        message = self._new_message(
            channel_id, guild_id, self.bot_user, str(body.get("content") or "")
        )
        self._apply_fields(message, body, files)
        if body.get("nonce") is not None:
            message["nonce"] = body["nonce"]
        if body.get("tts"):
            message["tts"] = True
        if guild_id is not None:
            message["member"] = self._member_without_user(guild_id, self.bot_id)
        return message

    def _apply_fields(self, message: JSON, body: JSON, files: list[Upload]) -> None:
        if "content" in body:
            message["content"] = str(body["content"] or "")
            message["mentions"] = self._mentions_in(
                message["content"], message.get("guild_id"), body.get("allowed_mentions")
            )
        if "embeds" in body:
            message["embeds"] = copy.deepcopy(body["embeds"] or [])
        if "components" in body:
            message["components"] = copy.deepcopy(body["components"] or [])
        if "flags" in body and body["flags"] is not None:
            keep = message.get("flags", 0) & (FLAG_EPHEMERAL)
            message["flags"] = (int(body["flags"]) & ~FLAG_LOADING) | keep
        if "attachments" in body or files:
            kept = []
            by_index = {str(i): f for i, f in enumerate(files)}
            current = {a["id"]: a for a in message.get("attachments", [])}
            for entry in body.get("attachments") or []:
                entry_id = str(entry.get("id"))
                if entry_id in current:
                    kept.append(current[entry_id])
                    continue
                upload = by_index.pop(entry_id, None)
                if upload is not None:
                    info = {
                        "filename": entry.get("filename") or upload.filename,
                        "content_type": upload.content_type,
                    }
                    if entry.get("description"):
                        info["description"] = entry["description"]
                    kept.append(self._attachment(message["channel_id"], info, upload.data))
            for upload in by_index.values():
                info = {"filename": upload.filename, "content_type": upload.content_type}
                kept.append(self._attachment(message["channel_id"], info, upload.data))
            message["attachments"] = kept

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
        if query.get("after"):
            found = [m for m in found if int(m["id"]) > int(query["after"])]
        return copy.deepcopy(found[:limit])

    async def _get_message(self, cid: str, mid: str, **_: Any) -> JSON:
        return copy.deepcopy(self._message_or_404(cid, mid))

    def _edit(self, message: JSON, body: JSON, files: list[Upload]) -> JSON:
        self._check_content(body, require=False, files=files)
        self._apply_fields(message, body, files)
        message["edited_timestamp"] = _now_iso()
        if not message.get("flags", 0) & FLAG_EPHEMERAL:
            self._dispatch("MESSAGE_UPDATE", message)
        return copy.deepcopy(message)

    async def _edit_message(
        self, cid: str, mid: str, *, body: JSON, files: list[Upload], **_: Any
    ) -> JSON:
        message = self._message_or_404(cid, mid)
        if message["author"]["id"] != self.bot_id:
            raise ApiError(403, "Cannot edit a message authored by another user", 50005)
        return self._edit(message, body, files)

    def _delete(self, cid: str, mid: str) -> None:
        message = self._messages.pop((cid, mid))
        if not message.get("flags", 0) & FLAG_EPHEMERAL:
            event: JSON = {"id": mid, "channel_id": cid}
            if message.get("guild_id"):
                event["guild_id"] = message["guild_id"]
            self._dispatch("MESSAGE_DELETE", event)

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

    # interactions

    def _interaction_or_404(self, iid: str, token: str) -> _Interaction:
        found = self._interactions.get(iid)
        if found is None or found.token != token:
            raise _unknown("interaction", 10062)
        return found

    def _interaction_by_token(self, app: str, token: str) -> _Interaction:
        if app != self.application_id:
            raise _unknown("Webhook", 10015)
        for found in self._interactions.values():
            if found.token == token:
                return found
        raise _unknown("Webhook", 10015)

    def _interaction_message(
        self, interaction: _Interaction, body: JSON, files: list[Upload], *, loading: bool = False
    ) -> JSON:
        data = body.get("data") or {}
        message = self._bot_message(interaction.channel_id, interaction.guild_id, data, files)
        message["application_id"] = self.application_id
        message["webhook_id"] = self.application_id
        message["type"] = 20 if interaction.type == INTERACTION_COMMAND else 0
        message["interaction_metadata"] = {
            "id": interaction.id,
            "type": interaction.type,
            "user": copy.deepcopy(interaction.user),
            "authorizing_integration_owners": interaction.payload.get(
                "authorizing_integration_owners", {}
            ),
        }
        flags = int(data.get("flags") or 0)
        message["flags"] = flags | (FLAG_LOADING if loading else 0)
        key = (interaction.channel_id, message["id"])
        self._messages[key] = message
        if flags & FLAG_EPHEMERAL:
            self._ephemeral.append(key)
        else:
            self._bot_sent.append(key)
            self._dispatch("MESSAGE_CREATE", message)
        return message

    async def _interaction_callback(
        self, iid: str, token: str, *, body: JSON, files: list[Upload], query: Any, **_: Any
    ) -> JSON | None:
        interaction = self._interaction_or_404(iid, token)
        if (
            self.interaction_timeout is not None
            and interaction.response_type is None
            and time.monotonic() - interaction.created > self.interaction_timeout
        ):
            raise _unknown("interaction", 10062)
        if interaction.response_type is not None:
            raise ApiError(400, "Interaction has already been acknowledged.", 40060)
        ctype = int(body.get("type", 0))
        data = body.get("data") or {}
        message: JSON | None = None
        ephemeral = bool(int(data.get("flags") or 0) & FLAG_EPHEMERAL)
        component_message = interaction.payload.get("message")
        if ctype == CALLBACK_MESSAGE:
            self._check_content(data, require=True, files=files)
            message = self._interaction_message(interaction, body, files)
            interaction.original = message["id"]
        elif ctype == CALLBACK_DEFERRED_MESSAGE:
            message = self._interaction_message(interaction, body, files, loading=True)
            interaction.original = message["id"]
        elif ctype in (CALLBACK_DEFERRED_UPDATE, CALLBACK_UPDATE_MESSAGE):
            if component_message is None:
                raise ApiError(
                    400, "Interaction callback type not valid for this interaction", 50035
                )
            interaction.original = component_message["id"]
            ephemeral = bool(component_message.get("flags", 0) & FLAG_EPHEMERAL)
            if ctype == CALLBACK_UPDATE_MESSAGE:
                stored = self._message_or_404(interaction.channel_id, component_message["id"])
                self._check_content(data, require=False, files=files)
                message = self._edit(stored, data, files)
        elif ctype == CALLBACK_MODAL:
            if not data.get("custom_id") or not data.get("title") or not data.get("components"):
                raise _invalid_form(
                    "data", "MODAL_INVALID", "A modal needs custom_id, title and components."
                )
            self.modals.append({"interaction_id": iid, **copy.deepcopy(data)})
        elif ctype == CALLBACK_AUTOCOMPLETE:
            self.autocomplete_results.append({"interaction_id": iid, **copy.deepcopy(data)})
        else:
            raise _invalid_form(
                "type", "BASE_TYPE_CHOICES", "Value must be one of (4, 5, 6, 7, 8, 9)."
            )
        interaction.response_type = ctype
        interaction.original_ephemeral = ephemeral
        if str(query.get("with_response", "")).lower() not in ("1", "true"):
            return None
        answer: JSON = {
            "interaction": {
                "id": iid,
                "type": interaction.type,
                "response_message_id": interaction.original,
                "response_message_loading": ctype == CALLBACK_DEFERRED_MESSAGE,
                "response_message_ephemeral": ephemeral,
            },
            "resource": {"type": ctype},
        }
        if message is not None:
            answer["resource"]["message"] = copy.deepcopy(message)
        return answer

    def _original(self, interaction: _Interaction) -> JSON:
        if interaction.original is None:
            raise _unknown("Message", 10008)
        return self._message_or_404(interaction.channel_id, interaction.original)

    async def _get_original(self, app: str, token: str, **_: Any) -> JSON:
        return copy.deepcopy(self._original(self._interaction_by_token(app, token)))

    async def _edit_original(
        self, app: str, token: str, *, body: JSON, files: list[Upload], **_: Any
    ) -> JSON:
        interaction = self._interaction_by_token(app, token)
        message = self._original(interaction)
        message["flags"] = message.get("flags", 0) & ~FLAG_LOADING
        return self._edit(message, body, files)

    async def _delete_original(self, app: str, token: str, **_: Any) -> None:
        interaction = self._interaction_by_token(app, token)
        message = self._original(interaction)
        self._delete(interaction.channel_id, message["id"])

    async def _followup(
        self, app: str, token: str, *, body: JSON, files: list[Upload], query: Any, **_: Any
    ) -> JSON | None:
        interaction = self._interaction_by_token(app, token)
        if interaction.response_type is None:
            raise _unknown("Webhook", 10015)
        self._check_content(body, require=True, files=files)
        original = None
        if interaction.original is not None:
            original = self._messages.get((interaction.channel_id, interaction.original))
        if (
            interaction.response_type == CALLBACK_DEFERRED_MESSAGE
            and not interaction.followup_used_loading
            and original is not None
            and original.get("flags", 0) & FLAG_LOADING
        ):
            # As on Discord: the first followup after a deferral fills the "thinking" message.
            interaction.followup_used_loading = True
            original["flags"] = original.get("flags", 0) & ~FLAG_LOADING
            result = self._edit(original, body, files)
        else:
            result = copy.deepcopy(self._interaction_message(interaction, {"data": body}, files))
        if str(query.get("wait", "")).lower() in ("1", "true"):
            return result
        return None

    def _followup_message(self, app: str, token: str, mid: str) -> tuple[_Interaction, JSON]:
        interaction = self._interaction_by_token(app, token)
        return interaction, self._message_or_404(interaction.channel_id, mid)

    async def _get_followup(self, app: str, token: str, mid: str, **_: Any) -> JSON:
        return copy.deepcopy(self._followup_message(app, token, mid)[1])

    async def _edit_followup(
        self, app: str, token: str, mid: str, *, body: JSON, files: list[Upload], **_: Any
    ) -> JSON:
        return self._edit(self._followup_message(app, token, mid)[1], body, files)

    async def _delete_followup(self, app: str, token: str, mid: str, **_: Any) -> None:
        interaction, message = self._followup_message(app, token, mid)
        self._delete(interaction.channel_id, message["id"])

    # application commands

    def _command_scope(self, app: str, gid: str | None) -> str | None:
        if app != self.application_id:
            raise _unknown("Application", 10002)
        if gid is not None and gid not in self._guilds:
            raise ApiError(403, "Missing Access", 50001)
        return gid

    async def _get_commands(self, app: str, gid: str | None = None, **_: Any) -> list[JSON]:
        return copy.deepcopy(self._commands.get(self._command_scope(app, gid), []))

    async def _put_commands(
        self, app: str, gid: str | None = None, *, body: JSON, **_: Any
    ) -> list[JSON]:
        scope = self._command_scope(app, gid)
        incoming = body.get("_list")
        if not isinstance(incoming, list):
            raise _invalid_form("_root", "LIST_TYPE_CONVERT", "Must be an array.")
        existing = {(c["name"], c.get("type", 1)): c for c in self._commands.get(scope, [])}
        stored: list[JSON] = []
        for item in incoming:
            command = copy.deepcopy(item)
            command.setdefault("type", 1)
            command.setdefault("description", "")
            command.setdefault("options", [])
            command.setdefault("default_member_permissions", None)
            command.setdefault("nsfw", False)
            previous = existing.get((command["name"], command["type"]))
            command["id"] = previous["id"] if previous else self._snowflake()
            command["application_id"] = self.application_id
            command["version"] = self._snowflake()
            if scope is not None:
                command["guild_id"] = scope
            stored.append(command)
        self._commands[scope] = stored
        self.commands_synced.append({"guild_id": scope, "commands": copy.deepcopy(stored)})
        return copy.deepcopy(stored)
