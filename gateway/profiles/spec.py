"""What a profile holds, and how a change to one is checked.

A profile is stored as a JSON object of these fields; a change is a set of `field=value`
pairs applied to the current version. Every check names the field it refuses. A key is never
a field: `key` holds a *reference* (`env:NAME` or `file:NAME`), and anything that looks like
a key itself is refused wherever it is given, so it never reaches the archive, a log or a page.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Final
from urllib.parse import urlsplit

AGENT_KINDS: Final = ("offline", "openai", "claude", "claude-code")
REASONING_LEVELS: Final = ("", "low", "medium", "high")
DEFAULT: Final = "default"  # the built-in profile: the environment's configuration
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
KEY_REFERENCE = re.compile(r"(env|file):([A-Za-z_][A-Za-z0-9_.-]{0,127})")
TOOL_NAME = re.compile(r"[A-Za-z0-9_.:*-]{1,100}")
MAX_PERSONA_CHARS: Final = 16_000
MAX_LIST: Final = 64
# What provider keys look like: a known prefix followed by a long run of key characters, or a
# long unbroken run of mixed letters and digits (a bearer token, a hex secret).
_KEY_PREFIXED = re.compile(
    r"(sk|pk|rk|xai|gsk|ghp|gho|ghs|hf|sk-ant|sk-proj|AIza|AKIA)[-_]?[A-Za-z0-9_-]{16,}"
)
_LONG_TOKEN = re.compile(r"[A-Za-z0-9+=]{32,}")
FIELD_NAMES: Final = (
    "agent",
    "model",
    "base_url",
    "key",
    "persona",
    "reasoning",
    "allowed_tools",
    "mcp_servers",
    "history_window",
    "fallbacks",
    "budgets",
)
LIST_FIELDS: Final = frozenset({"allowed_tools", "mcp_servers", "fallbacks"})


class ProfileInvalid(ValueError):
    """A change refused: `field` names what is wrong (or `name` for the profile's name)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    """One version of a profile. Empty strings and None mean "as the environment says" (the
    `default` profile's value), so a profile states only what it changes."""

    agent: str = ""
    model: str = ""
    base_url: str = ""
    key: str = ""  # a reference: env:NAME or file:NAME, never the key
    persona: str = ""
    reasoning: str = ""
    allowed_tools: tuple[str, ...] = ()  # run without confirmation
    mcp_servers: tuple[str, ...] = ()  # names from the MCP config; empty: all of them
    history_window: int | None = None
    fallbacks: tuple[str, ...] = ()  # profile names tried after this one (the fallback layer)
    # Budgets per member for the tasks this profile answers (`tokens_day`, `tokens_month`),
    # held before each model call against the member's whole spend, besides their own.
    budgets: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        data = asdict(self)
        data["budgets"] = dict(self.budgets)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ProfileSpec:
        data: dict[str, Any] = json.loads(text)
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in data.items() if k in known}
        for name in LIST_FIELDS:
            if name in kept:
                kept[name] = tuple(kept[name])
        return cls(**kept)

    def shown(self) -> dict[str, Any]:
        """The fields as a page or the CLI shows them (the key's reference, never a key)."""
        data = asdict(self)
        data["budgets"] = dict(self.budgets)
        for name in LIST_FIELDS:
            data[name] = list(data[name])
        return data


def check_name(name: str, *, builtin_ok: bool = False) -> str:
    if not NAME.fullmatch(name):
        raise ProfileInvalid("name", "lower-case letters, digits, - and _, at most 40")
    if name == DEFAULT and not builtin_ok:
        raise ProfileInvalid(
            "name", "`default` is the environment's configuration (AGENVOY_AGENT...)"
        )
    return name


def looks_like_key(text: str) -> bool:
    """Whether `text` holds something shaped like a provider key or a bearer token."""
    if _KEY_PREFIXED.search(text):
        return True
    return any(
        re.search(r"[a-z]", token) and re.search(r"[0-9]", token)
        for token in _LONG_TOKEN.findall(text)
    )


def _refuse_keys(field_name: str, text: str) -> None:
    if looks_like_key(text):
        raise ProfileInvalid(
            field_name,
            "this looks like a key; a profile names where its key is (key=env:NAME or "
            "key=file:NAME), it never holds one",
        )


def _text(field_name: str, value: Any, limit: int) -> str:
    if not isinstance(value, str):
        raise ProfileInvalid(field_name, "expected text")
    if len(value) > limit or any(ord(c) < 32 and c not in "\n\t" for c in value):
        raise ProfileInvalid(field_name, f"at most {limit} characters, no control characters")
    _refuse_keys(field_name, value)
    return value


def _names(field_name: str, value: Any, pattern: re.Pattern[str]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise ProfileInvalid(field_name, "expected a list of names")
    names = tuple(str(item).strip() for item in items if str(item).strip())
    if len(names) > MAX_LIST:
        raise ProfileInvalid(field_name, f"at most {MAX_LIST} names")
    for name in names:
        if not pattern.fullmatch(name):
            raise ProfileInvalid(field_name, f"{name[:40]!r} is not a valid name")
    return tuple(dict.fromkeys(names))


def _checked(field_name: str, value: Any) -> Any:
    if field_name == "agent":
        if value not in AGENT_KINDS:
            raise ProfileInvalid(field_name, f"one of {', '.join(AGENT_KINDS)}")
        return value
    if field_name == "model":
        return _text(field_name, value, 200).strip()
    if field_name == "base_url":
        url = _text(field_name, value, 500).strip()
        if url:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ProfileInvalid(field_name, "an http:// or https:// URL")
            if parts.username or parts.password or parts.query:
                raise ProfileInvalid(field_name, "no credentials or query in the URL")
        return url
    if field_name == "key":
        reference = _text(field_name, value, 140).strip()
        if reference and not KEY_REFERENCE.fullmatch(reference):
            raise ProfileInvalid(
                field_name, "env:NAME (an environment variable) or file:NAME (a secrets-file entry)"
            )
        return reference
    if field_name == "persona":
        return _text(field_name, value, MAX_PERSONA_CHARS)
    if field_name == "reasoning":
        if value not in REASONING_LEVELS:
            raise ProfileInvalid(field_name, "low, medium, high, or empty")
        return value
    if field_name == "allowed_tools":
        return _names(field_name, value, TOOL_NAME)
    if field_name in ("mcp_servers", "fallbacks"):
        return _names(field_name, value, TOOL_NAME if field_name == "mcp_servers" else NAME)
    if field_name == "history_window":
        return _window(value)
    if field_name == "budgets":
        return _budgets(value)
    raise ProfileInvalid(field_name, f"unknown field; fields: {', '.join(FIELD_NAMES)}")


def _window(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        window = int(value)
    except (TypeError, ValueError):
        raise ProfileInvalid("history_window", "a whole number from 1 to 1000") from None
    if isinstance(value, bool) or not 1 <= window <= 1000:
        raise ProfileInvalid("history_window", "a whole number from 1 to 1000")
    return window


# What a profile's budgets may hold: tokens per member a day and a month.
PROFILE_BUDGETS: Final = ("tokens_day", "tokens_month")


def _budgets(value: Any) -> dict[str, int]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise ProfileInvalid(
                "budgets", 'a JSON object of whole numbers: {"tokens_day": 0}'
            ) from None
    if not isinstance(value, dict) or len(value) > MAX_LIST:
        raise ProfileInvalid("budgets", "an object of names and whole numbers")
    out: dict[str, int] = {}
    for key, limit in value.items():
        if key not in PROFILE_BUDGETS:
            said = ", ".join(PROFILE_BUDGETS)
            raise ProfileInvalid("budgets", f"{str(key)[:40]!r}: one of {said}")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ProfileInvalid("budgets", f"{key}: a whole number, 0 or more")
        out[key] = limit
    return out


def changed(current: ProfileSpec, changes: Mapping[str, Any]) -> ProfileSpec:
    """`current` with `changes` applied, each checked; raises ProfileInvalid naming a field."""
    if not changes:
        raise ProfileInvalid("fields", f"give at least one of {', '.join(FIELD_NAMES)}")
    checked = {name: _checked(name, value) for name, value in changes.items()}
    return replace(current, **checked)


def parse_pairs(pairs: list[str]) -> dict[str, Any]:
    """`field=value` pairs as typed on a command line (lists comma-separated)."""
    changes: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ProfileInvalid(name or "fields", "expected FIELD=VALUE")
        changes[name.strip()] = value
    return changes


def difference(before: ProfileSpec | None, after: ProfileSpec) -> str:
    """What a version changed, one phrase per field ("model: a → b"; a persona as changed)."""
    if before is None:
        return "created"
    said = []
    old, new = before.shown(), after.shown()
    for name in FIELD_NAMES:
        if old[name] == new[name]:
            continue
        if name == "persona":
            said.append("persona changed")
        else:
            said.append(f"{name}: {_short(old[name])} → {_short(new[name])}")
    return "; ".join(said) or "no change"


def _short(value: Any) -> str:
    text = ",".join(value) if isinstance(value, list) else json.dumps(value)
    text = text if isinstance(value, list) else text.strip('"')
    return (text or "(none)")[:60]
