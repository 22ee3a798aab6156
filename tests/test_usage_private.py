"""/usage me tells a member their own spend, not the chat: on Discord only they see the answer
(an ephemeral response); in a Telegram group, where a bot cannot answer one member alone, the
answer holds their figures but not which other identities are linked with theirs."""

from __future__ import annotations

from pathlib import Path

from discord_rig import ANN, GENERAL, GUILD, INTERACTION_CALLBACK, running
from fakes.discord import FakeDiscord, point_discord_py_at, text_channel
from fakes.telegram import FakeTelegram
from telegram_rig import reply_in
from telegram_rig import running as telegram_running

from gateway.store.usage import UsageRecord


async def test_usage_me_on_discord_is_seen_by_the_asker_alone(tmp_path: Path) -> None:
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[ANN])
        with point_discord_py_at(fake):
            async with running(fake, tmp_path / "home", quota_tokens_day=500) as rig:
                ann = f"discord:{ANN['id']}"
                await rig.runtime.store.usage.record(
                    UsageRecord(f"dc-{GENERAL}", "m", input=30, output=12, identity=ann)
                )
                me = [{"name": "text", "type": 3, "value": "me"}]
                fake.inject_command(ANN, GENERAL, "usage", me)
                answer = await fake.wait_for_call(
                    INTERACTION_CALLBACK, lambda b: b.get("type") == 4, timeout=10
                )
                assert "tokens today: 42 of 500" in answer["data"]["content"]
                assert answer["data"]["flags"] & 64  # ephemeral: the channel does not see it


async def test_usage_me_in_a_telegram_group_keeps_linked_identities_to_itself(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    async with telegram_running(telegram, tmp_path / "home") as rig:
        await rig.runtime.store.ownership.link("telegram:41", "http:ann-secret-handle")
        ann = telegram.user(41, "Ann")
        telegram.inject_message(telegram.group(-700, "club"), ann, "/usage me")
        in_group = (await reply_in(telegram, -700, "tokens today"))["text"]
        assert "http:ann-secret-handle" not in in_group
        telegram.inject_message(telegram.private_chat(41, "Ann"), ann, "/usage me")
        alone = (await reply_in(telegram, 41, "tokens today"))["text"]
        assert "counted together: http:ann-secret-handle, telegram:41" in alone
