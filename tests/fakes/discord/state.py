"""The guilds, channels, users and messages the fake knows, and the test-side model API."""

from __future__ import annotations

import copy
import itertools
import time

from ..base import JSON, RecordingServer
from .api import RestCall
from .payloads import THREAD_TYPES, Snowflake, dm_channel, guild, member, role, sid

DISCORD_EPOCH_MS = 1_420_070_400_000
# @everyone's permissions in a new guild, as Discord sets them.
EVERYONE_PERMISSIONS = 1071698660929
# The guild owner when a test names none: the application's owner, not a member.
GUILD_OWNER_ID = "1"


class DiscordState(RecordingServer[RestCall]):
    """What the gateway and the REST API both read and change."""

    # Set by FakeDiscord.__init__.
    token: str
    bot_user: JSON
    application_id: str

    def __init__(self) -> None:
        super().__init__()
        # Snowflakes carry their creation time, so ids are made from the clock.
        self._ids = itertools.count(((int(time.time() * 1000) - DISCORD_EPOCH_MS) << 22) + 1)
        self._users: dict[str, JSON] = {}
        self._guilds: dict[str, JSON] = {}
        self._channels: dict[str, JSON] = {}
        self._messages: dict[tuple[str, str], JSON] = {}
        self._bot_sent: list[tuple[str, str]] = []

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
        gid = sid(guild_id)
        everyone = role(gid, "@everyone", permissions=EVERYONE_PERMISSIONS, position=0)
        all_roles = [everyone, *(copy.deepcopy(r) for r in roles if sid(r["id"]) != gid)]
        all_members = [member(self.bot_user)]
        for item in members:
            entry = copy.deepcopy(item) if "user" in item else member(item)
            if entry["user"]["id"] != self.bot_id:
                all_members.append(entry)
            self._users[entry["user"]["id"]] = copy.deepcopy(entry["user"])
        # The owner holds every permission; by default it is nobody the test writes as.
        owner = sid(owner_id) if owner_id is not None else GUILD_OWNER_ID
        stored = guild(gid, name, all_roles, all_members, owner)
        self._guilds[gid] = stored
        for channel in channels:
            self.add_channel(gid, channel)
        return copy.deepcopy(stored)

    def add_role(self, guild_id: Snowflake, new_role: JSON, holders: list[Snowflake]) -> None:
        """Add a role to a registered guild and give it to members of it (before the client
        connects: no GUILD_ROLE_CREATE or GUILD_MEMBER_UPDATE is sent)."""
        stored = self._guilds[sid(guild_id)]
        stored["roles"].append(copy.deepcopy(new_role))
        wanted = {sid(h) for h in holders}
        for entry in stored["members"]:
            if entry["user"]["id"] in wanted:
                entry["roles"].append(sid(new_role["id"]))

    def add_channel(self, guild_id: Snowflake, channel: JSON) -> JSON:
        """Add a text channel or thread to a registered guild (no CHANNEL_CREATE is sent)."""
        parent = self._guilds[sid(guild_id)]
        stored = copy.deepcopy(channel)
        stored["guild_id"] = parent["id"]
        if stored["type"] in THREAD_TYPES:
            if stored.get("owner_id") in (None, "0"):
                stored["owner_id"] = self.bot_id
            parent["threads"].append(stored)
        else:
            parent["channels"].append(stored)
        self._channels[stored["id"]] = stored
        return copy.deepcopy(stored)

    def dm_channel(self, id: Snowflake, recipient_user: JSON) -> JSON:
        """Register a DM channel (type 1) between the bot and ``recipient_user``."""
        channel = dm_channel(id, recipient_user)
        self._users[recipient_user["id"]] = copy.deepcopy(recipient_user)
        self._channels[channel["id"]] = channel
        return copy.deepcopy(channel)

    def channel(self, channel_id: Snowflake) -> JSON | None:
        found = self._channels.get(sid(channel_id))
        return copy.deepcopy(found) if found is not None else None

    # -- test-side inspection ------------------------------------------------------------------

    def sent_messages(self, channel_id: Snowflake | None = None) -> list[JSON]:
        """Non-ephemeral messages the bot sent (oldest first), latest state, deleted left out."""
        return self._collect(self._bot_sent, channel_id)

    def message(self, channel_id: Snowflake, message_id: Snowflake) -> JSON | None:
        """The stored state of any message, or None if unknown or deleted."""
        found = self._messages.get((sid(channel_id), sid(message_id)))
        return copy.deepcopy(found) if found is not None else None

    # -- internals -----------------------------------------------------------------------------

    def _snowflake(self) -> str:
        return str(next(self._ids))

    def _guild_of(self, channel_id: str) -> str | None:
        channel = self._channels.get(channel_id)
        return channel.get("guild_id") if channel is not None else None

    def _collect(self, keys: list[tuple[str, str]], channel_id: Snowflake | None) -> list[JSON]:
        wanted = sid(channel_id) if channel_id is not None else None
        result = []
        for key in keys:
            message = self._messages.get(key)
            if message is not None and (wanted is None or key[0] == wanted):
                result.append(copy.deepcopy(message))
        return result

    def _stored(self, message: JSON) -> JSON:
        key = (sid(message["channel_id"]), sid(message["id"]))
        found = self._messages.get(key)
        if found is None:
            raise ValueError(f"unknown message {key}")
        return copy.deepcopy(found)

    def _member_without_user(self, guild_id: str, user_id: str) -> JSON:
        # How the gateway sends a message author's member: the user is beside it.
        known = self._guilds.get(guild_id)
        for entry in known["members"] if known else []:
            if entry["user"]["id"] == user_id:
                copied: JSON = copy.deepcopy(entry)
                copied.pop("user")
                return copied
        found = member({"id": user_id})
        found.pop("user")
        return found
