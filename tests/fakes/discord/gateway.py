"""The fake's gateway websocket: HELLO, IDENTIFY, RESUME, heartbeats and dispatches.

Frames are plain JSON text frames: discord.py asks for ``zlib-stream`` but decompresses only
binary frames and parses text frames as JSON, so compression is not needed. A binary frame
or ``encoding=etf`` closes the socket with 4002. Sequence numbers count per session, and a
RESUME replays the dispatches after the client's ``seq``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from ..base import DEFAULT_TIMEOUT, JSON
from .state import DiscordState

# Opcodes.
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

# The application's flags that say a privileged intent is switched on in the developer portal:
# the _LIMITED ones, those of a bot in fewer than 100 servers (as every fake bot is).
APP_FLAG_PRESENCE_LIMITED = 1 << 13
APP_FLAG_MEMBERS_LIMITED = 1 << 15
APP_FLAG_MESSAGE_CONTENT_LIMITED = 1 << 19


def portal_flags(enabled_intents: int) -> int:
    """The application flags ``GET /applications/@me`` reports for these enabled intents."""
    return (
        (APP_FLAG_PRESENCE_LIMITED if enabled_intents & INTENT_PRESENCES else 0)
        | (APP_FLAG_MEMBERS_LIMITED if enabled_intents & INTENT_MEMBERS else 0)
        | (APP_FLAG_MESSAGE_CONTENT_LIMITED if enabled_intents & INTENT_MESSAGE_CONTENT else 0)
    )


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

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
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


class DiscordGateway(DiscordState):
    """Sessions and sockets; everything else reaches clients through :meth:`_dispatch`."""

    # Set by FakeDiscord.__init__.
    heartbeat_interval: int
    enabled_intents: int

    def __init__(self) -> None:
        super().__init__()
        self.gateway_received: list[JSON] = []
        self.identifies: list[JSON] = []
        self.resumes: list[JSON] = []
        self._consumed_identifies = 0
        self._consumed_resumes = 0
        self._sessions: dict[str, _Session] = {}
        self._early: list[tuple[str, JSON]] = []
        self._connections: list[_Connection] = []

    # -- test side -----------------------------------------------------------------------------

    def inject_event(self, event: str, data: JSON) -> None:
        """Dispatch any other gateway event as is."""
        self._dispatch(event, copy.deepcopy(data))

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

    def forget_sessions(self) -> None:
        """Discord ends every session without a word (as after an outage longer than a resume
        covers): nothing more is dispatched to them, and a RESUME of one is refused."""
        for session in self._sessions.values():
            session.alive = False

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

    # -- internals -----------------------------------------------------------------------------

    def _dispatch(self, event: str, data: JSON) -> None:
        """Send a dispatch to every live session; a guild's events go only to the shard that
        guild lives on, as Discord routes them. Before the first session, dispatches wait for
        it (a test may inject before its client connected); once there were sessions, what no
        live session gets is gone, as on Discord (the channel's history still has a message)."""
        sessions = [s for s in self._sessions.values() if s.alive]
        if not sessions:
            if not self._sessions:
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
        conn = _Connection(ws)
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
