"""Knowledge over HTTP, for gateway admins: the documents attached to profiles, places and
sessions (gateway/knowledge); attach one (its text, its bytes in base64, or a URL fetched
once), read one with its passages, remove one, and try a search as a task would make it.

A request body is at most 1 MiB here (the API's limit): a larger document is attached with
`agenvoy knowledge add` or by URL, up to AGENVOY_KNOWLEDGE_MAX_BYTES."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable
from typing import Annotated, Final, Literal, TypeVar

from pydantic import Field, model_validator

from adapters.http.errors import ApiError
from adapters.http.models import Query, RequestBody
from adapters.http.replies import Reply, UnixMs
from adapters.http.route import Call, Route
from gateway.knowledge.cited import Cited
from gateway.knowledge.documents import DocumentRefused
from gateway.knowledge.fetch import FetchRefused
from gateway.knowledge.service import Knowledge, TargetInvalid, check_target
from gateway.memory.embedders import EmbeddingFailed
from gateway.store.knowledge import AlreadyAttached, Document

T = TypeVar("T")
MAX_DOCUMENT_ID: Final = 2**31 - 1
TARGET = Field(
    pattern=r"^[a-z-]{2,20}:\S{1,240}$",
    description="profile:NAME, a place (discord-channel:123, telegram-chat:-100, …) or "
    "session:SID.",
)


class DocumentInfo(Reply):
    id: int
    target: str
    title: str
    source: str = Field(description="The file name it was attached as, or the URL fetched.")
    media_type: str
    sha256: str
    size: int = Field(description="Bytes.")
    passages: int
    model: str = Field(description="The embedding model of its passages.")
    added_by: str
    added_at: UnixMs


class DocumentList(Reply):
    documents: list[DocumentInfo]


class PassageInfo(Reply):
    section: str
    text: str


class DocumentDetail(Reply):
    document: DocumentInfo
    passages: list[PassageInfo]


class Found(Reply):
    document_id: int
    title: str
    section: str
    text: str
    score: float


class FoundList(Reply):
    targets: list[str] = Field(description="Whose documents were searched.")
    results: list[Found]


class Removed(Reply):
    removed: Literal[True] = True


class AttachRequest(RequestBody):
    """One of `text`, `data` (base64) or `url`."""

    target: str = TARGET
    name: Annotated[str, Field(max_length=200)] = Field(
        "", description="The file name: its extension tells the type when `media_type` does not."
    )
    media_type: Annotated[str, Field(max_length=100)] = Field(
        "", description="text/plain, text/markdown or application/pdf."
    )
    text: str | None = Field(None, description="The document's text (Markdown or plain).")
    data: str | None = Field(None, description="The document's bytes, base64 (a PDF).")
    url: Annotated[str, Field(max_length=2000)] | None = Field(
        None, description="Fetched once; its host must be in AGENVOY_KNOWLEDGE_HOSTS."
    )

    @model_validator(mode="after")
    def _one_source(self) -> AttachRequest:
        given = [n for n in ("text", "data", "url") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of text, data or url")
        return self


class ListQuery(Query):
    # Blank is absent (every document), as for any query parameter here.
    target: str | None = Field(None, pattern=r"^([a-z-]{2,20}:\S{1,240})?$")


class SearchQuery(Query):
    q: str = Field(min_length=1, max_length=2000)
    target: str = TARGET


async def _admin(call: Call) -> Knowledge:
    if not await call.ctx.access.is_gateway_admin(call.origin()):
        raise ApiError(403, "forbidden", "only gateway admins manage knowledge")
    memory = call.ctx.runtime.memory
    if memory is None:
        raise ApiError(404, "not_found", "knowledge is not served here")
    return memory.knowledge


async def _checked(work: Awaitable[T]) -> T:
    try:
        return await work
    except (TargetInvalid, DocumentRefused, FetchRefused) as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    except AlreadyAttached as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    except EmbeddingFailed as exc:
        raise ApiError(503, "unavailable", f"the embedder did not answer: {exc}") from None


def _info(d: Document) -> DocumentInfo:
    return DocumentInfo(
        id=d.id,
        target=d.target,
        title=d.title,
        source=d.source,
        media_type=d.media_type,
        sha256=d.sha256,
        size=d.size,
        passages=d.chunks,
        model=d.model,
        added_by=d.added_by,
        added_at=d.added_at,
    )


def _document_id(call: Call) -> int:
    raw = call.request.match_info["document"]
    if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_DOCUMENT_ID:
        raise ApiError(404, "not_found", "no such document")
    return int(raw)


async def list_documents(call: Call) -> DocumentList:
    knowledge = await _admin(call)
    target = call.query(ListQuery).target
    found = await knowledge.archive.documents([target] if target else None)
    return DocumentList(documents=[_info(d) for d in found])


async def attach(call: Call) -> DocumentInfo:
    knowledge = await _admin(call)
    body = await call.body(AttachRequest)
    who = call.origin().sender_key
    if body.url is not None:
        return _info(await _checked(knowledge.add_url(body.target, body.url, by=who)))
    if body.text is not None:
        data = body.text.encode("utf-8")
        kind = body.media_type or ("" if body.name else "text/markdown")
    else:
        try:
            data = base64.b64decode(body.data or "", validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "bad_request", "field 'data': not base64") from None
        kind = body.media_type
    added = knowledge.add(body.target, name=body.name, data=data, media_type=kind, by=who)
    return _info(await _checked(added))


async def get_document(call: Call) -> DocumentDetail:
    knowledge = await _admin(call)
    document_id = _document_id(call)
    document = await knowledge.archive.document(document_id)
    if document is None:
        raise ApiError(404, "not_found", "no such document")
    passages = await knowledge.archive.passages(document_id)
    return DocumentDetail(
        document=_info(document),
        passages=[PassageInfo(section=p.section, text=p.text) for p in passages],
    )


async def remove_document(call: Call) -> Removed:
    knowledge = await _admin(call)
    if await knowledge.remove(_document_id(call)) is None:
        raise ApiError(404, "not_found", "no such document")
    return Removed()


async def search_knowledge(call: Call) -> FoundList:
    knowledge = await _admin(call)
    query = call.query(SearchQuery)
    try:
        target = check_target(query.target)
    except TargetInvalid as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    found: list[Cited] = await _checked(knowledge.search([target], query.q, 10))
    return FoundList(
        targets=[target],
        results=[
            Found(
                document_id=c.document_id,
                title=c.title,
                section=c.section,
                text=c.text,
                score=round(c.score, 4),
            )
            for c in found
        ],
    )


DOCUMENT = "/v1/knowledge/{document}"
KNOWLEDGE_ROUTES: Final[tuple[Route, ...]] = (
    Route("GET", "/v1/knowledge", list_documents,
          "Attached documents, of one target or all (gateway admins)",
          query=ListQuery, caller=True, replies={200: DocumentList}, errors=(400,)),
    Route("POST", "/v1/knowledge", attach,
          "Attach a document to a profile, a place or a session (gateway admins)",
          body=AttachRequest, caller=True, replies={201: DocumentInfo},
          errors=(400, 409, 413, 503)),
    Route("GET", "/v1/search/knowledge", search_knowledge,
          "The passages of a target's documents a message would find (gateway admins)",
          query=SearchQuery, caller=True, replies={200: FoundList}, errors=(400, 503)),
    Route("GET", DOCUMENT, get_document, "One attached document and its passages (gateway admins)",
          caller=True, replies={200: DocumentDetail}, errors=(400, 404)),
    Route("DELETE", DOCUMENT, remove_document, "Remove an attached document (gateway admins)",
          caller=True, replies={200: Removed}, errors=(400, 404)),
)  # fmt: skip
