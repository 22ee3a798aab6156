"""Reading a Telegram message: whether it is for the bot, and which files came with it."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from telegram import Message, User
from telegram.constants import MessageEntityType

from adapters.attachments import Download


def addressed(message: Message, bot_id: int, username: str) -> tuple[bool, str]:
    """Whether a group message is for the bot (a command, a mention, a reply to the bot), and
    its text without the mention."""
    text = message.text or message.caption or ""
    mention = f"@{username}" if username else ""
    found = False
    # A photo or document carries its mention in the caption's entities.
    for entity, read in [
        *((e, message.parse_entity) for e in message.entities or ()),
        *((e, message.parse_caption_entity) for e in message.caption_entities or ()),
    ]:
        if entity.type == MessageEntityType.BOT_COMMAND and entity.offset == 0:
            found = True
        is_mention = entity.type == MessageEntityType.MENTION and mention
        if is_mention and read(entity).lower() == mention.lower():
            found = True
    replied = message.reply_to_message
    if replied is not None and replied.from_user is not None:
        found = found or replied.from_user.id == bot_id
    if mention and not text.startswith("/"):
        pattern = re.compile(rf"(?<!\w){re.escape(mention)}(?!\w)\s?", re.IGNORECASE)
        text = pattern.sub("", text).strip() or text
    return found, text


def downloads(message: Message, fetch: Callable[[str], Awaitable[bytes]]) -> list[Download]:
    """The files of a message (`fetch` takes a file id): a document, the largest size of a
    photo, a voice note, an audio file."""
    found: list[tuple[Any, str, str]] = []
    if message.document is not None:
        doc = message.document
        found.append(
            (doc, doc.file_name or "document", doc.mime_type or "application/octet-stream")
        )
    if message.photo:
        found.append((message.photo[-1], "photo.jpg", "image/jpeg"))
    if message.voice is not None:
        found.append((message.voice, "voice.ogg", message.voice.mime_type or "audio/ogg"))
    if message.audio is not None:
        sound = message.audio
        found.append((sound, sound.file_name or "audio", sound.mime_type or "audio/mpeg"))
    return [
        Download(
            f"{media.file_unique_id}_{name}",
            mime,
            int(media.file_size or 0),
            partial(fetch, media.file_id),
        )
        for media, name, mime in found
    ]


def display_name(user: User) -> str:
    return user.full_name or user.username or str(user.id)
