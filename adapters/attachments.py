"""Saving what users attach into their session's workspace, for every platform.

Files are fetched into hidden `.part` files first (`stage_downloads`) and put in place only
once the message they came with is accepted (`Staged.keep`): a message refused for its length
or its text leaves no file behind (`Staged.drop`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
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


@dataclass
class Staged:
    """The attachments of one message: described, fetched, not yet in place."""

    attachments: list[Attachment] = field(default_factory=list)
    _moves: list[tuple[Path, Path]] = field(default_factory=list)  # (.part file, final name)

    def fetched(self, attachment: Attachment, part: Path) -> None:
        self.attachments.append(attachment)
        self._moves.append((part, part.with_name(attachment.name)))

    async def keep(self) -> None:
        """Put every fetched file under its final name."""
        moves, self._moves = self._moves, []
        await asyncio.to_thread(_move, moves)

    async def drop(self) -> None:
        """Remove every fetched file: the message was refused."""
        moves, self._moves = self._moves, []
        await asyncio.to_thread(_remove, [part for part, _ in moves])


def safe_name(name: str) -> str:
    """A file name that stays inside the folder it is written to."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")
    return cleaned[:120] or "file"


async def stage_downloads(
    store: SessionStore,
    session_id: str,
    downloads: Sequence[Download],
    limit: int,
    errors: tuple[type[Exception], ...],
) -> Staged:
    """Fetch each file into the session workspace (creating the session), under a hidden name
    until `keep`. A file over `limit` bytes, or one the platform fails to hand over
    (`errors`), is described but not saved."""
    staged = Staged()
    if not downloads:
        return staged
    await store.ensure(session_id)
    folder = store.files(session_id).dir / ATTACHMENTS_DIR
    for item in downloads:
        name = safe_name(item.name)
        if item.size > limit:
            staged.attachments.append(Attachment(name, item.mime, item.size, ""))
            continue
        try:
            data = await item.fetch()
        except errors as exc:
            log.warning("attachment download failed", error=str(exc), name=item.name)
            staged.attachments.append(Attachment(name, item.mime, item.size, ""))
            continue
        if len(data) > limit:
            staged.attachments.append(Attachment(name, item.mime, len(data), ""))
            continue
        part = await asyncio.to_thread(_write_part, folder, name, data)
        staged.fetched(Attachment(name, item.mime, len(data), f"{ATTACHMENTS_DIR}/{name}"), part)
    return staged


def describe(attachments: Sequence[Attachment]) -> str:
    """How the agent hears of attachments: one line each, saying where it can read them."""
    return "\n".join(
        f"[attachment: {a.name}, {a.mime}, {a.size} bytes"
        + (f", saved as {a.path}]" if a.path else ", not downloaded: too large]")
        for a in attachments
    )


def _write_part(folder: Path, name: str, data: bytes) -> Path:
    # Only folders inside an existing session are made here, never the session itself.
    session_dir = folder.parents[1]
    if not session_dir.is_dir():
        raise FileNotFoundError(str(session_dir))
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    part = folder / f".{name}.part"
    part.write_bytes(data)
    return part


def _move(moves: list[tuple[Path, Path]]) -> None:
    for part, final in moves:
        part.replace(final)


def _remove(parts: list[Path]) -> None:
    for part in parts:
        part.unlink(missing_ok=True)
