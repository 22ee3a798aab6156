"""What a newcomer sees in the first hour: the start-up log, clients finding a gateway on a
port the system chose, `agenvoy doctor`'s table, the new-session log line, and a Discord
bot that starts without warnings about voice it never uses."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from pathlib import Path

import discord
import pytest
from discord_rig import general_only, running
from gateway_proc import EXE, Gateway
from test_http import serving

from gateway.client_settings import PORT_FILE
from gateway.jobs import SessionWatcher


async def agenvoy(home: Path, *args: str, **env: str) -> tuple[int, str, str]:
    command = await asyncio.create_subprocess_exec(
        EXE,
        *args,
        env={**os.environ, "AGENVOY_HOME": str(home), "NO_PROXY": "127.0.0.1", **env},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(command.communicate(), 60)
    assert command.returncode is not None
    return command.returncode, out.decode(), err.decode()


async def test_clients_find_a_gateway_on_a_chosen_port_and_the_log_says_tokens_are_asked(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    code, _, err = await agenvoy(home, "token", "add", "bob")
    assert code == 0, err
    gateway = Gateway(home, 0)
    await gateway.start()
    try:
        started = [e for e in gateway.log if e.get("adapter") == "http"]
        # Per-user tokens are enforced: the line says a token is asked for.
        assert [e.get("auth") for e in started] == [True], started
        port = int((home / ".store" / PORT_FILE).read_text())
        assert started[0]["url"] == f"http://127.0.0.1:{port}"
        code, out, err = await agenvoy(
            home, "send", "hello", "--session", "cli-port", AGENVOY_HTTP_PORT="0"
        )
        assert (code, out.strip()) == (0, "echo: hello"), err
    finally:
        assert await gateway.stop() == 0
    assert not (home / ".store" / PORT_FILE).exists()
    code, _, err = await agenvoy(home, "send", "hello", AGENVOY_HTTP_PORT="0")
    assert code == 1 and "not running" in err, err


async def test_doctor_lines_its_settings_up_and_leaves_test_settings_out(tmp_path: Path) -> None:
    code, out, err = await agenvoy(tmp_path / "home", "doctor")
    assert code == 0, err
    rows = out.split("settings\n", 1)[1].split("\nok ", 1)[0].splitlines()
    assert len(rows) > 20 and all(row.startswith("  ") for row in rows)
    valued = [m for row in rows if (m := re.fullmatch(r"  (\S+ +)(\S.*)", row))]
    assert len(valued) > 10
    columns = {len(m.group(1)) for m in valued}
    assert len(columns) == 1, out  # every value starts in the same column
    assert "crash_at" not in out
    code, out, _ = await agenvoy(tmp_path / "home", "doctor", AGENVOY_CRASH_AT="stored")
    assert "crash_at is set" in out


async def test_the_new_session_line_names_a_session_named_as_it_is_made(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        seen: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        watcher = SessionWatcher(server.runtime.store, on_new=lambda *new: seen.put_nowait(new))
        job = asyncio.create_task(watcher.run())
        try:
            await asyncio.wait_for(watcher.ready.wait(), 10)
            status, made = await server.call(
                "POST", "/v1/session", json_body={"prefix": "cli", "name": "planning"}
            )
            assert status == 201, made
            found = await asyncio.wait_for(seen.get(), 10)
            assert found == (made["session_id"], "planning")
            listed = await server.call("GET", f"/v1/session/{made['session_id']}")
            assert listed[1]["name"] == "planning"
        finally:
            job.cancel()
            with pytest.raises(asyncio.CancelledError):
                await job


async def test_a_discord_bot_starts_without_voice_warnings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As in a fresh process: discord.py warns once, at the first client made.
    monkeypatch.setattr(discord.VoiceClient, "warn_nacl", True)
    monkeypatch.setattr(discord.VoiceClient, "warn_dave", True)
    with caplog.at_level(logging.WARNING, logger="discord"):
        async with general_only() as fake, running(fake, tmp_path / "home"):
            pass
    said = [r.getMessage() for r in caplog.records if r.name.startswith("discord")]
    assert not [m for m in said if "voice" in m], said
