"""`agenvoy send` and `agenvoy answer` against a running gateway: what each ending prints, its
own exit status, the notices about the session; and `/`, `/ui` leading to the console."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from clock import FakeClock
from gateway_proc import EXE
from support import wait_until
from test_http import Server, serving

from adapters.http_client import GatewayClient
from adapters.terminal.outcome import Exit
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.credentials import read_terminal_credential


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return f"exit {self.exit_code}\n{self.stdout}\n{self.stderr}"


# The commands run as processes: several at once, as a user in several terminals would.
ENV: dict[str, str] = {}


async def agenvoy(*args: str) -> Result:
    command = await asyncio.create_subprocess_exec(
        EXE,
        *args,
        env={**os.environ, **ENV, "NO_PROXY": "127.0.0.1,localhost"},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(command.communicate(), 60)
    assert command.returncode is not None
    return Result(command.returncode, out.decode(), err.decode())


@contextlib.asynccontextmanager
async def commanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: Clock = SYSTEM_CLOCK
) -> AsyncIterator[Server]:
    """A gateway the commands run here talk to."""
    async with serving(tmp_path, clock, confirm_timeout_seconds=60) as server:
        monkeypatch.setitem(ENV, "AGENVOY_HOME", str(server.runtime.settings.home))
        monkeypatch.setitem(ENV, "AGENVOY_HTTP_PORT", server.base.rsplit(":", 1)[1])
        yield server


@pytest.fixture
async def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Server]:
    async with commanded(tmp_path, monkeypatch) as server:
        yield server


async def load_is(gateway: Server, running: int, queued: int) -> None:
    """Wait for the gateway (one session in each test) to run and queue so many tasks."""

    async def there() -> bool:
        return gateway.runtime.router.load() == (running, queued)

    assert await wait_until(there, 10)


async def test_a_question_is_answered_from_the_command_line(gateway: Server) -> None:
    asked = await agenvoy("send", "!ask favourite colour?", "--session", "cli-q")
    assert asked.exit_code == Exit.STILL_RUNNING, asked.output
    line = asked.stdout.strip().splitlines()[-1]
    assert line.startswith("waiting for an answer: agenvoy answer cli-q "), line
    task = line.split()[-2]
    # The chat window of the same local user lists it (a task sent from the command line has
    # no window of its own); another user's window does not.
    credential = read_terminal_credential(gateway.runtime.settings.store_dir)
    for user, listed in ((getpass.getuser(), [task]), ("someone-else", [])):
        async with GatewayClient(gateway.base, credential, user, window_hash="aaaa") as window:
            assert [p["task_hash"] for p in await window.pending()] == listed, user
    answered = await agenvoy("answer", "cli-q", task, "blue")
    assert answered.exit_code == 0 and answered.stdout.startswith("answered"), answered.output
    view = await gateway.runtime.router.wait(task, 10)
    assert view.reply == "answer: blue"


async def test_a_steered_message_and_a_canceled_task_exit_with_their_own_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    async with commanded(tmp_path, monkeypatch, clock) as gateway:
        assert (await agenvoy("send", "/queue steer", "--session", "cli-s")).exit_code == 0
        # Asleep on the test's clock: the message is waiting behind it before a second passes.
        first = asyncio.create_task(agenvoy("send", "!sleep 2", "--session", "cli-s"))
        await load_is(gateway, 1, 0)
        later = asyncio.create_task(agenvoy("send", "look here", "--session", "cli-s"))
        await load_is(gateway, 1, 1)

        async def slept() -> bool:
            await clock.advance(1)
            return gateway.runtime.router.load() == (0, 0)

        assert await wait_until(slept, 10)
        steered = await later
        assert steered.exit_code == Exit.STEERED, steered.output
        assert "steered into the running task cli-s" in steered.stderr
        assert steered.stdout.strip() == "slept 2s; took in: look here"
        assert (await first).exit_code == Exit.ANSWERED

        assert (await agenvoy("send", "/queue interrupt", "--session", "cli-s")).exit_code == 0
        cut = asyncio.create_task(agenvoy("send", "!sleep 30", "--session", "cli-s"))
        await load_is(gateway, 1, 0)
        newer = await agenvoy("send", "instead", "--session", "cli-s")
        assert (newer.exit_code, newer.stdout.strip()) == (Exit.ANSWERED, "echo: instead")
        canceled = await cut
        assert canceled.exit_code == Exit.CANCELED and "canceled: cli-s" in canceled.stderr


async def test_collected_messages_exit_with_their_own_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: FakeClock
) -> None:
    async with commanded(tmp_path, monkeypatch, clock) as gateway:
        assert (await agenvoy("send", "/queue collect", "--session", "cli-c")).exit_code == 0
        # The first task sleeps on the test's clock: both messages are queued behind it
        # however slowly the commands start, and only then does it end.
        first = asyncio.create_task(agenvoy("send", "!sleep 1", "--session", "cli-c"))
        await load_is(gateway, 1, 0)
        waiting = asyncio.create_task(agenvoy("send", "one", "--session", "cli-c"))
        await load_is(gateway, 1, 1)
        latest = asyncio.create_task(agenvoy("send", "two", "--session", "cli-c"))
        await load_is(gateway, 1, 2)

        async def slept() -> bool:
            await clock.advance(1)
            return gateway.runtime.router.load() != (1, 2)

        assert await wait_until(slept, 10)
        newest, collected = await latest, await waiting
        assert newest.exit_code == Exit.ANSWERED, newest.output
        assert collected.exit_code == Exit.COLLECTED, collected.output
        assert "collected into cli-c" in collected.stderr
        assert "queued (1 ahead)" in collected.stderr
        # The one that answers both says so, as a chat platform is told.
        assert "collected 2 messages" in newest.stderr, newest.output
        assert collected.stdout == newest.stdout  # the reply that answers both
        assert (await first).exit_code == Exit.ANSWERED


async def test_a_message_queued_behind_a_prompt_says_so_while_it_waits(gateway: Server) -> None:
    asking = await agenvoy("send", "!confirm deploy", "--session", "cli-w")
    assert asking.exit_code == Exit.STILL_RUNNING, asking.output
    task = asking.stdout.split()[-1]
    command = await asyncio.create_subprocess_exec(
        EXE,
        "send",
        "then this",
        "--session",
        "cli-w",
        env={**os.environ, **ENV, "NO_PROXY": "127.0.0.1,localhost"},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert command.stderr is not None and command.stdout is not None
    said = []
    behind = f"waiting behind a task that waits for an answer: agenvoy approve|deny cli-w {task}"
    # Told while it waits (within --wait's 120 s it would otherwise sit silent): read as said.
    async with asyncio.timeout(30):
        while behind not in said:
            said.append((await command.stderr.readline()).decode().strip())
    assert said == ["queued (1 ahead)", behind]
    assert (await agenvoy("approve", "cli-w", task)).exit_code == 0
    out, err = await asyncio.wait_for(command.communicate(), 30)
    assert command.returncode == Exit.ANSWERED, err
    assert (out.decode().strip(), err.decode()) == ("echo: then this", "")


async def test_a_failed_task_an_absent_gateway_and_bad_arguments_exit_with_their_status(
    gateway: Server, monkeypatch: pytest.MonkeyPatch, unused_tcp_port: int
) -> None:
    failed = await agenvoy("send", "!fail", "--session", "cli-f")
    assert failed.exit_code == Exit.FAILED and failed.stdout == "", failed.output
    assert failed.stderr.strip(), failed.output  # the task's error
    bad = await agenvoy("send", "hello", "--session", "../etc")
    assert bad.exit_code == 2 and "session" in bad.stderr.lower(), bad.output
    monkeypatch.setitem(ENV, "AGENVOY_HTTP_PORT", str(unused_tcp_port))
    absent = await agenvoy("send", "hello", "--session", "cli-f")
    assert absent.exit_code == Exit.FAILED and "not running" in absent.stderr, absent.output


async def test_a_denied_confirmation_exits_7(gateway: Server) -> None:
    """At a terminal `send` asks the confirmation itself; a no is the task's answer, and the
    status says the reply is that of a denied task."""
    controller, terminal = os.openpty()
    try:
        command = await asyncio.create_subprocess_exec(
            EXE,
            "send",
            "!confirm deploy",
            "--session",
            "cli-d",
            env={**os.environ, **ENV, "NO_PROXY": "127.0.0.1,localhost"},
            stdin=terminal,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        os.write(controller, b"n\n")  # kept by the terminal until the question reads it
        out, err = await asyncio.wait_for(command.communicate(), 60)
    finally:
        os.close(terminal)
        os.close(controller)
    assert command.returncode == Exit.DENIED, (out, err)
    assert "Allow demo_action" in out.decode() and "denied" in out.decode(), out


async def test_send_names_the_session_it_used(gateway: Server) -> None:
    kept = await agenvoy("send", "keep this", "--persist")
    assert kept.exit_code == 0 and kept.stdout.strip() == "echo: keep this"
    assert kept.stderr.startswith("session chat-"), kept.stderr
    passing = await agenvoy("send", "just once")
    assert passing.stderr.count("temp-") == 2, passing.stderr  # said once: its id, the kind
    assert "reaped after 30 idle minutes" in passing.stderr
    named = await agenvoy("send", "again", "--session", "cli-n")
    assert named.stderr == ""


async def test_root_and_ui_lead_to_the_console(gateway: Server) -> None:
    async with aiohttp.ClientSession() as http:
        for path in ("/", "/ui"):
            async with http.get(gateway.url(path), allow_redirects=False) as resp:
                assert (resp.status, resp.headers.get("Location")) == (302, "/ui/"), path
