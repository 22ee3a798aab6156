from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clock import FakeClock
from engine_rig import Engine, EngineRig

from gateway.adapter import Progress
from gateway.auth import NotAllowed
from gateway.engine.errors import MessageTooLong, TooManyTasks
from gateway.engine.prompts import AlreadyAnswered, PromptNotFound
from gateway.engine.router import Router
from gateway.events import Event, Inbound, Origin

pytestmark = pytest.mark.fast

ANN = Origin("http", sender_id="ann", sender_name="Ann", window_hash="w1")
BOB = Origin("http", sender_id="bob", sender_name="Bob", window_hash="w2")


class RecordingSink:
    def __init__(self) -> None:
        self.events: list[tuple[Origin, Event]] = []
        self.notices: list[tuple[Origin, str]] = []

    async def deliver(self, origin: Origin, event: Event, progress: Progress) -> None:
        self.events.append((origin, event))

    async def notice(self, origin: Origin, text: str) -> None:
        self.notices.append((origin, text))


@pytest.fixture
async def engine(engines: EngineRig) -> AsyncIterator[Engine]:
    async with engines.open(confirm_timeout_seconds=5, admins="http:root") as opened:
        yield opened


def drain(queue: asyncio.Queue[Event]) -> list[Event]:
    return [queue.get_nowait() for _ in range(queue.qsize())]


def person(i: int) -> Origin:
    return Origin("http", sender_id=f"user{i}", sender_name=f"User {i}", window_hash=f"w{i}")


def inbound(sid: str, text: str, origin: Origin = ANN) -> Inbound:
    return Inbound(origin, sid, text)


async def finished(router: Router, task_hash: str) -> str:
    state = await router.wait(task_hash, 10)
    assert state.finished, state.status
    return state.reply


async def test_echo_persists_everything(engine: Engine) -> None:
    router = engine.router
    sub = await router.submit(inbound("cli-a", "hello there"))
    # The user's message is stored before submit returns.
    stored = await engine.store.recent_messages("cli-a")
    assert [(m.role, m.content, m.sender) for m in stored][:1] == [("user", "hello there", "Ann")]
    assert await finished(router, sub.task_hash) == "echo: hello there"
    stored = await engine.store.recent_messages("cli-a")
    assert [(m.role, m.content) for m in stored] == [
        ("user", "hello there"),
        ("assistant", "echo: hello there"),
    ]
    history = engine.store.files("cli-a").history.read()
    assert [m.content for m in history] == ["hello there", "echo: hello there"]
    kinds = [r.kind for r in engine.store.files("cli-a").action_log.read()]
    assert kinds == ["user", "text", "done"]
    assert all(r.task_hash == sub.task_hash for r in engine.store.files("cli-a").action_log.read())
    assert list(engine.store.files("cli-a").list_pending()) == []  # journal removed
    assert not await engine.presence.is_running("cli-a")
    hits = await engine.store.search.messages("there")
    assert len(hits) == 2


async def test_one_task_at_a_time_in_archive_order(engine: Engine) -> None:
    router = engine.router
    with router.subscribe("cli-q") as sub:
        sub.queue = asyncio.Queue()  # unbounded: this test wants every event
        subs = await asyncio.gather(*(router.submit(inbound("cli-q", f"m{i}")) for i in range(50)))
        for s in subs:
            await finished(router, s.task_hash)
        events = [sub.queue.get_nowait() for _ in range(sub.queue.qsize())]
    archived = await engine.store.recent_messages("cli-q", 100)
    asked = [m.task_hash for m in archived if m.role == "user"]
    answered = [m.task_hash for m in archived if m.role == "assistant"]
    assert sorted(asked) == sorted(s.task_hash for s in subs)
    # Tasks ran in the order their messages were archived, replies were archived in that order
    # too, and each task's events are contiguous: one at a time.
    run_events = [e for e in events if e.kind != "user"]
    assert [e.task_hash for e in run_events if e.kind == "done"] == asked
    assert [e.task_hash for e in run_events] == [h for h in asked for _ in ("text", "done")]
    assert answered == asked
    history = engine.store.files("cli-q").history.read()
    assert [m.content for m in history if m.role == "user"] == [router.task(h).text for h in asked]
    assert all(router.task(h).reply == f"echo: {router.task(h).text}" for h in asked)


async def test_sessions_run_concurrently(engine: Engine, clock: FakeClock) -> None:
    router = engine.router
    subs = [await router.submit(inbound(f"cli-p{i}", "!sleep 1", person(i))) for i in range(5)]
    # All five are asleep at once: none waits for another session's task to end.
    await clock.until_sleeping(5, seconds=1)
    assert not any(router.task(s.task_hash).finished for s in subs)
    await clock.advance(1)
    for s in subs:
        assert await finished(router, s.task_hash) == "slept 1s"


async def test_no_queue_notice_while_the_previous_reply_goes_out(engine: Engine) -> None:
    """The task ahead has its reply recorded and is handing it to the platform: the next
    message is not "queued" for its sender, who already has (or is getting) the answer."""
    delivering = asyncio.Event()
    release = asyncio.Event()

    class SlowSink(RecordingSink):
        async def deliver(self, origin: Origin, event: Event, progress: Progress) -> None:
            if event.kind == "text":
                delivering.set()
                await release.wait()
            await super().deliver(origin, event, progress)

    sink = SlowSink()
    engine.router.register_sink("http", sink)
    first = await engine.router.submit(inbound("cli-w", "one"))
    await asyncio.wait_for(delivering.wait(), 10)
    second = await engine.router.submit(inbound("cli-w", "two"))
    assert second.position == 0
    assert not [text for _, text in sink.notices if text.startswith("queued")]
    release.set()
    assert await finished(engine.router, first.task_hash) == "echo: one"
    assert await finished(engine.router, second.task_hash) == "echo: two"


async def test_queue_position_is_told_to_the_origin(engine: Engine, clock: FakeClock) -> None:
    sink = RecordingSink()
    engine.router.register_sink("http", sink)
    first = await engine.router.submit(inbound("cli-w", "!sleep 1"))
    second = await engine.router.submit(inbound("cli-w", "after"))
    assert second.position == 1
    assert (ANN, "queued (1 ahead)") in sink.notices
    await clock.until_sleeping(1, seconds=1)
    assert engine.router.task(second.task_hash).status == "queued"
    await clock.advance(1)
    await finished(engine.router, second.task_hash)
    assert engine.router.task(first.task_hash).status == "done"


async def test_confirm_only_requester_or_admin(engine: Engine) -> None:
    router = engine.router
    sink = RecordingSink()
    router.register_sink("http", sink)
    sub = await router.submit(inbound("cli-c", "!confirm launch"))
    state = await router.wait(sub.task_hash, 10, until_prompt=True)
    assert state.prompt is not None and state.status == "waiting"
    pending = engine.store.files("cli-c").read_pending(sub.task_hash)
    assert pending is not None and pending["prompt"]["tool"] == "demo_action"
    with pytest.raises(NotAllowed, match="only Ann or an admin"):
        await router.answer("cli-c", sub.task_hash, BOB, approve=True)
    assert router.task(sub.task_hash).prompt is not None  # still open
    await router.answer("cli-c", sub.task_hash, ANN, approve=True)
    assert await finished(router, sub.task_hash) == "approved: launch"
    with pytest.raises(AlreadyAnswered):
        await router.answer("cli-c", sub.task_hash, ANN, approve=False)
    confirms = [e for o, e in sink.events if e.kind == "confirm"]
    assert len(confirms) == 1 and confirms[0].window_hash == "w1"


async def test_admin_may_answer_and_ask_user(engine: Engine) -> None:
    router = engine.router
    sub = await router.submit(inbound("cli-k", "!ask favourite colour?"))
    await router.wait(sub.task_hash, 10, until_prompt=True)
    root = Origin("http", sender_id="root", sender_name="Root")
    await router.answer("cli-k", sub.task_hash, root, text="green")
    assert await finished(router, sub.task_hash) == "answer: green"


async def test_prompt_expiry(engine: Engine, clock: FakeClock) -> None:
    sink = RecordingSink()
    engine.router.register_sink("http", sink)
    timeout = engine.settings.confirm_timeout_seconds
    confirm = await engine.router.submit(inbound("cli-e", "!confirm x"))
    await engine.router.wait(confirm.task_hash, 10, until_prompt=True)
    await clock.until_sleeping(1, seconds=timeout)
    await clock.advance(timeout - 0.001)
    assert engine.router.task(confirm.task_hash).status == "waiting"  # not a moment early
    await clock.advance(0.001)
    assert await finished(engine.router, confirm.task_hash) == "denied: x"
    ask = await engine.router.submit(inbound("cli-e", "!ask anyone?"))
    await engine.router.wait(ask.task_hash, 10, until_prompt=True)
    await clock.until_sleeping(1, seconds=timeout)
    await clock.advance(timeout)
    assert await finished(engine.router, ask.task_hash) == "answer: (none)"
    texts = [t for _, t in sink.notices]
    assert "The confirmation expired and was treated as denied." in texts
    assert "The question expired and was left unanswered." in texts


async def test_unknown_prompt_and_wrong_session(engine: Engine) -> None:
    with pytest.raises(PromptNotFound):
        await engine.router.answer("cli-x", "nosuchtask", ANN, approve=True)
    sub = await engine.router.submit(inbound("cli-y", "!confirm y"))
    await engine.router.wait(sub.task_hash, 10, until_prompt=True)
    with pytest.raises(PromptNotFound):
        await engine.router.answer("cli-other", sub.task_hash, ANN, approve=True)
    await engine.router.answer("cli-y", sub.task_hash, ANN, approve=False)
    assert await finished(engine.router, sub.task_hash) == "denied: y"


async def test_cancel_running_and_queued(engine: Engine) -> None:
    router = engine.router
    running = await router.submit(inbound("cli-z", "!sleep 30"))
    queued = await router.submit(inbound("cli-z", "later"))
    assert await router.cancel("cli-z", queued.task_hash, by="Ann")
    reply = await router.submit(inbound("cli-z", "/cancel"))
    assert reply.command is not None and reply.command.text == f"canceled {running.task_hash}"
    for sub in (running, queued):
        state = await router.wait(sub.task_hash, 10)
        assert state.status == "canceled"
    assert router.task(running.task_hash).events[-1].kind == "canceled"
    assert list(engine.store.files("cli-z").list_pending()) == []


async def test_cancel_by_someone_else_is_refused(engine: Engine) -> None:
    router = engine.router
    running = await router.submit(inbound("tg--5", "!sleep 30"))
    attempt = await router.submit(inbound("tg--5", "/cancel", BOB))
    assert attempt.command is not None and not attempt.command.ok
    assert not router.task(running.task_hash).finished
    await router.cancel("tg--5", by="test")


async def test_fail_and_write(engine: Engine) -> None:
    router = engine.router
    fail = await router.submit(inbound("cli-f", "!fail"))
    state = await router.wait(fail.task_hash, 10)
    assert state.status == "error" and "asked to fail" in state.error
    write = await router.submit(inbound("cli-f", "!write notes.txt hello world"))
    await router.wait(write.task_hash, 10, until_prompt=True)
    await router.answer("cli-f", write.task_hash, ANN, approve=True)
    assert await finished(router, write.task_hash) == "wrote notes.txt (11 bytes)"
    target = engine.store.files("cli-f").dir / "workspace" / "notes.txt"
    assert target.read_text() == "hello world"
    bad = await router.submit(inbound("cli-f", "!write ../escape.txt x"))
    assert (await finished(router, bad.task_hash)).startswith("refused:")
    assert not (engine.store.files("cli-f").dir / "escape.txt").exists()


async def test_write_never_follows_a_linked_workspace(engine: Engine, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    await engine.store.ensure("cli-y")
    (engine.store.files("cli-y").dir / "workspace").symlink_to(outside)
    write = await engine.router.submit(inbound("cli-y", "!write notes.txt hello"))
    await engine.router.wait(write.task_hash, 10, until_prompt=True)
    await engine.router.answer("cli-y", write.task_hash, ANN, approve=True)
    reply = await finished(engine.router, write.task_hash)
    assert reply.startswith("write notes.txt failed: error") and "not a folder" in reply
    assert str(tmp_path) not in reply
    assert list(outside.iterdir()) == []


async def test_commands(engine: Engine) -> None:
    router = engine.router
    help_ = await router.submit(inbound("cli-h", "/help"))
    assert help_.command is not None and "/status" in help_.command.text
    await finished(router, (await router.submit(inbound("cli-h", "hi"))).task_hash)
    status = await router.submit(inbound("cli-h", "/status@somebot"))
    assert status.command is not None and "session: cli-h" in status.command.text
    reset = await router.submit(inbound("tg--9", "/reset", BOB))
    assert reset.command is not None and not reset.command.ok
    reset = await router.submit(inbound("cli-h", "/reset"))
    assert reset.command is not None and reset.command.ok
    assert engine.store.files("cli-h").history.read() == []
    assert len(await engine.store.recent_messages("cli-h")) == 2  # archive keeps them
    new = await router.submit(inbound("cli-h", "/new", Origin("terminal", sender_id="me")))
    assert new.command is not None and new.command.session_id.startswith("cli-")
    assert await engine.store.get(new.command.session_id) is not None


async def test_too_long_message_rejected_and_not_stored(engine: Engine) -> None:
    with pytest.raises(MessageTooLong):
        await engine.router.submit(inbound("cli-l", "x" * 16_001))
    assert await engine.store.get("cli-l") is None


async def test_subscribers_get_events_and_slow_ones_drop(engine: Engine) -> None:
    router = engine.router
    with router.subscribe("cli-s") as sub:
        sub.queue = asyncio.Queue(2)
        task = await router.submit(inbound("cli-s", "one"))
        await finished(router, task.task_hash)
        assert sub.dropped == 1  # user, text fit; done dropped
        assert [(await sub.get()).kind, (await sub.get()).kind] == ["user", "text"]


async def test_usage_rows_from_offline_agent(engine: Engine) -> None:
    sub = await engine.router.submit(inbound("cli-u", "three word message"))
    await finished(engine.router, sub.task_hash)
    (row,) = await engine.store.usage.summary()
    assert (row.model, row.input, row.output) == ("offline", 3, 4)


async def test_journal_tracks_steps(engine: Engine) -> None:
    store = engine.store
    sub = await engine.router.submit(inbound("cli-j", "!confirm deploy"))
    (queued,) = await store.unfinished()  # stored with the message, before anything ran
    (message,) = await store.recent_messages("cli-j")
    assert (queued.task_hash, queued.user_message_id) == (sub.task_hash, message.id)
    await engine.router.wait(sub.task_hash, 10, until_prompt=True)
    (journal,) = await store.unfinished()
    assert journal.status == "waiting"
    assert journal.origin["sender_id"] == "ann"
    assert journal.steps == ({"type": "prompt", "kind": "confirm", "answer": None},)
    assert journal.prompt is not None and journal.prompt["args"] == {"action": "deploy"}
    # The session folder shows the open prompt, and where it must be answered.
    waiting = store.files("cli-j").read_pending(sub.task_hash)
    assert waiting is not None and waiting["prompt"] == journal.prompt
    assert waiting["origin"]["window_hash"] == "w1"
    # An answer is journaled before it is acknowledged.
    await engine.router.answer("cli-j", sub.task_hash, ANN, approve=True)
    left = [j for j in await store.unfinished() if j.task_hash == sub.task_hash]
    if left:
        (answered,) = left  # the task may already have ended, taking its journal with it
        assert answered.steps[0]["answer"]["approved"] is True
    await finished(engine.router, sub.task_hash)
    assert await store.unfinished() == []
    assert list(store.files("cli-j").list_pending()) == []


async def test_fifty_sessions_make_progress_together(engines: EngineRig, clock: FakeClock) -> None:
    async with engines.open(max_concurrent_tasks=50) as engine:
        tasks = await asyncio.gather(
            *(engine.router.submit(inbound(f"cli-n{i}", "!sleep 4", person(i))) for i in range(50))
        )
        for _ in range(4):
            # Every session's task is in the same second of its sleep: all fifty are going
            # before any of them finishes. Fifty tasks starting at once on a loaded machine can
            # take more than the clock's usual patience to all reach their sleep.
            await clock.until_sleeping(50, seconds=1, within=30)
            assert engine.router.load() == (50, 0)
            await clock.advance(1)
        for task in tasks:
            assert await finished(engine.router, task.task_hash) == "slept 4s"


async def test_action_history_records_tool_results(engine: Engine) -> None:
    from sqlalchemy import text
    from sqlmodel import Session

    sub = await engine.router.submit(inbound("cli-ah", "!write out.txt data"))
    await engine.router.wait(sub.task_hash, 10, until_prompt=True)
    await engine.router.answer("cli-ah", sub.task_hash, ANN, approve=True)
    await finished(engine.router, sub.task_hash)

    def rows(session: Session) -> list[tuple[str, str, str]]:
        res = session.connection().execute(
            text("SELECT objective, tool_results, reply FROM action_history")
        )
        return [(r[0], r[1], r[2]) for r in res.all()]

    ((objective, results, reply),) = await engine.store.db.read(rows)
    assert objective == "!write out.txt data" and reply == "wrote out.txt (4 bytes)"
    (tool,) = json.loads(results)
    assert (tool["tool"], tool["status"], tool["result"]) == ("write_file", "ok", "4 bytes")


async def test_model_and_persona_commands(engine: Engine) -> None:
    router = engine.router
    done = await router.submit(inbound("cli-mp", "/model gpt-test"))
    assert done.command is not None and done.command.ok
    await router.submit(inbound("cli-mp", "/persona a calm librarian"))
    row = await engine.store.require("cli-mp")
    assert (row.model, row.role, row.rule) == ("gpt-test", "a calm librarian", "a calm librarian")
    shown = await router.submit(inbound("cli-mp", "/model"))
    assert shown.command is not None and shown.command.text == "model: gpt-test"
    refused = await router.submit(inbound("tg--44", "/persona pirate", BOB))
    assert refused.command is not None and not refused.command.ok
    admin = Origin("telegram", sender_id="root", sender_name="Root", is_admin=True)
    allowed = await router.submit(inbound("tg--44", "/persona pirate", admin))
    assert allowed.command is not None and allowed.command.ok


async def test_a_lone_surrogate_is_refused_before_anything_is_written(engine: Engine) -> None:
    from gateway.text import UnstorableText

    with pytest.raises(UnstorableText, match="lone surrogate"):
        await engine.router.submit(inbound("cli-sur", "hello \udfff"))
    with pytest.raises(UnstorableText):
        await engine.router.record(inbound("cli-sur", "\ud800"))
    assert await engine.store.get("cli-sur") is None
    assert not engine.store.dirs.path_of("cli-sur").exists()  # no folder left behind


async def test_one_sender_cannot_take_every_slot(engines: EngineRig, clock: FakeClock) -> None:
    async with engines.open(
        max_concurrent_tasks=6, max_running_per_sender=2, max_pending_per_sender=5
    ) as engine:
        router = engine.router
        flood = [await router.submit(inbound(f"cli-f{i}", "!sleep 9")) for i in range(5)]
        await clock.until_sleeping(2, seconds=1)
        assert router.load() == (2, 3)  # two of Ann's run; three wait although slots are free
        other = await router.submit(inbound("cli-bob", "!sleep 1", BOB))
        await clock.until_sleeping(3, seconds=1)
        assert router.running_task("cli-bob") is not None  # Bob did not wait behind Ann
        # Ann has five tasks waiting or running: the sixth is refused, and nothing is stored.
        with pytest.raises(TooManyTasks, match="too many requests"):
            await router.submit(inbound("cli-f9", "one more"))
        assert await engine.store.get("cli-f9") is None
        await clock.advance(1)
        assert await finished(router, other.task_hash) == "slept 1s"
        for sub in flood:
            await router.cancel(sub.session_id, sub.task_hash, by="test")


async def test_sessions_take_turns_for_the_slots(engines: EngineRig, clock: FakeClock) -> None:
    async with engines.open(max_concurrent_tasks=1) as engine:
        router = engine.router
        sink = RecordingSink()  # sees every reply in the order they were given
        router.register_sink("http", sink)
        # The one slot is taken while both sessions queue up behind it.
        holder = await router.submit(inbound("cli-z", "!sleep 1", person(3)))
        await clock.until_sleeping(1, seconds=1)
        subs = [await router.submit(inbound("cli-a", f"a{i}", person(1))) for i in range(3)]
        subs += [await router.submit(inbound("cli-b", f"b{i}", person(2))) for i in range(3)]
        await clock.advance(1)
        await router.wait(holder.task_hash, 10)
        for s in subs:
            await router.wait(s.task_hash, 10)
        order = [e.text for _, e in sink.events if e.kind == "text"][1:]
        # After each task its session goes to the back of the line for the one slot.
        assert order == ["echo: a0", "echo: b0", "echo: a1", "echo: b1", "echo: a2", "echo: b2"]


async def test_a_task_canceled_while_it_waits_for_a_slot_never_runs(
    engines: EngineRig, clock: FakeClock
) -> None:
    async with engines.open(max_concurrent_tasks=1) as engine:
        router = engine.router
        busy = await router.submit(inbound("cli-busy", "!sleep 5", person(1)))
        await clock.until_sleeping(1, seconds=1)
        waiting = await router.submit(inbound("cli-wait", "!sleep 1", person(2)))
        assert router.load() == (1, 1)  # queued for the slot, not running
        assert await router.cancel("cli-wait", waiting.task_hash, by="Bob")
        view = await router.wait(waiting.task_hash, 10)
        assert view.status == "canceled"
        await router.cancel("cli-busy", busy.task_hash, by="test")
        await router.wait(busy.task_hash, 10)
        assert [e.kind for e in router.task(waiting.task_hash).events] == ["user", "canceled"]


async def test_a_command_delivered_twice_runs_once(engine: Engine) -> None:
    """A platform that delivers a command again (after a crash, or to a second instance)
    gets no second run: /new makes one session, and says so once."""
    sink = RecordingSink()
    engine.router.register_sink("terminal", sink)
    ann = Origin("terminal", sender_id="ann", sender_name="Ann", window_hash="w1")
    again = Inbound(ann, "cli-c", "/new", source_key="terminal:77")
    first = await engine.router.submit(again)
    second = await engine.router.submit(again)
    assert first.command is not None and first.command.session_id.startswith("cli-")
    assert second.duplicate and second.command is None
    assert len(sink.notices) == 1
    made = [s.id for s in await engine.store.list_sessions() if s.id != "cli-c"]
    assert made == [first.command.session_id]
    # Without a delivery id (typed again over HTTP, say) it is a new command each time.
    assert (await engine.router.submit(Inbound(ann, "cli-c", "/new"))).command is not None
