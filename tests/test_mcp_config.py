"""Which MCP servers the gateway reads from its config, how their tools are named, what the
model reads of a result, and the claude-code agent's `--mcp-config`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp_rig import started_pids, stdio_server, write_config
from structlog.testing import capture_logs
from test_claude_code_agent import FakeCli, ask, cli  # noqa: F401 (a fixture)

from gateway.events import Inbound, Origin
from gateway.mcp_tools.config import ConfigError, load_config, parse_config, parse_server
from gateway.mcp_tools.pool import result_text, tool_name
from gateway.runtime import Runtime
from gateway.settings import Settings

ANN = Origin("http", sender_id="ann", sender_name="Ann")


def settings(home: Path, **extra: Any) -> Settings:
    return Settings(_env_file=None, home=home, **extra)


@pytest.mark.parametrize(
    ("name", "entry", "error"),
    [
        ("a__b", {"command": "x"}, "server name"),
        ("-lead", {"command": "x"}, "server name"),
        ("ok", "npx", "must be an object"),
        ("ok", {}, "exactly one of"),
        ("ok", {"command": "x", "url": "http://h/mcp"}, "exactly one of"),
        ("ok", {"command": ""}, "non-empty"),
        ("ok", {"command": "x", "args": "a b"}, "list of strings"),
        ("ok", {"command": "x", "env": {"A": 1}}, "`env` must be an object of strings"),
        ("ok", {"command": "x", "arg": ["a"]}, "unknown keys ['arg']"),
        ("ok", {"url": "ftp://h/mcp"}, "http:// or https://"),
        ("ok", {"type": "sse", "url": "http://h/sse"}, "'sse' is not served"),
        ("ok", {"type": "http", "command": "x"}, "'http' is not served"),
        ("ok", {"url": "http://h/mcp", "headers": ["a"]}, "`headers`"),
    ],
)
def test_a_wrong_server_says_why(name: str, entry: object, error: str) -> None:
    with pytest.raises(ConfigError, match=error.replace("[", r"\[")):
        parse_server(name, entry)


def test_both_kinds_of_server_are_read() -> None:
    stdio = parse_server("files", {"command": "srv", "args": ["-v"], "env": {"K": "v"}, "cwd": "/"})
    assert (stdio.command, stdio.args, stdio.env, stdio.cwd) == ("srv", ("-v",), {"K": "v"}, "/")
    http = parse_server("web", {"type": "http", "url": "https://h/mcp", "headers": {"A": "b"}})
    assert (http.is_http, http.url, http.headers) == (True, "https://h/mcp", {"A": "b"})


@pytest.mark.parametrize(
    ("text", "error"),
    [("{", "not JSON"), ("[]", "JSON object"), ('{"mcpServers": []}', "must be an object")],
)
def test_a_malformed_file_says_why(text: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        parse_config(text)


def test_a_bad_file_or_server_is_logged_and_left_out(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert not load_config(settings(home))  # no mcp.json: no servers, nothing said
    (home / "mcp.json").write_text("{not json")
    with capture_logs() as logs:
        assert not load_config(settings(home))
    assert any("unusable" in e["event"] and "not JSON" in e["error"] for e in logs)
    write_config(home, {"good": {"command": "srv"}, "bad": {"command": 3}})
    with capture_logs() as logs:
        config = load_config(settings(home))
    assert [s.name for s in config.servers] == ["good"]
    assert [e["server"] for e in logs if e["event"] == "MCP server skipped"] == ["bad"]
    other = tmp_path / "elsewhere.json"
    other.write_text(json.dumps({"mcpServers": {"other": {"url": "http://h/mcp"}}}))
    assert [s.name for s in load_config(settings(home, mcp_config=str(other))).servers] == ["other"]
    with capture_logs() as logs:
        assert not load_config(settings(home, mcp_config=str(tmp_path / "missing.json")))
    assert any("does not exist" in e["event"] for e in logs)


async def test_a_bad_file_does_not_stop_the_gateway(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "mcp.json").write_text('{"mcpServers": {"x": ')
    rt = await Runtime.start(settings(home))
    try:
        sub = await rt.router.submit(Inbound(ANN, "cli-b", "hello"))
        assert (await rt.router.wait(sub.task_hash, 10)).reply == "echo: hello"
    finally:
        await rt.close()


def test_tool_names_fit_the_providers() -> None:
    assert tool_name("files", "read") == "files__read"
    cleaned = tool_name("files", "read.file v2")
    assert cleaned.startswith("files__read_file_v2_") and len(cleaned) == 28
    long = tool_name("files", "x" * 100)
    assert len(long) == 64 and long != tool_name("files", "x" * 101)


def test_result_text_reads_every_kind_of_part() -> None:
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="first"),
            types.ImageContent(type="image", data="AAAA", mime_type="image/png"),
            types.ResourceLink(type="resource_link", uri="file:///a.txt", name="a.txt"),
            types.EmbeddedResource(
                type="resource",
                resource=types.TextResourceContents(uri="file:///b.txt", text="inside"),
            ),
        ]
    )
    assert result_text(result).split("\n") == [
        "first",
        "[image, image/png, about 3 bytes, not shown]",
        "[resource link: file:///a.txt a.txt]",
        "inside",
    ]
    structured = types.CallToolResult(content=[], structured_content={"sum": 3})
    assert result_text(structured) == '{"sum": 3}'


@pytest.fixture
async def claude_code(cli: FakeCli, tmp_path: Path) -> AsyncIterator[Runtime]:  # noqa: F811
    home = tmp_path / "home"
    write_config(
        home,
        {
            "fake": stdio_server(tmp_path / "pids", KEY="v"),
            "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"A": "b"}},
        },
    )
    options = {"agent": "claude-code", "claude_code_bin": str(cli.bin), "model": "sonnet"}
    rt = await Runtime.start(settings(home, **options))
    try:
        yield rt
    finally:
        await rt.close()


async def test_claude_code_gets_the_servers_as_its_own_config(
    cli: FakeCli,  # noqa: F811
    claude_code: Runtime,
    tmp_path: Path,
) -> None:
    router = claude_code.router
    for command in ("/allow mcp__fake__add", "/allow fake__add", "/allow mcp__nope__add"):
        await router.submit(Inbound(ANN, "cli-cc", command))
    # The CLI names them mcp__<server>__<tool>; that is what /allow takes.
    assert (await claude_code.store.require("cli-cc")).allowed_tools == {"mcp__fake__add"}
    await ask(router, "cli-cc", "use the tools")
    argv = cli.calls()[0]["argv"]
    assert argv[argv.index("--allowedTools") + 1] == "mcp__fake__add"
    path = Path(argv[argv.index("--mcp-config") + 1])
    assert path.parent == claude_code.settings.store_dir
    mode, servers = read_private(path)
    assert mode & 0o077 == 0  # it may hold the servers' keys
    assert servers["fake"]["type"] == "stdio" and servers["fake"]["env"]["KEY"] == "v"
    web = {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"A": "b"}}
    assert servers["web"] == web
    assert started_pids(tmp_path / "pids") == []  # the gateway itself started none of them


def read_private(path: Path) -> tuple[int, dict[str, Any]]:
    return path.stat().st_mode, json.loads(path.read_text())["mcpServers"]


def test_without_servers_the_gateway_does_not_load_the_sdk(tmp_path: Path) -> None:
    probe = (
        "import asyncio, sys\n"
        "from gateway.runtime import Runtime\n"
        "from gateway.settings import Settings\n"
        "async def main():\n"
        f"    s = Settings(_env_file=None, home={str(tmp_path / 'home')!r}, agent='openai')\n"
        "    rt = await Runtime.start(s)\n"
        "    await rt.close()\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in ('mcp', 'mcp_types', 'httpx2') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"
