"""Agent profiles through the fake Telegram: a forum topic bound apart from its group, and a
group's admins switching among the profiles the operator allowed there (`/agent use`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fakes.openai import FakeOpenAI
from fakes.openai.replies import Text
from fakes.telegram import FakeTelegram
from telegram_rig import Rig, reply_in, running

from gateway.profiles.service import Profiles

FORUM, TOPIC, OTHER_TOPIC = -400, 7, 9
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
    async with FakeTelegram() as fake, running(fake, tmp_path / "home") as started:
        assert started.runtime.profiles is not None
        profiles: Profiles = started.runtime.profiles
        for name in ("alpha", "beta"):
            changes = {"agent": "openai", "model": f"model-{name}", "base_url": model.url}
            await profiles.set(name, {**changes, "key": f"env:{KEY_VARIABLE}"}, by="test")
        await profiles.bind(f"telegram-chat:{FORUM}", "alpha", by="test", switchable=("beta",))
        await profiles.bind(f"telegram-topic:{FORUM}:{TOPIC}", "beta", by="test")
        yield started


async def asked(
    rig: Rig, model: FakeOpenAI, text: str, topic: int | None, user: dict[str, Any]
) -> str:
    """The model that answered `text` sent in `topic` of the forum (None: General)."""
    answer = f"answer to {text}"
    model.script(Text(answer))
    forum = rig.fake.supergroup(FORUM, "forum", is_forum=True)
    bot = rig.fake.bot_user["username"]
    rig.fake.inject_message(forum, user, f"@{bot} {text}", thread_id=topic)
    posted = await reply_in(rig.fake, FORUM, answer)
    assert posted.get("message_thread_id") == topic
    return str(model.requests[-1]["model"])


async def command(rig: Rig, text: str, topic: int, user: dict[str, Any], expect: str) -> str:
    forum = rig.fake.supergroup(FORUM, "forum", is_forum=True)
    rig.fake.inject_message(forum, user, text, thread_id=topic)
    return str((await reply_in(rig.fake, FORUM, expect))["text"])


async def test_a_forum_topic_is_bound_apart_from_its_group(rig: Rig, model: FakeOpenAI) -> None:
    ann = rig.fake.user(41, "Ann")
    assert await asked(rig, model, "in general", None, ann) == "model-alpha"
    assert await asked(rig, model, "in the topic", TOPIC, ann) == "model-beta"
    # A topic without a binding of its own follows its group.
    assert await asked(rig, model, "in another topic", OTHER_TOPIC, ann) == "model-alpha"
    shown = await command(rig, "/agent", TOPIC, ann, "profile: beta")
    assert f"telegram-topic:{FORUM}:{TOPIC}" in shown


async def test_a_groups_admins_switch_among_the_allowed_profiles(
    rig: Rig, model: FakeOpenAI
) -> None:
    ann, mod = rig.fake.user(41, "Ann"), rig.fake.user(42, "Mod")
    rig.fake.set_admin(FORUM, mod)
    shown = await command(rig, "/agent", OTHER_TOPIC, ann, "profile: alpha")
    assert "admins may switch here: alpha, beta" in shown
    refused = await command(rig, "/agent use beta", OTHER_TOPIC, ann, "only an admin")
    assert "/agent" in refused
    await command(rig, "/agent use default", OTHER_TOPIC, mod, "only a gateway admin")
    await command(rig, "/agent use beta", OTHER_TOPIC, mod, "profile beta answers here")
    assert await asked(rig, model, "after the switch", OTHER_TOPIC, ann) == "model-beta"
    shown = await command(rig, "/agent", OTHER_TOPIC, ann, "profile: beta")
    assert f"session:tg-{FORUM}_{OTHER_TOPIC}" in shown
    # The switch holds in that topic only, and can be switched back.
    assert await asked(rig, model, "in general again", None, ann) == "model-alpha"
    await command(rig, "/agent use alpha", OTHER_TOPIC, mod, "profile alpha answers here")
    assert await asked(rig, model, "switched back", OTHER_TOPIC, ann) == "model-alpha"
