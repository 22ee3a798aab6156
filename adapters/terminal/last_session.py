"""The session a window showed last, so the next `agenvoy chat` opens it again.

Kept in a small JSON file (`<home>/terminal.json`), replaced atomically; a missing, unreadable
or tampered file just means no session is remembered.
"""

from __future__ import annotations

import json
from pathlib import Path

from gateway.ids import InvalidSessionId, validate_session_id


def recall(path: Path) -> str | None:
    try:
        value = json.loads(path.read_text()).get("last_session")
        return validate_session_id(value) if isinstance(value, str) else None
    except (OSError, ValueError, AttributeError, InvalidSessionId):
        return None


def remember(path: Path, session_id: str) -> bool:
    """Whether it could be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"last_session": session_id}))
        tmp.replace(path)
    except OSError:
        return False
    return True
