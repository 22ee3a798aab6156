"""Saving what users attach into their session's workspace, for every platform."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.events import Attachment
from gateway.logs import get_logger
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

ATTACHMENTS_DIR = "workspace/attachments"


@dataclass(frozen=True, slots=True)
class Download:
    """A file that came with a message, not fetched yet."""

    name: str  # unique within the session (the platform's file id in front)
    mime: str
    size: int  # as the platform announced it; 0 when it did not
    fetch: Callable[[], Awaitable[bytes]]


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


async def save_downloads(
    store: SessionStore,
    session_id: str,
    downloads: Sequence[Download],
    limit: int,
    errors: tuple[type[Exception], ...],
) -> list[Attachment]:
    """Fetch each file into the session workspace (creating the session). A file over `limit`
    bytes, or one the platform fails to hand over (`errors`), is described but not saved."""
    await store.ensure(session_id)
    saved: list[Attachment] = []
    for item in downloads:
        name = safe_name(item.name)
        if item.size > limit:
            saved.append(Attachment(name, item.mime, item.size, ""))
            continue
        try:
            data = await item.fetch()
        except errors as exc:
            log.warning("attachment download failed", error=str(exc), name=item.name)
            saved.append(Attachment(name, item.mime, item.size, ""))
            continue
        if len(data) > limit:
            saved.append(Attachment(name, item.mime, len(data), ""))
            continue
        saved.append(await save_attachment(store, session_id, name, item.mime, data))
    return saved


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
