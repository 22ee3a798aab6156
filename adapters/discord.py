"""The Discord front-end, on discord.py: every channel is one permanent `dc-*` session.

- A thread is a channel of its own, and a DM channel too, so DMs are per user.
- The agent answers DMs, mentions of the bot (the mention is taken out of the text), replies
  to its messages, and everything in the listen channels; other messages in allowed channels
  are kept as context. It never answers itself or another bot.
- Replies are split at 2,000 characters without breaking code blocks, reply to the trigger,
  and cannot mention @everyone, @here or roles. Each message carries a nonce derived from the
  outbox entry with `enforce_nonce`, so a retried send cannot post twice.
- Prompts are buttons whose custom ids carry the task hash; they are registered again at
  start-up (dynamic items), so a button pressed after a restart still works. Only the
  requester or an admin may press them; anyone else gets an ephemeral refusal.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass
from typing import Any, Final

import discord
import yarl
from discord import app_commands, ui

from adapters.attachments import describe, safe_name, save_attachment
from adapters.discord_format import split_message
from gateway.adapter import HttpRoute, Progress
from gateway.auth import NotAllowed
from gateway.commands.registry import Command
from gateway.engine.prompts import AlreadyAnswered, PromptError, PromptNotFound
from gateway.engine.task import MessageTooLong, TaskNotFound
from gateway.events import (
    AnswerEvent,
    AskUserEvent,
    Attachment,
    CanceledEvent,
    ConfirmEvent,
    ErrorEvent,
    Event,
    Inbound,
    Origin,
    TextDeltaEvent,
    TextEvent,
)
from gateway.ids import discord_session_id
from gateway.logs import get_logger
from gateway.runtime import Runtime
from gateway.settings import Settings

log = get_logger(__name__)

PLATFORM: Final = "discord"
TYPING_EVERY_SECONDS: Final = 8.0
STREAM_EDIT_SECONDS: Final = 1.0
INTERACTION_PREFIX: Final = "interaction:"
NO_MASS_MENTIONS: Final = discord.AllowedMentions(
    everyone=False, roles=False, users=True, replied_user=True
)
INTENT_HELP: Final = (
    "Discord refused the MESSAGE CONTENT intent. Enable it in the Developer Portal: "
    "Applications → your bot → Bot → Privileged Gateway Intents → MESSAGE CONTENT INTENT."
)


def point_at(settings: Settings) -> None:
    """Send REST and gateway traffic where the settings say (a proxy, or a test double)."""
    discord.http.Route.BASE = settings.discord_api_url.rstrip("/")
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(settings.discord_gateway_url)


# -- buttons that survive a restart -----------------------------------------------------------


class ConfirmButton(
    ui.DynamicItem[ui.Button[Any]], template=r"agv:c:(?P<task>[A-Za-z0-9_-]{1,64}):(?P<choice>[yn])"
):
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
        await _adapter(interaction).answer_click(interaction, self.task_hash, approve=self.approve)


class OptionButton(
    ui.DynamicItem[ui.Button[Any]],
    template=r"agv:o:(?P<task>[A-Za-z0-9_-]{1,64}):(?P<index>\d{1,2})",
):
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
        await _adapter(interaction).answer_option(interaction, self.task_hash, self.index)


class AnswerButton(ui.DynamicItem[ui.Button[Any]], template=r"agv:a:(?P<task>[A-Za-z0-9_-]{1,64})"):
    def __init__(self, task_hash: str) -> None:
        super().__init__(ui.Button(label="Answer", custom_id=f"agv:a:{task_hash}"))
        self.task_hash = task_hash

    @classmethod
    async def from_custom_id(
        cls, interaction: discord.Interaction[Any], item: ui.Item[Any], match: re.Match[str]
    ) -> AnswerButton:
        return cls(match["task"])

    async def callback(self, interaction: discord.Interaction[Any]) -> None:
        adapter = _adapter(interaction)
        if await adapter.refuse_if_not_allowed(interaction, self.task_hash):
            return
        await interaction.response.send_modal(AnswerModal(adapter, self.task_hash))


class AnswerModal(ui.Modal, title="Answer"):
    answer: ui.TextInput[Any] = ui.TextInput(label="Your answer", style=discord.TextStyle.paragraph)

    def __init__(self, adapter: DiscordAdapter, task_hash: str) -> None:
        super().__init__(custom_id=f"agv:m:{task_hash}")
        self.adapter, self.task_hash = adapter, task_hash

    async def on_submit(self, interaction: discord.Interaction[Any]) -> None:
        await self.adapter.answer_click(interaction, self.task_hash, text=str(self.answer.value))


def _adapter(interaction: discord.Interaction[Any]) -> DiscordAdapter:
    client = interaction.client
    assert isinstance(client, GatewayClient)
    return client.adapter


# -- the client ------------------------------------------------------------------------------


class GatewayClient(discord.AutoShardedClient):
    def __init__(self, adapter: DiscordAdapter, **options: Any) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        super().__init__(intents=intents, allowed_mentions=NO_MASS_MENTIONS, **options)
        self.adapter = adapter
        self.tree = app_commands.CommandTree(self)

    async def setup_hook(self) -> None:
        self.add_dynamic_items(ConfirmButton, OptionButton, AnswerButton)
        self.adapter.add_commands(self.tree)
        guilds = self.adapter.allowed_guilds
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
        self.adapter.ready.set()
        log.info("discord ready", user=str(self.user), guilds=len(self.guilds))

    async def on_message(self, message: discord.Message) -> None:
        await self.adapter.on_message(message)


@dataclass
class _Stream:
    channel_id: int
    text: str = ""
    message_id: int | None = None
    shown_at: float = 0.0


class DiscordAdapter:
    name = PLATFORM

    def __init__(self, runtime: Runtime, **client_options: Any) -> None:
        import asyncio

        settings = runtime.settings
        self.runtime = runtime
        self.router = runtime.router
        self.admins = settings.admin_keys
        self.allowed_guilds = Settings.id_set(settings.discord_allowed_guilds)
        self.allowed_channels = Settings.id_set(settings.discord_allowed_channels)
        self.listen_channels = Settings.id_set(settings.discord_listen_channels)
        self.admin_role = settings.discord_admin_role.strip()
        self.ready = asyncio.Event()
        shard_ids = sorted(Settings.id_set(settings.discord_shard_ids)) or None
        if settings.discord_shard_count is not None:
            client_options.setdefault("shard_count", settings.discord_shard_count)
            if shard_ids:
                client_options.setdefault("shard_ids", shard_ids)
        self.client = GatewayClient(self, **client_options)
        self._prompts: dict[str, tuple[int, int]] = {}  # task → (channel id, message id)
        self._closed_by_click: set[str] = set()
        self._typing_at: dict[int, float] = {}
        self._streams: dict[str, _Stream] = {}
        self._runner: asyncio.Task[None] | None = None
        self._missing_permission_logged: set[int] = set()

    # -- lifecycle -------------------------------------------------------------------------

    def routes(self) -> list[HttpRoute]:
        return []

    async def start(self, *, ready_timeout: float = 60.0) -> None:
        import asyncio

        point_at(self.runtime.settings)
        self.router.register_sink(PLATFORM, _Sink(self))
        token = self.runtime.settings.discord_token
        assert token is not None
        self._runner = asyncio.create_task(self.client.start(token.get_secret_value()))
        ready = asyncio.create_task(self.ready.wait())
        done, _ = await asyncio.wait(
            {self._runner, ready}, timeout=ready_timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if self._runner in done:
            ready.cancel()
            exc = self._runner.exception()
            if isinstance(exc, discord.PrivilegedIntentsRequired):
                log.error("discord adapter cannot start", reason=INTENT_HELP)
            raise exc or RuntimeError("the Discord client stopped during start-up")
        log.info("adapter started", adapter=PLATFORM, user=str(self.client.user))

    async def stop(self) -> None:
        await self.client.close()
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner

    # -- inbound ---------------------------------------------------------------------------

    def is_admin(self, user: discord.abc.User) -> bool:
        if f"{PLATFORM}:{user.id}" in self.admins:
            return True
        if self.admin_role and isinstance(user, discord.Member):
            return any(
                str(role.id) == self.admin_role or role.name == self.admin_role
                for role in user.roles
            )
        return False

    def _allowed(self, channel: Any, guild: discord.Guild | None) -> bool:
        if guild is not None and self.allowed_guilds and guild.id not in self.allowed_guilds:
            return False
        if not self.allowed_channels or guild is None:
            return True
        ids = {channel.id, getattr(channel, "parent_id", None)}
        return bool(ids & self.allowed_channels)

    def origin_of(self, message: discord.Message) -> Origin:
        author = message.author
        return Origin(
            PLATFORM,
            channel_id=str(message.channel.id),
            reply_to=str(message.id),
            sender_id=str(author.id),
            sender_name=author.display_name,
            is_admin=self.is_admin(author),
        )

    async def on_message(self, message: discord.Message) -> None:
        me = self.client.user
        if message.author.bot or (me is not None and message.author.id == me.id):
            return
        if not self._allowed(message.channel, message.guild):
            return
        text = message.content
        mentioned = me is not None and any(u.id == me.id for u in message.mentions)
        if me is not None:
            text = re.sub(rf"<@!?{me.id}>\s?", "", text).strip()
        replied = (
            message.reference is not None
            and isinstance(message.reference.resolved, discord.Message)
            and me is not None
            and message.reference.resolved.author.id == me.id
        )
        addressed = (
            message.guild is None
            or mentioned
            or replied
            or message.channel.id in self.listen_channels
        )
        session_id = discord_session_id(message.channel.id)
        # discord.py handles each message in a task of its own: the turn, taken before the
        # first await, keeps a later message from overtaking this one while it downloads.
        with self.router.take_turn(session_id) as turn:
            attachments = await self._attachments(message, session_id)
            if attachments:
                text = f"{text}\n{describe(attachments)}".strip()
            if not text:
                return
            inbound = Inbound(self.origin_of(message), session_id, text, attachments)
            try:
                if addressed:
                    await self.router.submit(inbound, turn=turn)
                else:
                    await self.router.record(inbound, turn=turn)
            except MessageTooLong as exc:
                with contextlib.suppress(discord.HTTPException):
                    await message.reply(f"⚠️ {exc}", allowed_mentions=NO_MASS_MENTIONS)

    async def _attachments(self, message: discord.Message, session_id: str) -> list[Attachment]:
        if not message.attachments:
            return []
        await self.runtime.store.ensure(session_id)
        limit = self.runtime.settings.discord_max_download_bytes
        saved: list[Attachment] = []
        for item in message.attachments:
            mime = item.content_type or "application/octet-stream"
            name = safe_name(f"{item.id}_{item.filename}")
            if item.size > limit:
                saved.append(Attachment(name, mime, item.size, ""))
                continue
            try:
                data = await item.read()
            except discord.HTTPException as exc:
                log.warning("attachment download failed", error=str(exc), name=item.filename)
                saved.append(Attachment(name, mime, item.size, ""))
                continue
            saved.append(await save_attachment(self.runtime.store, session_id, name, mime, data))
        return saved

    def add_commands(self, tree: app_commands.CommandTree[Any]) -> None:
        """The gateway's commands as application (slash) commands, from the registry."""
        for command in self.runtime.commands.menu(PLATFORM):
            tree.add_command(
                app_commands.Command(
                    name=command.name,
                    description=command.summary[:100],
                    callback=self._command_callback(command),
                )
            )

    def _command_callback(self, command: Command) -> Any:
        async def run(interaction: discord.Interaction[Any]) -> None:
            await self._run_command(interaction, command.name, "")

        @app_commands.describe(text=command.usage or "what follows the command")
        async def run_with_text(
            interaction: discord.Interaction[Any], text: str | None = None
        ) -> None:
            await self._run_command(interaction, command.name, text or "")

        return run_with_text if command.usage else run

    async def _run_command(
        self, interaction: discord.Interaction[Any], name: str, args: str
    ) -> None:
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
        submission = await self.router.submit(Inbound(origin, discord_session_id(channel_id), text))
        reply = submission.command.text if submission.command else "done"
        await interaction.response.send_message(reply, allowed_mentions=NO_MASS_MENTIONS)

    # -- answering prompts -----------------------------------------------------------------

    def responder(self, interaction: discord.Interaction[Any]) -> Origin:
        user = interaction.user
        return Origin(
            PLATFORM,
            sender_id=str(user.id),
            sender_name=user.display_name,
            is_admin=self.is_admin(user),
        )

    async def refuse_if_not_allowed(
        self, interaction: discord.Interaction[Any], task_hash: str
    ) -> bool:
        try:
            self.router.may_answer(task_hash, self.responder(interaction))
        except NotAllowed as exc:
            await interaction.response.send_message(str(exc), ephemeral=True)
            return True
        except PromptError:
            await interaction.response.send_message("already answered", ephemeral=True)
            return True
        return False

    async def answer_option(
        self, interaction: discord.Interaction[Any], task_hash: str, index: int
    ) -> None:
        try:
            prompt = self.router.task(task_hash).prompt
        except TaskNotFound:
            prompt = None
        options = list(prompt.options) if prompt else []
        if not 0 <= index < len(options):
            await interaction.response.send_message("already answered", ephemeral=True)
            return
        await self.answer_click(interaction, task_hash, text=options[index])

    async def answer_click(
        self,
        interaction: discord.Interaction[Any],
        task_hash: str,
        *,
        approve: bool | None = None,
        text: str | None = None,
    ) -> None:
        responder = self.responder(interaction)
        try:
            state = self.router.task(task_hash)
            answer = await self.router.answer(
                state.session_id, task_hash, responder, approve=approve, text=text
            )
        except NotAllowed as exc:
            await interaction.response.send_message(str(exc), ephemeral=True)
            return
        except (AlreadyAnswered, TaskNotFound, PromptNotFound):
            await interaction.response.send_message("already answered", ephemeral=True)
            return
        except PromptError as exc:
            await interaction.response.send_message(str(exc), ephemeral=True)
            return
        self._closed_by_click.add(task_hash)
        outcome = _outcome(approve, text, answer.by)
        message = interaction.message
        if message is not None:
            view = ui.View.from_message(message, timeout=None)
            for item in view.children:
                if isinstance(item, ui.Button):
                    item.disabled = True
            await interaction.response.edit_message(
                content=f"{message.content}\n→ {outcome}", view=view
            )
        else:
            await interaction.response.send_message(f"→ {outcome}")

    # -- outbound --------------------------------------------------------------------------

    def channel(self, channel_id: int) -> discord.abc.Messageable:
        found = self.client.get_channel(channel_id)
        if isinstance(found, discord.abc.Messageable):
            return found
        return self.client.get_partial_messageable(channel_id)

    async def send_reply(
        self, origin: Origin, text: str, nonce_base: str, progress: Progress
    ) -> str:
        """Send a reply in parts of at most 2,000 characters, from the first part an earlier
        attempt did not get out."""
        channel = self.channel(int(origin.channel_id))
        chunks = split_message(text or "(empty reply)")
        last: discord.Message | None = None
        for index in range(progress.sent, len(chunks)):
            last = await channel.send(
                chunks[index],
                nonce=f"{nonce_base}{index:03d}"[-25:],
                allowed_mentions=NO_MASS_MENTIONS,
                **(_reply_to(origin) if index == 0 else {}),
            )
            await progress.part_sent(index + 1)
        return str(last.id) if last else ""

    async def send_prompt(self, origin: Origin, event: ConfirmEvent | AskUserEvent) -> str:
        channel = self.channel(int(origin.channel_id))
        view = ui.View(timeout=None)
        if isinstance(event, ConfirmEvent):
            args = ", ".join(f"{k}={v!r}" for k, v in event.args.items())
            content = f"🔐 **{event.requester}**, allow `{event.tool}`({args})?"
            view.add_item(ConfirmButton(event.task_hash, True))
            view.add_item(ConfirmButton(event.task_hash, False))
        else:
            content = f"❓ **{event.requester}**: {event.question}"
            if event.options:
                for index, label in enumerate(event.options[:25]):
                    view.add_item(OptionButton(event.task_hash, index, label))
            else:
                view.add_item(AnswerButton(event.task_hash))
        sent = await channel.send(
            content[:2000],
            view=view,
            **_reply_to(origin),
            nonce=f"p{event.task_hash}{event.expires_at % 100000}"[-25:],
            allowed_mentions=NO_MASS_MENTIONS,
        )
        self._prompts[event.task_hash] = (sent.channel.id, sent.id)
        return str(sent.id)

    async def close_prompt(self, event: AnswerEvent) -> None:
        where = self._prompts.pop(event.task_hash, None)
        if event.task_hash in self._closed_by_click:
            self._closed_by_click.discard(event.task_hash)
            return
        if where is None:
            return
        channel_id, message_id = where
        partial = self.client.get_partial_messageable(channel_id).get_partial_message(message_id)
        outcome = _outcome(event.approved, event.answer, event.answered_by)
        with contextlib.suppress(discord.HTTPException):
            await partial.edit(content=f"→ {outcome}", view=None)

    async def typing(self, origin: Origin) -> None:
        channel_id = int(origin.channel_id)
        now = time.monotonic()
        if now - self._typing_at.get(channel_id, 0.0) < TYPING_EVERY_SECONDS:
            return
        self._typing_at[channel_id] = now
        with contextlib.suppress(discord.HTTPException):
            await self.client.http.send_typing(channel_id)

    async def stream(self, origin: Origin, event: TextDeltaEvent) -> None:
        stream = self._streams.setdefault(event.task_hash, _Stream(int(origin.channel_id)))
        stream.text += event.text
        now = time.monotonic()
        if now - stream.shown_at < STREAM_EDIT_SECONDS:
            return
        stream.shown_at = now
        shown = stream.text[-1900:] or "…"
        with contextlib.suppress(discord.HTTPException):
            if stream.message_id is None:
                sent = await self.channel(stream.channel_id).send(
                    shown, allowed_mentions=NO_MASS_MENTIONS
                )
                stream.message_id = sent.id
            else:
                partial = self.client.get_partial_messageable(stream.channel_id)
                await partial.get_partial_message(stream.message_id).edit(content=shown)

    async def end_stream(self, task_hash: str) -> None:
        stream = self._streams.pop(task_hash, None)
        if stream is not None and stream.message_id is not None:
            partial = self.client.get_partial_messageable(stream.channel_id)
            with contextlib.suppress(discord.HTTPException):
                await partial.get_partial_message(stream.message_id).delete()

    def log_forbidden_once(self, channel_id: int, exc: discord.Forbidden) -> None:
        if channel_id in self._missing_permission_logged:
            return
        self._missing_permission_logged.add(channel_id)
        log.warning(
            "discord: cannot send in channel (missing permission Send Messages?)",
            channel=channel_id,
            error=str(exc),
        )


class _Sink:
    def __init__(self, adapter: DiscordAdapter) -> None:
        self.adapter = adapter

    async def deliver(self, origin: Origin, event: Event, progress: Progress) -> str | None:
        adapter = self.adapter
        try:
            if isinstance(event, TextDeltaEvent):
                await adapter.typing(origin)
                await adapter.stream(origin, event)
            elif isinstance(event, TextEvent):
                message_id = await adapter.send_reply(
                    origin, event.text, f"r{event.task_hash}", progress
                )
                await adapter.end_stream(event.task_hash)
                return message_id
            elif isinstance(event, ConfirmEvent | AskUserEvent):
                return await adapter.send_prompt(origin, event)
            elif isinstance(event, AnswerEvent):
                await adapter.close_prompt(event)
            elif isinstance(event, ErrorEvent):
                sent = await adapter.channel(int(origin.channel_id)).send(
                    f"⚠️ {event.message}"[:2000], allowed_mentions=NO_MASS_MENTIONS
                )
                return str(sent.id)
            elif isinstance(event, CanceledEvent):
                await adapter.end_stream(event.task_hash)
                await adapter.channel(int(origin.channel_id)).send(
                    f"canceled by {event.by}", allowed_mentions=NO_MASS_MENTIONS
                )
            else:
                await adapter.typing(origin)
        except discord.Forbidden as exc:
            adapter.log_forbidden_once(int(origin.channel_id), exc)
            raise
        return None

    async def notice(self, origin: Origin, text: str) -> None:
        if origin.reply_to.startswith(INTERACTION_PREFIX):
            return  # a slash command: the interaction response carries the text
        with contextlib.suppress(discord.HTTPException):
            await self.adapter.channel(int(origin.channel_id)).send(
                text[:2000],
                allowed_mentions=NO_MASS_MENTIONS,
                **_reply_to(origin),
            )


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


def _outcome(approved: bool | None, text: str | None, by: str) -> str:
    who = "nobody (expired)" if by == "timeout" else by
    if text is not None:
        return f"answered “{text}” by {who}"
    if approved is None:
        return f"not answered ({who})"
    return f"{'approved' if approved else 'denied'} by {who}"


def create(runtime: Runtime) -> DiscordAdapter:
    return DiscordAdapter(runtime)
