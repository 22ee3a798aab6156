"""What people in a Telegram group or a Discord channel see of the gateway, asserted once for
both platforms: each test runs against the fake Telegram and the fake Discord, through the
real python-telegram-bot and discord.py clients (`chat_drivers`), with the offline agent."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from chat_drivers import (
    ANN,
    BOB,
    CY,
    DEE,
    DRIVERS,
    A,
    B,
    ChatDriver,
    Said,
    nth_prompt,
    said_with,
    task_of,
)
from clock import FakeClock
from conftest import RelayedDatabase
from structlog.testing import capture_logs
from support import wait_until

from gateway.adapter import Progress
from gateway.events import TextDeltaEvent, TextEvent


@pytest.fixture(params=["telegram", "discord"])
async def platform(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ChatDriver]:
    """The fake platform and its driver, the gateway not yet started."""
    async with DRIVERS[request.param](tmp_path / "home") as driver:
        yield driver


@pytest.fixture
async def chat(platform: ChatDriver) -> ChatDriver:
    """The platform with a gateway running on the default settings."""
    await platform.start()
    return platform


async def user_texts(driver: ChatDriver, session_id: str) -> list[str]:
    messages = await driver.runtime.store.recent_messages(session_id, 50)
    return [m.content.split("\n")[0] for m in messages if m.role == "user"]


async def test_members_writing_at_once_are_answered_in_the_order_they_wrote(
    chat: ChatDriver,
) -> None:
    # A message with a file takes a download before it can be stored: without its turn in
    # the chat's order, a later plain message would overtake it.
    people = (ANN, BOB, CY)
    written = []
    for i in range(9):
        addressed = i % 4 != 3  # every fourth is chatter, kept as context
        chat.post(
            A,
            people[i % 3],
            f"m{i}",
            to_bot=addressed,
            file=(f"f{i}.txt", b"x" * 2000) if i % 3 == 0 else None,
        )
        written.append((f"m{i}", addressed))
    asked = [text for text, addressed in written if addressed]
    for text in asked:
        await said_with(chat, A, f"echo: {text}")

    sid = chat.session_id(A)
    archived = await chat.runtime.store.recent_messages(sid, 50)
    users = [m.content.split("\n")[0] for m in archived if m.role == "user"]
    answers = [m.content.split("\n")[0] for m in archived if m.role == "assistant"]
    assert users == [text for text, _ in written]  # archived in the order they were written
    assert answers == [f"echo: {text}" for text in asked]  # replies archived in that order
    posted = [s.text.split("\n")[0] for s in chat.said(A) if s.text.startswith("echo:")]
    assert posted == answers  # and posted in that order
    history = chat.runtime.store.files(sid).history.read()
    assert [m.content.split("\n")[0] for m in history if m.role == "user"] == users


async def test_a_prompt_is_asked_only_in_the_chat_its_task_started_in(chat: ChatDriver) -> None:
    chat.post(A, ANN, "!confirm alpha")
    chat.post(B, BOB, "!confirm beta")
    chat.post(A, BOB, "meanwhile")  # waits behind alpha's prompt, in A
    in_a, in_b = await nth_prompt(chat, A), await nth_prompt(chat, B)
    assert "alpha" in in_a.text and "beta" not in in_a.text
    assert "beta" in in_b.text and "alpha" not in in_b.text

    assert (await chat.press(in_b, "Approve", BOB)).accepted
    await said_with(chat, B, "approved: beta")
    assert (await chat.press(in_a, "Deny", ANN)).accepted
    await said_with(chat, A, "denied: alpha")
    await said_with(chat, A, "echo: meanwhile")

    assert [len(chat.prompts(A)), len(chat.prompts(B))] == [1, 1]
    assert not any("alpha" in s.text or "meanwhile" in s.text for s in chat.said(B))
    assert not any("beta" in s.text for s in chat.said(A))


async def test_another_members_press_is_refused_and_the_requesters_is_taken(
    chat: ChatDriver,
) -> None:
    chat.post(A, ANN, "!confirm deploy")
    prompt = await nth_prompt(chat, A)
    assert set(prompt.buttons) == {"Approve", "Deny"}

    for label in ("Approve", "Deny"):
        refused = await chat.press(prompt, label, BOB)
        assert not refused.accepted and refused.told_only_them
        assert "ann" in refused.told  # says who may
    (still_open,) = chat.prompts(A)
    assert set(still_open.buttons) == {"Approve", "Deny"}
    assert not any(s.text.startswith(("approved:", "denied:")) for s in chat.said(A))

    assert (await chat.press(prompt, "Approve", ANN)).accepted
    await said_with(chat, A, "approved: deploy")
    (closed,) = chat.prompts(A)
    assert "approved by ann" in closed.text and closed.buttons == {}
    late = await chat.press(prompt, "Deny", ANN)
    assert (late.accepted, late.told) == (False, "already answered")
    outcomes = [s.text for s in chat.said(A) if s.id != closed.id]
    assert outcomes == ["approved: deploy"]


async def test_an_admins_press_is_taken(chat: ChatDriver) -> None:
    chat.post(A, CY, "!confirm ship")
    prompt = await nth_prompt(chat, A)
    assert (await chat.press(prompt, "Deny", DEE)).accepted
    await said_with(chat, A, "denied: ship")
    (closed,) = chat.prompts(A)
    assert "denied by dee" in closed.text and closed.buttons == {}


async def test_a_long_reply_is_split_under_the_limit_keeping_code_whole_and_every_character(
    chat: ChatDriver,
) -> None:
    code = [f"line_{i} = {i} * 2  # <tag> & more" for i in range(200)]
    prose = " ".join(["word", "wörd", "🙂"] * 500)
    text = "Here is the plan.\n\n```python\n" + "\n".join(code) + "\n```\n\n" + prose
    assert len(text) > 2 * chat.limit
    chat.post(A, ANN, text)
    await said_with(chat, A, "🙂 word")
    state = await chat.runtime.router.wait(await task_of(chat, A), 10)
    assert state.status == "done"  # done only once every part is out

    parts = chat.said(A)
    assert len(parts) >= 3
    assert all(chat.length(p.sent) <= chat.limit for p in parts)
    # Every line of the code is shown as code: no block left open, none cut in a line.
    assert [line for p in parts for line in p.code] == code
    assert len([p for p in parts if p.code]) >= 2  # the block was closed and reopened
    assert chat.rejoined([p.text for p in parts]) == chat.readable(f"echo: {text}")


async def test_a_part_is_marked_as_maybe_out_before_it_goes_only_where_repeats_are_not_refused(
    chat: ChatDriver,
) -> None:
    """What the outbox row of a two-part reply says as each part reaches the platform. On
    Telegram, the part about to go is marked as maybe out (a restart sends it again marked as
    a possible repeat). Discord refuses a second copy of a part itself (its nonce), so its
    first part goes without a write before it; the second part's write records the first."""
    database = chat.runtime.store.db.sqlite_path
    assert database is not None
    rows: list[tuple[int, int]] = []

    def note(record: Any) -> None:
        sent = getattr(record, "method", None) == "sendMessage"
        if sent or getattr(record, "route", None) == "POST /channels/{id}/messages":
            with contextlib.closing(sqlite3.connect(database)) as db:
                found = db.execute("SELECT parts_sent, parts_attempted FROM outbox").fetchall()
            rows.extend(found)

    chat.fake.on_answered = note
    chat.post(A, ANN, "word " * (chat.limit // 5 + 20))  # a reply of two parts

    async def both_out() -> bool:
        return len(chat.said(A)) == 2

    assert await wait_until(both_out, 10), chat.said(A)
    state = await chat.runtime.router.wait(await task_of(chat, A), 10)
    assert state.status == "done"
    first = (0, 0) if chat.adapter.refuses_repeats else (0, 1)
    assert rows == [first, (1, 2)]
    assert chat.adapter.refuses_repeats == (chat.platform == "discord")


async def test_a_streamed_reply_shows_one_preview_that_the_reply_replaces(
    platform: ChatDriver,
) -> None:
    clock = FakeClock()
    await platform.start(clock=clock)
    platform.post(A, ANN, "!sleep 3")
    shown = []
    for second in range(1, 4):
        # The agent's next second; with the first, the message's typing indicator's wait.
        await clock.until_sleeping(2 if second == 1 else 1, seconds=1)
        await clock.advance(1)
        if second < 3:
            preview = await said_with(platform, A, f"{second}s")
            shown.append((preview.id, preview.text.split()))
    await said_with(platform, A, "slept 3s")

    # One message, edited as the text grew, then deleted for the reply.
    preview_id = shown[0][0]
    assert shown == [(preview_id, ["1s"]), (preview_id, ["1s", "2s"])]
    assert [t.split() for t in platform.edits(A)] == [["1s", "2s"], ["1s", "2s", "3s"]]

    async def replaced() -> bool:  # the preview goes once the reply is out, not before
        return platform.deleted(A) == [preview_id]

    assert await wait_until(replaced, within=5)
    assert [s.text for s in platform.said(A)] == ["slept 3s"]


async def test_a_preview_is_edited_at_most_once_a_second(platform: ChatDriver) -> None:
    clock = FakeClock()
    await platform.start(clock=clock)
    where, session = platform.origin(A, ANN), platform.session_id(A)

    async def show(event: TextDeltaEvent | TextEvent) -> str | None:
        return await platform.adapter.deliver(where, event, Progress())

    def delta(text: str) -> TextDeltaEvent:
        return TextDeltaEvent(session_id=session, task_hash="t1", text=text)

    await show(delta("1s "))
    (preview,) = platform.said(A)
    assert preview.text == "1s "
    for text in ("2s ", "3s "):  # within the second the preview was shown: kept for later
        await clock.advance(0.4)
        await show(delta(text))
    assert platform.edits(A) == []
    await clock.advance(0.4)
    await show(delta("4s "))
    assert platform.edits(A) == ["1s 2s 3s 4s "]  # one message, edited once
    final_id = await show(TextEvent(session_id=session, task_hash="t1", text="slept 4s"))
    (final,) = platform.said(A)
    assert (final.text, final.id) == ("slept 4s", final_id)  # the preview is gone
    assert platform.deleted(A) == [preview.id] and preview.id != final.id


async def test_a_message_that_meets_a_database_outage_is_answered_once_it_is_back(
    platform: ChatDriver, relayed_database: RelayedDatabase
) -> None:
    """Telegram delivers the message again until it is stored; Discord sends it once and the
    adapter holds it. Either way: stored and answered once, in its place, once the database
    is back."""
    relay = relayed_database.relay
    # A long lease TTL keeps the session's tasks here through the short outage.
    await platform.start(database_url=relayed_database.relayed, lease_ttl_seconds=60)
    platform.post(A, ANN, "before")
    await said_with(platform, A, "echo: before")

    async def delivered() -> bool:  # so that the cut finds no reply on its way
        return await platform.runtime.store.outbox.undelivered() == []

    assert await wait_until(delivered, within=10)
    with capture_logs() as logs:
        await relay.cut()
        during = platform.post(A, ANN, "while down")

        async def waiting() -> bool:
            return platform.waits_for_database(logs)

        assert await wait_until(waiting, within=15)
        platform.post(A, BOB, "after it")
        if platform.redelivers:  # confirmed only once stored: Telegram still has it
            assert platform.held(during)
        await relay.restore()
        await said_with(platform, A, "echo: after it", within=30)
    assert await user_texts(platform, platform.session_id(A)) == [
        "before",
        "while down",
        "after it",
    ]
    # Besides its place in the queue ("queued (1 ahead)"), each is answered once, in order.
    answers = [s.text for s in platform.said(A) if not s.text.startswith("queued (")]
    assert answers == ["echo: before", "echo: while down", "echo: after it"]


async def _asked_across_a_restart(chat: ChatDriver) -> tuple[Said, Said]:
    """A confirmation asked, the gateway restarted, and the same prompt asked again where it
    was asked: the two askings, in that order."""
    chat.post(A, ANN, "!confirm migrate")
    before = await nth_prompt(chat, A)
    await chat.restart()
    assert await chat.runtime.router.recover() == 1
    return before, await nth_prompt(chat, A, 1)


@pytest.mark.parametrize("pressed", ["the prompt asked before", "the prompt asked again"])
async def test_a_prompt_open_at_a_restart_is_answered_once_after_it(
    chat: ChatDriver, pressed: str
) -> None:
    before, again = await _asked_across_a_restart(chat)
    assert "migrate" in again.text and set(again.buttons) == {"Approve", "Deny"}

    prompt = before if pressed == "the prompt asked before" else again
    assert (await chat.press(prompt, "Approve", ANN)).accepted
    await said_with(chat, A, "approved: migrate")
    state = await chat.runtime.router.wait(await task_of(chat, A), 10)
    assert state.status == "done"
    assert [s.text for s in chat.said(A) if s.text.startswith("approved:")] == ["approved: migrate"]
    messages = await chat.runtime.store.recent_messages(chat.session_id(A), 50)
    assert [(m.role, m.content) for m in messages] == [
        ("user", "!confirm migrate"),
        ("assistant", "approved: migrate"),
    ]


@pytest.mark.parametrize("pressed", ["the prompt asked before", "the prompt asked again"])
async def test_no_prompt_of_an_answered_task_is_left_open_after_a_restart(
    chat: ChatDriver, pressed: str
) -> None:
    before, again = await _asked_across_a_restart(chat)
    # Once it is asked again, the first asking says so and has no buttons left.
    assert [p.id for p in chat.prompts(A) if p.buttons] == [again.id]
    assert "asked again" in chat.prompts(A)[0].text
    prompt = before if pressed == "the prompt asked before" else again
    assert (await chat.press(prompt, "Approve", ANN)).accepted
    await said_with(chat, A, "approved: migrate")

    # The answer closes a prompt before the reply goes out: by now every copy should say so.
    state = await chat.runtime.router.wait(await task_of(chat, A), 10)
    assert state.status == "done"
    shown = [(p.text, dict(p.buttons)) for p in chat.prompts(A)]
    assert all(buttons == {} and "approved by ann" in text for text, buttons in shown), shown
