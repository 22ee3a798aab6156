"""Discord: a message or a slash command is taken in once however often it is delivered,
only from where the bot serves (one check for messages, commands, buttons and modals), and
not at all when its text is refused; previews a crash left are deleted. Against the fake
Discord, through discord.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from discord_rig import (
    ANN,
    DM,
    GENERAL,
    GUILD,
    INTERACTION_CALLBACK,
    Rig,
    contents,
    custom_ids,
    prompt_in,
    reply_in,
    running,
    start_rig,
    stop_rig,
)
from fakes.discord import FakeDiscord, point_discord_py_at, text_channel, thread

from adapters.discord.commands import REFUSAL
from gateway.adapter import Progress
from gateway.events import AskUserEvent, ConfirmEvent, Origin, TextDeltaEvent

OTHER_GUILD, OTHER_CHANNEL, CLOSED = 800, 801, 905
SIDE_THREAD, CATEGORY, IN_CATEGORY = 906, 907, 908


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    async with FakeDiscord() as server:
        server.add_guild(
            GUILD,
            "guild",
            channels=[
                text_channel(GENERAL, "general"),
                text_channel(CLOSED, "off-limits"),
                {**text_channel(CATEGORY, "bots"), "type": 4},
                {**text_channel(IN_CATEGORY, "in-bots"), "parent_id": str(CATEGORY)},
            ],
            members=[ANN],
        )
        server.add_channel(GUILD, thread(SIDE_THREAD, GENERAL, "side"))
        server.add_guild(
            OTHER_GUILD, "other", channels=[text_channel(OTHER_CHANNEL, "there")], members=[ANN]
        )
        server.dm_channel(DM, ANN)
        with point_discord_py_at(server):
            yield server


@pytest.fixture
async def rig(fake: FakeDiscord, tmp_path: Path) -> AsyncIterator[Rig]:
    async with running(fake, tmp_path / "home") as started:
        yield started


@pytest.fixture
async def guarded(fake: FakeDiscord, tmp_path: Path) -> AsyncIterator[Rig]:
    """A rig that serves only the channel `GENERAL` of the guild `GUILD`."""
    only_general = {
        "discord_allowed_guilds": str(GUILD),
        "discord_allowed_channels": str(GENERAL),
        "discord_allow_dms": False,
    }
    async with running(fake, tmp_path / "home", **only_general) as started:
        yield started


async def user_texts(rig: Rig, channel: int) -> list[str]:
    messages = await rig.runtime.store.recent_messages(f"dc-{channel}", 50)
    return [m.content for m in messages if m.role == "user"]


async def refusal(fake: FakeDiscord) -> str:
    """The next ephemeral interaction response."""
    body = await fake.wait_for_call(INTERACTION_CALLBACK, lambda b: b.get("type") == 4)
    assert body["data"]["flags"] & 64  # only the one who asked sees it
    return str(body["data"]["content"])


async def answer_saying(fake: FakeDiscord, text: str) -> None:
    """Wait for the interaction response that says `text`."""
    await fake.wait_for_call(
        INTERACTION_CALLBACK, lambda b: text in str(b.get("data", {}).get("content"))
    )


async def test_a_message_delivered_again_is_stored_and_answered_once(rig: Rig) -> None:
    fake = rig.fake
    message = fake.inject_message(GENERAL, ANN, "once please", mentions_bot=True)
    await reply_in(fake, GENERAL, "echo: once please")
    fake.inject_event("MESSAGE_CREATE", message)  # the same message id once more
    fake.inject_message(GENERAL, ANN, "after", mentions_bot=True)  # taken in after it
    await reply_in(fake, GENERAL, "echo: after")
    assert await user_texts(rig, GENERAL) == ["once please", "after"]
    assert [c for c in contents(fake, GENERAL) if c.startswith("echo:")] == [
        "echo: once please",
        "echo: after",
    ]


async def test_dms_are_not_served_unless_allowed(guarded: Rig) -> None:
    fake = guarded.fake
    fake.inject_message(DM, ANN, "let me in", guild_id=None)
    fake.inject_message(GENERAL, ANN, "here", mentions_bot=True)
    await reply_in(fake, GENERAL, "echo: here")
    fake.inject_command(ANN, DM, "status", guild_id=None)
    assert await refusal(fake) == REFUSAL
    assert contents(fake, DM) == []
    assert await guarded.runtime.store.get(f"dc-{DM}") is None


@pytest.mark.parametrize("channel", [OTHER_CHANNEL, CLOSED], ids=["other-guild", "other-channel"])
async def test_slash_commands_from_elsewhere_are_refused(guarded: Rig, channel: int) -> None:
    guarded.fake.inject_command(ANN, channel, "status")
    assert await refusal(guarded.fake) == REFUSAL
    guarded.fake.inject_command(ANN, GENERAL, "status")
    answer = await guarded.fake.wait_for_call(INTERACTION_CALLBACK, lambda b: b.get("type") == 4)
    assert f"session: dc-{GENERAL}" in answer["data"]["content"]


async def test_a_button_pressed_elsewhere_is_refused(guarded: Rig) -> None:
    fake = guarded.fake
    event = ConfirmEvent(session_id=f"dc-{CLOSED}", task_hash="t905", tool="x", requester="ann")
    where = Origin("discord", channel_id=str(CLOSED), sender_id=ANN["id"], sender_name="ann")
    posted = await guarded.adapter.post_prompt(where, event)
    prompt = fake.message(CLOSED, posted.message_id)
    assert prompt is not None
    fake.inject_component(ANN, prompt, "agv:c:t905:y")
    # Allowed, it would have said "already answered": no such task is waiting.
    assert await refusal(fake) == REFUSAL


@pytest.mark.parametrize(
    ("options", "custom_id"),
    [(["red", "blue"], "agv:o:t905:0"), ([], "agv:a:t905")],
    ids=["choice-button", "answer-button"],
)
async def test_a_question_button_pressed_elsewhere_is_refused(
    guarded: Rig, options: list[str], custom_id: str
) -> None:
    fake = guarded.fake
    event = AskUserEvent(
        session_id=f"dc-{CLOSED}",
        task_hash="t905",
        question="colour?",
        options=options,
        requester="ann",
    )
    where = Origin("discord", channel_id=str(CLOSED), sender_id=ANN["id"], sender_name="ann")
    posted = await guarded.adapter.post_prompt(where, event)
    prompt = fake.message(CLOSED, posted.message_id)
    assert prompt is not None and custom_id in custom_ids(prompt)
    fake.inject_component(ANN, prompt, custom_id)
    # Allowed, it would have said "already answered" (or opened the modal): no task waits.
    assert await refusal(fake) == REFUSAL


async def test_an_answer_sent_from_elsewhere_is_refused_and_the_question_stays_open(
    guarded: Rig,
) -> None:
    fake = guarded.fake
    fake.inject_message(GENERAL, ANN, "!ask favourite colour?", mentions_bot=True)
    prompt = await prompt_in(fake, GENERAL)
    (answer_button,) = custom_ids(prompt)

    async def open_modal() -> tuple[str, str]:
        fake.inject_component(ANN, prompt, answer_button)
        modal = await fake.wait_for_call(INTERACTION_CALLBACK, lambda b: b.get("type") == 9)
        text_input = modal["data"]["components"][0]["components"][0]
        return str(modal["data"]["custom_id"]), str(text_input["custom_id"])

    modal_id, field_id = await open_modal()
    fake.inject_modal_submit(ANN, None, modal_id, {field_id: "red"}, channel_id=CLOSED)
    assert await refusal(fake) == REFUSAL
    modal_id, field_id = await open_modal()
    fake.inject_modal_submit(ANN, prompt, modal_id, {field_id: "green"})
    await reply_in(fake, GENERAL, "answer: green")
    assert not any("answer: red" in c for c in contents(fake, GENERAL))


async def test_a_thread_is_served_through_its_channel_and_a_channel_through_its_category(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    allowed = {"discord_allowed_channels": f"{GENERAL},{CATEGORY}"}
    async with running(fake, tmp_path / "home", **allowed):
        for channel in (SIDE_THREAD, IN_CATEGORY):
            fake.inject_message(channel, ANN, f"hello {channel}", mentions_bot=True)
            await reply_in(fake, channel, f"echo: hello {channel}")
            fake.inject_command(ANN, channel, "status")
            await answer_saying(fake, f"session: dc-{channel}")
        fake.inject_command(ANN, CLOSED, "status")
        assert await refusal(fake) == REFUSAL


async def test_a_slash_command_delivered_again_runs_once(fake: FakeDiscord, tmp_path: Path) -> None:
    def model(name: str) -> list[dict[str, object]]:
        return [{"name": "text", "type": 3, "value": name}]

    async with running(fake, tmp_path / "home", admins=f"discord:{ANN['id']}") as rig:
        first = fake.inject_command(ANN, GENERAL, "model", model("first-model"))
        await answer_saying(fake, "model set to: first-model")
        fake.inject_command(ANN, GENERAL, "model", model("second-model"))
        await answer_saying(fake, "model set to: second-model")
        handled = rig.adapter.client.wait_for(
            "app_command_completion", check=lambda i, _c: str(i.id) == first["id"], timeout=10
        )
        fake.inject_event("INTERACTION_CREATE", first)  # as after a resume, or to another instance
        await handled
        row = await rig.runtime.store.get(f"dc-{GENERAL}")
        assert row is not None and row.model == "second-model"  # not set back by the old one
        # Answered once, by its first delivery: Discord would refuse a second response.
        callback = f"POST /interactions/{first['id']}/{first['token']}/callback"
        assert len(fake.calls_to(callback)) == 1


async def test_a_message_too_long_leaves_no_file(fake: FakeDiscord, tmp_path: Path) -> None:
    rig = await start_rig(fake, tmp_path / "home", max_message_chars=120)
    try:
        for text in ("x" * 121, "y" * 60):  # too long alone; too long with its file's line
            fake.inject_message(
                DM, ANN, text, guild_id=None, attachments=[("notes.txt", b"attached")]
            )
            await reply_in(fake, DM, "the limit is 120")
        folder = rig.runtime.store.files(f"dc-{DM}").dir / "workspace" / "attachments"
        assert not folder.exists() or list(folder.iterdir()) == []
        assert await user_texts(rig, DM) == []
    finally:
        await stop_rig(rig)


async def test_a_lone_surrogate_is_refused_with_a_short_reply(rig: Rig) -> None:
    fake = rig.fake
    fake.inject_message(DM, ANN, "broken \udfff text", guild_id=None)
    refused = await reply_in(fake, DM, "⚠️")
    assert "not valid Unicode" in refused["content"]
    fake.inject_command(ANN, GENERAL, "model", [{"name": "text", "type": 3, "value": "m\udfff"}])
    assert "not valid Unicode" in await refusal(fake)
    fake.inject_message(DM, ANN, "fine text", guild_id=None)
    await reply_in(fake, DM, "echo: fine text")
    assert await user_texts(rig, DM) == ["fine text"]


async def test_a_preview_left_by_a_crash_is_deleted_at_the_next_start(
    fake: FakeDiscord, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    rig = await start_rig(fake, home)
    where = Origin("discord", channel_id=str(GENERAL), sender_id=ANN["id"], sender_name="ann")
    delta = TextDeltaEvent(session_id=f"dc-{GENERAL}", task_hash="t1", text="half a rep")
    await rig.adapter.deliver(where, delta, Progress())
    assert contents(fake, GENERAL) == ["half a rep"]
    await stop_rig(rig)  # the final reply never comes

    rig = await start_rig(fake, home)
    try:
        await fake.wait_for_call("DELETE /channels/{cid}/messages/{mid}", timeout=10)
        assert contents(fake, GENERAL) == []
        assert await rig.runtime.kv.scan("preview:") == {}
    finally:
        await stop_rig(rig)
