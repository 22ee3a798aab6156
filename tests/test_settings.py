from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError
from support import head_revision

from gateway.settings import LogFormat, Settings, mask_url


def test_defaults_live_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("AGENVOY_HOME", "AGENVOY_DATABASE_URL", "AGENVOY_KV_URL"):
        monkeypatch.delenv(var, raising=False)
    settings = Settings(_env_file=None)
    home = tmp_path / ".config" / "agenvoy"
    assert settings.home == home
    assert settings.sessions_dir == home / "sessions"
    assert settings.resolved_database_url == f"sqlite:///{home}/.store/history.db"
    assert settings.resolved_kv_url == f"sqlite:///{home}/.store/kv.db"
    assert settings.log_format is LogFormat.console


def test_env_file_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "AGENVOY_HOME=/srv/agenvoy\nAGENVOY_LOG_FORMAT=json\nAGENVOY_LOG_LEVEL=debug\n"
        "AGENVOY_INSTANCE_ID=\n"
    )
    monkeypatch.setenv("AGENVOY_DATABASE_URL", "postgresql://bot:hunter2@db:5432/agenvoy")
    settings = Settings(_env_file=env_file)
    assert settings.home == Path("/srv/agenvoy")
    assert settings.log_format is LogFormat.json
    assert settings.log_level == "DEBUG"
    assert settings.instance_id  # empty falls back to the host name
    shown = settings.masked()
    assert shown["database_url"] == "postgresql://bot:***@db:5432/agenvoy"
    assert "hunter2" not in str(shown)


def test_bad_values_are_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENVOY_LOG_FORMAT", "xml")
    with pytest.raises(ValidationError, match="log_format"):
        Settings(_env_file=None)
    monkeypatch.setenv("AGENVOY_LOG_FORMAT", "json")
    monkeypatch.setenv("AGENVOY_LOG_LEVEL", "chatty")
    with pytest.raises(ValidationError, match="log level"):
        Settings(_env_file=None)


def test_secret_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENVOY_API_TOKEN", "s3cret-token")
    settings = Settings(_env_file=None)
    assert settings.masked()["api_token"] == "***"
    assert "s3cret" not in repr(settings)


def test_env_example_lists_every_setting() -> None:
    example = (Path(__file__).parents[1] / ".env.example").read_text()
    for name in Settings.model_fields:
        assert f"AGENVOY_{name.upper()}=" in example, name


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("sqlite+aiosqlite:////a/b.db", "sqlite+aiosqlite:////a/b.db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
    ],
)
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown


def test_cli_doctor_and_errors(tmp_path: Path) -> None:
    exe = shutil.which("agenvoy") or str(Path(__file__).parents[1] / ".venv" / "bin" / "agenvoy")

    def start(home: str, *args: str, **extra: str) -> subprocess.Popen[str]:
        # Each in a home of its own, so the four run at once.
        env = {"AGENVOY_HOME": str(tmp_path / home), "PATH": "/usr/bin:/bin", **extra}
        return subprocess.Popen(
            [exe, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def finished(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
        stdout, stderr = proc.communicate(timeout=60)
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)

    started = [
        start("h", "doctor"),
        start("broken", "doctor", AGENVOY_KV_URL="memcached://nowhere"),
        start("bad", "show", "../etc"),
        start("missing", "show", "cli-none"),
    ]
    done, broken, bad, missing = (finished(proc) for proc in started)
    assert done.returncode == 0, done.stderr
    assert f"database migrated to revision {head_revision()}" in done.stdout
    assert "KV store reads and writes" in done.stdout
    assert broken.returncode == 1 and "FAIL  KV store" in broken.stdout
    assert bad.returncode == 2 and "invalid session id" in bad.stderr
    assert missing.returncode == 1 and "no such session: cli-none" in missing.stderr


def test_anonymous_callers_cannot_be_admins() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="may not list http:anonymous"):
        Settings(admins="telegram:1, http:anonymous", _env_file=None)
    assert Settings(admins="http:alice", _env_file=None).admin_keys == {"http:alice"}


def test_the_discord_admin_role_is_an_id_never_a_name() -> None:
    """A role name is its guild's to choose: matched by name, a role called "ops" in any guild
    the bot is in would make its members admins everywhere the bot serves."""
    with pytest.raises(ValidationError, match="takes a role id"):
        Settings(discord_admin_role="ops", _env_file=None)
    assert Settings(discord_admin_role=" 950 ", _env_file=None).discord_admin_role == "950"
    assert Settings(discord_admin_role="", _env_file=None).discord_admin_role == ""
