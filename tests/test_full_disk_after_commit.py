"""A disk that fills between a commit and the files that follow it: the gateway's home on a
small tmpfs, the archive elsewhere (PostgreSQL's disk is the server's; SQLite's can be another
volume, or have room in its write-ahead log). What the archive committed is stored, so it is
never reported as "nothing stored": history.json is caught up later, and an `action.log` line
of it is held and written, in order, ahead of the session's next line once there is room."""

from __future__ import annotations

import asyncio
import json
from functools import partial
from pathlib import Path
from typing import Any
from unittest.mock import patch

import aiohttp
import pytest
from gateway_proc import Gateway, free_port
from small_disk import fill
from support import wait_until

from gateway.settings import Settings
from gateway.store.actionlog import ActionLog
from gateway.store.sessions import SessionStore

# Bigger than a page: a line that fits in the slack of the file's last page needs no room.
BIG = "x" * 9000


def test_a_held_line_is_written_ahead_of_the_next_once_there_is_room(small_disk: Path) -> None:
    folder = small_disk / "session"
    folder.mkdir()
    log = ActionLog(folder / "action.log")
    log.append("user", "before")
    filler = fill(small_disk)

    log.append_all([("user", "while full " + BIG)], hold=True)  # held, not raised
    with pytest.raises(OSError):
        log.append("assistant", "not of a done thing " + BIG)  # not held: the caller fails
    assert [r.body for r in log.read()] == ["before"]

    filler.unlink()
    log.append("assistant", "after")
    assert [r.body for r in log.read()] == ["before", "while full " + BIG, "after"]


async def test_held_lines_are_written_once_there_is_room_with_no_next_line(
    small_disk: Path,
) -> None:
    """The store writes what a session holds without waiting for its next line (the gateway
    asks every few seconds, and once more at its stop); a held session is never forgotten."""
    settings = Settings(home=small_disk / "home", _env_file=None)
    store = await SessionStore.open(settings)
    try:
        for sid in ("cli-held", "cli-other"):
            await store.take_in(sid, "one", sender="u")  # their folders
        held = store.files("cli-held")
        filler = await asyncio.to_thread(fill, small_disk)
        await store.file_calls.submit(
            partial(held.action_log.append_all, [("user", "while full " + BIG)], hold=True)
        )
        assert held.action_log.held
        assert await store.write_held_lines() == held.action_log.held > 0  # still no room

        with patch("gateway.store.files.KNOWN_SESSIONS", 1):
            store.files("cli-other")
            store.files("cli-third")  # past the cap: the session holding lines stays known
        assert store.files("cli-held") is held

        await asyncio.to_thread(filler.unlink)
        assert await store.write_held_lines() == 0
        records = await asyncio.to_thread(held.action_log.read)
        assert [r.body for r in records] == ["while full " + BIG]
        # At the stop too, with no job left to ask.
        other = store.files("cli-other")
        filler = await asyncio.to_thread(fill, small_disk)
        await store.file_calls.submit(
            partial(other.action_log.append_all, [("user", "at the stop " + BIG)], hold=True)
        )
        assert other.action_log.held
        await asyncio.to_thread(filler.unlink)
    finally:
        await store.close()
    last = ActionLog(small_disk / "home" / "sessions" / "cli-other" / "action.log").read()[-1]
    assert last.body == "at the stop " + BIG


async def test_a_committed_message_is_stored_when_its_history_line_is_not(
    small_disk: Path, database_url: str
) -> None:
    settings = Settings(home=small_disk / "home", database_url=database_url, _env_file=None)
    store = await SessionStore.open(settings)
    try:
        await store.take_in("cli-full", "one", sender="u")
        filler = await asyncio.to_thread(fill, small_disk)

        stored = await store.take_in("cli-full", "two " + BIG, sender="u")  # no StorageFull

        assert stored is not None
        assert store.db.space.full  # /healthz says the storage is full all the same
        archived = await store.messages_after("cli-full", 0)
        assert [m.content for m in archived] == ["one", "two " + BIG]
        history = store.files("cli-full").history
        assert [m.content for m in await asyncio.to_thread(history.read)] == ["one"]
        # What the instance running the session does before a task: no error either.
        assert await store.resync_history("cli-full") == 1

        await asyncio.to_thread(filler.unlink)
        await store.take_in("cli-full", "three", sender="u")
        filed = await asyncio.to_thread(history.read)
        assert [m.content for m in filed] == ["one", "two " + BIG, "three"]
        assert [m.id for m in filed] == [m.id for m in await store.messages_after("cli-full", 0)]
    finally:
        await store.close()


async def send(http: aiohttp.ClientSession, url: str, text: str, wait: float) -> tuple[int, Any]:
    body = {"content": text, "session_id": "cli-disk", "persist": True, "wait": wait}
    async with http.post(f"{url}/v1/send", json=body) as resp:
        return resp.status, await resp.json()


async def history_of(http: aiohttp.ClientSession, url: str) -> list[tuple[str, str]]:
    async with http.get(f"{url}/v1/session/cli-disk/history") as resp:
        return [(m["role"], m["content"]) for m in (await resp.json())["messages"]]


async def health(http: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with http.get(f"{url}/healthz") as resp:
        return resp.status, (await resp.json())["checks"]["database"]


@pytest.mark.slow
async def test_a_message_taken_in_on_a_full_disk_is_answered_once_there_is_room(
    small_disk: Path, tmp_path: Path
) -> None:
    """Accepted, its reply waits for room (its lines go before it), then goes out; action.log
    has every line, in the order of events; /healthz says full until there is room."""
    archive = tmp_path / "archive"
    archive.mkdir()
    gateway = Gateway(
        small_disk / "home",
        free_port(),
        AGENVOY_DATABASE_URL=f"sqlite:///{archive / 'history.db'}",
    )
    try:
        await gateway.start()
        async with aiohttp.ClientSession() as http:
            assert (await send(http, gateway.url, "before", 10))[0] == 200
            filler = await asyncio.to_thread(fill, small_disk)

            status, body = await send(http, gateway.url, "while full " + BIG, 1)
            assert status == 202, body  # stored, not answered yet: never 507 "nothing stored"
            assert await history_of(http, gateway.url) == [
                ("user", "before"),
                ("assistant", "echo: before"),
                ("user", "while full " + BIG),
            ]
            # Full, though the archive's disk has room: health looks at the home too.
            assert await health(http, gateway.url) == (503, "full")
            assert await health(http, gateway.url) == (503, "full")

            await asyncio.to_thread(filler.unlink)
            assert await health(http, gateway.url) == (200, "ok")  # no write needed to notice

            async def answered() -> bool:
                return len(await history_of(http, gateway.url)) == 4

            assert await wait_until(answered, 45)
            assert (await history_of(http, gateway.url))[3] == (
                "assistant",
                "echo: while full " + BIG,
            )
        assert await gateway.stop() == 0
    finally:
        await gateway.close()
    records = ActionLog(small_disk / "home" / "sessions" / "cli-disk" / "action.log").read()
    said = [(r.kind, json.loads(r.body).get("text")) for r in records]
    assert [kind for kind, _ in said] == ["user", "text", "done", "user", "text", "done"]
    assert said[3:5] == [("user", "while full " + BIG), ("text", "echo: while full " + BIG)]
