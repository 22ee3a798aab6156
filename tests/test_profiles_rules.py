"""The rules of agent profiles that need no front-end: which binding wins, what a change may
hold (a key never), and where a key reference points."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from gateway.events import Origin
from gateway.profiles.bindings import Binding, BindingInvalid, parse_target, winner
from gateway.profiles.building import profile_settings
from gateway.profiles.keys import KeyUnavailable, resolve_key
from gateway.profiles.spec import ProfileInvalid, ProfileSpec, changed
from gateway.settings import Settings

pytestmark = pytest.mark.fast

IN_THREAD = Origin(
    "discord",
    "902",
    sender_id="12",
    guild_id="900",
    parent_id="901",
    category_id="950",
    role_ids=("70", "71"),
)


def bound(*targets: str) -> dict[tuple[str, str], Binding]:
    found = {}
    for target in targets:
        kind, key = parse_target(target)
        found[(kind, key)] = Binding(kind, key, target)
    return found


@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        (["discord-guild:900", "discord-channel:901", "discord-thread:902"], "discord-thread:902"),
        (["discord-guild:900", "discord-channel:901"], "discord-channel:901"),
        (["discord-guild:900", "discord-category:950"], "discord-category:950"),
        (["discord-guild:900", "discord-role:71", "discord-role:70"], "discord-role:70"),
        (["discord-guild:900", "identity:discord:12"], "discord-guild:900"),
        (["identity:discord:12", "prefix:dc"], "identity:discord:12"),
        (["prefix:dc"], "prefix:dc"),
        (["session:dc-902", "discord-thread:902"], "session:dc-902"),
    ],
)
def test_the_most_specific_binding_wins(targets: list[str], expected: str) -> None:
    found = winner(bound(*targets), "dc-902", IN_THREAD)
    assert found is not None and found.profile == expected


def test_a_telegram_topic_is_bound_apart_from_its_group() -> None:
    both = bound("telegram-chat:-100", "telegram-topic:-100:7")
    topic = winner(both, "tg--100_7", Origin("telegram", "-100:7", sender_id="5"))
    general = winner(both, "tg--100", Origin("telegram", "-100", sender_id="5"))
    assert topic is not None and topic.profile == "telegram-topic:-100:7"
    assert general is not None and general.profile == "telegram-chat:-100"
    assert winner(bound("telegram-chat:-100"), "tg--100_7", None) is not None


def test_nothing_bound_is_the_default() -> None:
    assert winner({}, "cli-abc", Origin("terminal", sender_id="me")) is None


@pytest.mark.parametrize(
    "target", ["nowhere:1", "discord-channel:abc", "prefix:xyz", "session:../x", "identity:x"]
)
def test_a_bad_target_is_refused(target: str) -> None:
    with pytest.raises(BindingInvalid):
        parse_target(target)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"agent": "gpt"}, "agent"),
        ({"key": "sk-proj-abcdefghijklmnopqrstuvwxyz0123"}, "key"),
        ({"key": "plainvalue"}, "key"),
        ({"persona": "use sk-" + "abcdefghijklmnop" + "-not-a-real-key to call"}, "persona"),
        ({"model": "a3f9c2d8e7b6a5f4c3d2e1f0a9b8c7d6e5f4"}, "model"),
        ({"base_url": "https://user:pw@example.com/v1"}, "base_url"),
        ({"base_url": "ftp://example.com"}, "base_url"),
        ({"reasoning": "max"}, "reasoning"),
        ({"history_window": "0"}, "history_window"),
        ({"fallbacks": "Bad Name"}, "fallbacks"),
        ({"budgets": '{"tokens_day": -1}'}, "budgets"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_an_invalid_change_is_refused_naming_the_field(changes: dict[str, str], field: str) -> None:
    with pytest.raises(ProfileInvalid) as refused:
        changed(ProfileSpec(), changes)
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}: ")
    assert "sk-" not in str(refused.value)  # the refusal never repeats a key


def test_a_change_is_kept_as_json_and_read_back() -> None:
    spec = changed(
        ProfileSpec(),
        {
            "agent": "openai",
            "key": "env:TEAM_KEY",
            "allowed_tools": "read_file, list_files",
            "history_window": "12",
            "budgets": '{"tokens_day": 5000}',
        },
    )
    assert ProfileSpec.from_json(spec.to_json()) == spec
    assert spec.allowed_tools == ("read_file", "list_files")


def test_a_key_comes_from_the_environment_or_a_private_secrets_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = tmp_path / "secrets.env"
    secrets.write_text("# team keys\nTEAM=abc123\n")
    os.chmod(secrets, 0o644)
    with pytest.raises(KeyUnavailable, match="chmod 600"):
        resolve_key("file:TEAM", secrets)
    os.chmod(secrets, 0o600)
    assert resolve_key("file:TEAM", secrets) == "abc123"
    with pytest.raises(KeyUnavailable, match="no entry OTHER"):
        resolve_key("file:OTHER", secrets)
    monkeypatch.setenv("TEAM_KEY", "from-env")
    assert resolve_key("env:TEAM_KEY", secrets) == "from-env"
    monkeypatch.delenv("TEAM_KEY")
    with pytest.raises(KeyUnavailable, match="TEAM_KEY is not set"):
        resolve_key("env:TEAM_KEY", secrets)


def test_the_discord_place_survives_the_journal() -> None:
    assert Origin.from_json(IN_THREAD.to_json()) == IN_THREAD
    assert "guild_id" not in Origin("http", sender_id="a").to_json()


@pytest.mark.parametrize("agent", ["openai", "claude"])
def test_another_endpoint_never_gets_the_environments_key(agent: str, tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path,
        _env_file=None,
        openai_api_key=SecretStr("env-openai-key"),
        anthropic_api_key=SecretStr("env-claude-key"),
    )

    def key_of(made: Settings) -> str | None:
        key = made.anthropic_api_key if agent == "claude" else made.openai_api_key
        return key.get_secret_value() if key is not None else None

    elsewhere = ProfileSpec(agent=agent, base_url="https://models.example.net/v1")
    assert key_of(profile_settings(settings, elsewhere, None)) is None
    assert key_of(profile_settings(settings, elsewhere, "profile-key")) == "profile-key"
    # The environment's endpoint keeps the environment's key.
    same = profile_settings(settings, ProfileSpec(agent=agent, model="m"), None)
    assert key_of(settings) is not None
    assert key_of(same) == key_of(settings)
