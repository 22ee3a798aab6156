"""Finding the running gateway for `agenvoy chat`, and starting one when asked to."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from adapters.http_client import GatewayClient
from gateway.client_settings import ClientSettings
from gateway.credentials import read_terminal_credential

START_TIMEOUT_SECONDS = 30.0
POLL_SECONDS = 0.2


class GatewayNotRunning(RuntimeError):
    """No gateway answers at the configured address (and none could be started)."""


@dataclass(frozen=True)
class StartedGateway:
    pid: int
    log_file: Path


def client_token(settings: ClientSettings) -> str:
    """What the local clients sign in with: the local credential the gateway wrote into the
    home, or, where it cannot be read (a gateway elsewhere), AGENVOY_API_TOKEN.

    Blocking (reads a file): call it before the event loop runs, or from a thread."""
    local = read_terminal_credential(settings.store_dir)
    if local:
        return local
    return settings.api_token


async def ensure_gateway(settings: ClientSettings, *, start: bool) -> StartedGateway | None:
    """Check that a gateway answers; with `start`, launch one in the background if not.

    The background gateway inherits this process's environment and working directory, so it
    reads the same settings. Returns it, or None when a gateway was already running.
    """
    url = settings.gateway_url
    async with GatewayClient(url) as client:
        if await client.healthy():
            return None
        if not start:
            raise GatewayNotRunning(
                f"no gateway is running at {url}. Start one with `agenvoy run` in another "
                "terminal, or run `agenvoy chat --start` to start it in the background."
            )
        log_file = settings.home / "gateway.log"
        process = await asyncio.to_thread(_spawn, log_file)
        async with asyncio.timeout(START_TIMEOUT_SECONDS):
            while not await client.healthy():
                if process.poll() is not None:
                    raise GatewayNotRunning(
                        f"the gateway exited with status {process.returncode} while starting; "
                        f"see {log_file}"
                    )
                await asyncio.sleep(POLL_SECONDS)
        return StartedGateway(process.pid, log_file)


def _spawn(log_file: Path) -> subprocess.Popen[bytes]:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with log_file.open("ab") as log:
        # Its own session: closing the chat window (or its terminal) leaves the gateway up.
        return subprocess.Popen(
            [sys.executable, "-m", "gateway", "run"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
