"""The Discord adapter through the whole gateway, against a fake Discord on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import discord
import pytest
from clock import FakeClock
from discord_rig import (
    ANN,
    BOB,
    DM,
    GENERAL,
    GUILD,
    INTERACTION_CALLBACK,
    THREAD,
    Rig,
    contents,
    custom_ids,
    prompt_in,
    reply_in,
    running,
    start_rig,
    stop_rig,
)
from fakes.discord import (
    FakeDiscord,
    member,
    point_discord_py_at,
    role,
    text_channel,
    thread,
    user,
)

from adapters.discord.adapter import DiscordAdapter
from gateway.adapter import Progress
from gateway.events import Origin, ToolCallEvent
from gateway.runtime import Runtime
from gateway.settings import Settings


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        server.add_guild(
            GUILD,
            "guild",
            channels=[text_channel(GENERAL, "general"), thread(THREAD, GENERAL, "side")],
            members=[ANN, BOB],
        )
        server.dm_channel(DM, ANN)
        yield server


@pytest.fixture
def pointed(fake: FakeDiscord) -> Iterator[None]:
    with point_discord_py_at(fake):
        yield


@pytest.fixture
async def rig(fake: FakeDiscord, pointed: None, tmp_path: Path) -> AsyncIterator[Rig]:
    async with running(fake, tmp_path / "home") as started:
        yield started


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def clocked(
    fake: FakeDiscord, pointed: None, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Rig]:
    """A rig whose runtime runs on `clock`."""
    async with running(fake, tmp_path / "home", clock=clock) as started:
        yield started


async def test_mention_gets_an_echo_in_the_same_channel(rig: Rig) -> None:
    trigger = rig.fake.inject_message(GENERAL, ANN, "hello there", mentions_bot=True)
    body = await reply_in(rig.fake, GENERAL, "echo: hello there")
    assert str(body["message_reference"]["message_id"]) == str(trigger["id"])
    assert body["allowed_mentions"]["parse"] in ([], ["users"])  # no everyone, no roles
    assert body.get("nonce") and body.get("enforce_nonce") is True
    messages = await rig.runtime.store.recent_messages(f"dc-{GENERAL}")
    assert [(m.role, m.content, m.sender) for m in messages] == [
        ("user", "hello there", "ann"),
        ("assistant", "echo: hello there", "offline"),
    ]


async def test_chatter_is_context_and_the_bots_own_echo_is_ignored(rig: Rig) -> None:
    fake = rig.fake
    fake.inject_message(GENERAL, BOB, "just talking")
    fake.inject_message(GENERAL, ANN, "now you", mentions_bot=True)
    await reply_in(fake, GENERAL, "echo: now you")
    fake.inject_message(GENERAL, ANN, "and again", mentions_bot=True)
    await reply_in(fake, GENERAL, "echo: and again")
    echoes = [c for c in contents(fake, GENERAL) if c.startswith("echo:")]
    assert echoes == ["echo: now you", "echo: and again"]
    messages = await rig.runtime.store.recent_messages(f"dc-{GENERAL}")
    assert ("just talking", "bob") in [(m.content, m.sender) for m in messages]


async def test_dm_and_thread_are_sessions_of_their_own(rig: Rig) -> None:
    rig.fake.inject_message(DM, ANN, "private words", guild_id=None)
    await reply_in(rig.fake, DM, "echo: private words")
    rig.fake.inject_message(THREAD, BOB, "in the thread", mentions_bot=True)
    await reply_in(rig.fake, THREAD, "echo: in the thread")
    assert await rig.runtime.store.get(f"dc-{DM}") is not None
    assert await rig.runtime.store.get(f"dc-{THREAD}") is not None


async def test_ask_with_a_modal(rig: Rig) -> None:
    fake = rig.fake
    fake.inject_message(DM, ANN, "!ask favourite colour?", guild_id=None)
    prompt = await prompt_in(fake, DM)
    (answer_button,) = custom_ids(prompt)
    fake.inject_component(ANN, prompt, answer_button)
    modal = await fake.wait_for_call(
        "POST /interactions/{id}/{token}/callback", lambda b: b.get("type") == 9, timeout=10
    )
    text_input = modal["data"]["components"][0]["components"][0]
    fake.inject_modal_submit(
        ANN, prompt, modal["data"]["custom_id"], {text_input["custom_id"]: "green"}
    )
    await reply_in(fake, DM, "answer: green")


async def test_429_is_retried_and_nothing_is_lost(rig: Rig) -> None:
    rig.fake.fail_next("POST /channels/{id}/messages", 429, retry_after=0.2)
    rig.fake.inject_message(DM, ANN, "patience", guild_id=None)
    await reply_in(rig.fake, DM, "echo: patience")
    assert contents(rig.fake, DM).count("echo: patience") == 1


async def test_resume_after_the_server_drops_the_socket(rig: Rig) -> None:
    await rig.fake.disconnect(4000)
    await rig.fake.wait_for_resume(timeout=10)
    rig.fake.inject_message(DM, ANN, "still with me?", guild_id=None)
    await reply_in(rig.fake, DM, "echo: still with me?")


async def test_attachments_are_saved_in_the_session_workspace(rig: Rig) -> None:
    rig.fake.inject_message(
        DM, ANN, "see file", guild_id=None, attachments=[("notes.txt", b"attached bytes")]
    )
    reply = await reply_in(rig.fake, DM, "echo: see file")
    assert "notes.txt" in reply["content"] and "14 bytes" in reply["content"]
    folder = rig.runtime.store.files(f"dc-{DM}").dir / "workspace" / "attachments"
    assert [p.read_bytes() for p in folder.iterdir()] == [b"attached bytes"]


async def test_listen_channel_allowlist_admin_role_and_bots(
    fake: FakeDiscord, pointed: None, tmp_path: Path
) -> None:
    listen, closed = 904, 905
    fake.add_channel(GUILD, text_channel(listen, "ask-the-bot"))
    fake.add_channel(GUILD, text_channel(closed, "off-limits"))
    rig = await start_rig(
        fake,
        tmp_path / "home",
        discord_listen_channels=str(listen),
        discord_allowed_channels=f"{GENERAL},{listen}",
        admins=f"discord:{BOB['id']}",
    )
    try:
        fake.inject_message(closed, ANN, "not here", mentions_bot=True)
        fake.inject_message(listen, user(13, "other-bot", bot=True), "beep")
        fake.inject_message(listen, ANN, "no mention needed")
        await reply_in(fake, listen, "echo: no mention needed")
        assert contents(fake, closed) == []
        assert not any("beep" in c for c in contents(fake, listen))
        fake.inject_message(GENERAL, ANN, "!confirm ship", mentions_bot=True)
        prompt = await prompt_in(fake, GENERAL)
        approve = next(cid for cid in custom_ids(prompt) if cid.endswith(":y"))
        fake.inject_component(BOB, prompt, approve)  # bob is an admin
        await reply_in(fake, GENERAL, "approved: ship")
    finally:
        await stop_rig(rig)


async def test_missing_message_content_intent_is_explained(
    pointed: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with FakeDiscord(enabled_intents=0) as server:
        server.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")])
        with point_discord_py_at(server):
            settings = Settings(
                home=tmp_path / "home",
                discord_token=server.token,
                discord_api_url=server.api_base,
                discord_gateway_url=server.gateway_url,
                _env_file=None,
            )
            runtime = await Runtime.start(settings)
            adapter = DiscordAdapter(runtime, guild_ready_timeout=0.05)
            try:
                with pytest.raises(discord.PrivilegedIntentsRequired):
                    await adapter.start(ready_timeout=10)
            finally:
                await adapter.stop()
                await runtime.close()
    assert "MESSAGE CONTENT INTENT" in capsys.readouterr().err


async def test_member_with_the_admin_role_may_approve(tmp_path: Path) -> None:
    admin_role = "950"
    carl = user(13, "carl")
    async with FakeDiscord() as fake:
        fake.add_guild(
            GUILD,
            "guild",
            channels=[text_channel(GENERAL, "general")],
            roles=[role(950, "ops")],
            members=[ANN, BOB, member(carl, [950])],
        )
        with point_discord_py_at(fake):
            rig = await start_rig(fake, tmp_path / "home", discord_admin_role=admin_role)
            try:
                fake.inject_message(GENERAL, ANN, "!confirm deploy", mentions_bot=True)
                prompt = await prompt_in(fake, GENERAL)
                approve = next(cid for cid in custom_ids(prompt) if cid.endswith(":y"))
                fake.inject_component(BOB, prompt, approve)  # no role: refused
                await fake.wait_for_call(
                    "POST /interactions/{id}/{token}/callback",
                    lambda b: b.get("type") == 4,
                    timeout=10,
                )
                fake.inject_component(carl, prompt, approve)
                edit = await fake.wait_for_call(
                    "POST /interactions/{id}/{token}/callback",
                    lambda b: b.get("type") == 7,
                    timeout=10,
                )
                assert "approved by carl" in edit["data"]["content"]
                await reply_in(fake, GENERAL, "approved: deploy")
            finally:
                await stop_rig(rig)


async def test_a_shard_gets_only_its_own_guilds(tmp_path: Path) -> None:
    # Discord puts a guild on shard (guild_id >> 22) % shard_count.
    mine, other = (1 << 22) + 7, GUILD  # shard 1 and shard 0 of 2
    mine_channel, other_channel = 911, GENERAL
    async with FakeDiscord() as fake:
        fake.add_guild(mine, "mine", channels=[text_channel(mine_channel, "here")], members=[ANN])
        fake.add_guild(
            other, "other", channels=[text_channel(other_channel, "there")], members=[ANN]
        )
        with point_discord_py_at(fake):
            rig = await start_rig(
                fake, tmp_path / "home", discord_shard_count=2, discord_shard_ids="1"
            )
            try:
                identify = fake.identifies[-1]
                assert identify["shard"] == [1, 2]
                fake.inject_message(other_channel, ANN, "not for this shard", mentions_bot=True)
                fake.inject_message(mine_channel, ANN, "for this shard", mentions_bot=True)
                await reply_in(fake, mine_channel, "echo: for this shard")
                assert contents(fake, other_channel) == []
                assert await rig.runtime.store.get(f"dc-{other_channel}") is None
            finally:
                await stop_rig(rig)


async def test_slash_commands_are_registered_from_the_registry(rig: Rig) -> None:
    menu = rig.runtime.commands.menu("discord")
    registered = {c["name"]: c for c in rig.fake.registered_commands()}
    assert list(registered) == [c.name for c in menu]
    for command in menu:
        options = registered[command.name]["options"]
        if command.usage:  # what follows the name is one optional text option
            assert [(o["name"], o["type"], o.get("required", False)) for o in options] == [
                ("text", 3, False)
            ]
        else:
            assert options == []


async def test_slash_command_runs_through_the_gateway(rig: Rig) -> None:
    rig.fake.inject_command(ANN, GENERAL, "status")
    answer = await rig.fake.wait_for_call(
        INTERACTION_CALLBACK, lambda b: b.get("type") == 4, timeout=10
    )
    assert f"session: dc-{GENERAL}" in answer["data"]["content"]
    # The interaction response carries the reply; nothing else is posted in the channel.
    assert contents(rig.fake, GENERAL) == [answer["data"]["content"]]


async def test_slash_command_with_an_argument(
    fake: FakeDiscord, pointed: None, tmp_path: Path
) -> None:
    rig = await start_rig(fake, tmp_path / "home", admins=f"discord:{ANN['id']}")
    try:
        model = [{"name": "text", "type": 3, "value": "tiny-model"}]
        fake.inject_command(BOB, GENERAL, "model", model)
        refused = await fake.wait_for_call(
            INTERACTION_CALLBACK, lambda b: b.get("type") == 4, timeout=10
        )
        assert "only an admin" in refused["data"]["content"]
        fake.inject_command(ANN, GENERAL, "model", model)
        changed = await fake.wait_for_call(
            INTERACTION_CALLBACK, lambda b: b.get("type") == 4, timeout=10
        )
        assert "tiny-model" in changed["data"]["content"]
        row = await rig.runtime.store.get(f"dc-{GENERAL}")
        assert row is not None and row.model == "tiny-model"
        fake.inject_command(BOB, GENERAL, "model")  # alone it only shows the model: anyone may
        shown = await fake.wait_for_call(
            INTERACTION_CALLBACK, lambda b: b.get("type") == 4, timeout=10
        )
        assert shown["data"]["content"] == "model: tiny-model"
    finally:
        await stop_rig(rig)


ANN_IN_GENERAL = Origin("discord", str(GENERAL), sender_id=ANN["id"], sender_name="ann")


async def test_typing_is_sent_at_most_once_every_eight_seconds(
    clocked: Rig, clock: FakeClock
) -> None:
    step = ToolCallEvent(session_id=f"dc-{GENERAL}", task_hash="t1", call_id="c1", tool="x")
    for _ in range(4):
        await clocked.adapter.deliver(ANN_IN_GENERAL, step, Progress())
        await clock.advance(2.0)
    typing_route = f"POST /channels/{GENERAL}/typing"
    assert len(clocked.fake.calls_to(typing_route)) == 1
    await clocked.adapter.deliver(ANN_IN_GENERAL, step, Progress())  # 8 s after the first
    assert len(clocked.fake.calls_to(typing_route)) == 2
