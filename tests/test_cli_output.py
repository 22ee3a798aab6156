"""Hostile text from the archive or the gateway reaches the operator's terminal inert.

Names, senders and messages are anyone's text: escape sequences in them could retitle the
window, clear the screen or, with CR/LF, print lines that look like the command's own.
"""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from test_http import Server, serving
from typer.testing import CliRunner, Result

from gateway.cli import BODY_INDENT
from gateway.cli import app as cli_app
from gateway.cli_support import printable
from gateway.events import Inbound, Origin
from gateway.runtime import Runtime
from gateway.settings import Settings

FORGED = "[2020-01-01 00:00] assistant: all is well"
HOSTILE = f"look\x1b]0;pwned\x07 here\x1b[2J\r{FORGED}\u202etxt.exe\x9b31m\x7f"
RAW = ["\x1b", "\x07", "\r", "\u202e", "\x9b", "\x7f"]
MAL = Origin("http", sender_id="mal", sender_name="Mal\x1b[8m")


def assert_inert(output: str) -> None:
    assert not [c for c in RAW if c in output], repr(output)
    assert "\\x1b]0;pwned\\x07" in output and "\\x1b[2J\\r" in output
    assert "\\u202etxt.exe\\x9b31m\\x7f" in output
    assert not any(line.startswith(FORGED) for line in output.splitlines())


def invoke(args: list[str]) -> Result:
    result = CliRunner().invoke(cli_app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
async def archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("AGENVOY_HOME", str(home))
    runtime = await Runtime.start(Settings(home=home, _env_file=None))
    try:
        await runtime.store.ensure("cli-evil", name=f"name {HOSTILE}")
        await runtime.store.update("cli-evil", persona=HOSTILE)
        sub = await runtime.router.submit(Inbound(MAL, "cli-evil", f"{HOSTILE}\nsecond line"))
        await runtime.router.wait(sub.task_hash, 10)
    finally:
        await runtime.close()


def test_printable_keeps_text_and_escapes_what_acts_on_a_terminal() -> None:
    assert printable("plain, ünïcode, 中文 \\x1b") == "plain, ünïcode, 中文 \\x1b"
    assert printable("a\tb\nc\r\n\x00\u2066\u2028") == "a\\tb\\nc\\r\\n\\x00\\u2066\\u2028"
    assert printable("a\tb\r\nc\rd\x1b", body="  ") == "a\tb\n  c\\rd\\x1b"


async def test_show_prints_names_settings_and_bodies_inert(archive: None) -> None:
    result = await asyncio.to_thread(invoke, ["show", "cli-evil"])
    assert_inert(result.output)
    assert "Mal\\x1b[8m" in result.output
    lines = result.output.splitlines()
    # Each line of a message after its first is indented: it cannot pass for a header.
    user = next(i for i, line in enumerate(lines) if line.startswith("[") and "(Mal" in line)
    assert lines[user + 1] == f"{BODY_INDENT}second line"


async def test_search_and_sessions_print_inert(archive: None) -> None:
    found = await asyncio.to_thread(invoke, ["search", "pwned"])
    assert_inert(found.output)
    lines = found.output.splitlines()
    assert len(lines) == 2 and all(line.startswith("cli-evil  #") for line in lines)
    assert "\\nsecond line" in lines[0]  # one line per hit
    listed = await asyncio.to_thread(invoke, ["sessions"])
    assert_inert(listed.output)


@pytest.fixture
async def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Server]:
    # The operator is an admin here, so `agenvoy pending` lists Mal's question too.
    admin = f"terminal:{getpass.getuser()}"
    async with serving(tmp_path, confirm_timeout_seconds=30, admins=admin) as server:
        monkeypatch.setenv("AGENVOY_HOME", str(server.runtime.settings.home))
        monkeypatch.setenv("AGENVOY_HTTP_PORT", server.base.rsplit(":", 1)[1])
        yield server


async def test_client_commands_print_what_the_gateway_sends_inert(gateway: Server) -> None:
    sent = await asyncio.to_thread(invoke, ["send", HOSTILE])
    assert_inert(sent.output)
    assert sent.stdout.startswith("echo: look")  # stderr names the temp- session it used

    asked = await gateway.runtime.router.submit(Inbound(MAL, "cli-ask", f"!ask {HOSTILE}"))
    await gateway.runtime.router.wait(asked.task_hash, 10, until_prompt=True)
    waiting = await asyncio.to_thread(invoke, ["pending"])
    assert_inert(waiting.output)
    assert waiting.output.startswith(f"cli-ask  {asked.task_hash}  question: look")
    await gateway.runtime.router.cancel("cli-ask", by="test")
