"""The `.env` file the gateway reads its settings from, changed the way `agenvoy setup` does it:
every line it does not change kept as it was (comments, other settings, their order), the
changed ones replaced where they stand, new ones added at the end, and the whole file written at
once, mode 0600, with the previous one kept beside it as `.env.bak`.

It is parsed with python-dotenv, the parser pydantic-settings reads it with, so what is read
here is what the gateway reads; values are read without expanding `${NAME}`, which is how a key
is referenced rather than written (`env:NAME` at the prompt).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

BACKUP_SUFFIX: Final = ".bak"
# A key given as `env:NAME` is written as `${NAME}`: python-dotenv expands it from the
# environment when the gateway reads the file, so the key itself is never in the file.
REFERENCE: Final = re.compile(r"^env:([A-Za-z_][A-Za-z0-9_]*)$")
WRITTEN_REFERENCE: Final = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
# Shown of a secret: enough to tell two apart, never enough to use.
SHOWN_CHARS: Final = 4
SHORTEST_SHOWN: Final = 16


class UnwritableValue(ValueError):
    """A value the `.env` format cannot hold as it is."""


@dataclass(frozen=True, slots=True)
class Change:
    """One setting: its value in the file now (None: not there) and after (None: removed)."""

    key: str
    before: str | None
    after: str | None
    secret: bool


def read_values(path: Path) -> dict[str, str]:
    """The file's settings, names upper-cased (the gateway reads them case-insensitively),
    `${NAME}` references left as written; empty when there is no file."""
    if not path.is_file():
        return {}
    from dotenv import dotenv_values

    values = dotenv_values(path, encoding="utf-8", interpolate=False)
    return {key.upper(): value for key, value in values.items() if value is not None}


def as_reference(typed: str) -> str | None:
    """`env:NAME` as the `${NAME}` written to the file; None when `typed` is no reference."""
    found = REFERENCE.match(typed.strip())
    return f"${{{found.group(1)}}}" if found else None


def referenced_name(value: str) -> str | None:
    """The variable a written `${NAME}` value names; None for a value of its own."""
    found = WRITTEN_REFERENCE.match(value)
    return found.group(1) if found else None


def masked(value: str | None, *, secret: bool) -> str:
    """A value as the operator is shown it: a secret by its first and last few characters,
    a reference by the variable it names."""
    if value is None:
        return "(not set)"
    if not secret:
        return value
    name = referenced_name(value)
    if name is not None:
        return f"env:{name}"
    if len(value) < SHORTEST_SHOWN:
        return "•" * 8
    return f"{value[:SHOWN_CHARS]}…{value[-SHOWN_CHARS:]}"


def changes(
    current: Mapping[str, str], wanted: Mapping[str, str | None], secrets: frozenset[str]
) -> list[Change]:
    """What writing `wanted` (None: remove the setting) changes of `current`, in the order
    `wanted` names the settings; settings already as wanted are left out."""
    return [
        Change(key, current.get(key), value, key in secrets)
        for key, value in wanted.items()
        if current.get(key) != value
    ]


def _line(key: str, value: str) -> str:
    if "${" in value and referenced_name(value) is None:
        # python-dotenv would expand it when the gateway reads the file, quoted or not.
        raise UnwritableValue(f"{key}: a value cannot contain '${{'")
    if "\n" in value or "\r" in value:
        raise UnwritableValue(f"{key}: a value cannot span lines")
    # Single quotes: nothing in the value is taken for a comment or an escape (`\\` and `\'`
    # are the two escapes python-dotenv decodes inside them).
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"{key}='{escaped}'\n"


def updated_text(text: str, updates: list[Change]) -> str:
    """`text` with `updates` made: a setting's lines replaced where they are (each of them,
    should it be there twice) or dropped when it is removed, a new one appended."""
    from dotenv.parser import parse_stream

    by_key = {change.key: change for change in updates}
    placed: set[str] = set()
    out: list[str] = []
    for binding in parse_stream(io.StringIO(text)):
        key = binding.key.upper() if binding.key else None
        if key is None or key not in by_key:
            out.append(binding.original.string)
            continue
        placed.add(key)
        after = by_key[key].after
        if after is not None:
            out.append(_line(key, after))
    added = [
        _line(change.key, change.after)
        for change in updates
        if change.key not in placed and change.after is not None
    ]
    if added:
        if out and not out[-1].endswith("\n"):
            out.append("\n")
        if out:
            out.append("\n# Written by `agenvoy setup`.\n")
        out.extend(added)
    return "".join(out)


def write(path: Path, updates: list[Change]) -> Path | None:
    """Make `updates` to the file at `path` (created when missing), all at once: the new file
    is written beside it and renamed over it, so the gateway reads the old file or the new
    one, never a part. Both it and the copy of the old one are mode 0600 (they hold tokens).
    Returns where the old file was kept, if there was one."""
    from gateway.store.fslock import atomic_write

    old = path.read_text(encoding="utf-8") if path.is_file() else None
    new = updated_text(old or "", updates)
    backup = None
    if old is not None:
        backup = path.with_name(path.name + BACKUP_SUFFIX)
        # mkstemp (under atomic_write) makes its file 0600 before anything is written to it.
        atomic_write(backup, old.encode("utf-8"))
    atomic_write(path, new.encode("utf-8"))
    return backup


def set_in_environment(keys: list[str], environ: Mapping[str, str] | None = None) -> list[str]:
    """Which of `keys` the environment sets: there they win over the file."""
    names = {name.upper() for name in (os.environ if environ is None else environ)}
    return [key for key in keys if key in names]
