"""A shared chat's own quota overrides come with the caller's facts (one read where the
message's admission made a second), and are the chat's as stored."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.settings import Settings
from gateway.store.quotas import Quotas, read_ahead
from gateway.store.sessions import SessionStore

CHAT = "dc-4242"
MEMBER = "discord:77"


@pytest.fixture
async def store(database_url: str, tmp_path: Path) -> AsyncIterator[SessionStore]:
    settings = Settings(home=tmp_path / "home", database_url=database_url, _env_file=None)
    opened = await SessionStore.open(settings)
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_chats_overrides_are_read_with_the_callers_facts(store: SessionStore) -> None:
    await store.take_in(CHAT, "hello", sender="m", sender_key=MEMBER)
    await store.take_in("cli-private", "hello", sender="m", sender_key=MEMBER)
    quotas = Quotas(store.db)

    unset = await store.ownership.caller_facts(MEMBER, CHAT)
    assert unset.chat_quotas == ""  # read, and none set
    assert (await store.ownership.caller_facts(MEMBER, "cli-private")).chat_quotas is None

    await quotas.set(CHAT, {"messages_per_minute": 3}, by="admin")
    read = await store.ownership.caller_facts(MEMBER, CHAT)
    assert read.facts is not None and read.facts.member
    with read_ahead(MEMBER, read):
        assert await quotas.of_chat(CHAT) == {"messages_per_minute": 3}
        await quotas.set(CHAT, {"messages_per_minute": 9}, by="admin")
        # What the request read, not a second read: the admission and the rule agree.
        assert await quotas.of_chat(CHAT) == {"messages_per_minute": 3}
        assert await quotas.of_chat("dc-other") == {}  # another chat: read for itself
    assert await quotas.of_chat(CHAT) == {"messages_per_minute": 9}
    with read_ahead(MEMBER, unset):
        assert await quotas.of_chat(CHAT) == {}


async def test_a_message_to_a_chat_reads_its_senders_and_its_overrides_at_once(
    store: SessionStore,
) -> None:
    """What a platform message's admission reads (no access check came first to read it)."""
    quotas = Quotas(store.db)
    await store.ownership.link("discord:78", MEMBER, by="admin")
    assert await quotas.of_person_and_chat(MEMBER, CHAT) == (
        (frozenset({MEMBER, "discord:78"}), {}),
        {},
    )
    await quotas.set("discord:78", {"running": 2}, by="admin")
    await quotas.set(CHAT, {"messages_per_minute": 4}, by="admin")
    assert await quotas.of_person_and_chat(MEMBER, CHAT) == (
        (frozenset({MEMBER, "discord:78"}), {"discord:78": {"running": 2}}),
        {"messages_per_minute": 4},
    )
    assert await quotas.of_person_and_chat(MEMBER, CHAT) == (
        await quotas.of_person(MEMBER),
        await quotas.of_chat(CHAT),
    )
