"""The Claude Code CLI as a child process.

It runs in a process group of its own, with the prompt on stdin; its stderr is drained all
along (only the tail is kept, for error messages) and its stdout read line by line. Stopping it
stops whatever it started too: SIGTERM to the group, SIGKILL after a grace period. A CLI never
outlives the task that started it, even when that task is cancelled while the agent's
generator is suspended between two steps.

It gets only the environment it needs (`cli_environment`): an allowed tool call can read the
CLI's environment, so the gateway's own secrets (bot tokens, database passwords, its API
tokens) never reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType

from gateway.clock import Clock
from gateway.logs import get_logger

log = get_logger(__name__)

# How long a stopped CLI gets to exit after SIGTERM before it is killed.
KILL_GRACE_SECONDS = 3.0
# How long the CLI may take to exit once its output ended (it closes MCP servers, saves state).
EXIT_GRACE_SECONDS = 10.0
# How long output already written may take to be read once the CLI exited.
DRAIN_SECONDS = 1.0
# How long stderr may stay open after the CLI exited (a command it left running may hold it).
STDERR_GRACE_SECONDS = 1.0
# Longest stream-json line read; a tool result holding a whole file makes for long lines.
LINE_LIMIT = 32 * 1024 * 1024
STDERR_KEPT_BYTES = 8192
STDERR_SHOWN_CHARS = 500

# What the CLI, and the commands it runs, may see of the gateway's environment: the basics of a
# login, proxies and certificates, and the CLI's own settings (ANTHROPIC_*, CLAUDE_*).
PASSED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TERM",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "NODE_EXTRA_CA_CERTS",
        "XDG_CONFIG_HOME",
        "XDG_CACHE_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "XDG_RUNTIME_DIR",
    }
)
PASSED_PREFIXES = ("LC_", "ANTHROPIC_", "CLAUDE_")


def cli_environment(
    environ: Mapping[str, str], *, api_key: str | None, extra: Iterable[str] = ()
) -> dict[str, str]:
    """The CLI's environment: what `PASSED_NAMES`, `PASSED_PREFIXES` and `extra` (names, or
    prefixes ending in `*`) let through from `environ`, and the Anthropic key the gateway was
    given when the environment has none. Nothing named AGENVOY_ passes, whatever `extra` says."""
    names = {n for n in extra if n and not n.endswith("*")}
    prefixes = PASSED_PREFIXES + tuple(n[:-1] for n in extra if n.endswith("*") and n != "*")
    env = {
        name: value
        for name, value in environ.items()
        if not name.startswith("AGENVOY_")
        and (name in PASSED_NAMES or name in names or name.startswith(prefixes))
    }
    if api_key and not env.get("ANTHROPIC_API_KEY"):
        env["ANTHROPIC_API_KEY"] = api_key
    return env


class CliProcess:
    """One running CLI; use it as `async with`, which stops it (and its group) on the way out."""

    def __init__(self, proc: asyncio.subprocess.Process, prompt: str, clock: Clock) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._proc = proc
        self._stdout = proc.stdout
        self._clock = clock
        self._stderr = bytearray()
        self._helpers = [
            asyncio.create_task(_feed(proc.stdin, prompt)),
            asyncio.create_task(_collect(proc.stderr, self._stderr)),
        ]
        # A consumer cancelled between two steps leaves the agent's generator suspended at a
        # yield, and its `finally` runs only when the generator is closed or collected. The CLI
        # must not outlive the task that started it in the meantime.
        self._owner = asyncio.current_task()
        if self._owner is not None:
            self._owner.add_done_callback(self._orphaned)

    @classmethod
    async def start(
        cls, args: list[str], cwd: Path, prompt: str, clock: Clock, env: dict[str, str]
    ) -> CliProcess:
        """Start `args` in `cwd` with `prompt` on stdin and only `env` for its environment;
        OSError when it cannot be started."""
        proc = await asyncio.create_subprocess_exec(
            *args,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            limit=LINE_LIMIT,
            # Its own process group, so stopping it also stops the commands it started.
            start_new_session=True,
        )
        return cls(proc, prompt, clock)

    async def __aenter__(self) -> CliProcess:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._owner is not None:
            self._owner.remove_done_callback(self._orphaned)
        await self._stop()
        for helper in self._helpers:
            helper.cancel()
        await asyncio.gather(*self._helpers, return_exceptions=True)

    async def next_line(self) -> bytes | None:
        """The next stdout line; None once stdout ended. Overlong lines are skipped."""
        while True:
            try:
                line = await self._stdout.readline()
            except ValueError:
                log.warning("skipped an overlong line from the Claude Code CLI")
                continue
            return line or None

    async def wait(self) -> int:
        """The exit status, once the CLI exits (however long that takes)."""
        return await self._proc.wait()

    async def exited(self) -> int | None:
        """The exit status, once the CLI exits by itself; None when it did not within the grace
        (it is stopped on the way out of `async with`)."""
        try:
            code: int | None = await self._clock.wait_for(self._proc.wait(), EXIT_GRACE_SECONDS)
        except TimeoutError:
            log.warning("the Claude Code CLI did not exit after its output; stopping it")
            code = None
        # stderr is complete once the CLI exited, unless a leftover child holds it open.
        with contextlib.suppress(TimeoutError):
            await self._clock.wait_for(asyncio.wait(self._helpers), STDERR_GRACE_SECONDS)
        return code

    def stderr_tail(self) -> str:
        text = " ".join(self._stderr.decode("utf-8", errors="replace").split())
        return text if len(text) <= STDERR_SHOWN_CHARS else f"…{text[-STDERR_SHOWN_CHARS:]}"

    def _orphaned(self, _: object) -> None:
        if self._proc.returncode is None:
            self._signal_group(signal.SIGKILL)

    def _signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, sig)

    async def _stop(self) -> None:
        """End a CLI still running, and whatever it started: SIGTERM, then SIGKILL after the
        grace period."""
        proc = self._proc
        if proc.returncode is not None:
            return
        self._signal_group(signal.SIGTERM)
        try:
            await self._clock.wait_for(proc.wait(), KILL_GRACE_SECONDS)
            return
        except TimeoutError:
            pass
        except BaseException:
            # Cancelled again while waiting: no more waiting, but nothing is left running (the
            # event loop's child watcher still reaps the process).
            self._signal_group(signal.SIGKILL)
            raise
        # The CLI is still alive, so its pid still names its group: killing the group cannot
        # hit an unrelated process that reused the id.
        self._signal_group(signal.SIGKILL)
        await proc.wait()


async def _feed(stdin: asyncio.StreamWriter, prompt: str) -> None:
    # A CLI that exits early (bad arguments, unknown session) may close its end first.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        try:
            stdin.write(prompt.encode())
            await stdin.drain()
        finally:
            stdin.close()
        await stdin.wait_closed()


async def _collect(stream: asyncio.StreamReader, into: bytearray) -> None:
    # Drained all along, so a chatty CLI never blocks on a full pipe; only the tail is kept.
    while chunk := await stream.read(65536):
        into += chunk
        del into[:-STDERR_KEPT_BYTES]
