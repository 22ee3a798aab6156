"""Where the bot serves: the one check that every Discord entry point (a message, a slash
command, a button press, a modal submit) passes before anything is done for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import discord

from gateway.settings import Settings


@dataclass(frozen=True, slots=True)
class AllowList:
    guilds: frozenset[int]  # empty: every guild the bot is in
    channels: frozenset[int]  # empty: every channel of an allowed guild
    dms: bool

    @classmethod
    def from_settings(cls, settings: Settings) -> AllowList:
        return cls(
            guilds=Settings.id_set(settings.discord_allowed_guilds),
            channels=Settings.id_set(settings.discord_allowed_channels),
            dms=settings.discord_allow_dms,
        )

    def serves(self, where: discord.Message | discord.Interaction[Any]) -> bool:
        """Whether the gateway serves what came in through `where`."""
        if isinstance(where, discord.Message):
            channel: Any = where.channel
            guild_id = guild_of(where)
        else:
            channel = where.channel or discord.Object(where.channel_id or 0)
            guild_id = where.guild_id
        if guild_id is None:
            # Anyone can DM a bot: only when the admin said so.
            return self.dms
        if self.guilds and guild_id not in self.guilds:
            return False
        if not self.channels:
            return True
        # A thread is allowed through its parent channel, a channel (and its threads) through
        # its category; discord.py names a channel's category `category_id`, not `parent_id`.
        ids = {getattr(channel, name, None) for name in ("id", "parent_id", "category_id")}
        return bool(ids & self.channels)


def guild_of(message: discord.Message) -> int | None:
    """The message's guild, also when the guild is not in the client's cache; None in a DM."""
    if message.guild is not None:
        return message.guild.id
    guild_id: int | None = getattr(message.channel, "guild_id", None)
    return guild_id
