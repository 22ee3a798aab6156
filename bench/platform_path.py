"""Platform path: a fake Telegram / Discord message to the reply the fake accepted, vs a floor.

From the fake Telegram (and the fake Discord) server through the gateway and back, against a
floor measured in the same run.

    .venv/bin/python bench/platform_path.py [--messages N] [--chats M] [--turn T]
        [--platform telegram|discord|both] [--quick] [--json FILE]

M chats (20 by default: Telegram private chats, Discord DMs, so every message is for the bot
and becomes a task) each send their share of N messages (per platform and bot) one after
another, the next once the fake accepted the reply to the previous one, all chats at once.
A message's latency runs from the moment the fake has queued it (the update for the next
getUpdates; the MESSAGE_CREATE frame for the websocket's writer) to the moment the fake
accepts the bot's sendMessage / create-message request carrying `echo: <text>` (the fake's
`on_answered` hook, before the answer goes back). Goal: ours at p99 at most 2x the floor's.

Each bot runs in a process of its own; this one runs the fakes (one per bot) and the chats,
and takes every timestamp, with its own garbage collector held during timed turns (one of its
pauses would land in whichever bot's turn it fell). A platform's bots are up at the same time
and take turns: each chat sends T messages to one bot, then to the next, the order rotating
every round, so a noisy neighbour hits them all alike. Each bot first answers two untimed
messages per chat (sessions created, connections opened).

- ours: the gateway's runtime (offline agent, SQLite, default settings, logging at WARNING
  as in the other benchmarks) with its Telegram adapter (long polling) or its Discord
  adapter, started as `agenvoy run` starts them, the collector's settings once serving
  included (the HTTP front-end and the periodic jobs, idle here, left out).
- ours, no rate limit (Telegram): the same with the adapter's `AIORateLimiter` given no
  limits. As built, it holds the bot to Telegram's 30 messages/s, below what 20 chats
  answered back to back ask for; this row shows the gateway's cost without that queue.
- floor: a minimal python-telegram-bot `Application` (with its Updater) whose MessageHandler
  answers `reply_text("echo: <text>")`, quoting the message as ours does, updates handled
  concurrently (one at a time, every reply would wait for the other chats' round trips); or
  a minimal `discord.Client` whose `on_message` answers `message.reply("echo: <text>")`.

- durable floor (2 commits): the same floor, which before each reply stores what it answers
  as `http_load.py`'s floor does (`bench/floor_server.py`: the message, then the usage and
  the reply, two commits on one long-lived SQLite connection with the gateway's schema and
  pragmas, and two history lines), on a thread of its own. The goal is judged against the
  bare floor; the gateway's p99 against this one is printed beside it, as the gateway must
  store a message before it is acknowledged and a reply before it is sent.

The same on both sides: the fake, the chats and the message pattern, the library and its
HTTP client's defaults, the long-poll timeout and `allowed_updates` (imported from the
adapter), the Discord intents (default plus message content). The offline agent's own time
is next to nothing, so ours minus floor is the gateway's overhead.

With every chat waiting for its reply the bots are saturated: a message waits behind the
others, so latency is about M times the time a bot spends per message. The CPU column (the
bot process's user + system time per message, all threads) is that cost, and the number a
busy machine disturbs least; the last line gives the machine's load. calls/msg counts every
request the bot made to the fake (long polls, typing, replies) per message; posts other than
the echoes (such as a "queued" notice) are listed under the table.

`--pace S` offers the load at a set rate instead: each chat sends one message every S seconds
(the chats staggered across them), or at once when its last reply took longer. At a rate both
bots keep up with (20 chats, `--pace 0.5`: 40 messages/s), a message no longer waits behind
the others, and the latency is what a bot adds to one message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dtm
import functools
import json
import logging
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fakes.base import CallRecord
from fakes.discord import FakeDiscord, RestCall
from fakes.discord import user as discord_user
from fakes.telegram import BotApiCall, FakeTelegram
from http_load import collector_held, cpu_seconds, print_shares, thread_cpu, thread_shares

# Issue 36's goal 2: the gateway's p99 at most twice a minimal echo bot's on the same fake. The
# offline agent's own time is next to nothing, so a bot's latency is its overhead.
GOAL_P99_RATIO = 2.0
ECHO = "echo: "
# A floor that stores what it answers, as the gateway must: the same two commits and history
# lines as http_load.py's floor, before each reply. Reported beside the goal's bare floor.
DURABLE = "floor_durable"
DURABLE_LABEL = "durable floor (2 commits)"
A_FLOOR = "a floor"
WARM_UP = 2  # untimed messages per chat and bot
REPLY_TIMEOUT = 60.0  # far beyond any reply; a reply that never comes fails the run
START_TIMEOUT = 60.0
TELEGRAM_CHATS = 710_000_000
DISCORD_CHANNELS = 1_300_000_000_000_000_000
DISCORD_USERS = 1_200_000_000_000_000_000

# -- the bots, each in a process of its own ----------------------------------------------------


@contextlib.asynccontextmanager
async def gateway_with(settings: Any, make_adapter: Any) -> AsyncIterator[None]:
    """The gateway's runtime with one platform adapter, for the length of a `with` block,
    the collector set as `agenvoy run` sets it once serving (gateway/heap.py)."""
    from gateway import heap
    from gateway.runtime import Runtime

    runtime = await Runtime.start(settings)
    try:
        adapter = make_adapter(runtime)
        await adapter.start()
        heap.settle()
        try:
            yield
        finally:
            await adapter.stop()
    finally:
        await runtime.close()


@contextlib.asynccontextmanager
async def telegram_ours(spec: dict[str, str], *, limited: bool) -> AsyncIterator[None]:
    import adapters.telegram.adapter as telegram_adapter
    from adapters.telegram.sender import CountingRateLimiter
    from gateway.settings import Settings

    if not limited:
        # The limiter stays in the path (its retries too); only its limits go.
        telegram_adapter.CountingRateLimiter = functools.partial(  # type: ignore[attr-defined,assignment]
            CountingRateLimiter, overall_max_rate=0, group_max_rate=0
        )
    settings = Settings(
        home=Path(spec["home"]),
        telegram_token=spec["token"],
        telegram_api_url=spec["url"],
        _env_file=None,
    )
    async with gateway_with(settings, telegram_adapter.TelegramAdapter.build):
        yield


@contextlib.asynccontextmanager
async def durable_writes(spec: dict[str, str], durable: bool) -> AsyncIterator[Any]:
    """For a durable floor, what `http_load.py`'s floor does before it answers (two commits on
    one long-lived SQLite connection with the gateway's schema, two history lines), as a call
    `(session id, text)` awaited before the reply; for a bare floor, None."""
    if not durable:
        yield None
        return
    from floor_server import Floor

    from gateway.store.db import Database

    home = Path(spec["home"])
    db_path = home / "floor.db"
    await (await Database.open(f"sqlite:///{db_path}")).close()  # the gateway's schema
    await asyncio.to_thread((home / "history").mkdir, exist_ok=True)
    floor = Floor(db_path, home / "history")

    async def write(session_id: str, text: str) -> None:
        await asyncio.get_running_loop().run_in_executor(
            floor.worker, floor.write, session_id, text
        )

    try:
        yield write
    finally:
        floor.worker.shutdown()
        floor.conn.close()


@contextlib.asynccontextmanager
async def telegram_floor(spec: dict[str, str], *, durable: bool = False) -> AsyncIterator[None]:
    from telegram import Update
    from telegram.ext import ContextTypes

    from adapters.telegram.adapter import UPDATES
    from adapters.telegram.polling import POLL_TIMEOUT

    async with durable_writes(spec, durable) as write:

        async def echo(update: Update, _context: ContextTypes.DEFAULT_TYPE) -> None:
            message = update.effective_message
            assert message is not None
            if write is not None:
                await write(f"tg-{message.chat_id}", message.text or "")
            # Quoting the trigger, as the gateway does, so the fake does the same work for both.
            await message.reply_text(f"{ECHO}{message.text}", do_quote=True)

        async with telegram_floor_app(spec, echo, UPDATES, POLL_TIMEOUT):
            yield


@contextlib.asynccontextmanager
async def telegram_floor_app(
    spec: dict[str, str], echo: Any, updates: Any, poll_timeout: float
) -> AsyncIterator[None]:
    from telegram.ext import ApplicationBuilder, MessageHandler, filters

    app = (
        ApplicationBuilder()
        .token(spec["token"])
        .base_url(f"{spec['url']}/bot")
        .base_file_url(f"{spec['url']}/file/bot")
        .concurrent_updates(True)
        .build()
    )
    app.add_handler(MessageHandler(filters.TEXT, echo))
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(
            timeout=dtm.timedelta(seconds=poll_timeout), allowed_updates=list(updates)
        )
        try:
            yield
        finally:
            await app.updater.stop()
            await app.stop()


@contextlib.asynccontextmanager
async def discord_ours(spec: dict[str, str]) -> AsyncIterator[None]:
    from adapters.discord.adapter import DiscordAdapter
    from gateway.settings import Settings

    settings = Settings(
        home=Path(spec["home"]),
        discord_token=spec["token"],
        discord_api_url=spec["url"],
        discord_gateway_url=spec["gateway"],
        discord_allow_dms=True,
        _env_file=None,
    )
    async with gateway_with(settings, DiscordAdapter):
        yield


@contextlib.asynccontextmanager
async def discord_floor(spec: dict[str, str], *, durable: bool = False) -> AsyncIterator[None]:
    async with durable_writes(spec, durable) as write, discord_floor_client(spec, write):
        yield


@contextlib.asynccontextmanager
async def discord_floor_client(spec: dict[str, str], write: Any) -> AsyncIterator[None]:
    import discord
    import yarl

    discord.http.Route.BASE = spec["url"]
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(spec["gateway"])
    intents = discord.Intents.default()
    intents.message_content = True
    client = discord.Client(intents=intents)
    ready = asyncio.Event()

    @client.event
    async def on_ready() -> None:
        ready.set()

    @client.event
    async def on_message(message: discord.Message) -> None:
        if not message.author.bot:
            if write is not None:
                await write(f"dc-{message.channel.id}", message.content)
            await message.reply(f"{ECHO}{message.content}")

    runner = asyncio.create_task(client.start(spec["token"]))
    waiter = asyncio.create_task(ready.wait())
    try:
        await asyncio.wait(
            {runner, waiter}, timeout=START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED
        )
        if not ready.is_set():
            raise RuntimeError("the Discord client did not get ready")
        yield
    finally:
        waiter.cancel()
        await client.close()
        with contextlib.suppress(Exception):
            await runner


BOTS: dict[str, Callable[[dict[str, str]], contextlib.AbstractAsyncContextManager[None]]] = {
    "telegram-ours": functools.partial(telegram_ours, limited=True),
    "telegram-ours-unlimited": functools.partial(telegram_ours, limited=False),
    "telegram-floor": telegram_floor,
    "telegram-floor-durable": functools.partial(telegram_floor, durable=True),
    "discord-ours": discord_ours,
    "discord-floor": discord_floor,
    "discord-floor-durable": functools.partial(discord_floor, durable=True),
}


async def serve(spec: dict[str, str]) -> None:
    """The child side: run one bot until SIGTERM; say `ready` on stdout once it is up."""
    from gateway.logs import configure_logging

    configure_logging("WARNING")
    # discord.py warns at every start that voice is unavailable; no bot here uses voice.
    logging.getLogger("discord.client").setLevel(logging.ERROR)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with BOTS[spec["kind"]](spec):
        print("ready", flush=True)
        await stop.wait()


# -- the chats, next to the fakes, in this process ---------------------------------------------


@dataclass
class Bot:
    """One bot under measurement, its own fake, and the reply each chat waits for."""

    name: str  # its key in the results
    label: str
    kind: str  # which bot the child process runs (BOTS)
    fake: FakeTelegram | FakeDiscord
    send: Callable[[int, str], None]  # chat index, text: the fake queues the message
    reply_of: Callable[[Any], tuple[str, str] | None]  # a call -> (chat key, text)
    keys: list[str]  # chat index -> chat key
    proc: asyncio.subprocess.Process | None = None
    waiting: dict[str, tuple[str, asyncio.Future[float]]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)
    busy_seconds: float = 0.0
    cpu_seconds: float | None = 0.0  # the bot process's; None where /proc cannot say
    fake_cpu_seconds: float = 0.0  # this process's: the fake and the chats
    threads: dict[str, float] = field(default_factory=dict)  # the bot's CPU seconds by thread
    calls: int = 0  # calls the bot made to the fake while timed
    other_posts: Counter[str] = field(default_factory=Counter)  # posts besides the echoes
    timing: bool = False
    sent: int = 0
    # Why its p99 is not held to the goal (a limit the platform sets), or "" when it is.
    not_judged: str = ""

    def on_answered(self, record: CallRecord) -> None:
        # Runs inside the fake's handler, so the clock is read as the call is accepted.
        if self.timing:
            self.calls += 1
        found = self.reply_of(record) if record.ok else None
        if found is None:
            return
        key, text = found
        waiting = self.waiting.get(key)
        if waiting is not None and waiting[0] == text and not waiting[1].done():
            waiting[1].set_result(time.perf_counter())
        elif self.timing:
            self.other_posts[text] += 1


def telegram_bot(name: str, label: str, kind: str, chats: int, *, not_judged: str = "") -> Bot:
    fake = FakeTelegram()
    places = [
        (fake.private_chat(TELEGRAM_CHATS + i), fake.user(TELEGRAM_CHATS + i, f"user{i}"))
        for i in range(chats)
    ]

    def send(index: int, text: str) -> None:
        fake.inject_message(*places[index], text)

    def reply_of(record: BotApiCall) -> tuple[str, str] | None:
        if record.method != "sendMessage":
            return None
        return str(record.data.get("chat_id")), str(record.data.get("text", ""))

    keys = [str(chat["id"]) for chat, _ in places]
    return Bot(name, label, kind, fake, send, reply_of, keys, not_judged=not_judged)


def discord_bot(name: str, label: str, kind: str, chats: int, *, not_judged: str = "") -> Bot:
    fake = FakeDiscord()
    people = [discord_user(DISCORD_USERS + i, f"user{i}") for i in range(chats)]
    channels = [fake.dm_channel(DISCORD_CHANNELS + i, people[i])["id"] for i in range(chats)]

    def send(index: int, text: str) -> None:
        fake.inject_message(channels[index], people[index], text, guild_id=None)

    def reply_of(record: RestCall) -> tuple[str, str] | None:
        if record.route != "POST /channels/{id}/messages":
            return None
        return record.path.split("/")[2], str(record.data.get("content", ""))

    return Bot(name, label, kind, fake, send, reply_of, channels, not_judged=not_judged)


async def start_bot(bot: Bot, home: Path) -> None:
    fake = bot.fake
    spec = {"kind": bot.kind, "token": fake.token, "home": str(home)}
    if isinstance(fake, FakeTelegram):
        spec["url"] = fake.url
    else:
        spec |= {"url": fake.api_base, "gateway": fake.gateway_url}
    fake.on_answered = bot.on_answered
    bot.proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve", json.dumps(spec), stdout=asyncio.subprocess.PIPE
    )
    assert bot.proc.stdout is not None
    try:
        async with asyncio.timeout(START_TIMEOUT):
            line = await bot.proc.stdout.readline()
    except TimeoutError:
        line = b""
    if line.strip() != b"ready":
        raise RuntimeError(f"{bot.label} did not start (exit status {bot.proc.returncode})")


async def stop_bot(bot: Bot) -> None:
    proc = bot.proc
    if proc is None or proc.returncode is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), 20)
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def exchange(bot: Bot, per_chat: int, *, timed: bool, pace: float = 0.0) -> None:
    """Every chat sends `per_chat` messages, each once the previous one was answered, and
    with `pace` not before `pace` seconds after the previous one was sent (the chats
    staggered across that interval)."""
    loop = asyncio.get_running_loop()
    first = bot.sent
    chats = len(bot.keys)

    async def chat(index: int, key: str) -> None:
        next_at = time.perf_counter() + pace * index / chats
        for k in range(per_chat):
            if pace:
                # Load offered at a set rate: a message waits for its slot, not for the bot.
                await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
                next_at += pace
            text = f"bench {index} {first + k}"
            answered: asyncio.Future[float] = loop.create_future()
            bot.waiting[key] = (ECHO + text, answered)
            bot.send(index, text)
            queued = time.perf_counter()
            try:
                accepted = await asyncio.wait_for(answered, REPLY_TIMEOUT)
            except TimeoutError:
                raise RuntimeError(
                    f"{bot.label}: no reply to {text!r} within {REPLY_TIMEOUT}s"
                ) from None
            if timed:
                bot.latencies.append(accepted - queued)

    assert bot.proc is not None
    bot.timing = timed
    cpu_before, threads_before = cpu_seconds(bot.proc.pid), thread_cpu(bot.proc.pid)
    fake_before = time.process_time()
    began = time.perf_counter()
    with collector_held() if timed else contextlib.nullcontext():
        await asyncio.gather(*(chat(i, key) for i, key in enumerate(bot.keys)))
    bot.timing = False
    if timed:
        bot.busy_seconds += time.perf_counter() - began
        bot.fake_cpu_seconds += time.process_time() - fake_before
        cpu_after = cpu_seconds(bot.proc.pid)
        for thread, used in thread_cpu(bot.proc.pid).items():
            spent = used - threads_before.get(thread, 0.0)
            bot.threads[thread] = bot.threads.get(thread, 0.0) + spent
        if cpu_before is None or cpu_after is None or bot.cpu_seconds is None:
            bot.cpu_seconds = None
        else:
            bot.cpu_seconds += cpu_after - cpu_before
    bot.sent += per_chat


async def measure(
    platform: str, bots: list[Bot], home: Path, per_chat: int, turn: int, pace: float = 0.0
) -> None:
    """Start the bots, warm each up, then give them turns of `turn` messages per chat."""
    for bot in bots:
        await bot.fake.start()
    try:
        await asyncio.gather(*(start_bot(bot, home / bot.name) for bot in bots))
        for bot in bots:
            await exchange(bot, WARM_UP, timed=False)
        done = rounds = 0
        while done < per_chat:
            size = min(turn, per_chat - done)
            for k in range(len(bots)):
                await exchange(bots[(rounds + k) % len(bots)], size, timed=True, pace=pace)
            done += size
            rounds += 1
            print(f"{platform}: {done}/{per_chat} messages per chat", file=sys.stderr)
    finally:
        await asyncio.gather(*(stop_bot(bot) for bot in bots))
        for bot in bots:
            await bot.fake.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(bot: Bot) -> dict[str, Any]:
    count = len(bot.latencies)
    return {
        "messages": count,
        "seconds": bot.busy_seconds,
        "per_second": count / bot.busy_seconds,
        "p50_ms": statistics.median(bot.latencies) * 1000,
        "p99_ms": percentile(bot.latencies, 0.99) * 1000,
        "mean_ms": statistics.fmean(bot.latencies) * 1000,
        "cpu_ms_per_message": None if bot.cpu_seconds is None else bot.cpu_seconds / count * 1000,
        "fake_cpu_ms_per_message": bot.fake_cpu_seconds / count * 1000,
        **thread_shares(bot.threads, count),
        "calls_per_message": bot.calls / count,
        "other_posts": dict(bot.other_posts.most_common(5)),
        "other_posts_total": sum(bot.other_posts.values()),
    }


def report(title: str, bots: list[Bot]) -> dict[str, Any]:
    rows = {bot.name: summary(bot) for bot in bots}
    floor = rows["floor"]
    print(title)
    print(f"   {'':<34}{'msg/s':>8}{'p50 ms':>10}{'p99 ms':>10}{'CPU ms/msg':>12}{'calls/msg':>11}")
    for bot in bots:
        r = rows[bot.name]
        cpu = "-" if r["cpu_ms_per_message"] is None else f"{r['cpu_ms_per_message']:.2f}"
        print(
            f"   {bot.label:<34}{r['per_second']:>8.0f}{r['p50_ms']:>10.2f}{r['p99_ms']:>10.2f}"
            f"{cpu:>12}{r['calls_per_message']:>11.2f}"
        )
    overhead: dict[str, Any] = {}
    for bot in bots[1:]:
        r = rows[bot.name]
        cpu_ratio = (
            None
            if r["cpu_ms_per_message"] is None or not floor["cpu_ms_per_message"]
            else r["cpu_ms_per_message"] / floor["cpu_ms_per_message"]
        )
        over = {
            "p50_ms": r["p50_ms"] - floor["p50_ms"],
            "p99_ms": r["p99_ms"] - floor["p99_ms"],
            "p99_ratio": r["p99_ms"] / floor["p99_ms"],
            "throughput_ratio": r["per_second"] / floor["per_second"],
            "cpu_ratio": cpu_ratio,
        }
        over["goal_met"] = None if bot.not_judged else over["p99_ratio"] <= GOAL_P99_RATIO
        overhead[bot.name] = over
        cpu = "-" if cpu_ratio is None else f"{cpu_ratio:.1f}x"
        verdict = (
            f"not judged: {bot.not_judged}"
            if bot.not_judged
            else f"goal <= {GOAL_P99_RATIO:g}x: {'met' if over['goal_met'] else 'missed'}"
        )
        print(
            f"   {bot.label.split(' (')[0] + ' - floor':<34}{over['throughput_ratio']:>7.2f}x"
            f"{over['p50_ms']:>+10.2f}{over['p99_ms']:>+10.2f}{cpu:>12}"
            f"   p99 {over['p99_ratio']:.2f}x the floor's ({verdict})"
        )
    durable = rows.get(DURABLE)
    for bot in bots[1:]:
        if durable is None or bot.name == DURABLE:
            continue
        ratio = rows[bot.name]["p99_ms"] / durable["p99_ms"]
        overhead[bot.name]["p99_ratio_durable_floor"] = ratio
        print(f"   {bot.label.split(' (')[0]}: p99 {ratio:.2f}x the durable floor's")
    for bot in bots:
        print_shares(bot.label.split(" (")[0], rows[bot.name])
    for bot in bots:
        r = rows[bot.name]
        if r["other_posts_total"]:
            example = next(iter(r["other_posts"]))
            print(
                f"   {bot.label.split(' (')[0]} also posted {r['other_posts_total']} other "
                f"messages, such as {example!r}"
            )
    return {**rows, "overhead": overhead}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    chats = args.chats
    per_chat = max(1, args.messages // chats)
    pattern = (
        f"{{}} at once: {chats}, {per_chat} messages each per bot, {args.turn} at a turn "
        f"({per_chat * chats} per bot)"
        + (f", one every {args.pace:g} s per chat" if args.pace else "")
    )
    results: dict[str, Any] = {}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.platform in ("telegram", "both"):
            bots = [
                telegram_bot("floor", "floor (PTB Application)", "telegram-floor", chats),
                telegram_bot(
                    "ours",
                    "ours (gateway, offline agent)",
                    "telegram-ours",
                    chats,
                    not_judged="held to Telegram's 30 messages/s",
                ),
                telegram_bot(
                    "ours_no_limit", "ours, no rate limit", "telegram-ours-unlimited", chats
                ),
                telegram_bot(
                    DURABLE, DURABLE_LABEL, "telegram-floor-durable", chats, not_judged=A_FLOOR
                ),
            ]
            await measure("telegram", bots, root / "telegram", per_chat, args.turn, args.pace)
            results["telegram"] = report(pattern.format("Telegram private chats"), bots)
        if args.platform in ("discord", "both"):
            bots = [
                discord_bot("floor", "floor (discord.Client)", "discord-floor", chats),
                discord_bot("ours", "ours (gateway, offline agent)", "discord-ours", chats),
                discord_bot(
                    DURABLE, DURABLE_LABEL, "discord-floor-durable", chats, not_judged=A_FLOOR
                ),
            ]
            await measure("discord", bots, root / "discord", per_chat, args.turn, args.pace)
            results["discord"] = report(pattern.format("Discord DM channels"), bots)
    load_after = os.getloadavg()[0]
    print(
        f"machine load (1-minute average): {load_before:.1f} before, {load_after:.1f} after, "
        f"on {os.cpu_count()} CPUs"
    )
    results["meta"] = {
        "load_before": load_before,
        "load_after": load_after,
        "chats": chats,
        "messages_per_chat": per_chat,
        "turn_per_chat": args.turn,
        "pace_seconds": args.pace,
        "warm_up_per_chat": WARM_UP,
        "goal_p99_ratio": GOAL_P99_RATIO,
        "quick": args.quick,
        "cpus": os.cpu_count(),
    }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000, help="per platform and bot")
    parser.add_argument("--chats", type=int, default=20)
    parser.add_argument("--turn", type=int, default=10, help="messages per chat in one turn")
    parser.add_argument("--platform", choices=("telegram", "discord", "both"), default="both")
    parser.add_argument(
        "--pace",
        type=float,
        default=0.0,
        help="seconds between one chat's messages (0: each as soon as the last is answered)",
    )
    parser.add_argument("--quick", action="store_true", help="a small run, for a smoke check")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the child side: a bot's spec
    args = parser.parse_args()
    # Clients that honour proxy variables must reach the fakes on loopback directly.
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    os.environ.setdefault("no_proxy", "127.0.0.1,localhost")
    # python-telegram-bot 22 warns once per process unless told which RetryAfter it will get.
    os.environ.setdefault("PTB_TIMEDELTA", "1")
    if args.serve:
        asyncio.run(serve(json.loads(args.serve)))
        return
    if args.quick:
        args.messages, args.turn = 100, 5
    started = time.perf_counter()
    results = asyncio.run(run(args))
    results["meta"]["total_seconds"] = time.perf_counter() - started
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
