"""The console's page for knowledge, for gateway admins only (others get 403, as over the API):
every document attached to a profile, a place or a session, and one document's passages with
the sections a citation names; a document attached from a file the browser sends, or from a URL
fetched once where AGENVOY_KNOWLEDGE_HOSTS allows it; a document removed; and a search tried
as a task would make it, each passage found shown with its citation and score. Everything goes
through gateway/knowledge/service.py, as `agenvoy knowledge` and /v1/knowledge do.

A file comes in the form's body, so it is held to the console's request limit (1 MiB) as well
as AGENVOY_KNOWLEDGE_MAX_BYTES: a larger one comes by URL or `agenvoy knowledge add`. Forms
answer with a redirect (post/redirect/get); a refused one is shown again with its error, and
the target and URL entered (adapters/web/refusals.py)."""

from __future__ import annotations

import re
from typing import Final

from aiohttp import web

from adapters.http.context import Context
from adapters.web.auth import Form, Viewer
from adapters.web.pages import Pages
from adapters.web.refusals import RefusedForms
from gateway.knowledge.cited import citation
from gateway.knowledge.documents import DocumentRefused, media_type_of
from gateway.knowledge.fetch import FetchRefused
from gateway.knowledge.service import Knowledge, TargetInvalid, check_target
from gateway.memory.embedders import EmbeddingFailed
from gateway.store.knowledge import AlreadyAttached

FORBIDDEN: Final = "only gateway admins manage knowledge"
PAGE: Final = "/ui/knowledge"
SEARCH_LIMIT: Final = 10  # as many as /v1/search/knowledge answers
MAX_DOCUMENT_ID: Final = 2**31 - 1
_MAX_TARGET_CHARS: Final = 260
_MAX_URL_CHARS: Final = 2000
_MAX_QUERY_CHARS: Final = 2000
_MAX_NAME_CHARS: Final = 200
_PATH_PARTS: Final = re.compile(r"[\\/]")


class AttachUnclear(ValueError):
    """A form that names no document, or two: neither a file nor a URL, or both."""


# What an attachment may be refused with; the page says why, as /v1/knowledge does.
_REFUSED: Final = (
    AttachUnclear,
    TargetInvalid,
    DocumentRefused,
    FetchRefused,
    AlreadyAttached,
    EmbeddingFailed,
)


def size(n: int) -> str:
    """Bytes as a reader compares them: `1 MiB`, `12.5 KiB`, `300 bytes`."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} byte" if n == 1 else f"{n} bytes"


def _said(exc: Exception, by_url: bool) -> tuple[str, str]:
    """The field an error belongs to, and the error as the page shows it."""
    if isinstance(exc, EmbeddingFailed):
        return "", f"the embedder did not answer, so nothing was kept: {exc}"
    if isinstance(exc, TargetInvalid):
        return "target", str(exc)
    return "url" if by_url or isinstance(exc, FetchRefused) else "file", str(exc)


def _file_name(filename: str) -> str:
    # Some browsers send the path the file was chosen from; only its last part names it.
    return _PATH_PARTS.split(filename)[-1].strip()[:_MAX_NAME_CHARS]


def _declared(name: str, content_type: str) -> str:
    """The type to attach a file as: none when its name's extension says (a browser's type is
    only the system's guess from that same extension, and may say text/plain for Markdown),
    else the one the browser sent."""
    try:
        media_type_of(name)
    except DocumentRefused:
        return content_type
    return ""


def _document_id(request: web.Request) -> int:
    raw = request.match_info["id"]
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_DOCUMENT_ID:
        raise web.HTTPNotFound(text="no such document")
    return int(raw)


def _shown_id(request: web.Request, name: str) -> int | None:
    """A document id a redirect put in the address (`?added=12`), if it is one."""
    raw = request.query.get(name, "")
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 10 else None


class KnowledgePages:
    def __init__(self, ctx: Context, pages: Pages) -> None:
        self.ctx = ctx
        self.pages = pages
        self.refusals = RefusedForms(ctx.runtime.kv)

    # -- who may ---------------------------------------------------------------------------

    async def _knowledge(self, viewer: Viewer) -> Knowledge:
        # Asked here rather than trusting the page's link, which gives way to an archive that
        # cannot be reached: this answers 503 then.
        if not (await self.ctx.access.caller(viewer.origin())).gateway_admin:
            raise web.HTTPForbidden(text=FORBIDDEN)
        memory = self.ctx.runtime.memory
        if memory is None:
            raise web.HTTPNotFound(text="knowledge is not served here")
        return memory.knowledge

    async def _viewing(self, request: web.Request) -> tuple[Viewer, Knowledge]:
        viewer = await self.pages.viewer(request)
        return viewer, await self._knowledge(viewer)

    async def _posted(self, request: web.Request) -> tuple[Viewer, Knowledge, Form]:
        viewer = await self.pages.viewer(request)
        # Multipart as well as URL-encoded: a chosen file arrives as a web.FileField, held in
        # memory (the request limit bounds it), and the CSRF field is read as in any form.
        form = await request.post()
        self.pages.auth.check_form(request, viewer, form)
        return viewer, await self._knowledge(viewer), form

    # -- the page --------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        viewer, knowledge = await self._viewing(request)
        documents = await knowledge.archive.documents()
        refusal = await self.refusals.shown(viewer, request)
        added = _shown_id(request, "added")
        return self.pages.render(
            "knowledge.html",
            viewer,
            documents=documents,
            refusal=refusal,
            values=refusal.values if refusal else {},
            added=next((d for d in documents if d.id == added), None),
            removed=_shown_id(request, "removed"),
            hosts=knowledge.hosts,
            # Whichever is smaller holds: aiohttp answers 413 to a larger body before any of
            # this reads it, and the service refuses a larger document.
            file_limit=min(knowledge.max_bytes, request.client_max_size),
            url_limit=knowledge.max_bytes,
            search=await self._search(knowledge, request),
            size=size,
        )

    async def _search(self, knowledge: Knowledge, request: web.Request) -> dict[str, object]:
        """The search form's values and, once it was sent, what it found or why not."""
        target = request.query.get("target", "").strip()[:_MAX_TARGET_CHARS]
        text = request.query.get("q", "").strip()[:_MAX_QUERY_CHARS]
        searched = {"target": target, "q": text, "sent": "q" in request.query, "error": ""}
        if not searched["sent"]:
            return {**searched, "results": []}
        if not text:
            return {**searched, "error": "say what to search for", "results": []}
        try:
            found = await knowledge.search([check_target(target)], text, SEARCH_LIMIT)
        except TargetInvalid as exc:
            return {**searched, "error": str(exc), "results": []}
        except EmbeddingFailed as exc:
            return {**searched, "error": f"the embedder did not answer: {exc}", "results": []}
        results = [
            {
                "citation": citation(c),
                "score": f"{c.score:.3f}",
                "text": c.text,
                "id": c.document_id,
            }
            for c in found
        ]
        return {**searched, "results": results}

    async def document(self, request: web.Request) -> web.Response:
        viewer, knowledge = await self._viewing(request)
        document_id = _document_id(request)
        document = await knowledge.archive.document(document_id)
        if document is None:
            raise web.HTTPNotFound(text="no such document")
        return self.pages.render(
            "knowledge_document.html",
            viewer,
            document=document,
            passages=await knowledge.archive.passages(document_id),
            size=size,
        )

    # -- changes ---------------------------------------------------------------------------

    async def attach(self, request: web.Request) -> web.Response:
        viewer, knowledge, form = await self._posted(request)
        target = str(form.get("target", "")).strip()[:_MAX_TARGET_CHARS]
        url = str(form.get("url", "")).strip()[:_MAX_URL_CHARS]
        upload = form.get("file")
        # A file input left empty comes as an empty text field, not as a file.
        chosen = upload if isinstance(upload, web.FileField) else None
        entered = {"target": target, "url": url}
        by = viewer.origin().sender_key  # recorded as the API records its caller
        try:
            if chosen is not None and url:
                raise AttachUnclear("choose a file or give a URL, not both")
            if url:
                added = await knowledge.add_url(target, url, by=by)
            elif chosen is not None:
                name = _file_name(chosen.filename)
                added = await knowledge.add(
                    target,
                    name=name,
                    # In memory, not on disk: aiohttp spools a part to disk only past the
                    # request limit, which bounds it already.
                    data=chosen.file.read(),
                    media_type=_declared(name, chosen.content_type),
                    by=by,
                )
            else:
                raise AttachUnclear("choose a file to attach")
        except _REFUSED as exc:
            field, error = _said(exc, by_url=bool(url))
            await self.refusals.refuse(viewer, PAGE, "attach", error, field, entered)
        finally:
            if chosen is not None:
                chosen.file.close()
        raise web.HTTPSeeOther(f"{PAGE}?added={added.id}")

    async def remove(self, request: web.Request) -> web.Response:
        viewer, knowledge, _ = await self._posted(request)
        document_id = _document_id(request)
        if await knowledge.remove(document_id) is None:
            gone = f"there is no document {document_id}: removed already?"
            await self.refusals.refuse(viewer, PAGE, "remove", gone, "", {})
        raise web.HTTPSeeOther(f"{PAGE}?removed={document_id}")


def add_knowledge_routes(app: web.Application, pages: KnowledgePages) -> None:
    app.router.add_get("/knowledge", pages.index)
    app.router.add_post("/knowledge", pages.attach)
    app.router.add_get("/knowledge/{id}", pages.document)
    app.router.add_post("/knowledge/{id}/remove", pages.remove)
