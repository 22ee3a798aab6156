"""Saving what users attach into their session's workspace, for every platform.

Files are fetched first (`stage_downloads`) and written only once the message they came with is
accepted (`Staged.keep`): a message refused for its length or its text leaves no file behind
(`Staged.drop`). They are written like every workspace file (`gateway.agents.workspace`): never
through a link, so an agent that planted one cannot have an attachment land outside.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from gateway.agents.workspace import Workspace, WorkspaceError
from gateway.events import Attachment
from gateway.logs import get_logger
from gateway.store.sessions import SessionStore

log = get_logger(__name__)

ATTACHMENTS = "attachments"  # inside the workspace
ATTACHMENTS_DIR = f"workspace/{ATTACHMENTS}"  # as the agent is told (from the session folder)


@dataclass(frozen=True, slots=True)
class Download:
    """A file that came with a message, not fetched yet."""

    name: str  # unique within the session (the platform's file id in front)
    mime: str
    size: int  # as the platform announced it; 0 when it did not
    fetch: Callable[[], Awaitable[bytes]]


@dataclass
class Staged:
    """The attachments of one message: described, fetched, not yet written."""

    workspace: Workspace | None = None
    attachments: list[Attachment] = field(default_factory=list)
    _fetched: list[tuple[str, bytes]] = field(default_factory=list)  # (name in workspace, data)

    def fetched(self, attachment: Attachment, data: bytes) -> None:
        self.attachments.append(attachment)
        self._fetched.append((f"{ATTACHMENTS}/{attachment.name}", data))

    def data_of(self, attachment: Attachment) -> bytes | None:
        """The fetched bytes of one of the attachments; None when it was not fetched."""
        wanted = f"{ATTACHMENTS}/{attachment.name}"
        return next((data for name, data in self._fetched if name == wanted), None)

    async def keep(self) -> None:
        """Write every fetched file into the workspace."""
        fetched, self._fetched = self._fetched, []
        if self.workspace is not None:
            await asyncio.to_thread(_write_all, self.workspace, fetched)

    async def drop(self) -> None:
        """Forget every fetched file: the message was refused."""
        self._fetched = []


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
    *,
    owner: str = "",
    claim: bool = False,
) -> Staged:
    """Fetch each file into the session workspace (creating the session, owned by `owner`;
    with `claim`, only a session still theirs to make), under a hidden name until `keep`. A
    file over `limit` bytes, or one the platform fails to hand over (`errors`), is described
    but not saved."""
    if not downloads:
        return Staged()
    await store.ensure(session_id, owner=owner, claim=claim)
    staged = Staged(Workspace(store.files(session_id).dir / "workspace"))
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
        staged.fetched(Attachment(name, item.mime, len(data), f"{ATTACHMENTS_DIR}/{name}"), data)
    return staged


def describe(attachments: Sequence[Attachment]) -> str:
    """How the agent hears of attachments: one line each, saying where it can read them."""
    return "\n".join(
        f"[attachment: {a.name}, {a.mime}, {a.size} bytes"
        + (f", saved as {a.path}]" if a.path else ", not downloaded: too large]")
        for a in attachments
    )


def _write_all(workspace: Workspace, files: list[tuple[str, bytes]]) -> None:
    for name, data in files:
        try:
            workspace.write(name, data)
        except WorkspaceError as exc:
            log.warning("attachment not saved", name=name, error=str(exc))
