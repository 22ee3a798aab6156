"""Subagents through the router with the offline agent (`!delegate`): a task hands a sub-task
to a new temp-* session and waits for its answer. In a Telegram group, with the openai agent's
tool, across a SIGKILL and in the listings: tests/test_subagents_frontends.py."""

from __future__ import annotations

from typing import Any

import pytest
from engine_rig import Core, Engine, EngineRig
from sqlalchemy import text
from sqlmodel import Session
from support import wait_until

from gateway.engine.subagents import child_session_id, child_task_hash
from gateway.events import Inbound, Origin
from gateway.jobs import Reaper

pytestmark = pytest.mark.fast


ANN = Origin("http", sender_id="ann", sender_name="Ann")


async def ask(core: Core, sid: str, message: str, within: float = 15) -> Any:
    sub = await core.router.submit(Inbound(ANN, sid, message))
    return sub, await core.router.wait(sub.task_hash, within)


async def children_of(core: Core, sid: str) -> list[str]:
    return [s.id for s in await core.store.list_sessions() if s.parent == sid]


async def usage_by_session(core: Core) -> list[tuple[str, str, str]]:
    def work(session: Session) -> list[tuple[str, str, str]]:
        rows = session.connection().execute(
            text("SELECT session_id, model, task_hash FROM usage ORDER BY id")
        )
        return [(r[0], r[1], r[2]) for r in rows.all()]

    return await core.store.db.read(work)


async def test_a_subagent_answers_in_a_session_of_its_own(engine: Engine) -> None:
    sub, state = await ask(engine, "cli-parent", "!delegate hello there")
    assert state.status == "done" and state.reply == "delegated: echo: hello there"
    (child,) = await children_of(engine, "cli-parent")
    assert child.startswith("temp-") and child == child_session_id(sub.task_hash, "#0")
    said = [(m.role, m.content) for m in await engine.store.recent_messages(child)]
    assert said == [("user", "hello there"), ("assistant", "echo: hello there")]
    parent = [m.content for m in await engine.store.recent_messages("cli-parent")]
    assert parent == ["!delegate hello there", "delegated: echo: hello there"]
    # The child's model calls are its session's, and name the task that started it.
    rows = await usage_by_session(engine)
    assert (child, "offline", sub.task_hash) in rows
    assert ("cli-parent", "offline", sub.task_hash) in rows


async def test_the_child_gets_the_parents_persona_and_tools(engine: Engine) -> None:
    await engine.store.ensure("cli-p")
    await engine.store.update("cli-p", persona="terse", model="m-1")
    await engine.store.set_tool_allowed("cli-p", "write_file", True)
    await ask(engine, "cli-p", "!delegate hi")
    (child,) = await children_of(engine, "cli-p")
    row = await engine.store.get(child)
    assert row is not None
    assert (row.persona, row.model, row.allowed_tools) == (
        "terse",
        "m-1",
        frozenset({"write_file"}),
    )
    assert row.parent is not None and row.parent[0] == "cli-p"


async def test_depth_and_count_are_limited(engines: EngineRig) -> None:
    async with engines.open(max_subagent_depth=2, max_subagents_per_task=3) as engine:
        _, state = await ask(engine, "cli-d", "!delegate !delegate !delegate deep")
        assert state.reply.startswith("delegated: delegated: refused: a subagent may not start")
        # Three subagents in one task are allowed, the fourth is refused, at any depth.
        _, state = await ask(engine, "cli-n", "!delegate !delegate !delegate !delegate x")
        assert state.reply.startswith("delegated: delegated: refused:"), state.reply
    async with engines.open(home=engines.home.with_name("h2"), max_subagent_depth=0) as engine:
        _, state = await ask(engine, "cli-z", "!delegate x")
        assert state.reply.startswith("refused: a subagent may not start another")
        assert await children_of(engine, "cli-z") == []


async def test_cancelling_the_parent_cancels_the_child_and_the_reaper_waits(
    engine: Engine,
) -> None:
    router = engine.router
    sub = await router.submit(Inbound(ANN, "cli-c", "!delegate !sleep 60"))
    child = child_session_id(sub.task_hash, "#0")

    reaper = Reaper(engine.store, engine.kv, engine.presence, router, idle_seconds=0)

    async def child_asked() -> bool:
        return (
            bool(await engine.store.recent_messages(child))
            if await _exists(engine, child)
            else False
        )

    assert await wait_until(child_asked, within=10)
    # Idle by its clock, but its parent runs: the reaper leaves it.
    assert child not in await reaper.run_once()
    await router.cancel_for(ANN, "cli-c", sub.task_hash)
    state = await router.wait(sub.task_hash, 10)
    assert state.status == "canceled"
    assert await engine.store.finished_run(child, child_task_hash(child)) is None
    said = [m.content for m in await engine.store.recent_messages(child)]
    assert said == ["!sleep 60"]  # asked, never answered
    assert await wait_until(lambda: _reaped(reaper, child), within=10)


async def _exists(core: Core, sid: str) -> bool:
    return await core.store.get(sid) is not None


async def _reaped(reaper: Reaper, sid: str) -> bool:
    return sid in await reaper.run_once()
