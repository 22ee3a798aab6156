"""Saving what users attach into their session's workspace, for every platform."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from gateway.events import Attachment
from gateway.store.sessions import SessionStore

ATTACHMENTS_DIR = "workspace/attachments"


def safe_name(name: str) -> str:
    """A file name that stays inside the folder it is written to."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")
    return cleaned[:120] or "file"


async def save_attachment(
    store: SessionStore, session_id: str, name: str, mime: str, data: bytes
) -> Attachment:
    """Write `data` under the session's workspace/attachments; the session must exist."""
    safe = safe_name(name)
    session_dir = store.files(session_id).dir
    await asyncio.to_thread(_write, session_dir, safe, data)
    return Attachment(safe, mime, len(data), f"{ATTACHMENTS_DIR}/{safe}")


def describe(attachments: list[Attachment]) -> str:
    """How the agent hears of attachments: one line each, saying where it can read them."""
    return "\n".join(
        f"[attachment: {a.name}, {a.mime}, {a.size} bytes"
        + (f", saved as {a.path}]" if a.path else ", not downloaded: too large]")
        for a in attachments
    )


def _write(session_dir: Path, name: str, data: bytes) -> None:
    # Only folders inside an existing session are made here, never the session itself.
    if not session_dir.is_dir():
        raise FileNotFoundError(str(session_dir))
    folder = session_dir / ATTACHMENTS_DIR
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = folder / f".{name}.part"
    tmp.write_bytes(data)
    tmp.replace(folder / name)
