"""The permission bridge between the Claude Code CLI's permission server and the agent: only
this run's secret is heard, answers come back in the CLI's shape, and nothing is left waiting."""

from __future__ import annotations

import asyncio
import json
import stat

from gateway.agents.claude_permission_server import ask_gateway
from gateway.agents.claude_permissions import PermissionBridge, cli_mcp_config


async def test_an_approved_request_answers_allow_with_the_input() -> None:
    async with await PermissionBridge.open() as bridge:
        asked = asyncio.create_task(
            ask_gateway(str(bridge.socket_path), bridge.secret, "Write", {"file_path": "a"}, "t1")
        )
        request = await asyncio.wait_for(bridge.requests.get(), 10)
        assert (request.tool, request.args, request.tool_use_id) == (
            "Write",
            {"file_path": "a"},
            "t1",
        )
        request.answer.set_result(True)
        answer = json.loads(await asyncio.wait_for(asked, 10))
        assert answer == {"behavior": "allow", "updatedInput": {"file_path": "a"}}


async def test_a_denied_request_answers_deny() -> None:
    async with await PermissionBridge.open() as bridge:
        asked = asyncio.create_task(
            ask_gateway(str(bridge.socket_path), bridge.secret, "Bash", {}, "")
        )
        request = await asyncio.wait_for(bridge.requests.get(), 10)
        request.answer.set_result(False)
        answer = json.loads(await asyncio.wait_for(asked, 10))
        assert answer["behavior"] == "deny" and "denied" in answer["message"]


async def test_a_wrong_secret_is_not_heard_and_is_denied() -> None:
    async with await PermissionBridge.open() as bridge:
        answer = json.loads(
            await asyncio.wait_for(
                ask_gateway(str(bridge.socket_path), "not-the-secret", "Bash", {}, ""), 10
            )
        )
        assert answer["behavior"] == "deny"
        assert bridge.requests.empty()  # nobody was asked


async def test_a_request_left_open_is_denied_when_the_run_ends() -> None:
    async with await PermissionBridge.open() as bridge:
        asked = asyncio.create_task(
            ask_gateway(str(bridge.socket_path), bridge.secret, "Edit", {}, "")
        )
        await asyncio.wait_for(bridge.requests.get(), 10)
    answer = json.loads(await asyncio.wait_for(asked, 10))
    assert answer["behavior"] == "deny"
    assert not bridge.folder.exists()  # socket and config are gone with the run


async def test_no_gateway_to_ask_is_a_deny() -> None:
    answer = json.loads(await ask_gateway("/nonexistent/permission.sock", "s", "Write", {}, ""))
    assert answer["behavior"] == "deny"


async def test_the_config_holds_the_secret_for_this_user_only() -> None:
    async with await PermissionBridge.open() as bridge:
        assert stat.S_IMODE(bridge.folder.stat().st_mode) == 0o700
        other = {"docs": {"type": "stdio", "command": "docs-server"}}
        path = await bridge.write_config(cli_mcp_config(other, bridge.mcp_server(60)))
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        servers = json.loads(path.read_text())["mcpServers"]
        assert set(servers) == {"docs", "agenvoy_permissions"}
        entry = servers["agenvoy_permissions"]
        assert entry["env"]["AGENVOY_PERMISSION_SECRET"] == bridge.secret
        assert entry["args"][:2] == ["-I", "-m"] and entry["timeout"] == 60_000
