"""The discord.py client, and the prompt buttons it recognises again after a restart.

Buttons are dynamic items: their custom ids carry the task hash, and the client registers the
templates at start-up, so a button on a message posted before a restart still works. What a
press does is up to the adapter that owns the client (`Owner`).
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Final, Protocol

import aiohttp
import discord
import yarl
from discord import app_commands, ui

from adapters.discord.allowlist import AllowList
from adapters.discord.catchup import CatchUp
from adapters.discord.invite import invite_url
from gateway.engine import Traffic
from gateway.events import AskUserEvent, ConfirmEvent
from gateway.logs import get_logger
from gateway.runtime import Runtime
from gateway.settings import Settings

log = get_logger(__name__)

# Nothing the bot posts pings anyone but the person it answers (a reply to their message):
# a reply or a notice may echo what someone wrote, `@everyone` or `<@id>` included.
NO_MENTIONS: Final = discord.AllowedMentions(
    everyone=False, roles=False, users=False, replied_user=True
)
TASK: Final = r"(?P<task>[A-Za-z0-9_-]{1,64})"
MAX_OPTIONS: Final = 25  # buttons on one message


def rate_limit_trace(traffic: Traffic) -> aiohttp.TraceConfig:
    """discord.py waits out a 429 and tries again itself; the client's session tells this
    trace of every answer, so that each 429 is counted (/metrics) all the same."""

    async def on_request_end(
        session: aiohttp.ClientSession, context: Any, params: aiohttp.TraceRequestEndParams
    ) -> None:
        if params.response.status == 429:
            traffic.throttled("discord")

    trace = aiohttp.TraceConfig()
    trace.on_request_end.append(on_request_end)
    return trace


def point_at(settings: Settings) -> None:
    """Send REST and gateway traffic where the settings say (a proxy, or a test double)."""
    discord.http.Route.BASE = settings.discord_api_url.rstrip("/")
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.discord_gateway_url)


class Owner(Protocol):
    """What the client hands on to the adapter."""

    ready: asyncio.Event
    runtime: Runtime  # its router counts the REST API's 429s (`rate_limit_trace`)
    allow_list: AllowList  # its guilds get the commands; each press is checked by the owner
    catch_up: CatchUp  # told of each shard's new session, and when its guilds are in

    def add_commands(self, tree: app_commands.CommandTree[Any]) -> None: ...

    async def on_message(self, message: discord.Message) -> None: ...

    async def on_press(
        self,
        interaction: discord.Interaction[Any],
        task_hash: str,
        *,
        approve: bool | None = None,
        option: int | None = None,
        text: str | None = None,
    ) -> None:
        """A prompt button was pressed (or its answer typed into the modal)."""

    async def ask_for_answer(self, interaction: discord.Interaction[Any], task_hash: str) -> None:
        """The Answer button of a free-text question: open the modal, if the presser may."""


# -- buttons that survive a restart -----------------------------------------------------------


class ConfirmButton(ui.DynamicItem[ui.Button[Any]], template=rf"agv:c:{TASK}:(?P<choice>[yn])"):
    def __init__(self, task_hash: str, approve: bool) -> None:
        super().__init__(
            ui.Button(
                label="Approve" if approve else "Deny",
                style=discord.ButtonStyle.success if approve else discord.ButtonStyle.danger,
                custom_id=f"agv:c:{task_hash}:{'y' if approve else 'n'}",
            )
        )
        self.task_hash, self.approve = task_hash, approve

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction[Any], item: ui.Item[Any], match: re.Match[str]
    ) -> ConfirmButton:
        return cls(match["task"], match["choice"] == "y")

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        await owner(interaction).on_press(interaction, self.task_hash, approve=self.approve)


class OptionButton(ui.DynamicItem[ui.Button[Any]], template=rf"agv:o:{TASK}:(?P<index>\d{{1,2}})"):
    def __init__(self, task_hash: str, index: int, label: str = "option") -> None:
        super().__init__(
            ui.Button(label=label[:80] or "option", custom_id=f"agv:o:{task_hash}:{index}")
        )
        self.task_hash, self.index = task_hash, index

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction[Any], item: ui.Item[Any], match: re.Match[str]
    ) -> OptionButton:
        return cls(match["task"], int(match["index"]))

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        await owner(interaction).on_press(interaction, self.task_hash, option=self.index)


class AnswerButton(ui.DynamicItem[ui.Button[Any]], template=rf"agv:a:{TASK}"):
    def __init__(self, task_hash: str) -> None:
        super().__init__(ui.Button(label="Answer", custom_id=f"agv:a:{task_hash}"))
        self.task_hash = task_hash

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction[Any], item: ui.Item[Any], match: re.Match[str]
    ) -> AnswerButton:
        return cls(match["task"])

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        await owner(interaction).ask_for_answer(interaction, self.task_hash)


class AnswerModal(ui.Modal, title="Answer"):
    answer: ui.TextInput[Any] = ui.TextInput(label="Your answer", style=discord.TextStyle.paragraph)

    def __init__(self, task_hash: str) -> None:
        super().__init__(custom_id=f"agv:m:{task_hash}")
        self.task_hash = task_hash

    async def on_submit(self, interaction: discord.Interaction[Any]) -> None:
        text = str(self.answer.value)
        await owner(interaction).on_press(interaction, self.task_hash, text=text)


def prompt_view(event: ConfirmEvent | AskUserEvent, *, disabled: bool = False) -> ui.View:
    """The buttons that answer `event` (shown greyed out on an asking that is no longer the
    open one)."""
    view = ui.View(timeout=None)
    buttons: list[ui.DynamicItem[ui.Button[Any]]]
    if isinstance(event, ConfirmEvent):
        buttons = [ConfirmButton(event.task_hash, True), ConfirmButton(event.task_hash, False)]
    elif event.options:
        options = enumerate(event.options[:MAX_OPTIONS])
        buttons = [OptionButton(event.task_hash, index, label) for index, label in options]
    else:
        buttons = [AnswerButton(event.task_hash)]
    for button in buttons:
        button.item.disabled = disabled
        view.add_item(button)
    return view


def owner(interaction: discord.Interaction[Any]) -> Owner:
    client = interaction.client
    assert isinstance(client, GatewayClient)
    return client.owner


# -- the client ------------------------------------------------------------------------------


class GatewayClient(discord.AutoShardedClient):
    def __init__(self, owner: Owner, **options: Any) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        # The gateway never joins a voice channel: discord.py's warnings that the voice
        # libraries (PyNaCl, davey) are missing say nothing to its operator.
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        options.setdefault("http_trace", rate_limit_trace(owner.runtime.router.traffic))
        super().__init__(intents=intents, allowed_mentions=NO_MENTIONS, **options)
        self.owner = owner
        self.tree = app_commands.CommandTree(self)

    async def setup_hook(self) -> None:
        self.add_dynamic_items(ConfirmButton, OptionButton, AnswerButton)
        self.owner.add_commands(self.tree)
        guilds = self.owner.allow_list.guilds
        try:
            if guilds:
                for guild_id in guilds:
                    guild = discord.Object(id=guild_id)
                    self.tree.copy_global_to(guild=guild)
                    await self.tree.sync(guild=guild)
            else:
                await self.tree.sync()
        except discord.HTTPException as exc:
            log.warning("discord command sync failed", error=str(exc))

    async def on_ready(self) -> None:
        self.owner.ready.set()
        log.info("discord ready", user=str(self.user), guilds=len(self.guilds))
        if self.application_id is not None:
            # What a new bot needs first: the link that adds it to a server.
            log.info("discord invite link", url=invite_url(self.application_id))

    async def on_shard_connect(self, shard_id: int) -> None:
        # READY of a new session, dispatched before any message of that session: nothing to
        # await here, so the gate is shut before those messages are handled.
        self.owner.catch_up.connected(shard_id)

    async def on_shard_ready(self, shard_id: int) -> None:
        self.owner.catch_up.shard_ready(shard_id)

    async def on_shard_resumed(self, shard_id: int) -> None:
        self.owner.catch_up.resumed(shard_id)

    async def on_message(self, message: discord.Message) -> None:
        await self.owner.on_message(message)
