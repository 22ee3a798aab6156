"""The gateway commands, as the command registry describes them, for a client's completion."""

from __future__ import annotations

from adapters.http.replies import CommandInfo, CommandList
from adapters.http.route import Call


async def list_commands(call: Call) -> CommandList:
    platform = call.origin().platform
    return CommandList(
        commands=[
            CommandInfo(
                name=command.name,
                summary=command.summary,
                usage=command.usage,
                access=command.access.value,
            )
            for command in call.ctx.runtime.commands.menu(platform)
        ]
    )
