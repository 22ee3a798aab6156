"""The Discord adapter: who and what the bot answers, prompts as buttons, and the chat
primitives the shared base (`adapters.chat`) builds on."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from typing import Any, ClassVar, Final

import discord
from discord import app_commands, ui

from adapters.attachments import Download
from adapters.chat import ASKED_AGAIN, Answered, Arrival, ChatAdapter, Posted, Refused
from adapters.discord.admins import DiscordAdmins
from adapters.discord.allowlist import AllowList, guild_of
from adapters.discord.answers import respond
from adapters.discord.catchup import CatchUp
from adapters.discord.client import NO_MENTIONS, AnswerModal, GatewayClient, point_at, prompt_view
from adapters.discord.commands import (
    INTERACTION_PREFIX,
    PLATFORM,
    REFUSAL,
    UNAVAILABLE,
    SlashCommands,
)
from adapters.discord.connect import connect, refused
from adapters.discord.place import placed
from adapters.discord.prompts import literal, outcome_content, prompt_content
from adapters.discord.split import DISCORD_LIMIT, split_message
from adapters.reconnect import Connection
from gateway.adapter import Undeliverable
from gateway.connections import env_token
from gateway.events import AskUserEvent, ConfirmEvent, Event, Origin
from gateway.ids import discord_session_id
from gateway.logs import get_logger
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.errors import DatabaseUnavailable

log = get_logger(__name__)

MAX_NONCE: Final = 25
NOT_RECORDED: Final = (
    "⚠️ That could not be recorded: the gateway cannot reach its database. Press again in a moment."
)


class DiscordAdapter(ChatAdapter):
    name = PLATFORM
    errors: ClassVar[tuple[type[Exception], ...]] = (discord.HTTPException,)
    forbidden: ClassVar[type[Exception]] = discord.Forbidden
    typing_every: ClassVar[float] = 8.0  # Discord shows "typing" for 10 s
    preview_chars: ClassVar[int] = 1900
    redelivers: ClassVar[bool] = False  # a gateway event missed is gone
    refuses_repeats: ClassVar[bool] = True  # a part's nonce (send_part)
    preview_replies: ClassVar[bool] = False

    def __init__(
        self, runtime: Runtime, *, token: str | None = None, **client_options: Any
    ) -> None:
        super().__init__(runtime)
        settings = runtime.settings
        self.token = token or env_token(settings, "discord") or ""  # a live connection, or .env
        self.allow_list = AllowList.from_settings(settings)
        self.listen_channels = Settings.id_set(settings.discord_listen_channels)
        self.admin_role = settings.discord_admin_role.strip()
        self.ready = asyncio.Event()
        shard_ids = sorted(Settings.id_set(settings.discord_shard_ids)) or None
        if settings.discord_shard_count is not None:
            client_options.setdefault("shard_count", settings.discord_shard_count)
            if shard_ids:
                client_options.setdefault("shard_ids", shard_ids)
        self._client_options = client_options
        self.client = self.new_client()
        self.catch_up = CatchUp(self, runtime)
        self.commands = SlashCommands(self.on_command)
        self.admins = DiscordAdmins(lambda: self.client, settings.admin_keys, self.admin_role)
        if runtime.bans is not None:
            runtime.bans.register_admin_check(PLATFORM, self.admins.of_session)
        self._runner: asyncio.Task[None] | None = None
        self._missing_permission_logged: set[str] = set()
        self._ready_timeout = 60.0
        self.connection = Connection(
            PLATFORM,
            runtime.platforms,
            self._connect,
            fatal=refused,
            max_wait=settings.platform_retry_max_seconds,
            # What waited for the platform while it was down goes out once it connects.
            connected=runtime.engine.courier.redeliver,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def new_client(self) -> GatewayClient:
        return GatewayClient(self, **self._client_options)

    async def start(self, *, ready_timeout: float = 60.0) -> None:
        """Connect, or go on trying in the background while Discord cannot be reached (see
        adapters/reconnect.py); raises only for a refused token or intent."""
        point_at(self.runtime.settings)
        self._ready_timeout = ready_timeout
        await self.connection.start()

    async def _connect(self) -> None:
        self._runner = await connect(self, self._ready_timeout)
        self.router.register_sink(PLATFORM, self)
        await self.clear_left_previews()
        log.info("adapter started", adapter=PLATFORM, user=str(self.client.user))

    async def stop(self) -> None:
        await self.connection.stop()
        if self._runner is not None:  # a client never started has nothing to close
            await self.client.close()
            with contextlib.suppress(Exception):
                await self._runner
        await self.catch_up.stop()
        await self.end_arrivals()  # discord.py does not end its event handlers' tasks

    def add_commands(self, tree: app_commands.CommandTree[Any]) -> None:
        self.commands.add(tree, self.runtime.commands.menu(PLATFORM))

    # -- inbound ---------------------------------------------------------------------------

    def is_admin(self, user: discord.abc.User) -> bool:
        return self.admins.is_admin(user)

    async def admit(self, interaction: discord.Interaction[Any]) -> bool:
        """The allow-lists for a slash command, a button press or a modal submit: from where
        the bot does not serve, the one who asked alone is told so. Served, it awaits nothing,
        so a command still takes its turn before anything is awaited for it."""
        if self.allow_list.serves(interaction):
            return True
        await self._tell(interaction, REFUSAL)
        return False

    def who(
        self, user: discord.abc.User, channel_id: str = "", reply_to: str = "", where: Any = None
    ) -> Origin:
        """The sender; with `where` (the channel), also the guild, category and roles."""
        name, admin = user.display_name, self.is_admin(user)
        return placed(
            Origin(PLATFORM, channel_id, reply_to, str(user.id), name, admin), where, user
        )

    async def on_message(self, message: discord.Message) -> None:
        arrival = self.arrival_of(message)
        if arrival is None:
            return
        # discord.py handles each message in a task of its own: `arrive` takes the message's
        # turn before it awaits, so a later message cannot overtake one that downloads. The
        # catch-up's turn awaits nothing unless the channel's missed messages are being read.
        await self.catch_up.turn(message.channel.id)
        await self.arrive(arrival)

    def arrival_of(self, message: discord.Message) -> Arrival | None:
        """`message` as taken in (live, or read after a gap: `catchup`); None when the bot does
        not take it."""
        me = self.client.user
        if message.author.bot or (me is not None and message.author.id == me.id):
            return None
        if not self.allow_list.serves(message):
            return None  # not a word back: the bot is not there for whoever wrote it
        text = message.content
        mentioned = me is not None and any(u.id == me.id for u in message.mentions)
        if me is not None:
            text = re.sub(rf"<@!?{me.id}>\s?", "", text).strip()
        replied = message.reference.resolved if message.reference is not None else None
        to_me = isinstance(replied, discord.Message) and replied.author == me
        addressed = (
            guild_of(message) is None
            or mentioned
            or to_me
            or message.channel.id in self.listen_channels
        )
        channel = str(message.channel.id)
        return Arrival(
            self.who(message.author, channel, str(message.id), message.channel),
            discord_session_id(message.channel.id),
            text,
            addressed,
            [
                Download(
                    f"{item.id}_{item.filename}",
                    item.content_type or "application/octet-stream",
                    item.size,
                    item.read,
                )
                for item in message.attachments
            ],
            source_key=f"discord:{message.id}",
        )

    async def on_command(self, interaction: discord.Interaction[Any], name: str, args: str) -> None:
        """A slash command, taken in as the message `/name args` would be: its place in the
        channel's order, the same sender and a delivery id (a repeated delivery runs it once).
        The reply is the interaction's response, as Discord wants within 3 s."""
        if not await self.admit(interaction):
            return
        channel_id = interaction.channel_id or 0
        reply_to = f"{INTERACTION_PREFIX}{interaction.id}"
        origin = self.who(interaction.user, str(channel_id), reply_to, interaction.channel)
        arrival = Arrival(
            origin,
            discord_session_id(channel_id),
            f"/{name} {args}".rstrip(),
            addressed=True,
            source_key=f"discord:{interaction.id}",
            refuse=functools.partial(self._tell, interaction),
        )
        try:
            submission = await self.arrive(arrival)
        except DatabaseUnavailable:
            # Said to the one who asked, rather than Discord's "the application did not respond".
            await self._tell(interaction, UNAVAILABLE)
            return
        if submission is None or submission.duplicate:
            return  # refused (and told), or delivered before and answered then
        await respond(interaction, submission.command)

    async def _tell(self, interaction: discord.Interaction[Any], text: str) -> None:
        """The interaction's response, seen by the one who asked alone."""
        await interaction.response.send_message(text, ephemeral=True)

    # -- answering prompts -----------------------------------------------------------------

    async def ask_for_answer(self, interaction: discord.Interaction[Any], task_hash: str) -> None:
        if not await self.admit(interaction):
            return
        refused = await self.prompts.refusal(task_hash, self.who(interaction.user))
        if refused is not None:
            await self._tell(interaction, refused.reason)
            return
        await interaction.response.send_modal(AnswerModal(task_hash))

    async def on_press(
        self,
        interaction: discord.Interaction[Any],
        task_hash: str,
        *,
        approve: bool | None = None,
        option: int | None = None,
        text: str | None = None,
    ) -> None:
        """A button pressed or a modal sent: answered (the interaction's response) only once
        the router has the answer journaled."""
        if not await self.admit(interaction):
            return
        try:
            result = await self.prompts.answer(
                task_hash,
                self.who(interaction.user),
                approve=approve,
                option=option,
                text=text,
                closes=_posted(interaction.message) if interaction.message else None,
            )
        except DatabaseUnavailable:
            # Nothing was recorded and the prompt stays open: the presser is told, as only
            # they see, to press again (Discord would otherwise show "interaction failed").
            await self._tell(interaction, NOT_RECORDED)
            return
        if isinstance(result, Refused):
            await self._tell(interaction, result.reason)
            return
        await self._close_pressed(interaction, result)

    async def _close_pressed(self, interaction: discord.Interaction[Any], result: Answered) -> None:
        """The prompt's buttons disabled, and the outcome under its question."""
        message = interaction.message
        if message is None:
            await interaction.response.send_message(
                outcome_content(result.outcome), allowed_mentions=NO_MENTIONS
            )
            return
        view = ui.View.from_message(message, timeout=None)
        for item in view.children:
            if isinstance(item, ui.Button):
                item.disabled = True
        # The content comes back as it was sent (escaped), so it is sent again as it is.
        await interaction.response.edit_message(
            content=f"{message.content}\n{outcome_content(result.outcome)}",
            view=view,
            allowed_mentions=NO_MENTIONS,
        )

    # -- chat primitives -------------------------------------------------------------------

    @property
    def max_download_bytes(self) -> int:
        return self.runtime.settings.discord_max_download_bytes

    def channel(self, channel_id: str) -> discord.abc.Messageable:
        found = self.client.get_channel(int(channel_id))
        if isinstance(found, discord.abc.Messageable):
            return found
        return self.client.get_partial_messageable(int(channel_id))

    def _message(self, posted: Posted) -> discord.PartialMessage:
        channel = self.client.get_partial_messageable(int(posted.channel))
        return channel.get_partial_message(int(posted.message_id))

    def split(self, text: str) -> list[str]:
        return split_message(text)

    async def send_part(
        self, origin: Origin, part: str, *, index: int, key: str, repeat: bool
    ) -> Posted:
        # The nonce, the same on every attempt, makes Discord refuse a repeat for some minutes.
        sent = await self.channel(origin.channel_id).send(
            part,
            nonce=f"r{key}{index:03d}"[-MAX_NONCE:],
            allowed_mentions=NO_MENTIONS,
            **(_reply_to(origin) if index == 0 else {}),
        )
        return _posted(sent)

    def may_have_arrived(self, exc: Exception) -> bool:
        return not isinstance(exc, discord.HTTPException)  # an error answer: not taken

    async def send_text(self, origin: Origin, text: str, *, reply: bool) -> Posted:
        # Notices, command replies and previews: plain text, as on Telegram, whatever part of
        # them a person wrote (a name, a persona, an answer).
        sent = await self.channel(origin.channel_id).send(
            literal(text)[:DISCORD_LIMIT],
            allowed_mentions=NO_MENTIONS,
            **(_reply_to(origin) if reply else {}),
        )
        return _posted(sent)

    async def edit_text(self, posted: Posted, text: str) -> None:
        await self._message(posted).edit(
            content=literal(text)[:DISCORD_LIMIT], allowed_mentions=NO_MENTIONS
        )

    async def delete(self, posted: Posted) -> None:
        await self._message(posted).delete()

    async def send_typing(self, origin: Origin) -> None:
        await self.client.http.send_typing(int(origin.channel_id))

    async def post_prompt(self, origin: Origin, event: ConfirmEvent | AskUserEvent) -> Posted:
        sent = await self.channel(origin.channel_id).send(
            prompt_content(event)[:DISCORD_LIMIT],
            view=prompt_view(event),
            nonce=f"p{event.task_hash}{event.expires_at % 100000}"[-MAX_NONCE:],
            allowed_mentions=NO_MENTIONS,
            **_reply_to(origin),
        )
        return _posted(sent)

    async def retire_prompt(self, posted: Posted, event: ConfirmEvent | AskUserEvent) -> None:
        note = outcome_content(ASKED_AGAIN)  # kept whole under the limit, the question cut
        content = f"{prompt_content(event)[: DISCORD_LIMIT - len(note) - 1]}\n{note}"
        view = prompt_view(event, disabled=True)
        await self._message(posted).edit(content=content, view=view, allowed_mentions=NO_MENTIONS)

    async def show_outcome(self, posted: Posted, outcome: str) -> None:
        await self._message(posted).edit(
            content=outcome_content(outcome), view=None, allowed_mentions=NO_MENTIONS
        )

    async def notice(self, origin: Origin, text: str) -> None:
        if origin.reply_to.startswith(INTERACTION_PREFIX):
            return  # a slash command: the interaction response carries the text
        await super().notice(origin, text)

    async def unreachable(self, origin: Origin, event: Event, exc: Exception) -> str | None:
        if origin.channel_id not in self._missing_permission_logged:
            self._missing_permission_logged.add(origin.channel_id)
            log.warning(
                "discord: cannot send in channel (missing permission Send Messages?)",
                channel=origin.channel_id,
                error=str(exc),
            )
        raise Undeliverable(str(exc)) from exc

    def refused_for_good(self, exc: Exception) -> bool:
        # 400 (a request Discord rejects as such) and 404 (the channel is gone); a 5xx, a 429
        # or no answer at all passes.
        return isinstance(exc, discord.HTTPException) and exc.status in (400, 404)


def _posted(message: discord.Message) -> Posted:
    return Posted(str(message.channel.id), str(message.id))


def _reply_to(origin: Origin) -> dict[str, Any]:
    """`reference=` for a send that answers the triggering message, when there is one."""
    if not origin.reply_to.isdigit():
        return {}
    reference = discord.MessageReference(
        message_id=int(origin.reply_to),
        channel_id=int(origin.channel_id),
        fail_if_not_exists=False,
    )
    return {"reference": reference}
