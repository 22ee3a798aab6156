"""Attachments in the console: the `[attachment: …, saved as PATH]` lines of a message become
links, and the file is served from the session's workspace to signed-in viewers.

Files are read as the agents read them (gateway/agents/workspace.py: no link followed, no hard
link), and never shown as a page of this site: only common image types are shown inline, with
`nosniff`; anything else is a download."""

from __future__ import annotations

import asyncio
import re
from typing import Final
from urllib.parse import quote

from aiohttp import web
from markupsafe import Markup, escape

from adapters.web.pages import Pages
from gateway.agents.workspace import Workspace, WorkspaceError
from gateway.ids import validate_session_id
from gateway.ownership import Need

# How attachments are described to the agent (adapters/attachments.py `describe`).
_ATTACHMENT: Final = re.compile(r"\[attachment: (?P<name>[^\n]*?), saved as (?P<path>[^\]\n]+)\]")
_INLINE: Final = {"image/png", "image/jpeg", "image/gif", "image/webp"}
_SIGNATURES: Final = {
    b"\x89PNG\r\n\x1a\n": "image/png",
    b"\xff\xd8\xff": "image/jpeg",
    b"GIF87a": "image/gif",
    b"GIF89a": "image/gif",
}
MAX_FILE_BYTES: Final = 50 * 1024 * 1024


def with_attachment_links(text: str, session_id: str) -> Markup:
    """`text`, escaped, with each saved attachment's line a link to the file."""
    out: list[str] = []
    last = 0
    for match in _ATTACHMENT.finditer(text):
        out.append(escape(text[last : match.start()]))
        url = f"/ui/session/{quote(session_id)}/file?path={quote(match['path'])}"
        out.append(f'<a class="attachment" href="{escape(url)}">{escape(match[0])}</a>')
        last = match.end()
    out.append(escape(text[last:]))
    return Markup("".join(out))


def _kind(data: bytes) -> str | None:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((mime for sig, mime in _SIGNATURES.items() if data.startswith(sig)), None)


class Files:
    def __init__(self, pages: Pages) -> None:
        self.pages = pages

    async def serve(self, request: web.Request) -> web.Response:
        viewer = await self.pages.viewer(request)
        sid = validate_session_id(request.match_info["sid"])
        await self.pages.ctx.access.require(viewer.origin(), sid, Need.read)
        # Named as the agent sees it, from the session's folder.
        path = request.query.get("path", "").removeprefix("workspace/")
        store = self.pages.ctx.store
        if await store.get(sid) is None:
            raise web.HTTPNotFound(text=f"no such session: {sid}")
        workspace = Workspace(store.files(sid).dir / "workspace")
        try:
            data = await asyncio.to_thread(workspace.read, path, MAX_FILE_BYTES + 1)
        except WorkspaceError as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        if data is None:
            raise web.HTTPNotFound(text=f"no file {path!r} in {sid}")
        if len(data) > MAX_FILE_BYTES:
            raise web.HTTPRequestEntityTooLarge(MAX_FILE_BYTES, len(data))
        # The bytes decide, not the name: a page named .png is still not shown.
        kind = _kind(data)
        name = path.rsplit("/", 1)[-1]
        response = web.Response(body=data, content_type=kind or "application/octet-stream")
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Content-Security-Policy"] = "default-src 'none'; sandbox"
        response.headers["Cache-Control"] = "no-store"
        disposition = "inline" if kind in _INLINE else "attachment"
        response.headers["Content-Disposition"] = f"{disposition}; filename*=UTF-8''{quote(name)}"
        return response
