"""Messages a minute over several real gateway processes on one PostgreSQL database and one
Redis: they count together, so two instances allow the limit once, not once each."""

from __future__ import annotations

import pytest
from cluster_rig import Cluster, cluster

pytestmark = pytest.mark.slow

__all__ = ["cluster"]  # the fixture


async def test_two_instances_share_a_sender_s_messages_a_minute(cluster: Cluster) -> None:
    limit = {"AGENVOY_QUOTA_MESSAGES_PER_MINUTE": "2"}
    first, second = await cluster.add(**limit), await cluster.add(**limit)

    async def send(gateway_url: str, text: str) -> tuple[int, dict[str, object]]:
        body = {"content": text, "wait": 0}
        async with cluster.http.post(gateway_url + "/v1/send", json=body) as resp:
            return resp.status, await resp.json()

    assert (await send(first.url, "one"))[0] in (200, 202)
    assert (await send(second.url, "two"))[0] in (200, 202)
    status, body = await send(second.url, "three")
    assert status == 429, body
    error = body["error"]
    assert isinstance(error, dict) and error["code"] == "rate_limited"
    assert "sent 2 messages in the last minute" in error["message"]
    assert (await send(first.url, "four"))[0] == 429
    # What was refused left nothing behind: two messages were taken in, on the two instances.
    store = await cluster.archive()
    try:
        sessions = await store.list_sessions()
        texts = [m.content for s in sessions for m in await store.recent_messages(s.id, 10)]
        assert sorted(t for t in texts if t in {"one", "two", "three", "four"}) == ["one", "two"]
    finally:
        await store.close()
