"""The answer to a slash command: its text, and the document it carries (a member's export) as
an attachment. An answer with a document is ephemeral, whatever the command said: the file is
for the one who asked alone."""

from __future__ import annotations

import io
from typing import Any, Final

import discord

from adapters.discord.client import NO_MENTIONS
from adapters.discord.prompts import literal
from adapters.discord.split import DISCORD_LIMIT
from gateway.commands.registry import CommandReply

# What any bot may upload in one message (servers with boosts take more).
MAX_UPLOAD_BYTES: Final = 10 * 1024 * 1024
TOO_LARGE: Final = (
    "\n\nThe document is larger than Discord takes from a bot: download it with "
    "GET /v1/me/export or ask the operator."
)


async def respond(interaction: discord.Interaction[Any], command: CommandReply | None) -> None:
    """Answer the interaction with `command`'s reply ("done" for none)."""
    text = command.text if command is not None else "done"
    private = command is not None and command.private
    document = command.document if command is not None else None
    if document is None:
        await interaction.response.send_message(
            literal(text)[:DISCORD_LIMIT], allowed_mentions=NO_MENTIONS, ephemeral=private
        )
        return
    if len(document.data) > MAX_UPLOAD_BYTES:
        shown = literal(text)[: DISCORD_LIMIT - len(TOO_LARGE)] + TOO_LARGE
        await interaction.response.send_message(shown, allowed_mentions=NO_MENTIONS, ephemeral=True)
        return
    attached = discord.File(io.BytesIO(document.data), filename=document.name)
    await interaction.response.send_message(
        literal(text)[:DISCORD_LIMIT], allowed_mentions=NO_MENTIONS, ephemeral=True, file=attached
    )
