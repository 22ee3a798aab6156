"""Message hops: the project modules a message's way crosses, from its adapter to the reply.

    .venv/bin/python bench/message_hops.py [--scenario telegram|discord|both] [--calls]
        [--json [FILE]]

Starts the gateway's runtime in this process with its Telegram adapter (and, for the second
scenario, its Discord adapter) against the fake servers, as bench/platform_path.py starts them
(offline agent, SQLite, default settings), and traces, with `sys.setprofile`, the Python calls
into the project's own modules (`gateway.*`, `adapters.*`; library and standard library frames
are looked through, never counted):

- telegram: a text in a private chat, from the first project call after the fake hands out the
  update (the poller taking it) until the fake accepts the `sendMessage` carrying the reply;
- discord: a press of Approve on a confirmation (`!confirm`) in a DM, from the first project
  call after the fake writes the INTERACTION_CREATE until it accepts the message carrying
  `approved: <action>`, the agent's answer once approved.

Each scenario first goes once through the same exchange untimed (imports, the session, the
connections, first-time set-up), then traces the second.

A call is a fresh call of a project function (a coroutine or generator resumed is no call; a
dataclass's generated `__init__` belongs to the dataclass's module). Its caller is the nearest
project frame up the stack; in a task whose stack holds none, whoever created the task (the
nearest project frame when it was created, or that task's own creator, and so on), so work
handed to another task (the run of a task, the courier, presence) stays on the way; a loop
callback (a future settled from a worker thread) has no project caller at all. A hop is a call
whose module differs from its caller's; the first call is where the way starts, not a hop.
"Back" counts hops into a module the way has already been in; an entry "passes on" when it
calls nothing else of its own module and makes exactly one hop on; a "leaf" calls no project
code at all (a clock read, an id check, a dataclass built). Calls in other threads (the
archive's writer and readers, `asyncio.to_thread`) are listed per thread, not counted as hops.
Loop calls before the adapter's first (other work that happened to run) are left out and
counted. A background task whose timer fires inside the window (presence keeping its mark
alive) can add a hop or two now and then.

The trace then keeps running until the gateway is quiet (no project call for a while): that
tail (delivery bookkeeping after the reply was made) is reported apart from the way itself.
`--calls` lists every hop with the functions on both sides; without it, the router's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import dis
import importlib
import json
import logging
import os
import sys
import tempfile
import textwrap
import threading
import time
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import Any, Final, TypeVar

T = TypeVar("T")

PROJECT: Final = ("gateway", "adapters")
ROUTER: Final = "gateway.engine.router"
RESUME: Final = dis.opmap["RESUME"]
REPLY_TIMEOUT: Final = 30.0
SETTLE_SECONDS: Final = 0.5  # after the warm-up: its own tail must not fall into the trace
QUIET_SECONDS: Final = 0.3  # no project call for this long: the tail is over
TAIL_CAP_SECONDS: Final = 3.0  # periodic jobs would keep it from ever being quiet
TELEGRAM_CHAT: Final = 710_000_001
DISCORD_USER: Final = 1_200_000_000_000_000_001
DISCORD_DM: Final = 1_300_000_000_000_000_001

BENCH = Path(__file__).resolve().parent


def load_platform_path() -> ModuleType:
    """bench/platform_path.py: its bots' set-up and, through it, the fakes under tests/.

    Imported by name at run time: `fakes` lives in tests/, on the path only once platform_path
    puts it there, where a type checker given this file alone would not find it.
    """
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("platform_path")


def project_module(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__")
    if isinstance(name, str) and name.partition(".")[0] in PROJECT:
        return name
    return None


def nearest_project(frame: FrameType | None) -> FrameType | None:
    while frame is not None and project_module(frame) is None:
        frame = frame.f_back
    return frame


# -- the trace ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Creator:
    """Where a task was created, in project terms."""

    module: str
    function: str


@dataclass
class Call:
    module: str
    function: str
    caller_module: str | None  # None: no project caller at all (a loop callback, say)
    caller_function: str | None
    via: str  # "stack", "task" (the creator of the running task), "outside", "origin"
    parent: int | None  # the call the caller frame was, if it was made within the trace
    task: str
    thread: str
    phase: str  # "way" or "tail"
    hop: bool
    library_calls: int = 0  # calls this frame made straight into libraries and builtins


@dataclass
class Mark:
    """A call the fake accepted, placed among the project's calls."""

    phase: str
    after_call: int
    label: str


@dataclass
class _Node:
    frame: FrameType  # held so its id is not reused by another frame while the trace runs
    index: int


class Tracer:
    """`sys.setprofile` over every thread, recording while armed."""

    def __init__(self) -> None:
        self.recording = False
        self.phase = "way"
        self.calls: list[Call] = []
        self.marks: list[Mark] = []
        self.last_call = 0.0
        self.entry = ""  # the way starts at the first call into a module named so
        self.started = False
        self.before: Counter[str] = Counter()  # loop calls before that: other work
        self.loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._nodes: dict[int, _Node] = {}
        self._starts: dict[CodeType, int] = {}
        self._creators: weakref.WeakKeyDictionary[asyncio.Task[Any], Creator | None] = (
            weakref.WeakKeyDictionary()
        )
        self._task_labels: weakref.WeakKeyDictionary[asyncio.Task[Any], str] = (
            weakref.WeakKeyDictionary()
        )
        self._thread_names: dict[int, str] = {}

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Before anything starts: threads started later inherit the profiler; tasks created
        later are known by their creator."""
        self.loop = loop
        self._loop_thread = threading.get_ident()
        threading.setprofile(self.profile)
        loop.set_task_factory(self.task_factory)

    def uninstall(self) -> None:
        self.recording = False
        sys.setprofile(None)
        threading.setprofile(None)
        if self.loop is not None:
            self.loop.set_task_factory(None)

    def arm(self, entry: str) -> None:
        self.calls, self.marks, self._nodes = [], [], {}
        self.entry, self.started, self.before = entry, False, Counter()
        self.phase = "way"
        self.last_call = time.perf_counter()
        self.recording = True
        # The loop's thread is profiled only while armed: start-up and warm-up run at full
        # speed; threads cannot be reached from here, so they carry the profiler throughout.
        sys.setprofile(self.profile)

    def reached(self) -> None:
        """The reply was made: what follows is the tail."""
        if self.recording:
            self.phase = "tail"

    def disarm(self) -> None:
        self.recording = False
        sys.setprofile(None)
        self._nodes = {}

    def mark(self, label: str) -> None:
        if self.recording:
            self.marks.append(Mark(self.phase, len(self.calls), label))

    async def quiet(self) -> None:
        """Wait until no project code has run for a while (or the cap is reached)."""
        began = time.perf_counter()
        while time.perf_counter() - began < TAIL_CAP_SECONDS:
            await asyncio.sleep(QUIET_SECONDS / 4)
            if time.perf_counter() - self.last_call > QUIET_SECONDS:
                return

    def task_factory(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, T] | Generator[Any, None, T],
        context: contextvars.Context | None = None,
    ) -> asyncio.Task[T]:
        task = asyncio.Task(coro, loop=loop, context=context)
        found = nearest_project(sys._getframe(1))
        creator: Creator | None = None
        if found is not None:
            creator = Creator(project_module(found) or "?", found.f_code.co_qualname)
        else:
            # Created by a library (discord.py dispatching an event, say) on behalf of
            # whatever started the task that is running now.
            parent = asyncio.current_task(loop)
            creator = self._creators.get(parent) if parent is not None else None
        self._creators[task] = creator
        return task

    def profile(self, frame: FrameType, event: str, _arg: object) -> None:
        if not self.recording:
            return
        if event == "c_call":
            self._library_call(frame)
        elif event == "call" and self._fresh(frame):
            module = project_module(frame)
            if module is None:
                self._library_call(frame.f_back)
            else:
                self._record(frame, module)

    def _fresh(self, frame: FrameType) -> bool:
        # A fresh frame stands at its first RESUME (oparg 0); a coroutine or generator
        # resumed stands at a later one.
        code = frame.f_code
        start = self._starts.get(code)
        if start is None:
            start = next((i.offset for i in dis.get_instructions(code) if i.opcode == RESUME), -1)
            self._starts[code] = start
        return frame.f_lasti == start

    def _library_call(self, caller: FrameType | None) -> None:
        if caller is None:
            return
        node = self._nodes.get(id(caller))
        if node is not None and node.frame is caller:
            self.calls[node.index].library_calls += 1

    def _record(self, frame: FrameType, module: str) -> None:
        ident = threading.get_ident()
        on_loop = ident == self._loop_thread
        first = on_loop and not self.started
        if first and not module.startswith(self.entry):
            self.before[f"{module}:{frame.f_code.co_qualname}"] += 1
            return
        task = asyncio.current_task(self.loop) if on_loop and self.loop is not None else None
        caller = nearest_project(frame.f_back)
        parent: int | None = None
        if caller is not None:
            caller_module, caller_function, via = (
                project_module(caller),
                caller.f_code.co_qualname,
                "stack",
            )
            node = self._nodes.get(id(caller))
            if node is not None and node.frame is caller:
                parent = node.index
        elif task is not None and (creator := self._creators.get(task)) is not None:
            caller_module, caller_function, via = creator.module, creator.function, "task"
        else:
            caller_module, caller_function, via = None, None, "outside"
        if first:
            self.started, via = True, "origin"
        self._nodes[id(frame)] = _Node(frame, len(self.calls))
        self.calls.append(
            Call(
                module=module,
                function=frame.f_code.co_qualname,
                caller_module=caller_module,
                caller_function=caller_function,
                via=via,
                parent=parent,
                task=self._task_label(task) if on_loop else "",
                thread="loop" if on_loop else self._thread_name(ident),
                phase=self.phase,
                hop=not first and on_loop and caller_module != module,
            )
        )
        self.last_call = time.perf_counter()

    def _task_label(self, task: asyncio.Task[Any] | None) -> str:
        if task is None:
            return "(loop callback)"
        label = self._task_labels.get(task)
        if label is None:
            coro = task.get_coro()
            what = getattr(coro, "__qualname__", type(coro).__name__)
            name = task.get_name()
            label = what if name.startswith("Task-") else f"{name} ({what})"
            self._task_labels[task] = label
        return label

    def _thread_name(self, ident: int) -> str:
        name = self._thread_names.get(ident)
        if name is None:
            name = self._thread_names[ident] = threading.current_thread().name
        return name


# -- the scenarios -----------------------------------------------------------------------------


class Watch:
    """The fake's calls as the fake accepts them (its `on_answered` hook, called before the
    answer goes back, so the client has not seen it yet)."""

    def __init__(self, tracer: Tracer, describe: Callable[[Any], str]) -> None:
        self.tracer = tracer
        self.describe = describe
        self._wanted: tuple[Callable[[Any], bool], asyncio.Future[Any]] | None = None

    def expect(self, matches: Callable[[Any], bool]) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._wanted = (matches, future)
        return future

    def on_call(self, record: Any) -> None:
        self.tracer.mark(self.describe(record))
        if self._wanted is None or not record.ok:
            return
        matches, future = self._wanted
        if matches(record) and not future.done():
            self.tracer.reached()
            future.set_result(record)


async def exchange(watch: Watch, send: Callable[[], None], done: Callable[[Any], bool]) -> Any:
    """`send`, then wait for the fake to accept a call that is `done`; traced if armed."""
    answered = watch.expect(done)
    send()
    try:
        return await asyncio.wait_for(answered, REPLY_TIMEOUT)
    except TimeoutError:
        raise RuntimeError("no answer from the gateway within the time allowed") from None


async def traced(tracer: Tracer, entry: str, run: Callable[[], Awaitable[Any]]) -> None:
    await asyncio.sleep(SETTLE_SECONDS)
    tracer.arm(entry)
    try:
        await run()
        await tracer.quiet()
    finally:
        tracer.disarm()


@dataclass
class Scenario:
    name: str
    title: str
    calls: list[Call] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    before: Counter[str] = field(default_factory=Counter)  # calls before the adapter's


async def telegram_text(tracer: Tracer, home: Path) -> Scenario:
    bench = load_platform_path()
    fake = bench.FakeTelegram()
    await fake.start()
    try:
        chat = fake.private_chat(TELEGRAM_CHAT)
        person = fake.user(TELEGRAM_CHAT, "ann")
        watch = Watch(tracer, lambda record: str(record.method))
        fake.on_answered = watch.on_call

        def reply(text: str) -> Callable[[Any], bool]:
            return lambda r: r.method == "sendMessage" and r.data.get("text") == f"echo: {text}"

        def say(text: str) -> Callable[[], None]:
            return lambda: fake.inject_message(chat, person, text)

        spec = {"home": str(home), "token": fake.token, "url": fake.url}
        async with bench.telegram_ours(spec, limited=True):
            await exchange(watch, say("warming up"), reply("warming up"))
            await traced(
                tracer, "adapters.telegram.", lambda: exchange(watch, say("hello"), reply("hello"))
            )
    finally:
        await fake.stop()
    return Scenario(
        "telegram",
        "Telegram: a text in a private chat -> the sendMessage of its reply",
        tracer.calls,
        tracer.marks,
        tracer.before,
    )


async def discord_press(tracer: Tracer, home: Path) -> Scenario:
    bench = load_platform_path()
    fake = bench.FakeDiscord()
    await fake.start()
    try:
        person = bench.discord_user(DISCORD_USER, "ann")
        channel = fake.dm_channel(DISCORD_DM, person)["id"]
        watch = Watch(tracer, lambda record: str(record.route))
        fake.on_answered = watch.on_call

        def posted(record: Any) -> bool:
            return bool(
                record.route == "POST /channels/{id}/messages"
                and record.path.endswith(f"/channels/{channel}/messages")
            )

        def prompt(record: Any) -> bool:
            return posted(record) and bool(record.data.get("components"))

        def answer(action: str) -> Callable[[Any], bool]:
            return lambda r: posted(r) and f"approved: {action}" in str(r.data.get("content"))

        def press() -> None:
            message = fake.sent_messages(channel)[-1]
            ids = [c["custom_id"] for row in message["components"] for c in row["components"]]
            fake.inject_component(person, message, next(i for i in ids if i.endswith(":y")))

        def ask(action: str) -> Callable[[], None]:
            return lambda: fake.inject_message(channel, person, f"!confirm {action}", guild_id=None)

        spec = {
            "home": str(home),
            "token": fake.token,
            "url": fake.api_base,
            "gateway": fake.gateway_url,
        }
        async with bench.discord_ours(spec):
            await exchange(watch, ask("warm-up"), prompt)
            await exchange(watch, press, answer("warm-up"))
            await exchange(watch, ask("deploy"), prompt)
            await traced(
                tracer, "adapters.discord.", lambda: exchange(watch, press, answer("deploy"))
            )
    finally:
        await fake.stop()
    return Scenario(
        "discord",
        "Discord: Approve pressed on a confirmation -> the message with the approved answer",
        tracer.calls,
        tracer.marks,
        tracer.before,
    )


SCENARIOS: Final = {"telegram": telegram_text, "discord": discord_press}


async def run(names: Iterable[str]) -> list[Scenario]:
    from gateway.logs import configure_logging

    configure_logging("WARNING")
    # discord.py warns at every start that voice is unavailable; nothing here uses voice.
    logging.getLogger("discord.client").setLevel(logging.ERROR)
    tracer = Tracer()
    tracer.install(asyncio.get_running_loop())
    found: list[Scenario] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in names:
                found.append(await SCENARIOS[name](tracer, Path(tmp) / name))
    finally:
        tracer.uninstall()
    return found


# -- the numbers -------------------------------------------------------------------------------


def compressed(modules: list[str]) -> list[str]:
    """Runs of one module as `module xN`."""
    runs: list[tuple[str, int]] = []
    for module in modules:
        if runs and runs[-1][0] == module:
            runs[-1] = (module, runs[-1][1] + 1)
        else:
            runs.append((module, 1))
    return [m if n == 1 else f"{m} x{n}" for m, n in runs]


@dataclass
class Entry:
    """What one entry into a module did there before leaving it."""

    own_calls: int  # calls within the module, made by the entry or those it called there
    hops_on: list[int]  # hops made from there, by index
    library_calls: int


def entry(calls: list[Call], index: int) -> Entry:
    module = calls[index].module
    inside = {index}
    found = Entry(0, [], calls[index].library_calls)
    for i in range(index + 1, len(calls)):
        call = calls[i]
        if call.parent not in inside:
            continue
        if call.hop:
            found.hops_on.append(i)
        elif call.module == module:
            inside.add(i)
            found.own_calls += 1
            found.library_calls += call.library_calls
    return found


def summary(scenario: Scenario) -> dict[str, Any]:
    calls = scenario.calls
    way = [i for i, c in enumerate(calls) if c.thread == "loop" and c.phase == "way"]
    tail = [c for c in calls if c.thread == "loop" and c.phase == "tail"]
    if not way:
        raise RuntimeError(f"{scenario.name}: no project call was traced")
    origin = calls[way[0]]
    path = [origin.module]
    visited = {origin.module}
    hops: list[dict[str, Any]] = []
    per_module: dict[str, Counter[str]] = {}
    for index in way:
        call = calls[index]
        stats = per_module.setdefault(call.module, Counter())
        stats["calls"] += 1
        if not call.hop:
            continue
        went = entry(calls, index)
        passes_on = went.own_calls == 0 and len(went.hops_on) == 1
        again = call.module in visited
        visited.add(call.module)
        path.append(call.module)
        stats["entries"] += 1
        stats["back"] += again
        stats["passes_on"] += passes_on
        hops.append(
            {
                "from": f"{call.caller_module or '(outside)'}:{call.caller_function or ''}",
                "to": f"{call.module}:{call.function}",
                "via": call.via,
                "task": call.task,
                "back": again,
                "own_calls": went.own_calls,
                "hops_on": [calls[i].module for i in went.hops_on],
                "library_calls": went.library_calls,
                "passes_on": passes_on,
            }
        )
    fake_calls = [
        {
            "call": m.label,
            "phase": m.phase,
            "after_hops": sum(calls[i].hop for i in way if i < m.after_call),
        }
        for m in scenario.marks
    ]
    threads: dict[str, Counter[str]] = {}
    for call in calls:
        if call.thread != "loop":
            threads.setdefault(call.thread, Counter())[call.module] += 1
    leaves = [h for h in hops if not h["own_calls"] and not h["hops_on"]]
    return {
        "title": scenario.title,
        "origin": f"{origin.module}:{origin.function}",
        "modules": len(visited),
        "hops": len(hops),
        "back": sum(h["back"] for h in hops),
        "router_entries": sum(h["to"].startswith(f"{ROUTER}:") for h in hops),
        "from_outside": sum(h["via"] == "outside" for h in hops),
        "passes_on": sum(h["passes_on"] for h in hops),
        "leaves": len(leaves),
        "project_calls": len(way),
        "unrelated_before": scenario.before.total(),
        "unrelated_before_calls": dict(scenario.before),
        "path": path,
        "path_compressed": compressed(path),
        # The way without its leaves (helpers that call nothing else of the project).
        "skeleton": compressed(
            [origin.module]
            + [h["to"].partition(":")[0] for h in hops if h["own_calls"] or h["hops_on"]]
        ),
        "hop_list": hops,
        "per_module": {m: dict(s) for m, s in per_module.items()},
        "hops_by_task": dict(Counter(h["task"] for h in hops)),
        "fake_calls": fake_calls,
        "thread_calls": {t: dict(m.most_common()) for t, m in threads.items()},
        "tail": {
            "project_calls": len(tail),
            "hops": sum(c.hop for c in tail),
            "path": compressed([c.module for c in tail if c.hop]),
        },
    }


HEADLINE: Final = (
    ("modules", "project modules crossed"),
    ("hops", "hops (calls into another module)"),
    ("back", "  of them back into a module already visited"),
    ("router_entries", f"  of them into {ROUTER}"),
    ("passes_on", "  of them entries that only pass the call on"),
    ("leaves", "  of them into leaves (calling no project code)"),
    ("from_outside", "  of them with no project caller at all"),
    ("project_calls", "project calls (within modules too)"),
    ("unrelated_before", "calls before the adapter took it (other work)"),
)


def show(results: dict[str, dict[str, Any]], every_hop: bool) -> None:
    import gateway

    print(f"code: {gateway.__file__}")
    names = list(results)
    print(f"{'':<48}" + "".join(f"{n:>12}" for n in names))
    for key, label in HEADLINE:
        print(f"{label:<48}" + "".join(f"{results[n][key]:>12}" for n in names))
    print(
        f"{'after the reply, until quiet: calls / hops':<48}"
        + "".join(
            f"{results[n]['tail']['project_calls']:>6} / {results[n]['tail']['hops']:<3}"
            for n in names
        )
    )
    for found in results.values():
        print(f"\n{found['title']}\n  starts at {found['origin']}")
        way = " -> ".join(found["path_compressed"])
        print(textwrap.fill(way, 100, initial_indent="  way: ", subsequent_indent="       "))
        bones = " -> ".join(found["skeleton"])
        print(
            textwrap.fill(bones, 100, initial_indent="  without leaves: ", subsequent_indent="    ")
        )
        fakes = ", ".join(f"{f['call']} (after hop {f['after_hops']})" for f in found["fake_calls"])
        print(textwrap.fill(fakes, 100, initial_indent="  fake: ", subsequent_indent="        "))
        print(f"  {'module':<40}{'entries':>8}{'back':>6}{'pass on':>9}{'calls':>7}")
        for module, stats in found["per_module"].items():
            print(
                f"  {module:<40}{stats.get('entries', 0):>8}{stats.get('back', 0):>6}"
                f"{stats.get('passes_on', 0):>9}{stats.get('calls', 0):>7}"
            )
        print(f"  hops by task: {found['hops_by_task']}")
        print("  calls in other threads (not hops):" + ("" if found["thread_calls"] else " none"))
        for thread, modules in found["thread_calls"].items():
            listed = ", ".join(f"{m} {n}" for m, n in modules.items())
            print(
                textwrap.fill(
                    listed, 100, initial_indent=f"    {thread}: ", subsequent_indent="      "
                )
            )
        if found["tail"]["path"]:
            tail = " -> ".join(found["tail"]["path"])
            print(textwrap.fill(tail, 100, initial_indent="  tail: ", subsequent_indent="        "))
        for number, hop in enumerate(found["hop_list"], 1):
            if every_hop or hop["to"].startswith(f"{ROUTER}:"):
                note = " passes on" if hop["passes_on"] else ""
                print(
                    f"  {number:>3} {hop['from']} -> {hop['to']} [{hop['via']}, {hop['task']}]"
                    f"  own {hop['own_calls']}, on {hop['hops_on']}, lib {hop['library_calls']}"
                    f"{note}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=("telegram", "discord", "both"), default="both")
    parser.add_argument(
        "--calls", action="store_true", help="list every hop, not only the router's"
    )
    parser.add_argument(
        "--json", nargs="?", const="-", help="the numbers as JSON, to FILE or (no FILE) stdout"
    )
    args = parser.parse_args()
    # Clients that honour proxy variables must reach the fakes on loopback directly.
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
    os.environ.setdefault("PTB_TIMEDELTA", "1")
    names = ["telegram", "discord"] if args.scenario == "both" else [args.scenario]
    scenarios = asyncio.run(run(names))
    results = {s.name: summary(s) for s in scenarios}
    if args.json != "-":
        show(results, args.calls)
    if args.json:
        import gateway

        document = json.dumps({"code": gateway.__file__, **results}, indent=2)
        if args.json == "-":
            print(document)
        else:
            Path(args.json).write_text(document + "\n")


if __name__ == "__main__":
    main()
