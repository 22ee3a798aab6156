"""A real gateway process (`agenvoy run`) for tests: started, waited for, killed, restarted.

The process's stderr (JSON log lines) is kept, so a test can say why a gateway did not come up.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import warnings
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TypeVar

from gateway.slow_stop import FORCED_EXIT_STATUS

T = TypeVar("T")
EXE = shutil.which("agenvoy") or str(Path(sys.executable).with_name("agenvoy"))


# Starting a gateway is its one burst of work (imports, migrations, connecting): the test workers
# start them one per core at a time, so a burst of starts across workers queues for a core
# instead of stretching every start past its bound. The slots are lock files all workers share.
START_SLOTS = len(os.sched_getaffinity(0))
SLOT_DIR = Path(tempfile.gettempdir()) / f"agenvoy-test-starts-{os.getuid()}"
SLOT_POLL_SECONDS = 0.05


@contextlib.asynccontextmanager
async def start_slot() -> AsyncIterator[None]:
    """Hold one of the START_SLOTS, across every process of the test run, while inside."""
    SLOT_DIR.mkdir(exist_ok=True)
    while True:
        for slot in range(START_SLOTS):
            fd = os.open(SLOT_DIR / f"{slot}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield
                return
            finally:
                os.close(fd)  # closing it lets the lock go, in this process or if it dies
        # A lock has no wake-up that an event loop can wait on: asked again shortly.
        await asyncio.sleep(SLOT_POLL_SECONDS)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Gateway:
    def __init__(self, home: Path, port: int, **env: str) -> None:
        self.home, self.port = home, port
        # Another installation's `agenvoy`, and where it runs: set after construction, so every
        # keyword argument stays an environment variable.
        self.exe: str = EXE
        self.cwd: Path | None = None
        self.url = f"http://127.0.0.1:{port}"
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None
        self.log: list[dict[str, object]] = []
        self._draining: asyncio.Task[None] | None = None

    async def start(self, **env: str) -> dict[str, object]:
        """Start `agenvoy run` (with `env` on top of the gateway's own) and wait until it is
        ready; returns the "gateway ready" log line."""
        self.log = []
        full_env = {
            **os.environ,
            "AGENVOY_HOME": str(self.home),
            "AGENVOY_HTTP_PORT": str(self.port),
            "AGENVOY_LOG_FORMAT": "json",
            "AGENVOY_INSTANCE_ID": "test-instance",
            **self.env,
            **env,
        }
        async with start_slot():
            self.proc = await asyncio.create_subprocess_exec(
                self.exe,
                "run",
                env=full_env,
                cwd=self.cwd,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
            try:
                return await self._within(self._ready(), 30, "became ready")
            except BaseException:
                await self.close()  # not left running behind a test that gave up on it
                raise

    async def _ready(self) -> dict[str, object]:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            line = await self.proc.stderr.readline()
            if not line:
                raise AssertionError(
                    f"gateway exited with {await self.proc.wait()}:\n{self.tail()}"
                )
            entry = self._keep(line)
            if entry is not None and entry.get("event") == "gateway ready":
                # Keep draining stderr so the process never blocks on a full pipe.
                self._draining = asyncio.get_running_loop().create_task(self._drain())
                return entry

    def _keep(self, line: bytes) -> dict[str, object] | None:
        try:
            entry = json.loads(line)
        except ValueError:
            return None
        if isinstance(entry, dict):
            self.log.append(entry)
            return entry
        return None

    async def _drain(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self._keep(line)

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        await self._within(self.proc.wait(), 10, "ended after SIGKILL")

    async def died(self, within: float = 15.0) -> int:
        """Wait for the process to end by itself (a crash point); returns its exit status."""
        assert self.proc is not None
        return await self._within(self.proc.wait(), within, "reached its crash point")

    async def stop(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        # Past the gateway's own deadline for a stop (FORCED_STOP_SECONDS), which ends it.
        status = await self._within(self.proc.wait(), 30, "stopped after SIGTERM")
        if status == FORCED_EXIT_STATUS:
            # Nothing is lost (the crash tests prove it), but the hang is a bug to find: its
            # report goes to the test run's warnings summary.
            await self._drained()
            report = [e for e in self.log if e.get("event") == "shutdown slow"]
            warnings.warn(f"a gateway's stop hung and was forced: {report}", stacklevel=2)
        return status

    async def _drained(self) -> None:
        """Wait until the stderr drain has read the ended process's last lines."""
        if self._draining is not None:
            await asyncio.wait({self._draining}, timeout=5)

    async def _within(self, waiting: Awaitable[T], seconds: float, what: str) -> T:
        """`waiting`, or a failure that says what the gateway did not do and its last log lines
        (a bare TimeoutError does not say which step of a test stalled)."""
        try:
            return await asyncio.wait_for(waiting, seconds)
        except TimeoutError:
            raise AssertionError(
                f"the gateway never {what} within {seconds} s:\n{self.tail()}"
            ) from None

    def tail(self, lines: int = 20) -> str:
        """The last log lines, for a failure to say what the gateway was doing."""
        return "\n".join(json.dumps(entry) for entry in self.log[-lines:])

    async def close(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
