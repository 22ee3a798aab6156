"""Where a profile's key comes from: `env:NAME` (an environment variable of the gateway's
process) or `file:NAME` (an entry of the secrets file, `NAME=value` lines, readable by its
owner alone). The key is read when the profile's agent is built and kept in that agent only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gateway.profiles.spec import KEY_REFERENCE


class KeyUnavailable(RuntimeError):
    """The reference names nothing usable; the message says which and why (never a key)."""


def read_secrets_file(path: Path) -> dict[str, str]:
    """The entries of a secrets file; refused unless only its owner may read it (0600)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise KeyUnavailable(f"the secrets file {path} does not exist") from None
    if stat.S_IMODE(mode) & 0o077:
        raise KeyUnavailable(
            f"the secrets file {path} may be read by others (chmod 600 {path.name})"
        )
    entries: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, sep, value = stripped.partition("=")
        if sep:
            entries[name.strip()] = value.strip().strip('"').strip("'")
    return entries


def resolve_key(reference: str, secrets_file: Path) -> str | None:
    """The key `reference` names; None for no reference. Blocking (reads a file): call it in a
    thread."""
    if not reference:
        return None
    found = KEY_REFERENCE.fullmatch(reference)
    if found is None:
        raise KeyUnavailable(f"{reference!r} is not env:NAME or file:NAME")
    where, name = found.groups()
    if where == "env":
        value = os.environ.get(name)
        if not value:
            raise KeyUnavailable(f"the environment variable {name} is not set")
        return value
    value = read_secrets_file(secrets_file).get(name)
    if not value:
        raise KeyUnavailable(f"the secrets file {secrets_file} has no entry {name}")
    return value
