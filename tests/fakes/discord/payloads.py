"""Builders for the Discord objects the fake serves and dispatches.

Each returns a fresh dict with the fields discord.py reads (a missing one usually crashes
``Client.start()`` with a KeyError) plus the ones the real API sends for realism. Tests build
fixtures with the public ones (``user``, ``text_channel``, ``thread``, ``role``, ``member``);
the fake uses the rest.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from ..base import JSON

Snowflake = int | str

ATTACHMENT_SIZE_LIMIT = 25 * 1024 * 1024
# Reported as the bot's ``app_permissions`` and as the acting member's permissions: what an
# ordinary member may do (send, embed, attach, react, threads...), without any moderation
# or administrator bit, so a handler that checks permissions sees a plain user.
MEMBER_PERMISSIONS = "2248473465835073"

# Channel types.
CHANNEL_TEXT = 0
CHANNEL_DM = 1
CHANNEL_PUBLIC_THREAD = 11
THREAD_TYPES = (10, 11, 12)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


# "Not given" where None already means something (no guild: a DM).
MISSING: Any = _Missing()


def sid(value: Snowflake) -> str:
    return str(int(value))


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def user(
    id: Snowflake, username: str, *, bot: bool = False, global_name: str | None = None
) -> JSON:
    """A Discord ``User`` object."""
    data: JSON = {
        "id": sid(id),
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
        "id": sid(id),
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
        "id": sid(id),
        "type": CHANNEL_PUBLIC_THREAD,
        "name": name,
        "parent_id": sid(parent_id),
        "owner_id": sid(owner_id),
        "last_message_id": None,
        "rate_limit_per_user": 0,
        "message_count": 0,
        "member_count": 1,
        "flags": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 1440,
            "archive_timestamp": now_iso(),
            "locked": False,
        },
    }


def dm_channel(id: Snowflake, recipient: JSON) -> JSON:
    """A DM channel (type 1) between the bot and ``recipient``."""
    return {
        "id": sid(id),
        "type": CHANNEL_DM,
        "last_message_id": None,
        "recipients": [copy.deepcopy(recipient)],
        "flags": 0,
    }


def role(id: Snowflake, name: str, *, permissions: int = 0, position: int = 1) -> JSON:
    """A guild ``Role``; the ``@everyone`` role (id = guild id) is added by ``add_guild``."""
    return {
        "id": sid(id),
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
        "roles": [sid(r) for r in roles or []],
        "nick": nick,
        "avatar": None,
        "joined_at": now_iso(),
        "premium_since": None,
        "deaf": False,
        "mute": False,
        "pending": False,
        "flags": 0,
    }


def guild(id: str, name: str, roles: list[JSON], members: list[JSON], owner_id: str) -> JSON:
    """A ``Guild`` as GUILD_CREATE carries it, still without channels and threads."""
    return {
        "id": id,
        "name": name,
        "icon": None,
        "splash": None,
        "discovery_splash": None,
        "owner_id": owner_id,
        "afk_channel_id": None,
        "afk_timeout": 300,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "roles": roles,
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
        "member_count": len(members),
        "joined_at": now_iso(),
        "voice_states": [],
        "presences": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "soundboard_sounds": [],
        "members": members,
        "channels": [],
        "threads": [],
    }


def message(id: str, channel_id: str, guild_id: str | None, author: JSON, content: str) -> JSON:
    """A plain ``Message``; DMs have no ``guild_id``."""
    data: JSON = {
        "id": id,
        "channel_id": channel_id,
        "author": copy.deepcopy(author),
        "content": content,
        "timestamp": now_iso(),
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
        data["guild_id"] = guild_id
    return data


def application(id: str, bot_user: JSON, flags: int = 0) -> JSON:
    """The bot's ``Application``; a null ``interactions_endpoint_url`` keeps discord.py from
    warning that components will not be delivered over the gateway. ``flags`` say which
    privileged intents are switched on."""
    return {
        "id": id,
        "name": bot_user["username"],
        "description": "",
        "icon": None,
        "bot_public": True,
        "bot_require_code_grant": False,
        "owner": user(1, "owner"),
        "verify_key": "0" * 64,
        "team": None,
        "flags": flags,
        "bot": copy.deepcopy(bot_user),
        "interactions_endpoint_url": None,
        "redirect_uris": [],
        "tags": [],
    }


def interaction(
    id: str,
    token: str,
    application_id: str,
    type: int,
    data: JSON,
    channel: JSON,
    invoker: JSON,
    *,
    guild_id: str | None,
    message: JSON | None,
) -> JSON:
    """An INTERACTION_CREATE payload; ``invoker`` is the member (with its user) in a guild
    and the user in a DM.

    discord.py 2.7 indexes ``attachment_size_limit`` directly, and its ViewStore ignores a
    component click without ``message``, ``guild_id`` or ``member``.
    """
    payload: JSON = {
        "id": id,
        "application_id": application_id,
        "type": type,
        "token": token,
        "version": 1,
        "data": data,
        "channel_id": channel["id"],
        "channel": copy.deepcopy(channel),
        "locale": "en-US",
        "app_permissions": MEMBER_PERMISSIONS,
        "entitlements": [],
        "attachment_size_limit": ATTACHMENT_SIZE_LIMIT,
    }
    if guild_id is not None:
        payload["guild_id"] = guild_id
        payload["guild"] = {"id": guild_id, "locale": "en-US", "features": []}
        payload["guild_locale"] = "en-US"
        payload["member"] = copy.deepcopy(invoker)
        payload["authorizing_integration_owners"] = {"0": guild_id}
        payload["context"] = 0
    else:
        payload["user"] = copy.deepcopy(invoker)
        payload["authorizing_integration_owners"] = {"1": invoker["id"]}
        payload["context"] = 1
    if message is not None:
        payload["message"] = copy.deepcopy(message)
    return payload
