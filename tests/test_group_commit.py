"""Group commit on SQLite: writes that arrive together share one transaction, a failing write
fails only its caller, nobody hears back before the commit — and a gateway killed in the middle
of a batch loses no message it acknowledged."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from gateway_proc import Gateway, free_port
from sqlmodel import Session
from support import wait_until

from gateway.settings import Settings
from gateway.store.db import Database
from gateway.store.lean import Lean
from gateway.store.sessions import SessionStore


async def scratch_db(tmp_path: Path) -> Database:
    db = await Database.open(f"sqlite:///{tmp_path / 'history.db'}")

    def create(session: Session) -> None:
        session.connection().exec_driver_sql("CREATE TABLE scratch (x INTEGER UNIQUE)")

    await db.write(create)
    return db


class Gate:
    """Holds the writer thread inside a write until the test lets it go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    async def inside(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 10), "the held write never started"


def insert(value: int, *, fail: bool = False, hold: Gate | None = None) -> Callable[[Session], int]:
    def work(session: Session) -> int:
        if hold is not None:
            hold.entered.set()
            assert hold.released.wait(10), "the test never let the first write go"
        session.connection().exec_driver_sql(f"INSERT INTO scratch VALUES ({value})")
        if fail:
            raise ValueError(f"no {value}")
        return value

    return work


async def values(db: Database) -> list[int]:
    def work(session: Session) -> list[int]:
        rows = session.connection().exec_driver_sql("SELECT x FROM scratch ORDER BY x")
        return [int(row[0]) for row in rows]

    return await db.read(work)


async def writer_held(db: Database) -> tuple[Gate, int, asyncio.Future[int]]:
    """A write of 0 holding the writer thread (until `Gate.released`), the batches before it,
    and the write itself."""
    hold = Gate()
    batches_before = db._group.batches
    first = asyncio.ensure_future(db.write(insert(0, hold=hold)))
    await hold.inside()
    return hold, batches_before, first


async def test_writes_queued_together_commit_as_one_batch(tmp_path: Path) -> None:
    db = await scratch_db(tmp_path)
    try:
        hold, batches_before, first = await writer_held(db)
        rest = [asyncio.ensure_future(db.write(insert(i))) for i in range(1, 6)]
        failing = asyncio.ensure_future(db.write(insert(99, fail=True)))
        duplicate = asyncio.ensure_future(db.write(insert(3)))  # breaks the UNIQUE constraint
        await asyncio.sleep(0)
        assert not any(f.done() for f in [first, *rest]), "answered before its commit"
        hold.released.set()
        assert await asyncio.wait_for(asyncio.gather(first, *rest), 10) == [0, 1, 2, 3, 4, 5]
        with pytest.raises(ValueError, match="no 99"):
            await asyncio.wait_for(failing, 10)
        with pytest.raises(Exception, match="UNIQUE"):
            await asyncio.wait_for(duplicate, 10)
        # The held write alone, then everything that queued up behind it in one transaction.
        assert db._group.batches - batches_before == 2
        assert await values(db) == [0, 1, 2, 3, 4, 5]  # the failed ones left nothing
    finally:
        await db.close()


async def test_a_write_in_hand_sees_the_writes_waiting_behind_it(tmp_path: Path) -> None:
    """What lets a long write (the reaper's) commit early for the live ones behind it."""
    db = await scratch_db(tmp_path)
    try:
        hold = Gate()
        seen: list[bool] = []

        def long(session: Session) -> None:
            seen.append(db.writes_waiting())  # alone so far
            hold.entered.set()
            assert hold.released.wait(10), "the test never let the long write go"
            seen.append(db.writes_waiting())

        first = asyncio.ensure_future(db.write(long))
        await hold.inside()
        behind = asyncio.ensure_future(db.write(insert(1)))
        await asyncio.sleep(0)  # it queues before its first suspension
        hold.released.set()
        await asyncio.wait_for(asyncio.gather(first, behind), 10)
        assert seen == [False, True]
        assert not db.writes_waiting()
    finally:
        await db.close()


async def test_a_write_sees_the_writes_of_its_own_batch_waiting(tmp_path: Path) -> None:
    """Writes that share a batch are answered at its commit: they wait for the long one too."""
    db = await scratch_db(tmp_path)
    try:
        hold, _, first = await writer_held(db)
        seen: list[bool] = []

        def long(session: Session) -> None:
            seen.append(db.writes_waiting())

        together = [
            asyncio.ensure_future(db.write(long)),
            asyncio.ensure_future(db.write(insert(1))),
        ]
        await asyncio.sleep(0)  # both queued behind the held write: the next batch takes both
        hold.released.set()
        await asyncio.wait_for(asyncio.gather(first, *together), 10)
        assert seen == [True]
    finally:
        await db.close()


def insert_lean(value: int, *, fail: bool = False) -> Callable[[Lean], int]:
    def work(sql: Lean) -> int:
        sql.run("INSERT INTO scratch VALUES (?)", value)
        if fail:
            raise ValueError(f"no {value}")
        return value

    return work


async def test_lean_and_orm_writes_share_a_batch_and_fail_alone(tmp_path: Path) -> None:
    db = await scratch_db(tmp_path)
    try:
        hold, batches_before, first = await writer_held(db)
        lean = [asyncio.ensure_future(db.write_lean(insert_lean(i))) for i in (1, 2)]
        orm = asyncio.ensure_future(db.write(insert(3)))
        failing = asyncio.ensure_future(db.write_lean(insert_lean(98, fail=True)))
        duplicate = asyncio.ensure_future(db.write_lean(insert_lean(2)))  # UNIQUE
        last = asyncio.ensure_future(db.write_lean(insert_lean(4)))
        await asyncio.sleep(0)
        hold.released.set()
        done = await asyncio.wait_for(asyncio.gather(first, *lean, orm, last), 10)
        assert done == [0, 1, 2, 3, 4]
        with pytest.raises(ValueError, match="no 98"):
            await asyncio.wait_for(failing, 10)
        with pytest.raises(Exception, match="UNIQUE"):
            await asyncio.wait_for(duplicate, 10)
        assert db._group.batches - batches_before == 2
        assert await values(db) == [0, 1, 2, 3, 4]
        # A batch of lean writes alone commits too, and the connection is ready for the next.
        assert await db.write_lean(insert_lean(5)) == 5
        with pytest.raises(ValueError):
            await db.write_lean(insert_lean(6, fail=True))
        assert await db.write(insert(7)) == 7
        assert await values(db) == [0, 1, 2, 3, 4, 5, 7]
    finally:
        await db.close()


async def test_after_commit_runs_only_for_committed_writes(tmp_path: Path) -> None:
    db = await scratch_db(tmp_path)
    try:
        seen: list[int] = []
        hold = Gate()
        first = asyncio.ensure_future(db.write(insert(1, hold=hold), after_commit=seen.append))
        await hold.inside()
        ok = asyncio.ensure_future(db.write(insert(2), after_commit=seen.append))
        bad = asyncio.ensure_future(db.write(insert(3, fail=True), after_commit=seen.append))
        await asyncio.sleep(0)
        hold.released.set()
        await asyncio.wait_for(asyncio.gather(first, ok), 10)
        with pytest.raises(ValueError):
            await asyncio.wait_for(bad, 10)
        assert seen == [1, 2]
    finally:
        await db.close()


async def test_before_runs_ahead_of_its_transaction_and_a_failing_one_writes_nothing(
    tmp_path: Path,
) -> None:
    """A write's `before` (a run's action.log lines) runs in the writer's hand-off before the
    batch's transaction begins: a reader then sees none of the batch. One that fails fails its
    write alone; the others in its batch commit."""
    db = await scratch_db(tmp_path)
    path = tmp_path / "history.db"
    try:
        seen: list[str] = []

        def before(name: str) -> Callable[[], None]:
            def call() -> None:
                with sqlite3.connect(path) as other:
                    count = other.execute("SELECT count(*) FROM scratch").fetchone()[0]
                seen.append(f"{name} sees {count}")
                if name == "refused":
                    raise OSError("no room")

            return call

        hold, _, first = await writer_held(db)
        ok = asyncio.ensure_future(db.write_lean(insert_lean(1), before=before("ok")))
        refused = asyncio.ensure_future(db.write_lean(insert_lean(2), before=before("refused")))
        also = asyncio.ensure_future(db.write_lean(insert_lean(3), before=before("also")))
        await asyncio.sleep(0)
        hold.released.set()
        assert list(await asyncio.wait_for(asyncio.gather(first, ok, also), 10)) == [0, 1, 3]
        with pytest.raises(OSError, match="no room"):
            await asyncio.wait_for(refused, 10)
        # All three ran before the batch began: the held write's row was committed, theirs not.
        assert seen == ["ok sees 1", "refused sees 1", "also sees 1"]
        assert await values(db) == [0, 1, 3]
    finally:
        await db.close()


async def test_after_commit_runs_on_the_writer_unless_writes_wait(tmp_path: Path) -> None:
    """With no write waiting, the file work after a commit runs in the writer's own hand-off
    (one thread hand-off less for its caller); with writes waiting it goes to a thread of its
    own so the next batch need not wait. Either way in commit order, and before the caller
    hears back."""
    db = await scratch_db(tmp_path)
    try:
        ran: list[tuple[int, str]] = []

        def note(value: int) -> None:
            ran.append((value, threading.current_thread().name))

        assert await db.write(insert(1), after_commit=note) == 1
        assert ran == [(1, "agenvoy-db-write")]
        hold = Gate()
        first = asyncio.ensure_future(db.write(insert(2, hold=hold), after_commit=note))
        await hold.inside()
        behind = [asyncio.ensure_future(db.write(insert(v), after_commit=note)) for v in (3, 4)]
        await asyncio.sleep(0)
        hold.released.set()
        assert await asyncio.wait_for(asyncio.gather(first, *behind), 10) == [2, 3, 4]
        # 2 committed with 3 and 4 waiting: handed on. 3 and 4, the last batch: on the writer
        # once 2's work was done, or after it on the same thread.
        assert [value for value, _ in ran] == [1, 2, 3, 4]
        assert ran[1] == (2, "agenvoy-db-after")
    finally:
        await db.close()


async def test_a_write_alone_that_fails_leaves_nothing(tmp_path: Path) -> None:
    db = await scratch_db(tmp_path)
    try:
        with pytest.raises(ValueError):
            await db.write(insert(7, fail=True))
        await db.write(insert(8))
        assert await values(db) == [8]
    finally:
        await db.close()


# -- a real gateway killed in the middle of a batch --------------------------------------------

SESSIONS = 12


async def keep_sending(
    http: aiohttp.ClientSession, url: str, sid: str, acknowledged: list[str]
) -> None:
    """Messages to one session until the gateway stops answering: each is acknowledged as
    soon as it is stored (`wait: 0`), and the next goes once the task has ended."""
    for n in range(500):
        text = f"message {n} to {sid}"
        try:
            body = {"session_id": sid, "content": text, "wait": 0}
            async with http.post(f"{url}/v1/send", json=body) as resp:
                answer = await resp.json()
                assert resp.status in (200, 202), f"unexpected answer {resp.status}: {answer}"
            acknowledged.append(text)
            task = f"{url}/v1/session/{sid}/task/{answer['task_hash']}?wait=20"
            async with http.get(task) as resp:
                assert resp.status == 200, await resp.text()
        except (TimeoutError, aiohttp.ClientConnectionError, aiohttp.ContentTypeError):
            return


@pytest.mark.slow
async def test_killed_mid_batch_loses_no_acknowledged_message(tmp_path: Path) -> None:
    home = tmp_path / "home"
    gateway = Gateway(home, free_port())
    # Die in a batch of several writes after a few waves of messages have been acknowledged.
    await gateway.start(AGENVOY_CRASH_AT="mid_batch:25")
    acknowledged: list[str] = []
    try:
        timeout = aiohttp.ClientTimeout(total=20)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            sessions = []
            for _ in range(SESSIONS):
                async with http.post(f"{gateway.url}/v1/session", json={"prefix": "cli"}) as resp:
                    sessions.append((await resp.json())["session_id"])
            await asyncio.gather(
                *(keep_sending(http, gateway.url, sid, acknowledged) for sid in sessions)
            )
        assert await gateway.died() == -9, "the gateway never reached the middle of a batch"
        assert acknowledged, "nothing was acknowledged before the crash"

        await gateway.start()
        settings = Settings(home=home, _env_file=None)
        store = await SessionStore.open(settings)
        try:

            async def archived() -> dict[str, list[tuple[str, str]]]:
                return {
                    sid: [(m.role, m.content) for m in await store.recent_messages(sid, 1000)]
                    for sid in sessions
                }

            async def all_answered() -> bool:
                rows = [row for sid_rows in (await archived()).values() for row in sid_rows]
                asked = {content for role, content in rows if role == "user"}
                answered = {content for role, content in rows if role == "assistant"}
                return all(f"echo: {text}" in answered for text in asked)

            assert await wait_until(all_answered, 30), "an archived message was never answered"
            rows = [row for sid_rows in (await archived()).values() for row in sid_rows]
            users = [content for role, content in rows if role == "user"]
            replies = [content for role, content in rows if role == "assistant"]
            assert set(acknowledged) <= set(users), "an acknowledged message was lost"
            assert len(users) == len(set(users)), "a message was archived twice"
            assert len(replies) == len(set(replies)), "a message was answered twice"
            assert await store.unfinished() == []
            # A line rides its write's hand-off (a message's after its commit, a reply's
            # before its transaction): no stored message, no recorded reply, without its line.
            for sid in sessions:
                lines = {(r.kind, r.task_hash) for r in store.files(sid).action_log.read()}
                for message in await store.recent_messages(sid, 1000):
                    kind = "user" if message.role == "user" else "text"
                    assert (kind, message.task_hash) in lines, f"no {kind} line: {message}"
        finally:
            await store.close()
        await gateway.stop()
    finally:
        await gateway.close()
