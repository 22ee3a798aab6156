"""Who is an admin on Discord: a gateway admin (`AGENVOY_ADMINS`), or an admin of the guild a
member writes in — the role whose id `AGENVOY_DISCORD_ADMIN_ROLE` gives, or Discord's own
Administrator or Manage Server permission in that guild (its owner has every permission).
Never a role matched by its name: a role of that name may exist in any guild the bot is in."""

from __future__ import annotations

from collections.abc import Callable

import discord

PLATFORM = "discord"


class DiscordAdmins:
    def __init__(
        self, client: Callable[[], discord.Client], admin_keys: frozenset[str], admin_role: str
    ) -> None:
        # The adapter's current client: a reconnect may make a new one.
        self.client = client
        self.admin_keys = admin_keys
        self.admin_role = admin_role

    def is_admin(self, user: discord.abc.User) -> bool:
        if f"{PLATFORM}:{user.id}" in self.admin_keys:
            return True
        if not isinstance(user, discord.Member):
            return False  # a DM: no guild to be an admin of
        if self.admin_role and any(str(role.id) == self.admin_role for role in user.roles):
            return True
        granted = user.guild_permissions
        return granted.administrator or granted.manage_guild

    async def of_session(self, session_id: str, user_id: str) -> bool:
        """Whether the member `user_id` is an admin of the guild of `session_id`'s channel, as
        Discord says."""
        channel_id = session_id.removeprefix("dc-")
        if not channel_id.isdigit() or not user_id.isdigit():
            return False
        guild = getattr(self.client().get_channel(int(channel_id)), "guild", None)
        if not isinstance(guild, discord.Guild):
            return False
        member = guild.get_member(int(user_id))
        if member is None:
            # Without the members intent few members are cached: Discord is asked.
            try:
                member = await guild.fetch_member(int(user_id))
            except discord.HTTPException:
                return False  # not a member there (or Discord cannot say): no admin of it
        return self.is_admin(member)
