"""`agenvoy send` against a gateway that restarts while it waits: the command follows its
task across the restart and prints the reply, as a user would expect of a stored message."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from gateway_proc import EXE, Gateway, free_port
from support import wait_until

pytestmark = pytest.mark.slow


async def test_send_waits_through_a_gateway_restart(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path / "home", free_port())
    await gateway.start()
    env = {
        **os.environ,
        "AGENVOY_HOME": str(gateway.home),
        "AGENVOY_HTTP_PORT": str(gateway.port),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    command = await asyncio.create_subprocess_exec(
        EXE,
        "send",
        "!sleep 2",
        "--session",
        "cli-restart",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:

        async def started() -> bool:
            return any(entry.get("event") == "task started" for entry in gateway.log)

        assert await wait_until(started, 20), "the task never started"
        assert await gateway.stop() == 0  # a graceful stop: the waiting command hears 503
        await gateway.start()
        out, err = await asyncio.wait_for(command.communicate(), 60)
        assert command.returncode == 0, err.decode()
        assert out.decode().strip() == "slept 2s"
        assert "restarting" in err.decode()
    finally:
        if command.returncode is None:
            command.kill()
            await command.wait()
        await gateway.close()
