"""Messages: how the fake builds, checks, edits and deletes them, and injects one from a user.

Like Discord, every message the bot creates, edits or deletes also goes out over the gateway
(MESSAGE_CREATE, MESSAGE_UPDATE, MESSAGE_DELETE), which catches a bot answering itself.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from ..base import JSON, Upload
from . import payloads
from .api import ApiError, invalid_form, unknown
from .gateway import DiscordGateway
from .payloads import MISSING, Snowflake, now_iso, sid

MAX_CONTENT_LENGTH = 2000
FLAG_EPHEMERAL = 1 << 6
FLAG_LOADING = 1 << 7

_MENTION_RE = re.compile(r"<@!?(\d+)>")


class DiscordMessages(DiscordGateway):
    """The message model shared by channel endpoints and interaction responses."""

    def __init__(self) -> None:
        super().__init__()
        self._attachments: dict[str, bytes] = {}

    # -- test side -----------------------------------------------------------------------------

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
        cid = sid(channel_id)
        gid = self._guild_of(cid) if guild_id is MISSING else guild_id
        gid = sid(gid) if gid is not None else None
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

    # -- internals -----------------------------------------------------------------------------

    def _channel_or_404(self, channel_id: str) -> JSON:
        channel = self._channels.get(channel_id)
        if channel is None:
            raise unknown("Channel", 10003)
        return channel

    def _message_or_404(self, channel_id: str, message_id: str) -> JSON:
        message = self._messages.get((channel_id, message_id))
        if message is None:
            raise unknown("Message", 10008)
        return message

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
        created = payloads.message(self._snowflake(), channel_id, guild_id, author, content)
        channel = self._channels.get(channel_id)
        if channel is not None:
            channel["last_message_id"] = created["id"]
        return created

    def _set_reference(self, message: JSON, target: JSON, *, fail_if_missing: bool = True) -> None:
        key = (
            sid(target.get("channel_id") or message["channel_id"]),
            sid(target["message_id"] if "message_id" in target else target["id"]),
        )
        found = self._messages.get(key)
        if found is None and fail_if_missing:
            raise invalid_form(
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

    def _check_content(self, body: JSON, *, require: bool, files: list[Upload]) -> None:
        content = body.get("content")
        if content is not None and len(str(content)) > MAX_CONTENT_LENGTH:
            raise invalid_form(
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

    def _edit(self, message: JSON, body: JSON, files: list[Upload]) -> JSON:
        self._check_content(body, require=False, files=files)
        self._apply_fields(message, body, files)
        message["edited_timestamp"] = now_iso()
        if not message.get("flags", 0) & FLAG_EPHEMERAL:
            self._dispatch("MESSAGE_UPDATE", message)
        return copy.deepcopy(message)

    def _delete(self, cid: str, mid: str) -> None:
        message = self._messages.pop((cid, mid))
        if not message.get("flags", 0) & FLAG_EPHEMERAL:
            event: JSON = {"id": mid, "channel_id": cid}
            if message.get("guild_id"):
                event["guild_id"] = message["guild_id"]
            self._dispatch("MESSAGE_DELETE", event)
