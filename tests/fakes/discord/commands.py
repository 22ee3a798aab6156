"""Application commands: what ``tree.sync()`` registers, and slash command invocations."""

from __future__ import annotations

import copy
from typing import Any

from ..base import JSON
from .api import ApiError, invalid_form, unknown
from .interactions import INTERACTION_COMMAND, DiscordInteractions
from .payloads import MISSING, Snowflake, sid
from .rest import RouteRow


class DiscordCommands(DiscordInteractions):
    """Global and per-guild command lists, as ``PUT .../commands`` last replaced them."""

    def __init__(self) -> None:
        super().__init__()
        self.commands_synced: list[JSON] = []
        self._commands: dict[str | None, list[JSON]] = {}

    # -- test side -----------------------------------------------------------------------------

    def inject_command(
        self,
        user: JSON,
        channel_id: Snowflake,
        name: str,
        options: list[JSON] | None = None,
        *,
        guild_id: Snowflake | None = MISSING,
        command_type: int = 1,
        resolved: JSON | None = None,
    ) -> JSON:
        """Dispatch INTERACTION_CREATE type 2 for the slash command ``name``.

        ``options`` are raw option dicts (``{"name", "type", "value"}``). The command id is
        taken from the synced commands when ``name`` was synced.
        """
        cid = sid(channel_id)
        gid = self._guild_of(cid) if guild_id is MISSING else guild_id
        gid = sid(gid) if gid is not None else None
        command_id = None
        for scope in (gid, None):
            for command in self._commands.get(scope, []):
                if command["name"] == name and command.get("type", 1) == command_type:
                    command_id = command["id"]
        data: JSON = {
            "id": command_id or self._snowflake(),
            "name": name,
            "type": command_type,
            "options": copy.deepcopy(options or []),
        }
        if resolved:
            data["resolved"] = copy.deepcopy(resolved)
        if gid is not None:
            data["guild_id"] = gid
        return self._inject_interaction(INTERACTION_COMMAND, user, cid, data, guild_id=gid)

    def registered_commands(self, guild_id: Snowflake | None = None) -> list[JSON]:
        """The application commands as last synced (global, or for ``guild_id``)."""
        return copy.deepcopy(self._commands.get(sid(guild_id) if guild_id else None, []))

    # -- internals -----------------------------------------------------------------------------

    def _route_table(self) -> list[RouteRow]:
        return [
            *super()._route_table(),
            ("GET", "/applications/{app}/commands", self._get_commands, True),
            ("PUT", "/applications/{app}/commands", self._put_commands, True),
            ("GET", "/applications/{app}/guilds/{gid}/commands", self._get_commands, True),
            ("PUT", "/applications/{app}/guilds/{gid}/commands", self._put_commands, True),
        ]

    def _command_scope(self, app: str, gid: str | None) -> str | None:
        if app != self.application_id:
            raise unknown("Application", 10002)
        if gid is not None and gid not in self._guilds:
            raise ApiError(403, "Missing Access", 50001)
        return gid

    async def _get_commands(self, app: str, gid: str | None = None, **_: Any) -> list[JSON]:
        return copy.deepcopy(self._commands.get(self._command_scope(app, gid), []))

    async def _put_commands(
        self, app: str, gid: str | None = None, *, body: JSON, **_: Any
    ) -> list[JSON]:
        scope = self._command_scope(app, gid)
        incoming = body.get("_list")
        if not isinstance(incoming, list):
            raise invalid_form("_root", "LIST_TYPE_CONVERT", "Must be an array.")
        existing = {(c["name"], c.get("type", 1)): c for c in self._commands.get(scope, [])}
        stored: list[JSON] = []
        for item in incoming:
            command = copy.deepcopy(item)
            command.setdefault("type", 1)
            command.setdefault("description", "")
            command.setdefault("options", [])
            command.setdefault("default_member_permissions", None)
            command.setdefault("nsfw", False)
            previous = existing.get((command["name"], command["type"]))
            command["id"] = previous["id"] if previous else self._snowflake()
            command["application_id"] = self.application_id
            command["version"] = self._snowflake()
            if scope is not None:
                command["guild_id"] = scope
            stored.append(command)
        self._commands[scope] = stored
        self.commands_synced.append({"guild_id": scope, "commands": copy.deepcopy(stored)})
        return copy.deepcopy(stored)
