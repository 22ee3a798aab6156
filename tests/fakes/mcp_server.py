"""A small MCP server for the tests, built with the SDK's server API.

`python tests/fakes/mcp_server.py` serves it over stdio; `… --http PORT` over streamable
HTTP on 127.0.0.1:PORT at `/mcp`. Its tools:

- `add(a, b)`: the sum, read-only and idempotent by its annotations;
- `echo(text)`: the text back;
- `fail(reason)`: a tool error (`isError`) carrying the reason;
- `crash()`: ends the process at once, as a crashing server does;
- `pid()`: the server's process id (a restart shows as a new one);
- `env(name)`: an environment variable of the server, or `(unset)`;
- `picture()`: an image part next to a text part;
- `nap(seconds)`: answers after that long;
- `header(name)`: a header of the HTTP request that called it, or `(unset)`;
- `grow()`: adds the tool `extra` and says the tool list changed.

It writes one line to stderr when it starts (`fake mcp server up <pid>`), so a test can see
where a server's stderr goes, and appends its process id to the file `FAKE_MCP_PIDS` names
(when its config gives it one), so a test can count the processes started and see them end.
With `FAKE_MCP_EXIT` set it exits right after that, as a server that cannot start does.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent, ToolAnnotations

server = MCPServer("fake")

# One red pixel, PNG.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
)


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True))
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def fail(reason: str) -> str:
    """Fail with the reason."""
    raise ToolError(reason)


@server.tool()
def crash() -> str:
    """End the server process at once."""
    os._exit(3)


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def env(name: str) -> str:
    """An environment variable of the server."""
    return os.environ.get(name, "(unset)")


@server.tool()
def picture() -> list[TextContent | ImageContent]:
    """A text part and an image part."""
    data = base64.b64encode(PIXEL).decode()
    return [
        TextContent(type="text", text="a red pixel"),
        ImageContent(type="image", data=data, mime_type="image/png"),
    ]


@server.tool()
async def nap(seconds: float) -> str:
    """Answer after `seconds`."""
    await anyio.sleep(seconds)
    return "rested"


@server.tool()
def header(name: str, ctx: Context) -> str:
    """A header of the HTTP request that called this tool."""
    return (ctx.headers or {}).get(name.lower(), "(unset)")


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `extra`."""
    server.add_tool(lambda: "extra here", name="extra", description="Added by grow.")
    await ctx.notify_tools_changed()
    return "grown"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=0, help="serve streamable HTTP on this port")
    options = parser.parse_args()
    pids = os.environ.get("FAKE_MCP_PIDS")
    if pids:
        with open(pids, "a") as out:
            out.write(f"{os.getpid()}\n")
    if os.environ.get("FAKE_MCP_EXIT"):  # a server that cannot start
        sys.exit(f"fake mcp server gives up: {os.environ['FAKE_MCP_EXIT']}")
    sys.stderr.write(f"fake mcp server up {os.getpid()}\n")
    sys.stderr.flush()
    if options.http:
        server.run("streamable-http", host="127.0.0.1", port=options.http)
    else:
        server.run()


if __name__ == "__main__":
    main()
