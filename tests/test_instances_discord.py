"""Discord shards split across instances: a button pressed on one instance's shard answers a
task that another instance runs."""

from __future__ import annotations

import pytest
from cluster_rig import Cluster, assert_answered_once, cluster, logged, runs, until
from discord_rig import ANN, GENERAL, GUILD, INTERACTION_CALLBACK, custom_ids, prompt_in, reply_in
from fakes.discord import FakeDiscord, text_channel

pytestmark = pytest.mark.slow

__all__ = ["cluster"]  # the fixture


async def test_a_button_pressed_on_one_shard_answers_the_task_another_instance_runs(
    cluster: Cluster,
) -> None:
    async with FakeDiscord() as fake:
        fake.add_guild(GUILD, "guild", channels=[text_channel(GENERAL, "general")], members=[ANN])
        bot = {
            "AGENVOY_DISCORD_TOKEN": fake.token,
            "AGENVOY_DISCORD_API_URL": fake.api_base,
            "AGENVOY_DISCORD_GATEWAY_URL": fake.gateway_url,
            "AGENVOY_DISCORD_SHARD_COUNT": "2",
        }
        # The guild lives on shard 0: only the first instance hears it.
        shard0 = await cluster.add(**bot, AGENVOY_DISCORD_SHARD_IDS="0")
        shard1 = await cluster.add(**bot, AGENVOY_DISCORD_SHARD_IDS="1")
        sid = f"dc-{GENERAL}"
        # The second instance runs the channel's session: a slow task sent to its HTTP API.
        slow = await cluster.send(shard1, sid, "!sleep 1")
        await until(
            lambda: logged(shard1, "task started", slow),
            "the slow task runs on gw-2",
            logs_of=cluster.gateways,
        )

        fake.inject_message(GENERAL, ANN, "!confirm launch", mentions_bot=True)
        # Received on shard 0, run by gw-2: the prompt is posted by gw-2.
        prompt = await prompt_in(fake, GENERAL)
        approve = next(cid for cid in custom_ids(prompt) if cid.endswith(":y"))
        fake.inject_component(ANN, prompt, approve)  # delivered to shard 0 (gw-1)
        await fake.wait_for_call(INTERACTION_CALLBACK, lambda body: True, timeout=10)
        await reply_in(fake, GENERAL, "approved: launch")

    assert runs([shard0]) == []  # it only heard the channel and the button
    assert [r.instance for r in runs([shard1])] == ["gw-2", "gw-2"]
    store = await cluster.archive()
    try:
        await assert_answered_once(store, sid, ["!sleep 1", "!confirm launch"])
    finally:
        await store.close()
