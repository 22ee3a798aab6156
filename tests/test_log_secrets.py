"""Configured secrets never reach a log line: ours, a library's, or a traceback."""

from __future__ import annotations

import asyncio
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

from gateway.logs import MASK, configure_logging, get_logger, hide_secrets
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


@pytest.mark.parametrize("name", ["httpx", "httpcore", "hpack", "aiohttp.client"])
def test_http_clients_are_quiet_below_warning(masked: None, name: str) -> None:
    configure_logging("INFO", LogFormat.console)
    assert not logging.getLogger(name).isEnabledFor(logging.INFO)
    assert logging.getLogger(name).isEnabledFor(logging.WARNING)


@pytest.mark.slow
async def test_a_rejected_bot_token_is_masked_when_the_gateway_gives_up(tmp_path: Path) -> None:
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
                "AGENVOY_TELEGRAM_TOKEN": rejected,
                "AGENVOY_TELEGRAM_API_URL": fake.url,
            },
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(), 60)
    text = err.decode()
    assert process.returncode == 1, text
    assert "the gateway stopped on an unexpected error" in text
    assert "was rejected by the server" in text and f"`{MASK}`" in text
    assert "rejected-bot-token" not in text
