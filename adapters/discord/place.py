"""Where on Discord a message was sent, as the profile bindings need it: the guild, the
channel a thread is in, the category, and the sender's roles (highest first)."""

from __future__ import annotations

import dataclasses
from typing import Any

import discord

from gateway.events import Origin


def placed(origin: Origin, channel: Any, user: discord.abc.User) -> Origin:
    """`origin` with what discord.py knows of `channel` and of `user` in its guild; as it was
    without a channel, in a DM, or where the channel is not cached."""
    if channel is None:
        return origin
    guild_id = getattr(channel, "guild_id", None) or getattr(
        getattr(channel, "guild", None), "id", None
    )
    if guild_id is None:
        return origin
    parent_id = ""
    category_id = getattr(channel, "category_id", None)
    if isinstance(channel, discord.Thread):
        parent_id = str(channel.parent_id)
        parent = channel.parent
        category_id = getattr(parent, "category_id", None) if parent is not None else None
    roles: tuple[str, ...] = ()
    if isinstance(user, discord.Member):
        # discord.py lists a member's roles lowest first, @everyone (the guild's id) first.
        roles = tuple(str(r.id) for r in reversed(user.roles) if r.id != guild_id)
    return dataclasses.replace(
        origin,
        guild_id=str(guild_id),
        parent_id=parent_id,
        category_id=str(category_id) if category_id else "",
        role_ids=roles,
    )
