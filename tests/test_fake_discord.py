"""The fake Discord REST API and gateway, driven by the real discord.py client."""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import discord
import pytest
from discord import app_commands
from fakes.discord import FakeDiscord, point_discord_py_at

WAIT = 5.0
GUILD = 900_000_000_000_000_001
CHANNEL = 900_000_000_000_000_010
THREAD = 900_000_000_000_000_011
ROLE = 900_000_000_000_000_020
ALICE = 900_000_000_000_000_100
BOB = 900_000_000_000_000_101
DM = 900_000_000_000_000_200

MESSAGES = "POST /channels/{id}/messages"
CALLBACK = "POST /interactions/{id}/{token}/callback"

MessageHandler = Callable[[discord.Message], Awaitable[None]]


class RecordingView(discord.ui.View):
    """A View whose callback errors are recorded instead of only logged."""

    def __init__(self, errors: list[BaseException]) -> None:
        super().__init__(timeout=WAIT * 2)
        self.errors = errors

    async def on_error(
        self, interaction: discord.Interaction, error: Exception, item: discord.ui.Item[Any]
    ) -> None:
        self.errors.append(error)


class Bot(discord.Client):
    def __init__(self, handler: MessageHandler | None = None, *, content: bool = True) -> None:
        intents = discord.Intents.default()
        intents.message_content = content
        super().__init__(intents=intents, guild_ready_timeout=0.05)
        self.tree = app_commands.CommandTree(self)
        self.ready_event = asyncio.Event()
        self.resumed_event = asyncio.Event()
        self.errors: list[BaseException] = []
        self.received: list[discord.Message] = []
        self.received_changed = asyncio.Condition()
        self.handler = handler

    async def wait_received(self, count: int) -> list[discord.Message]:
        async with asyncio.timeout(WAIT), self.received_changed:
            await self.received_changed.wait_for(lambda: len(self.received) >= count)
        return self.received

    async def on_ready(self) -> None:
        self.ready_event.set()

    async def on_resumed(self) -> None:
        self.resumed_event.set()

    async def on_error(self, event_method: str, /, *args: Any, **kwargs: Any) -> None:
        error = sys.exc_info()[1]
        self.errors.append(error if error is not None else RuntimeError(event_method))

    async def on_message(self, message: discord.Message) -> None:
        if message.author == self.user:
            return
        async with self.received_changed:
            self.received.append(message)
            self.received_changed.notify_all()
        if self.handler is not None:
            await self.handler(message)


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        alice = server.user(ALICE, "alice")
        bob = server.user(BOB, "bob")
        server.add_guild(
            GUILD,
            "Test Guild",
            channels=[
                server.text_channel(CHANNEL, "general"),
                server.thread(THREAD, CHANNEL, "a thread"),
            ],
            roles=[server.role(ROLE, "members")],
            members=[server.member(alice, [ROLE]), bob],
        )
        yield server


@asynccontextmanager
async def running(fake: FakeDiscord, bot: Bot) -> AsyncIterator[Bot]:
    """Start ``bot`` against ``fake``, wait for on_ready, and shut it down cleanly."""
    with point_discord_py_at(fake):
        task = asyncio.create_task(bot.start(fake.token))
        ready = asyncio.create_task(bot.ready_event.wait())
        try:
            done, _ = await asyncio.wait(
                {task, ready}, timeout=WAIT, return_when=asyncio.FIRST_COMPLETED
            )
            if task in done:
                task.result()  # re-raise why the client stopped
            assert ready in done, "on_ready did not fire"
            yield bot
        finally:
            ready.cancel()
            await bot.close()
            await asyncio.wait_for(task, WAIT)
        assert not bot.errors, bot.errors


def alice(fake: FakeDiscord) -> dict[str, Any]:
    return fake.user(ALICE, "alice")


async def test_login_ready_and_guild_state(fake: FakeDiscord) -> None:
    async with running(fake, Bot()) as bot:
        assert bot.user is not None and str(bot.user.id) == fake.bot_id
        assert bot.application_id == int(fake.application_id)
        guild = bot.get_guild(GUILD)
        assert guild is not None and guild.name == "Test Guild"
        channel = guild.get_channel(CHANNEL)
        assert isinstance(channel, discord.TextChannel) and channel.name == "general"
        thread = guild.get_thread(THREAD)
        assert thread is not None and thread.parent_id == CHANNEL
        assert guild.get_role(ROLE) is not None
        assert guild.me is not None
        # Without the members intent discord.py caches only the bot's own member.
        identify = await fake.wait_for_identify()
        assert identify["token"] == fake.token
        assert identify["intents"] == bot.intents.value
        routes = [key for _, key, _, _ in fake.calls]
        assert routes[:2] == ["GET /users/@me", "GET /oauth2/applications/@me"]


async def test_message_reaches_on_message_and_bot_replies(fake: FakeDiscord) -> None:
    async def handler(message: discord.Message) -> None:
        await message.reply(f"echo: {message.content}")

    async with running(fake, Bot(handler)) as bot:
        sent = fake.inject_message(CHANNEL, alice(fake), "hello there", mentions_bot=True)
        body = await fake.wait_for_call(MESSAGES)
        assert body["content"] == f"echo: <@{fake.bot_id}> hello there"
        assert str(body["message_reference"]["message_id"]) == sent["id"]
        received = bot.received[0]
        assert received.content == f"<@{fake.bot_id}> hello there"
        assert isinstance(received.author, discord.Member)
        assert bot.user in received.mentions
        [reply] = fake.sent_messages(CHANNEL)
        assert reply["type"] == 19
        assert reply["referenced_message"]["id"] == sent["id"]
        # The bot's own MESSAGE_CREATE came back over the gateway and was ignored.
        assert len(bot.received) == 1


async def test_dm_message(fake: FakeDiscord) -> None:
    async def handler(message: discord.Message) -> None:
        await message.channel.send("dm reply")

    async with running(fake, Bot(handler)) as bot:
        fake.dm_channel(DM, alice(fake))
        sent = fake.inject_message(DM, alice(fake), "hi in private")
        assert "guild_id" not in sent and "member" not in sent
        await fake.wait_for_call(MESSAGES, lambda b: b["content"] == "dm reply")
        assert isinstance(bot.received[0].channel, discord.DMChannel)
        assert [m["content"] for m in fake.sent_messages(DM)] == ["dm reply"]


async def test_button_click_edits_message(fake: FakeDiscord) -> None:
    clicks: list[int] = []

    async def handler(message: discord.Message) -> None:
        view = RecordingView(bot.errors)
        button: discord.ui.Button[RecordingView] = discord.ui.Button(label="Go")

        async def pressed(interaction: discord.Interaction) -> None:
            clicks.append(interaction.user.id)
            await interaction.response.edit_message(content="clicked", view=None)

        button.callback = pressed  # type: ignore[method-assign]
        view.add_item(button)
        await message.channel.send("pick one", view=view)

    bot = Bot(handler)
    async with running(fake, bot):
        fake.inject_message(CHANNEL, alice(fake), "menu")
        body = await fake.wait_for_call(MESSAGES)
        custom_id = body["components"][0]["components"][0]["custom_id"]
        [menu] = fake.sent_messages(CHANNEL)
        assert menu["components"][0]["components"][0]["label"] == "Go"

        fake.inject_component(alice(fake), menu, custom_id)
        callback = await fake.wait_for_call(CALLBACK)
        assert callback["type"] == 7
        assert clicks == [ALICE]
        [edited] = fake.sent_messages(CHANNEL)
        assert edited["id"] == menu["id"]
        assert edited["content"] == "clicked"
        assert edited["components"] == []


async def test_ephemeral_response_and_second_response_fails(fake: FakeDiscord) -> None:
    second: list[BaseException] = []

    async def handler(message: discord.Message) -> None:
        view = RecordingView(bot.errors)
        button: discord.ui.Button[RecordingView] = discord.ui.Button(label="Secret")

        async def pressed(interaction: discord.Interaction) -> None:
            await interaction.response.send_message("only you", ephemeral=True)
            try:
                await interaction.response.send_message("again")
            except discord.InteractionResponded as exc:
                second.append(exc)
            await interaction.followup.send("follow", ephemeral=True)

        button.callback = pressed  # type: ignore[method-assign]
        view.add_item(button)
        await message.channel.send("press", view=view)

    bot = Bot(handler)
    async with running(fake, bot):
        fake.inject_message(CHANNEL, alice(fake), "secret")
        body = await fake.wait_for_call(MESSAGES)
        custom_id = body["components"][0]["components"][0]["custom_id"]
        fake.inject_component(alice(fake), fake.sent_messages(CHANNEL)[0], custom_id)
        callback = await fake.wait_for_call(CALLBACK)
        assert callback["type"] == 4 and callback["data"]["flags"] == 64
        await fake.wait_for_call("POST /webhooks/{app}/{token}")
        assert [m["content"] for m in fake.ephemeral_responses] == ["only you", "follow"]
        assert [m["content"] for m in fake.sent_messages(CHANNEL)] == ["press"]
        assert len(second) == 1


async def test_second_callback_is_rejected_by_the_fake(fake: FakeDiscord) -> None:
    # Plain HTTP, no client: interaction routes authenticate by the token in the URL.
    payload = fake.inject_command(alice(fake), CHANNEL, "nothing")
    url = f"{fake.api_base}/interactions/{payload['id']}/{payload['token']}/callback"
    async with aiohttp.ClientSession() as session:
        async with session.post(url, json={"type": 5}, params={"with_response": "1"}) as first:
            assert first.status == 200
            assert first.headers["Content-Type"] == "application/json"
            answer = await first.json()
            assert answer["interaction"]["response_message_loading"] is True
        async with session.post(url, json={"type": 5}) as again:
            assert again.status == 400 and (await again.json())["code"] == 40060
        bad = url.replace(payload["token"], "nope")
        async with session.post(bad, json={"type": 5}) as unknown:
            assert unknown.status == 404 and (await unknown.json())["code"] == 10062
        async with session.get(f"{fake.api_base}/no/such/route") as missing:
            assert missing.status == 404
            assert missing.headers["Content-Type"] == "application/json"
        async with session.get(f"{fake.api_base}/users/@me") as anonymous:
            assert anonymous.status == 401


async def test_slash_command_sync_and_ephemeral_reply(fake: FakeDiscord) -> None:
    bot = Bot()
    seen: list[str] = []

    @bot.tree.command(name="ask", description="Ask something")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        seen.append(question)
        await interaction.response.defer(ephemeral=True, thinking=True)
        await interaction.edit_original_response(content=f"answer to {question}")

    async def tree_error(interaction: discord.Interaction, error: Exception) -> None:
        bot.errors.append(error)

    bot.tree.on_error = tree_error  # type: ignore[method-assign]
    async with running(fake, bot):
        bot.tree.copy_global_to(guild=discord.Object(GUILD))
        synced = await bot.tree.sync(guild=discord.Object(GUILD))
        assert [c.name for c in synced] == ["ask"]
        assert fake.commands_synced[-1]["guild_id"] == str(GUILD)
        fake.inject_command(
            alice(fake), CHANNEL, "ask", [{"name": "question", "type": 3, "value": "why"}]
        )
        callback = await fake.wait_for_call(CALLBACK)
        assert callback["type"] == 5
        edit = await fake.wait_for_call("PATCH /webhooks/{app}/{token}/messages/@original")
        assert edit["content"] == "answer to why"
        assert seen == ["why"]
        [response] = fake.ephemeral_responses
        assert response["content"] == "answer to why" and response["flags"] == 64


async def test_modal_flow(fake: FakeDiscord) -> None:
    submitted: list[str] = []

    class Feedback(discord.ui.Modal, title="Feedback"):
        text: discord.ui.TextInput[Feedback] = discord.ui.TextInput(label="Text", custom_id="text")

        async def on_submit(self, interaction: discord.Interaction) -> None:
            submitted.append(self.text.value)
            await interaction.response.send_message("thanks", ephemeral=True)

        async def on_error(  # type: ignore[override]
            self, interaction: discord.Interaction, error: Exception, /
        ) -> None:
            bot.errors.append(error)

    async def handler(message: discord.Message) -> None:
        view = RecordingView(bot.errors)
        button: discord.ui.Button[RecordingView] = discord.ui.Button(label="Open")

        async def pressed(interaction: discord.Interaction) -> None:
            await interaction.response.send_modal(Feedback(custom_id="feedback"))

        button.callback = pressed  # type: ignore[method-assign]
        view.add_item(button)
        await message.channel.send("form", view=view)

    bot = Bot(handler)
    async with running(fake, bot):
        fake.inject_message(CHANNEL, alice(fake), "form please")
        body = await fake.wait_for_call(MESSAGES)
        menu = fake.sent_messages(CHANNEL)[0]
        fake.inject_component(
            alice(fake), menu, body["components"][0]["components"][0]["custom_id"]
        )
        modal_call = await fake.wait_for_call(CALLBACK)
        assert modal_call["type"] == 9
        assert fake.modals[0]["custom_id"] == "feedback"
        fake.inject_modal_submit(alice(fake), menu, "feedback", {"text": "great"})
        await fake.wait_for_call(CALLBACK, lambda b: b["type"] == 4)
        assert submitted == ["great"]
        assert fake.ephemeral_responses[0]["content"] == "thanks"


async def test_rate_limited_message_is_retried(fake: FakeDiscord) -> None:
    async def handler(message: discord.Message) -> None:
        await message.channel.send("after the limit")

    async with running(fake, Bot(handler)):
        fake.fail_next(MESSAGES, 429, retry_after=0.2)
        fake.inject_message(CHANNEL, alice(fake), "go")
        limited = await fake.wait_for_record(MESSAGES, ok=False)
        assert limited.status == 429 and limited.response["retry_after"] == 0.2
        body = await fake.wait_for_call(MESSAGES)
        assert body["content"] == "after the limit"
        assert len(fake.calls_to(MESSAGES)) == 2
        assert [m["content"] for m in fake.sent_messages(CHANNEL)] == ["after the limit"]


async def test_rate_limits_for_matching_calls_are_waited_out(fake: FakeDiscord) -> None:
    async with running(fake, Bot()) as bot:
        channel = bot.get_channel(CHANNEL)
        assert isinstance(channel, discord.TextChannel)
        fake.fail_next(MESSAGES, 429, retry_after=0.1, times=2, when=lambda b: b["content"] == "b")
        await channel.send("a")
        await channel.send("b")
        calls = [r for r in fake.call_log if r.route == MESSAGES]
        assert [(r.data["content"], r.status) for r in calls] == [
            ("a", 200),
            ("b", 429),
            ("b", 429),
            ("b", 200),
        ]
        # discord.py waited out each retry_after before trying again.
        first, second, third = calls[1:]
        assert second.time - first.time >= 0.1 and third.time - second.time >= 0.1


async def test_dropped_connection(fake: FakeDiscord) -> None:
    async with running(fake, Bot()) as bot:
        channel = bot.get_channel(CHANNEL)
        assert isinstance(channel, discord.TextChannel)
        fake.drop_next(MESSAGES)
        with pytest.raises(aiohttp.ClientConnectionError):
            await channel.send("lost")
        dropped = await fake.wait_for_record(MESSAGES, ok=False)
        assert dropped.dropped and dropped.data["content"] == "lost"
        await channel.send("sent")
        assert [m["content"] for m in fake.sent_messages(CHANNEL)] == ["sent"]


async def test_forbidden_and_too_long(fake: FakeDiscord) -> None:
    async with running(fake, Bot()) as bot:
        channel = bot.get_channel(CHANNEL)
        assert isinstance(channel, discord.TextChannel)
        with pytest.raises(discord.HTTPException) as too_long:
            await channel.send("x" * 2001)
        assert too_long.value.status == 400 and too_long.value.code == 50035
        fake.fail_next(MESSAGES, 403)
        with pytest.raises(discord.Forbidden) as forbidden:
            await channel.send("not allowed")
        assert forbidden.value.code == 50013
        assert fake.sent_messages() == []


async def test_enforced_nonce_returns_the_same_message(fake: FakeDiscord) -> None:
    async with running(fake, Bot()) as bot:
        channel = bot.get_channel(CHANNEL)
        assert isinstance(channel, discord.TextChannel)
        first = await channel.send("once", nonce="abc-1")
        second = await channel.send("once", nonce="abc-1")
        third = await channel.send("twice", nonce="abc-2")
        assert first.id == second.id != third.id
        bodies = fake.calls_to(MESSAGES)
        assert bodies[0] is not None and bodies[0]["enforce_nonce"] is True
        assert [m["content"] for m in fake.sent_messages(CHANNEL)] == ["once", "twice"]


async def test_edit_typing_and_thread_send(fake: FakeDiscord) -> None:
    async with running(fake, Bot()) as bot:
        channel = bot.get_channel(CHANNEL)
        assert isinstance(channel, discord.TextChannel)
        async with channel.typing():
            sent = await channel.send("draft")
        await sent.edit(content="final")
        await fake.wait_for_call("POST /channels/{id}/typing")
        await fake.wait_for_call("PATCH /channels/{cid}/messages/{mid}")
        assert fake.message(CHANNEL, sent.id)["content"] == "final"  # type: ignore[index]
        thread = bot.get_channel(THREAD)
        assert isinstance(thread, discord.Thread)
        await thread.send("in thread")
        assert [m["content"] for m in fake.sent_messages(THREAD)] == ["in thread"]


async def test_server_disconnect_resumes_and_replays(fake: FakeDiscord) -> None:
    async def handler(message: discord.Message) -> None:
        await message.channel.send(f"got {message.content}")

    async with running(fake, Bot(handler)) as bot:
        fake.inject_message(CHANNEL, alice(fake), "one")
        await fake.wait_for_call(MESSAGES, lambda b: b["content"] == "got one")
        await fake.disconnect(4000)
        # Sent while the client is away: replayed after RESUME.
        fake.inject_message(CHANNEL, alice(fake), "two")
        resume = await fake.wait_for_resume()
        assert resume["session_id"] and resume["seq"] > 0
        await asyncio.wait_for(bot.resumed_event.wait(), WAIT)
        await fake.wait_for_call(MESSAGES, lambda b: b["content"] == "got two")
        fake.inject_message(CHANNEL, alice(fake), "three")
        await fake.wait_for_call(MESSAGES, lambda b: b["content"] == "got three")
        assert [m.content for m in bot.received] == ["one", "two", "three"]
        assert len(fake.identifies) == 1


async def test_bad_token_raises_login_failure(fake: FakeDiscord) -> None:
    bot = Bot()
    with point_discord_py_at(fake), pytest.raises(discord.LoginFailure):
        await asyncio.wait_for(bot.start("wrong-token"), WAIT)
    await bot.close()


async def test_message_content_blanked_without_intent(fake: FakeDiscord) -> None:
    async with running(fake, Bot(content=False)) as bot:
        fake.inject_message(CHANNEL, alice(fake), "hidden")
        fake.inject_message(CHANNEL, alice(fake), "visible", mentions_bot=True)
        received = await bot.wait_received(2)
        assert [m.content for m in received] == ["", f"<@{fake.bot_id}> visible"]


async def test_attachments_both_ways(fake: FakeDiscord) -> None:
    downloaded: list[bytes] = []

    async def handler(message: discord.Message) -> None:
        downloaded.append(await message.attachments[0].read())
        await message.channel.send("file back", file=discord.File(io.BytesIO(b"pong"), "b.txt"))

    async with running(fake, Bot(handler)):
        fake.inject_message(CHANNEL, alice(fake), "see file", attachments=[("a.txt", b"ping")])
        body = await fake.wait_for_call(MESSAGES)
        assert body["content"] == "file back"
        assert downloaded == [b"ping"]
        [sent] = fake.sent_messages(CHANNEL)
        assert sent["attachments"][0]["filename"] == "b.txt"
        assert sent["attachments"][0]["size"] == 4
        assert fake.uploads[-1].data == b"pong"
