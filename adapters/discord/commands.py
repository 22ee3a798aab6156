"""The gateway's commands as Discord application (slash) commands, read from the registry.

A command that takes something after its name (`/model <name>`) gets one optional text
option. The reply is the interaction's response, so the router's notice for the command is
not posted again (`INTERACTION_PREFIX` marks such origins).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import discord
from discord import app_commands

from adapters.discord.client import NO_MASS_MENTIONS
from gateway.commands.registry import Command
from gateway.engine.router import Router
from gateway.engine.task import MessageTooLong, TooManyTasks
from gateway.events import Inbound, Origin
from gateway.ids import discord_session_id
from gateway.store.errors import DatabaseUnavailable
from gateway.text import UnstorableText

PLATFORM: Final = "discord"
INTERACTION_PREFIX: Final = "interaction:"
REFUSAL: Final = "Sorry, this bot is not available here."
UNAVAILABLE: Final = "⚠️ The gateway cannot reach its database right now: try again in a moment."


class SlashCommands:
    def __init__(
        self,
        router: Router,
        is_admin: Callable[[discord.abc.User], bool],
        admits: Callable[[discord.Interaction[Any]], bool],
    ) -> None:
        self.router = router
        self.is_admin = is_admin
        self.admits = admits  # the allow-lists

    def add(self, tree: app_commands.CommandTree[Any], commands: list[Command]) -> None:
        for command in commands:
            tree.add_command(
                app_commands.Command(
                    name=command.name,
                    description=command.summary[:100],
                    callback=self._callback(command),
                )
            )

    def _callback(self, command: Command) -> Any:
        async def run(interaction: discord.Interaction[Any]) -> None:
            await self.run(interaction, command.name, "")

        @app_commands.describe(text=command.usage or "what follows the command")
        async def run_with_text(
            interaction: discord.Interaction[Any], text: str | None = None
        ) -> None:
            await self.run(interaction, command.name, text or "")

        return run_with_text if command.usage else run

    async def run(self, interaction: discord.Interaction[Any], name: str, args: str) -> None:
        if not self.admits(interaction):
            await interaction.response.send_message(REFUSAL, ephemeral=True)
            return
        channel_id = interaction.channel_id or 0
        origin = Origin(
            PLATFORM,
            channel_id=str(channel_id),
            reply_to=f"{INTERACTION_PREFIX}{interaction.id}",
            sender_id=str(interaction.user.id),
            sender_name=interaction.user.display_name,
            is_admin=self.is_admin(interaction.user),
        )
        text = f"/{name} {args}".rstrip()
        try:
            submission = await self.router.submit(
                Inbound(origin, discord_session_id(channel_id), text)
            )
        except (MessageTooLong, UnstorableText, TooManyTasks) as exc:
            await interaction.response.send_message(f"⚠️ {exc}", ephemeral=True)
            return
        except DatabaseUnavailable:
            # Said to the one who asked, rather than Discord's "the application did not respond".
            await interaction.response.send_message(UNAVAILABLE, ephemeral=True)
            return
        reply = submission.command.text if submission.command else "done"
        await interaction.response.send_message(reply, allowed_mentions=NO_MASS_MENTIONS)
