"""The command line's light settings reader gives the same answers as `Settings`, from the
environment, a `.env` file, and both, and refuses what `Settings` refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.client_settings import (
    ClientSettings,
    InvalidClientSettings,
    read_client_settings,
)
from gateway.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def both(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], dotenv: str | None
) -> tuple[ClientSettings, ClientSettings]:
    for key in list(os.environ):
        if key.upper().startswith("AGENVOY_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    env_file = tmp_path / ".env"
    if dotenv is not None:
        env_file.write_text(dotenv)
    full = Settings(_env_file=env_file)
    return read_client_settings(env_file=env_file), full.client()


CASES = [
    pytest.param({}, None, id="defaults"),
    pytest.param(
        {"AGENVOY_HOME": "~/bot", "AGENVOY_HTTP_PORT": "8080", "AGENVOY_HTTP_HOST": "0.0.0.0"},
        None,
        id="environment",
    ),
    pytest.param({}, "AGENVOY_HTTP_PORT=9000\nAGENVOY_API_TOKEN='s3cret # kept'\n", id="dotenv"),
    pytest.param(
        {"AGENVOY_HTTP_PORT": "9100"},
        "# a comment\nexport AGENVOY_HTTP_PORT=9000\n"
        "agenvoy_http_host=::1\nAGENVOY_HOME=rel/home\n",
        id="environment-over-dotenv",
    ),
    pytest.param({"agenvoy_api_token": "lower"}, None, id="case-insensitive"),
    pytest.param(
        {}, 'AGENVOY_HOME="${HOME}/x"\nAGENVOY_API_TOKEN=\n', id="interpolation-and-empty"
    ),
]


@pytest.mark.parametrize(("env", "dotenv"), CASES)
def test_the_light_reader_agrees_with_settings(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    env: dict[str, str],
    dotenv: str | None,
) -> None:
    monkeypatch.chdir(tmp_path)
    light, full = both(monkeypatch, tmp_path, env, dotenv)
    assert light == full
    assert light.gateway_url.startswith("http://")


def test_a_bad_port_is_refused_by_both(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError):
        both(monkeypatch, tmp_path, {"AGENVOY_HTTP_PORT": "eighty"}, None)
    with pytest.raises(InvalidClientSettings, match="AGENVOY_HTTP_PORT"):
        read_client_settings(env_file=None)


def test_gateway_url_brackets_ipv6_and_reaches_wildcards_on_loopback() -> None:
    home = Path("/h")
    assert ClientSettings(home, "::1", 1).gateway_url == "http://[::1]:1"
    assert ClientSettings(home, "::", 2).gateway_url == "http://127.0.0.1:2"
    assert ClientSettings(home, "0.0.0.0", 3).gateway_url == "http://127.0.0.1:3"


def test_the_client_commands_load_no_pydantic_and_no_store(tmp_path: Path) -> None:
    # What `agenvoy send` pays for at start-up: the command line, aiohttp and this reader.
    probe = (
        "import sys\n"
        "from gateway.cli import app\n"
        "from adapters.terminal.commands import _client_call\n"
        "from adapters.http_client import GatewayClient\n"
        "from adapters.terminal.launch import client_token\n"
        "from gateway.client_settings import read_client_settings\n"
        "client_token(read_client_settings())\n"
        "heavy = [m for m in ('pydantic', 'pydantic_settings', 'sqlalchemy', 'gateway.settings',"
        " 'gateway.store', 'structlog', 'textual') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    env = {**os.environ, "AGENVOY_HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
