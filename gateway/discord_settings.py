"""The Discord adapter's settings, part of `Settings` (AGENVOY_DISCORD_*)."""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr, field_validator


class DiscordSettings(BaseModel):
    # Discord: the adapter starts when a token is set.
    discord_token: SecretStr | None = None
    # REST and gateway addresses; set them only to put a proxy in front of Discord.
    discord_api_url: str = "https://discord.com/api/v10"
    discord_gateway_url: str = "wss://gateway.discord.gg/"
    # Comma-separated ids; empty = all.
    discord_allowed_guilds: str = ""
    discord_allowed_channels: str = ""
    # Channels where every message goes to the agent without a mention.
    discord_listen_channels: str = ""
    # Whether the bot answers direct messages: anyone can DM a bot, so only when asked to.
    discord_allow_dms: bool = False
    # Members with the role of this id count as admins (a role id names one role of one guild).
    discord_admin_role: str = ""
    # Sharding: total shards, and which of them this process runs ("0,1"); empty = all.
    discord_shard_count: int | None = None
    # Attachments larger than this are not downloaded, in bytes.
    discord_max_download_bytes: int = 25 * 1024 * 1024
    discord_shard_ids: str = ""
    # After a new gateway session (a start, a resume that failed), what was posted meanwhile in
    # each channel with a session is read: at most this many messages a channel (0 = none),
    # none older than this.
    discord_catch_up_messages: int = Field(50, ge=0, le=1000)
    discord_catch_up_max_age_seconds: float = Field(86_400.0, ge=0)

    @field_validator("discord_admin_role", mode="after")
    @classmethod
    def _a_role_id(cls, value: str) -> str:
        # A role is named by its owner in each guild: a name would make the holders of a role
        # of that name in any guild the bot is in admins of every channel it serves.
        value = value.strip()
        if value and not value.isdigit():
            raise ValueError(
                f"AGENVOY_DISCORD_ADMIN_ROLE takes a role id (Server Settings → Roles → Copy Role "
                f"ID, with Developer Mode on), not a name: {value!r} would match a role of that "
                "name in every guild the bot is in"
            )
        return value

    @field_validator("discord_shard_count", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if value == "" else value
