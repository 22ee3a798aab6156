"""Which MCP servers the agents get: `<home>/mcp.json`, or the file `AGENVOY_MCP_CONFIG` names.

The file has the shape other MCP clients read too:

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "some-server"], "env": {"KEY": "…"}, "cwd": "…"},
        "search": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer …"}}
    }}

A file that cannot be read or parsed costs its servers, never the gateway's start: the reason
is logged and the agents run with their built-in tools. A server entry that is wrong is skipped
alone, with its reason. Nothing here imports the MCP SDK, which only servers that exist need.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from gateway.logs import get_logger
from gateway.settings import Settings

log = get_logger(__name__)

# A server's name starts its tools' names (`<server>__<tool>`), which providers limit to
# `[A-Za-z0-9_-]`; a double underscore would make the split ambiguous.
SERVER_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
SEPARATOR: Final = "__"
# The file the claude-code agent hands the CLI (`--mcp-config`), under the home's .store/.
CLAUDE_CODE_FILE: Final = "claude_code_mcp.json"


class ConfigError(ValueError):
    """Why a config file or one of its servers cannot be used."""


@dataclass(frozen=True)
class McpServerConfig:
    """One server: a command run over stdio, or a streamable-HTTP URL."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def is_http(self) -> bool:
        return bool(self.url)

    def for_claude_code(self) -> dict[str, Any]:
        """The entry in the Claude Code CLI's own `--mcp-config` format."""
        if self.is_http:
            return {"type": "http", "url": self.url, "headers": dict(self.headers)}
        return {"type": "stdio", "command": self.command, "args": list(self.args), "env": self.env}


@dataclass(frozen=True)
class McpConfig:
    servers: tuple[McpServerConfig, ...] = ()
    source: Path | None = None

    def __bool__(self) -> bool:
        return bool(self.servers)

    def prefixes(self, before: str = "") -> tuple[str, ...]:
        """What the names of the servers' tools start with (`/allow` takes them before the
        servers ran): `<server>__`, or `mcp__<server>__` as the Claude Code CLI names them."""
        return tuple(f"{before}{server.name}{SEPARATOR}" for server in self.servers)


def config_path(settings: Settings) -> tuple[Path, bool]:
    """The file to read, and whether it was named (a named file that is missing is an error;
    the default one is optional)."""
    if settings.mcp_config.strip():
        return Path(settings.mcp_config.strip()).expanduser(), True
    return settings.home / "mcp.json", False


def load_config(settings: Settings) -> McpConfig:
    """The configured servers; what cannot be used is logged and left out. Blocking: call it
    in a thread."""
    path, named = config_path(settings)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if named:
            log.error("the MCP config file does not exist; no MCP servers", path=str(path))
        return McpConfig()
    except (OSError, UnicodeDecodeError) as exc:
        log.error("cannot read the MCP config file; no MCP servers", path=str(path), error=str(exc))
        return McpConfig()
    try:
        servers = parse_config(text)
    except ConfigError as exc:
        log.error("the MCP config file is unusable; no MCP servers", path=str(path), error=str(exc))
        return McpConfig()
    usable = []
    for name, entry in servers.items():
        try:
            usable.append(parse_server(name, entry))
        except ConfigError as exc:
            log.error("MCP server skipped", path=str(path), server=name, error=str(exc))
    if usable:
        log.info("MCP servers configured", path=str(path), servers=[s.name for s in usable])
    return McpConfig(tuple(usable), path)


def parse_config(text: str) -> dict[str, Any]:
    """The `mcpServers` object of a config file's text (its entries not checked yet)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError("the file must hold a JSON object with an `mcpServers` object")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError("`mcpServers` must be an object: server name -> server")
    return servers


def parse_server(name: str, entry: object) -> McpServerConfig:
    if not SERVER_NAME.fullmatch(name) or SEPARATOR in name:
        raise ConfigError(
            "a server name is 1-32 letters, digits, '-' or '_' (no '__'), starting with a "
            "letter or digit"
        )
    if not isinstance(entry, dict):
        raise ConfigError("a server must be an object with `command` or `url`")
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise ConfigError("a server needs exactly one of `command` (stdio) and `url` (HTTP)")
    kind = entry.get("type", "stdio" if command is not None else "http")
    if kind not in (("stdio",) if command is not None else ("http", "streamable-http")):
        # An `sse` server speaks the transport MCP replaced with streamable HTTP.
        raise ConfigError(f"`type` {kind!r} is not served; stdio or (streamable) http are")
    if url is not None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError("`url` must be an http:// or https:// URL")
        _no_keys(entry, {"url", "headers", "type"})
        return McpServerConfig(name, url=url, headers=_strings(entry, "headers"))
    if not isinstance(command, str) or not command.strip():
        raise ConfigError("`command` must be a non-empty string")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError("`args` must be a list of strings")
    cwd = entry.get("cwd", "")
    if not isinstance(cwd, str):
        raise ConfigError("`cwd` must be a string")
    _no_keys(entry, {"command", "args", "env", "cwd", "type"})
    return McpServerConfig(
        name, command=command, args=tuple(args), env=_strings(entry, "env"), cwd=cwd
    )


def _strings(entry: dict[str, Any], key: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"`{key}` must be an object of strings")
    return dict(value)


def _no_keys(entry: dict[str, Any], known: set[str]) -> None:
    # A misspelt key (`arg`, `header`) would otherwise be dropped without a word.
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ConfigError(f"unknown keys {unknown}; known: {sorted(known)}")


def write_claude_code_config(config: McpConfig, store_dir: Path) -> Path:
    """The servers as the Claude Code CLI reads them, in a file only the owner can read (it
    may hold the servers' keys). Blocking: call it in a thread."""
    servers = {s.name: s.for_claude_code() for s in config.servers}
    store_dir.mkdir(parents=True, exist_ok=True)
    path = store_dir / CLAUDE_CODE_FILE
    fd, temp = tempfile.mkstemp(dir=store_dir, prefix=".mcp-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"mcpServers": servers}, out, indent=2)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path
