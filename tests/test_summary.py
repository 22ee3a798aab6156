from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest
from engine_rig import EngineRig
from support import wait_until

from gateway.agents.base import AgentContext, Step
from gateway.agents.summary import RollingSummary
from gateway.events import Inbound, Origin
from gateway.store.sessions import StoredMessage

pytestmark = pytest.mark.fast

ANN = Origin("http", sender_id="ann", sender_name="Ann")


class Recording:
    """A summary model that remembers which messages it was given."""

    def __init__(self, fail_first: bool = False) -> None:
        self.folded: list[int] = []
        self.fail_first = fail_first

    async def summarize(self, previous: str, messages: Sequence[StoredMessage]) -> str:
        if self.fail_first:
            self.fail_first = False
            raise ConnectionError("summary model down")
        self.folded.extend(m.id for m in messages)
        return previous + "".join(f"[{m.id}]" for m in messages)


async def test_each_message_is_folded_once_and_the_cursor_advances(engines: EngineRig) -> None:
    async with engines.open(history_window=4) as engine:
        engine.assembled.runner.after_task.clear()  # this test drives the summary itself
        model = Recording(fail_first=True)
        rolling = RollingSummary(engine.store, model, window=4)
        for i in range(5):  # ten messages: each task adds a message and its reply
            sub = await engine.router.submit(Inbound(ANN, "cli-s", f"message {i}"))
            await engine.router.wait(sub.task_hash, 10)
        ids = [m.id for m in await engine.store.messages_after("cli-s", 0)]
        assert len(ids) == 10
        assert not await rolling.run("cli-s")  # the model failed: nothing moves
        assert engine.store.files("cli-s").read_summary_cursor() == 0
        assert await rolling.run("cli-s")
        assert model.folded == ids[:6]  # everything outside the 4-message window
        assert engine.store.files("cli-s").read_summary_cursor() == ids[5]
        assert not await rolling.run("cli-s")  # nothing new is due
        sub = await engine.router.submit(Inbound(ANN, "cli-s", "one more"))
        await engine.router.wait(sub.task_hash, 10)
        assert await rolling.run("cli-s")
        ids = [m.id for m in await engine.store.messages_after("cli-s", 0)]
        assert model.folded == ids[:8]  # the next two, and no message twice
        summary = engine.store.files("cli-s").read_summary()
        assert summary is not None and summary.text == "".join(f"[{i}]" for i in ids[:8])


async def test_summary_runs_in_the_background_after_replies(engines: EngineRig) -> None:
    async with engines.open(history_window=2) as engine:
        assert engine.summary is not None  # the offline agent can summarize
        for i in range(3):
            sub = await engine.router.submit(Inbound(ANN, "cli-b", f"note {i}"))
            await engine.router.wait(sub.task_hash, 10)
        files = engine.store.files("cli-b")
        ids = [m.id for m in await engine.store.messages_after("cli-b", 0)]

        async def folded() -> bool:
            summary = files.read_summary()
            return summary is not None and summary.cursor == ids[-3]  # all but the window

        assert await wait_until(folded)  # off the reply path, in the background
        summary = files.read_summary()
        assert summary is not None and "Ann: note 0" in summary.text


async def test_the_agent_sees_the_summary(engines: EngineRig) -> None:
    from gateway.store.files import Summary

    async with engines.open() as engine:
        await engine.store.ensure("cli-v")
        engine.store.files("cli-v").write_summary(Summary("they agreed on blue", 0, 1))
        seen: list[str] = []
        original = engine.agent.run

        def spy(ctx: AgentContext) -> AsyncIterator[Step]:
            seen.append(ctx.summary)
            return original(ctx)

        engine.agent.run = spy  # type: ignore[method-assign]
        sub = await engine.router.submit(Inbound(ANN, "cli-v", "hi"))
        await engine.router.wait(sub.task_hash, 10)
        assert seen == ["they agreed on blue"]


async def test_messages_are_folded_a_batch_at_a_time_and_seen_until_then(
    engines: EngineRig,
) -> None:
    """One summary call per batch, not per message; until a batch is due, what left the
    window is still in the agent's context."""
    async with engines.open(history_window=4) as engine:
        engine.assembled.runner.after_task.clear()  # this test drives the summary itself
        model = Recording()
        rolling = RollingSummary(engine.store, model, window=4, batch=3)
        seen: list[list[str]] = []
        original = engine.agent.run

        def spy(ctx: AgentContext) -> AsyncIterator[Step]:
            seen.append([m.content for m in ctx.history])
            return original(ctx)

        engine.agent.run = spy  # type: ignore[method-assign]

        async def say(text: str) -> None:
            sub = await engine.router.submit(Inbound(ANN, "cli-f", text))
            await engine.router.wait(sub.task_hash, 10)

        for i in range(5):
            await say(f"m{i}")
        assert await rolling.run("cli-f")  # six outside the window: two batches' worth
        assert len(model.folded) == 6
        await say("m5")  # two more outside the window: less than a batch
        assert not await rolling.run("cli-f")
        assert len(model.folded) == 6
        await say("m6")
        # The agent saw the two unfolded ones next to its four-message window.
        assert seen[-1] == ["m3", "echo: m3", "m4", "echo: m4", "m5", "echo: m5"]
        assert await rolling.run("cli-f")  # four due: one call for all of them
        assert len(model.folded) == 10
        await say("m7")
        assert seen[-1] == ["m5", "echo: m5", "m6", "echo: m6"]


async def test_after_tasks_the_summary_folds_only_when_a_batch_may_be_due(
    engines: EngineRig,
) -> None:
    """The runtime's own hook: called after a task only when the context read said a batch
    may be due, and then it folds every message outside the window once."""
    async with engines.open(history_window=4) as engine:
        model = Recording()
        rolling = RollingSummary(engine.store, model, window=4)
        calls: list[str] = []

        def hook(session_id: str) -> None:
            calls.append(session_id)
            rolling.schedule(session_id)

        engine.assembled.runner.after_task.clear()
        engine.assembled.runner.after_task.append(hook)
        sub = await engine.router.submit(Inbound(ANN, "cli-s", "message 0"))
        await engine.router.wait(sub.task_hash, 10)
        assert calls == []  # two messages in a four-message window: nothing can be due
        for i in range(1, 6):
            sub = await engine.router.submit(Inbound(ANN, "cli-s", f"message {i}"))
            await engine.router.wait(sub.task_hash, 10)
        ids = [m.id for m in await engine.store.messages_after("cli-s", 0)]

        async def folded() -> bool:
            # Everything outside the window but a last, incomplete batch (of 2): once, in order.
            return model.folded in (ids[:-5], ids[:-4])

        assert await wait_until(folded, 10), f"{model.folded} vs {ids}"
        assert 0 < len(calls) < 6
        await rolling.close()
