"""Configured secrets never reach a log line: ours, a library's, or a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fakes.telegram import FakeTelegram

from gateway.logs import MASK, configure_logging, get_logger, hide_also, hide_secrets
from gateway.settings import LogFormat, Settings

EXE = shutil.which("agenvoy") or str(Path(sys.executable).with_name("agenvoy"))
BOT_TOKEN = "123456:AAE-bot-token_value"
DB_PASSWORD = "p@ss:word/1"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        home=tmp_path / "home",
        telegram_token=BOT_TOKEN,
        discord_token="discord.token.value",
        api_token="http-api-token",
        openai_api_key="sk-openai-key",
        database_url="postgresql://agenvoy:p%40ss%3Aword%2F1@db.internal:5432/agenvoy",
        kv_url="redis://:redis-secret@kv.internal:6379/0",
        _env_file=None,
    )


@pytest.fixture
def masked(settings: Settings) -> Iterator[None]:
    try:
        yield
    finally:
        hide_secrets(Settings(home=settings.home, _env_file=None))
        configure_logging("WARNING", LogFormat.console)


SECRETS = [
    BOT_TOKEN,
    "discord.token.value",
    "http-api-token",
    "sk-openai-key",
    DB_PASSWORD,
    "p%40ss%3Aword%2F1",
    "redis-secret",
]


def assert_masked(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, text


@pytest.mark.parametrize("fmt", [LogFormat.json, LogFormat.console])
def test_secrets_are_masked_in_our_lines_and_tracebacks(
    settings: Settings, masked: None, fmt: LogFormat, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("INFO", fmt)
    hide_secrets(settings)
    log = get_logger("gateway.test")
    log.info("calling", url=f"https://api.telegram.org/bot{BOT_TOKEN}/getMe")
    log.info(f"database {settings.database_url} and kv {settings.kv_url}")
    log.warning("decoded", password=DB_PASSWORD, keys=["sk-openai-key", "http-api-token"])
    try:
        raise RuntimeError("bad token discord.token.value")
    except RuntimeError:
        log.exception("failed")
    err = capsys.readouterr().err
    assert_masked(err)
    assert err.count(MASK) >= 7
    assert "api.telegram.org/bot***/getMe" in err
    assert "db.internal" in err  # only the secret goes, the rest of the line stays


def test_an_http_client_request_line_is_masked(
    settings: Settings, masked: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("INFO", LogFormat.json)
    hide_secrets(settings)
    url = f"https://api.telegram.org/bot{BOT_TOKEN}/getUpdates"

    def request() -> None:
        transport = httpx.MockTransport(lambda _: httpx.Response(200, json={"ok": True}))
        with httpx.Client(transport=transport) as client:
            client.get(url).raise_for_status()

    request()  # at the default level httpx says nothing
    assert capsys.readouterr().err == ""
    logging.getLogger("httpx").setLevel(logging.INFO)
    request()
    try:
        raise ValueError(f"refused: {url}")
    except ValueError:
        logging.getLogger("some.library").exception("retrying %s", url)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line]
    assert [entry["logger"] for entry in lines] == ["httpx", "some.library"]
    assert lines[0]["event"].startswith("HTTP Request: GET https://api.telegram.org/bot***/")
    assert_masked(json.dumps(lines))
    assert "Traceback" in lines[1]["exception"] and "refused: https" in lines[1]["exception"]


def test_a_token_learnt_while_running_is_masked_beside_the_settings_own(
    settings: Settings, masked: None, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging("INFO", LogFormat.json)
    hide_secrets(settings)
    live = "777000:connected-live-token"
    log = get_logger("gateway.test")
    log.info("before", url=f"https://api.telegram.org/bot{live}/getMe")
    hide_also(live)
    log.info("after", url=f"https://api.telegram.org/bot{live}/getMe", other=BOT_TOKEN)
    hide_secrets(settings)  # the settings read again keep what was learnt
    log.info("again", token=live)
    before, after, again = (json.loads(line) for line in capsys.readouterr().err.splitlines())
    assert live in before["url"]  # not known yet: the test can tell masked from not
    assert after["url"] == f"https://api.telegram.org/bot{MASK}/getMe"
    assert after["other"] == MASK and again["token"] == MASK


@pytest.mark.parametrize("name", ["httpx", "httpcore", "hpack", "aiohttp.client"])
def test_http_clients_are_quiet_below_warning(masked: None, name: str) -> None:
    configure_logging("INFO", LogFormat.console)
    assert not logging.getLogger(name).isEnabledFor(logging.INFO)
    assert logging.getLogger(name).isEnabledFor(logging.WARNING)


@pytest.mark.slow
async def test_a_rejected_bot_token_is_masked_and_the_gateway_goes_on(tmp_path: Path) -> None:
    """Telegram refuses the token: the gateway says so, with the token masked (the refusal
    quotes it), and goes on serving the rest (its HTTP API, where an admin can connect
    another token) rather than stop."""
    rejected = "424242:rejected-bot-token"
    async with FakeTelegram() as fake:  # knows only its own token: ours gets a 401
        process = await asyncio.create_subprocess_exec(
            EXE,
            "run",
            env={
                **os.environ,
                "AGENVOY_HOME": str(tmp_path / "home"),
                "AGENVOY_HTTP_PORT": "0",
                "AGENVOY_LOG_LEVEL": "DEBUG",
                "AGENVOY_LOG_FORMAT": "json",
                "AGENVOY_TELEGRAM_TOKEN": rejected,
                "AGENVOY_TELEGRAM_API_URL": fake.url,
            },
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stderr is not None
        lines: list[str] = []

        async def until(event: str) -> dict[str, object]:
            assert process.stderr is not None
            while True:
                raw = await process.stderr.readline()
                assert raw, "the gateway ended:\n" + "".join(lines)
                lines.append(raw.decode())
                with contextlib.suppress(ValueError):
                    entry: dict[str, object] = json.loads(raw)
                    if entry.get("event") == event:
                        return entry

        try:
            refused = await asyncio.wait_for(until("platform cannot start"), 60)
            await asyncio.wait_for(until("gateway ready"), 60)
            assert process.returncode is None  # still serving
        finally:
            process.terminate()
            _, rest = await asyncio.wait_for(process.communicate(), 60)
    text = "".join(lines) + rest.decode()
    assert "was rejected by the server" in str(refused["error"]) and f"`{MASK}`" in text
    assert "rejected-bot-token" not in text
