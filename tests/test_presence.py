from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from clock import FakeClock
from support import wait_until

from gateway.ids import InvalidHash, InvalidSessionId
from gateway.presence import Presence, presence_key
from gateway.store.kv import KVStore, SqliteKV

WORKER = Path(__file__).with_name("kv_worker.py")
WAIT = 10.0


@pytest.fixture
async def sqlite_kv(tmp_path: Path) -> AsyncIterator[SqliteKV]:
    async with await SqliteKV.open(tmp_path / "kv.db") as store:
        yield store


def stopped(presence: Presence, session_id: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return not await presence.is_running(session_id)

    return check


# --------------------------------------------------------------------------- one process


async def test_hold_marks_task_running_and_releases(kv: KVStore) -> None:
    presence = Presence(kv, "inst-a", ttl=30, refresh=10)
    assert await presence.is_running("cli-s1") is False
    before = int(time.time() * 1000)
    async with presence.hold("cli-s1", "task1"):
        after = int(time.time() * 1000)
        assert await presence.is_running("cli-s1") is True
        assert await presence.running_tasks("cli-s1") == [("cli-s1", "task1")]
        raw = await kv.get("action:cli-s1:task1")
        assert raw is not None
        value = json.loads(raw)
        assert value["instance"] == "inst-a"
        assert value["pid"] == os.getpid()
        assert isinstance(value["started_at"], int)
        assert before <= value["started_at"] <= after
    assert await presence.is_running("cli-s1") is False
    assert await kv.get("action:cli-s1:task1") is None
    assert await presence.running_tasks() == []


async def test_running_tasks_lists_and_filters(kv: KVStore) -> None:
    presence = Presence(kv, "inst-a", ttl=30, refresh=10)
    async with (
        presence.hold("cli-a", "t2"),
        presence.hold("cli-a", "t1"),
        presence.hold("cli-ab", "t3"),
        presence.hold("tg--100_5", "t4"),
    ):
        await kv.set("action:garbage", "x", ttl=30)  # not a presence key: ignored
        assert await presence.running_tasks() == [
            ("cli-a", "t1"),
            ("cli-a", "t2"),
            ("cli-ab", "t3"),
            ("tg--100_5", "t4"),
        ]
        assert await presence.running_tasks("cli-a") == [("cli-a", "t1"), ("cli-a", "t2")]
        assert await presence.running_tasks("cli-ab") == [("cli-ab", "t3")]
        assert await presence.is_running("tg--100_5") is True
        assert await presence.is_running("cli-b") is False
    assert await presence.running_tasks() == []


async def test_hold_releases_on_exception(kv: KVStore) -> None:
    presence = Presence(kv, "inst-a", ttl=30, refresh=10)
    with pytest.raises(RuntimeError, match="boom"):
        async with presence.hold("cli-s1", "task1"):
            assert await presence.is_running("cli-s1")
            raise RuntimeError("boom")
    assert await presence.is_running("cli-s1") is False


async def test_hold_releases_on_cancellation(kv: KVStore) -> None:
    presence = Presence(kv, "inst-a", ttl=30, refresh=0.05)
    entered = asyncio.Event()

    async def worker() -> None:
        async with presence.hold("cli-s1", "task1"):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(worker())
    await asyncio.wait_for(entered.wait(), WAIT)
    assert await presence.is_running("cli-s1")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAIT)
    assert await presence.is_running("cli-s1") is False
    # The refresher went with it.
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert [t.get_name() for t in others if t.get_name().startswith("presence")] == []


async def test_refresh_keeps_key_alive_beyond_ttl(kv: KVStore) -> None:
    # A ttl ten refreshes long: a loaded machine may hold a refresh back a while.
    presence = Presence(kv, "inst-a", ttl=1.0, refresh=0.1)
    await kv.set("control", "v", ttl=1.0)
    async with presence.hold("cli-s1", "task1"):
        start = time.monotonic()
        checks = 0
        while time.monotonic() - start < 2.5:
            assert await presence.is_running("cli-s1"), f"lapsed after {checks} checks"
            checks += 1
            await asyncio.sleep(0.05)
        # The ttl really was short: a key set alongside without refreshing is gone.
        assert await kv.get("control") is None
        assert checks >= 10
    assert await presence.is_running("cli-s1") is False


async def test_refresher_recreates_a_lost_key(kv: KVStore) -> None:
    presence = Presence(kv, "inst-a", ttl=5, refresh=0.1)
    async with presence.hold("cli-s1", "task1"):
        assert await kv.delete("action:cli-s1:task1")
        assert await presence.is_running("cli-s1") is False

        async def back() -> bool:
            return await presence.is_running("cli-s1")

        assert await wait_until(back)
    assert await presence.is_running("cli-s1") is False


class FlakyKV(KVStore):
    """Wraps a store; its first `expire` calls and every `delete` can be made to fail."""

    def __init__(self, inner: KVStore, expire_failures: int = 0, fail_delete: bool = False):
        self.inner = inner
        self.expire_failures = expire_failures
        self.fail_delete = fail_delete
        self.expire_calls = 0

    async def get(self, key: str) -> str | None:
        return await self.inner.get(key)

    async def set(self, key: str, value: str, ttl: float | None = None) -> None:
        await self.inner.set(key, value, ttl)

    async def delete(self, key: str) -> bool:
        if self.fail_delete:
            raise ConnectionError("delete failed")
        return await self.inner.delete(key)

    async def scan(self, prefix: str) -> dict[str, str]:
        return await self.inner.scan(prefix)

    async def expire(self, key: str, ttl: float) -> bool:
        self.expire_calls += 1
        if self.expire_calls <= self.expire_failures:
            raise ConnectionError("expire failed")
        return await self.inner.expire(key, ttl)

    async def close(self) -> None:
        await self.inner.close()


async def test_refresh_survives_a_failing_refresh(sqlite_kv: SqliteKV) -> None:
    flaky = FlakyKV(sqlite_kv, expire_failures=1)
    presence = Presence(flaky, "inst-a", ttl=1.0, refresh=0.1)
    async with presence.hold("cli-s1", "task1"):
        start = time.monotonic()
        while time.monotonic() - start < 2.5:
            assert await presence.is_running("cli-s1")
            await asyncio.sleep(0.05)
    assert flaky.expire_calls >= 5
    assert await presence.is_running("cli-s1") is False


class CancelLosingKV(FlakyKV):
    """A refresh that loses a cancellation landing in it and goes on, as redis-py's client can
    when the cancel arrives inside its read's timeout."""

    def __init__(self, inner: KVStore) -> None:
        super().__init__(inner)
        self.refreshing = asyncio.Event()
        self.lost = 0

    async def expire(self, key: str, ttl: float) -> bool:
        if self.lost:  # once: a keeper that never stops must not outlive the test
            return await self.inner.expire(key, ttl)
        self.refreshing.set()
        try:
            await asyncio.Event().wait()  # the command in flight, until it is canceled
        except asyncio.CancelledError:
            self.lost += 1  # and not raised again
        return await self.inner.expire(key, ttl)


async def test_a_refresh_that_loses_the_cancel_still_lets_the_hold_end(
    sqlite_kv: SqliteKV,
) -> None:
    losing = CancelLosingKV(sqlite_kv)
    presence = Presence(losing, "inst-a", ttl=5, refresh=0.01)

    async def held_through_a_refresh() -> None:
        async with presence.hold("cli-s1", "task1"):
            await asyncio.wait_for(losing.refreshing.wait(), WAIT)

    await asyncio.wait_for(held_through_a_refresh(), WAIT)
    assert losing.lost == 1
    assert await presence.is_running("cli-s1") is False


async def test_failed_release_is_logged_and_key_expires(sqlite_kv: SqliteKV) -> None:
    flaky = FlakyKV(sqlite_kv, fail_delete=True)
    presence = Presence(flaky, "inst-a", ttl=0.3, refresh=0.1)
    async with presence.hold("cli-s1", "task1"):
        pass  # leaving must not raise although delete fails
    assert await presence.is_running("cli-s1") is True
    assert await wait_until(stopped(presence, "cli-s1"))


async def test_clear_instance_removes_only_own_keys(kv: KVStore) -> None:
    def stale(instance: str) -> str:
        return json.dumps({"instance": instance, "started_at": 1, "pid": 1})

    # What a previous life of inst-a, and a live inst-b, left in the store.
    await kv.set("action:cli-s1:old1", stale("inst-a"), ttl=30)
    await kv.set("action:dc-42:old2", stale("inst-a"), ttl=30)
    await kv.set("action:cli-s1:theirs", stale("inst-b"), ttl=30)
    await kv.set("action:cli-s2:broken", "not json", ttl=30)
    await kv.set("action:cli-s2:listy", "[1, 2]", ttl=30)
    await kv.set("other:cli-s1:old3", stale("inst-a"), ttl=30)

    mine = Presence(kv, "inst-a", ttl=30, refresh=10)
    async with mine.hold("cli-s3", "current"):
        assert await mine.clear_instance() == 2
        assert await mine.running_tasks() == [
            ("cli-s1", "theirs"),
            ("cli-s2", "broken"),
            ("cli-s2", "listy"),
            ("cli-s3", "current"),
        ]
        assert await kv.get("other:cli-s1:old3") is not None
    assert await mine.clear_instance() == 0


async def test_invalid_ids_are_rejected(kv: KVStore) -> None:
    presence = Presence(kv, "inst-a", ttl=30, refresh=10)
    for bad_session in ("", "bad", "cli-", "cli-a:b", "../etc", "cli-a b", "xx-abc"):
        with pytest.raises(InvalidSessionId):
            async with presence.hold(bad_session, "task1"):
                pytest.fail("entered hold with an invalid session id")
        with pytest.raises(InvalidSessionId):
            await presence.is_running(bad_session)
        with pytest.raises(InvalidSessionId):
            await presence.running_tasks(bad_session)
    for bad_hash in ("", "a:b", "a/b", "x" * 65, "tâche"):
        with pytest.raises(InvalidHash):
            async with presence.hold("cli-ok", bad_hash):
                pytest.fail("entered hold with an invalid task hash")
    assert await kv.scan("") == {}
    assert presence_key("cli-ok", "h_1-2") == "action:cli-ok:h_1-2"


@pytest.mark.parametrize(
    ("instance_id", "ttl", "refresh"),
    [("", 60, 55), ("i", 0, 1), ("i", 60, 0), ("i", 60, 60), ("i", 10, 20), ("i", 60, -1)],
)
def test_constructor_rejects_bad_arguments(instance_id: str, ttl: float, refresh: float) -> None:
    kv = object.__new__(SqliteKV)  # never used: construction fails first
    with pytest.raises(ValueError):
        Presence(kv, instance_id, ttl=ttl, refresh=refresh)


# --------------------------------------------------------------------------- two processes


async def start_holder(
    db: Path, session_id: str, task_hash: str, instance: str, ttl: float, refresh: float
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        "hold",
        str(db),
        session_id,
        task_hash,
        instance,
        str(ttl),
        str(refresh),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def read_line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
    if not line:
        assert proc.stderr is not None
        err = await asyncio.wait_for(proc.stderr.read(), WAIT)
        pytest.fail(f"worker exited early: {err.decode()}")
    return line.decode().rstrip("\n")


async def reap(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.kill()
        await asyncio.wait_for(proc.wait(), WAIT)


@pytest.mark.slow
async def test_two_processes_see_each_others_presence(tmp_path: Path) -> None:
    db = tmp_path / "kv.db"
    async with await SqliteKV.open(db) as kv:
        presence = Presence(kv, "parent", ttl=5, refresh=1)
        async with presence.hold("cli-parent", "p1"):
            proc = await start_holder(db, "cli-child", "c1", "child", ttl=5, refresh=1)
            try:
                assert await read_line(proc) == "HELD"
                seen = await read_line(proc)
                assert seen.startswith("SEES ")
                assert ["cli-parent", "p1"] in json.loads(seen.removeprefix("SEES "))

                assert await presence.is_running("cli-child") is True
                assert await presence.running_tasks() == [
                    ("cli-child", "c1"),
                    ("cli-parent", "p1"),
                ]
                raw = await kv.get("action:cli-child:c1")
                assert raw is not None
                assert json.loads(raw)["instance"] == "child"
                assert json.loads(raw)["pid"] == proc.pid

                assert proc.stdin is not None
                proc.stdin.close()
                released_at = time.monotonic()
                # Deleted on release, well before the 5 s ttl could have ended it.
                assert await wait_until(stopped(presence, "cli-child"), within=3.0)
                assert time.monotonic() - released_at < 4.0
                assert await read_line(proc) == "RELEASED"
                assert await asyncio.wait_for(proc.wait(), WAIT) == 0
            finally:
                await reap(proc)
            assert await presence.is_running("cli-parent") is True


@pytest.mark.slow
async def test_killed_holder_goes_offline_after_ttl(tmp_path: Path) -> None:
    db = tmp_path / "kv.db"
    ttl = 1.0
    async with await SqliteKV.open(db) as kv:
        presence = Presence(kv, "parent", ttl=5, refresh=1)
        proc = await start_holder(db, "cli-child", "c1", "child", ttl=ttl, refresh=0.2)
        try:
            assert await read_line(proc) == "HELD"
            # The child keeps its key alive past its ttl by refreshing it.
            start = time.monotonic()
            while time.monotonic() - start < 1.5 * ttl:
                assert await presence.is_running("cli-child")
                await asyncio.sleep(0.05)
            proc.kill()
            assert await asyncio.wait_for(proc.wait(), WAIT) == -9
            killed_at = time.monotonic()
            # Nobody deleted the key...
            assert await presence.is_running("cli-child") is True
            # ...it simply expires.
            assert await wait_until(stopped(presence, "cli-child"), within=ttl + 5)
            assert time.monotonic() - killed_at <= ttl + 1.5
        finally:
            await reap(proc)
        # A restarted "child" would find nothing left to clear.
        assert await Presence(kv, "child", ttl=5, refresh=1).clear_instance() == 0


@pytest.mark.slow
async def test_clear_instance_after_a_crash(tmp_path: Path) -> None:
    db = tmp_path / "kv.db"
    async with await SqliteKV.open(db) as kv:
        other = Presence(kv, "other", ttl=30, refresh=10)
        async with other.hold("cli-x", "keep"):
            proc = await start_holder(db, "cli-child", "c1", "child", ttl=30, refresh=10)
            try:
                assert await read_line(proc) == "HELD"
                proc.kill()
                await asyncio.wait_for(proc.wait(), WAIT)
            finally:
                await reap(proc)
            # The crashed instance left its key; its next life clears it at start-up.
            restarted = Presence(kv, "child", ttl=30, refresh=10)
            assert await restarted.is_running("cli-child") is True
            assert await restarted.clear_instance() == 1
            assert await restarted.running_tasks() == [("cli-x", "keep")]


# --------------------------------------------------------------------------- grace


async def test_a_block_shorter_than_the_grace_writes_nothing(sqlite_kv: SqliteKV) -> None:
    writes: list[str] = []
    original = sqlite_kv.set

    async def counting_set(key: str, value: str, ttl: float | None = None) -> None:
        writes.append(key)
        await original(key, value, ttl)

    sqlite_kv.set = counting_set  # type: ignore[method-assign]
    presence = Presence(sqlite_kv, "inst-a", ttl=30, refresh=10, grace=60)
    async with presence.hold("cli-s1", "task1"):
        assert await presence.is_running("cli-s1") is False
    assert writes == []
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert [t.get_name() for t in others if t.get_name().startswith("presence")] == []


async def test_a_block_outlasting_the_grace_shows_and_is_released(kv: KVStore) -> None:
    clock = FakeClock()
    presence = Presence(kv, "inst-a", ttl=30, refresh=10, clock=clock, grace=0.05)
    async with presence.hold("cli-s1", "task1"):
        assert await wait_until(lambda: presence.is_running("cli-s1"), WAIT)
        await clock.until_sleeping(seconds=10)  # refreshed from then on
    assert await presence.is_running("cli-s1") is False
    assert await kv.get("action:cli-s1:task1") is None
