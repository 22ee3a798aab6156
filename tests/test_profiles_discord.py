"""Agent profiles through the fake Discord: two channels bound to two profiles, each answered
by its own profile's model and persona; a thread follows its channel until it is bound
itself; a change applies to the next message without a restart; `/agent` says which profile
answers and why."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from discord_rig import ANN, GUILD, Rig, reply_in, running
from fakes.discord import FakeDiscord, point_discord_py_at, text_channel, thread
from fakes.openai import FakeOpenAI
from fakes.openai.replies import Text
from test_openai_agent import usage_rows

from gateway.profiles.service import Profiles

ALPHA_ROOM, BETA_ROOM, ALPHA_THREAD, PLAIN = 910, 920, 911, 930
KEY_VARIABLE = "AGENVOY_TEST_PROFILE_KEY"


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
async def rig(
    tmp_path: Path, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Rig]:
    monkeypatch.setenv(KEY_VARIABLE, model.api_key)
    async with FakeDiscord() as fake:
        fake.add_guild(
            GUILD,
            "guild",
            channels=[
                text_channel(ALPHA_ROOM, "alpha"),
                text_channel(BETA_ROOM, "beta"),
                text_channel(PLAIN, "plain"),
                thread(ALPHA_THREAD, ALPHA_ROOM, "side"),
            ],
            members=[ANN],
        )
        with point_discord_py_at(fake):
            async with running(fake, tmp_path / "home") as started:
                yield started


def profiles_of(rig: Rig) -> Profiles:
    assert rig.runtime.profiles is not None
    return rig.runtime.profiles


async def two_profiles(rig: Rig, model: FakeOpenAI) -> None:
    profiles = profiles_of(rig)
    for name in ("alpha", "beta"):
        await profiles.set(
            name,
            {
                "agent": "openai",
                "model": f"model-{name}",
                "base_url": model.url,
                "key": f"env:{KEY_VARIABLE}",
                "persona": f"You are the {name} helper.",
            },
            by="test",
        )
    await profiles.bind(f"discord-channel:{ALPHA_ROOM}", "alpha", by="test")
    await profiles.bind(f"discord-channel:{BETA_ROOM}", "beta", by="test")


async def asked(rig: Rig, model: FakeOpenAI, channel: int, text: str) -> dict[str, Any]:
    """The request the model got for `text` sent in `channel`, once its answer is posted."""
    answer = f"answer to {text}"
    model.script(Text(answer))
    rig.fake.inject_message(channel, ANN, text, mentions_bot=True)
    await reply_in(rig.fake, channel, answer)
    return model.requests[-1]


def persona(request: dict[str, Any]) -> str:
    return str(request["messages"][0]["content"])


async def test_two_channels_answered_by_their_own_profiles(rig: Rig, model: FakeOpenAI) -> None:
    await two_profiles(rig, model)
    alpha = await asked(rig, model, ALPHA_ROOM, "hello alpha")
    beta = await asked(rig, model, BETA_ROOM, "hello beta")
    assert alpha["model"] == "model-alpha" and "alpha helper" in persona(alpha)
    assert beta["model"] == "model-beta" and "beta helper" in persona(beta)
    # A channel no binding names keeps the environment's agent (the offline one here).
    rig.fake.inject_message(PLAIN, ANN, "hello plain", mentions_bot=True)
    await reply_in(rig.fake, PLAIN, "echo: hello plain")
    # Each usage row names the model that answered.
    assert {row[0] for row in await usage_rows(rig.runtime)} == {
        "model-alpha",
        "model-beta",
        "offline",
    }


async def test_a_thread_follows_its_channel_until_bound_itself(rig: Rig, model: FakeOpenAI) -> None:
    await two_profiles(rig, model)
    followed = await asked(rig, model, ALPHA_THREAD, "in the thread")
    assert followed["model"] == "model-alpha"
    await profiles_of(rig).bind(f"discord-thread:{ALPHA_THREAD}", "beta", by="test")
    own = await asked(rig, model, ALPHA_THREAD, "bound now")
    assert own["model"] == "model-beta"
    # The channel itself is still alpha's.
    assert (await asked(rig, model, ALPHA_ROOM, "and the room"))["model"] == "model-alpha"


async def test_a_change_applies_to_the_next_message_without_a_restart(
    rig: Rig, model: FakeOpenAI
) -> None:
    await two_profiles(rig, model)
    assert (await asked(rig, model, ALPHA_ROOM, "first"))["model"] == "model-alpha"
    await profiles_of(rig).set("alpha", {"model": "model-alpha-2"}, by="test")
    assert (await asked(rig, model, ALPHA_ROOM, "second"))["model"] == "model-alpha-2"
    await profiles_of(rig).rollback("alpha", 1, by="test")
    assert (await asked(rig, model, ALPHA_ROOM, "third"))["model"] == "model-alpha"
    history = await profiles_of(rig).history("alpha")
    assert [v.change for v in history] == [
        "created",
        "model: model-alpha → model-alpha-2",
        "rollback to version 1: model: model-alpha-2 → model-alpha",
    ]


async def test_agent_command_says_which_profile_answers_and_why(
    rig: Rig, model: FakeOpenAI
) -> None:
    await two_profiles(rig, model)
    rig.fake.inject_message(BETA_ROOM, ANN, "/agent", mentions_bot=True)
    shown = await reply_in(rig.fake, BETA_ROOM, "profile: beta")
    assert f"bound to discord-channel:{BETA_ROOM}" in shown["content"]
    assert "model-beta" in shown["content"]
    rig.fake.inject_message(ALPHA_THREAD, ANN, "/agent", mentions_bot=True)
    followed = await reply_in(rig.fake, ALPHA_THREAD, "profile: alpha")
    assert f"discord-channel:{ALPHA_ROOM}" in followed["content"]
    rig.fake.inject_message(PLAIN, ANN, "/agent", mentions_bot=True)
    await reply_in(rig.fake, PLAIN, "profile: default")
