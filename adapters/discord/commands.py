"""The gateway's commands as Discord application (slash) commands, read from the registry.

A command that takes something after its name (`/model <name>`) gets one optional text
option. A use is handed to the adapter (`CommandUse`), which takes it in as the message
`/name args` would be taken in. The reply is the interaction's response, so the router's
notice for the command is not posted again (`INTERACTION_PREFIX` marks such origins).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final

import discord
from discord import app_commands

from gateway.commands.registry import Command

# What marks a slash command's origin; the core reads it as an answer seen by the asker alone.
from gateway.linking import INTERACTION_PREFIX as INTERACTION_PREFIX

PLATFORM: Final = "discord"
REFUSAL: Final = "Sorry, this bot is not available here."
UNAVAILABLE: Final = "⚠️ The gateway cannot reach its database right now: try again in a moment."


# A use of a slash command: the interaction, the command's name and what follows the name.
CommandUse = Callable[[discord.Interaction[Any], str, str], Awaitable[None]]


class SlashCommands:
    def __init__(self, use: CommandUse) -> None:
        self.use = use

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
            await self.use(interaction, command.name, "")

        @app_commands.describe(text=command.usage or "what follows the command")
        async def run_with_text(
            interaction: discord.Interaction[Any], text: str | None = None
        ) -> None:
            await self.use(interaction, command.name, text or "")

        return run_with_text if command.usage else run
