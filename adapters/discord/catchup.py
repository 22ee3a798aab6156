"""What was posted while the gateway was away from Discord, read when it is back.

Discord does not deliver to a new gateway session what an earlier one missed: a message posted
while the gateway was down, or while its connection was gone past what a RESUME covers, never
arrives as an event. So whenever a shard starts a new session (READY after an IDENTIFY: at
start, and after a RESUME that failed), once every shard of the client is ready again, each
channel with a `dc-` session is read for the messages after the newest one the archive has
from Discord (by its id, the message's `source_key`): the oldest first, at most
`discord_catch_up_messages` a channel, none older than `discord_catch_up_max_age_seconds`.
Each is taken in as if it had just arrived — archived once (its id), answered in order — with
a line saying when it was posted and that it was read late, which the agent sees too.

Live messages must not overtake the ones being read: from a new session's start until the
channels to read are known, every message waits; then only those of a channel still being read.
A message that is both read and delivered live is stored once, at its place.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from dataclasses import replace
from typing import Protocol

import discord

from adapters.chat import Arrival
from gateway.engine import Submission
from gateway.logs import get_logger
from gateway.runtime import Runtime

log = get_logger(__name__)

SESSION_PREFIX = "dc-"
KEY_PREFIX = "discord:"


class Reader(Protocol):
    """What the catch-up needs of the adapter."""

    @property
    def client(self) -> discord.Client: ...

    def arrival_of(self, message: discord.Message) -> Arrival | None: ...

    async def arrive(self, arrival: Arrival) -> Submission | None: ...


def late_line(message: discord.Message) -> str:
    """The line a message read late carries, for the agent and the archive."""
    posted = message.created_at.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"[posted {posted} UTC while the gateway was away; read late]"


class CatchUp:
    def __init__(self, reader: Reader, runtime: Runtime) -> None:
        self.reader = reader
        self.runtime = runtime
        self.limit = runtime.settings.discord_catch_up_messages
        self.max_age_ms = int(runtime.settings.discord_catch_up_max_age_seconds * 1000)
        self._all_open = asyncio.Event()
        self._all_open.set()
        self._channels: dict[int, asyncio.Event] = {}
        self._connecting: set[int] = set()
        self._run: asyncio.Task[None] | None = None
        self._again = False

    # -- the shards' sessions ------------------------------------------------------------------

    def connected(self, shard_id: int) -> None:
        """A shard began a new session (its READY): what it missed is to be read. Called before
        any of that session's messages is handled, so they all wait."""
        self._connecting.add(shard_id)
        self._all_open.clear()

    def shard_ready(self, shard_id: int) -> None:
        """A shard has its guilds: once every shard has, the channels are read."""
        self._connecting.discard(shard_id)
        if self._connecting:
            return
        if self._run is not None and not self._run.done():
            self._again = True  # another gap while reading: read again once this run ends
            return
        self._run = asyncio.create_task(self._runs(), name="discord catch-up")

    def resumed(self, shard_id: int) -> None:
        """A shard resumed its session. One whose READY was cut short before its guilds were
        in (discord.py then never says it is ready) is read now rather than waited for."""
        if shard_id in self._connecting:
            self.shard_ready(shard_id)

    async def stop(self) -> None:
        """Stop reading; whatever waits goes on (the adapter's stop ends its arrivals)."""
        if self._run is not None:
            self._run.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._run
        self._open_all()

    # -- live messages -------------------------------------------------------------------------

    async def turn(self, channel_id: int) -> None:
        """Wait until `channel_id`'s missed messages are in. Returns without awaiting anything
        when nothing is being read, so a live message keeps its place."""
        if not self._all_open.is_set():
            await self._all_open.wait()
        gate = self._channels.get(channel_id)
        if gate is not None:
            await gate.wait()

    # -- reading -------------------------------------------------------------------------------

    async def _runs(self) -> None:
        while True:
            self._again = False
            await self._read_all()
            if not self._again:
                return

    async def _read_all(self) -> None:
        try:
            marks = await self.runtime.store.latest_sources(SESSION_PREFIX, KEY_PREFIX)
        except Exception as exc:
            log.warning("discord catch-up: the archive could not be read", error=repr(exc))
            self._open_all()
            return
        floor = _snowflake_at(self.runtime.clock.now_ms() - self.max_age_ms)
        todo: dict[int, int] = {}
        for session_id, key in marks.items():
            channel, mark = session_id.removeprefix(SESSION_PREFIX), key.removeprefix(KEY_PREFIX)
            if channel.isdigit() and mark.isdigit() and self.limit > 0:
                todo[int(channel)] = max(int(mark), floor)
                self._channels.setdefault(int(channel), asyncio.Event())
        if not self._connecting and not self._again:
            self._all_open.set()  # the channels to read are known: the others' messages go on
        taken = 0
        for channel_id, after in todo.items():
            try:
                taken += await self._read(channel_id, after)
            except discord.HTTPException as exc:
                log.warning(
                    "discord catch-up: channel not read", channel=channel_id, error=str(exc)
                )
            finally:
                gate = self._channels.pop(channel_id, None)
                if gate is not None:
                    gate.set()
        log.info("discord caught up", channels=len(todo), messages=taken)

    async def _read(self, channel_id: int, after: int) -> int:
        channel = await self._channel(channel_id)
        if channel is None:
            return 0
        taken = 0
        history = channel.history(
            limit=self.limit, after=discord.Object(id=after), oldest_first=True
        )
        async for message in history:
            arrival = self.reader.arrival_of(message)
            if arrival is not None:
                await self.reader.arrive(_marked_late(arrival, message))
                taken += 1
        if taken:
            log.info("discord: read messages posted while away", channel=channel_id, count=taken)
        return taken

    async def _channel(self, channel_id: int) -> discord.abc.Messageable | None:
        client = self.reader.client
        found = client.get_channel(channel_id)
        if found is None:
            try:  # a DM channel, or a thread no longer in the cache
                found = await client.fetch_channel(channel_id)
            except (discord.NotFound, discord.Forbidden) as exc:
                log.info("discord catch-up: channel gone", channel=channel_id, error=str(exc))
                return None
        return found if isinstance(found, discord.abc.Messageable) else None

    def _open_all(self) -> None:
        self._all_open.set()
        for gate in self._channels.values():
            gate.set()
        self._channels.clear()


def _marked_late(arrival: Arrival, message: discord.Message) -> Arrival:
    if not (arrival.text or arrival.downloads):
        return arrival  # nothing the bot would take in: it stays so
    line = late_line(message)
    return replace(arrival, text=f"{arrival.text}\n{line}" if arrival.text else line)


def _snowflake_at(ms: int) -> int:
    return discord.utils.time_snowflake(dt.datetime.fromtimestamp(ms / 1000, dt.UTC))
