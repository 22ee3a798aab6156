"""The small MCP server of tests/fakes/mcp_server.py as a gateway's config names it, and what
the MCP tests look at: which server processes started, and whether one has ended."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

SERVER = Path(__file__).parent / "fakes" / "mcp_server.py"


def stdio_server(pids: Path, **env: str) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": [str(SERVER)],
        "env": {"FAKE_MCP_PIDS": str(pids), **env},
    }


def write_config(home: Path, servers: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "mcp.json").write_text(json.dumps({"mcpServers": servers}))


def started_pids(pids: Path) -> list[int]:
    return [int(line) for line in pids.read_text().split()] if pids.exists() else []


async def wait_gone(pid: int, within: float = 15.0) -> bool:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.02)
