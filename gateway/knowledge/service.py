"""Knowledge: documents admins attach to a profile, a place or a session, found for a task's
message and handed to its model with their citations.

A document is attached to one target: `profile:NAME` (every task that profile answers), a
place by its binding target (`discord-channel:901`, `discord-guild:…`, `telegram-chat:-100`,
`telegram-topic:…`, and the rest of gateway/profiles/bindings.py), or `session:SID`. A task
sees the documents of its profile and of every target its binding candidates name: a thread
sees its channel's, a channel its guild's. Documents are chunked (gateway/knowledge/documents.py),
embedded with the memory's embedder and kept in the archive; a task's search scores the
passages of its targets' documents in this process (a few thousand at most: no index needed),
caching each document's vectors until it is removed.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

import numpy as np

from gateway.clock import Clock, now_ms
from gateway.events import Origin
from gateway.knowledge.cited import Cited
from gateway.knowledge.documents import chunks_of, media_type_of, title_of
from gateway.knowledge.fetch import fetch_document
from gateway.logs import get_logger
from gateway.memory.embedders import Embedder
from gateway.profiles.bindings import BindingInvalid, candidates, parse_target
from gateway.profiles.spec import NAME
from gateway.settings import Settings
from gateway.store.knowledge import Document, KnowledgeArchive, NewPassage

log = get_logger(__name__)

EMBED_BATCH: Final = 64  # passages embedded per call while a document is attached
CACHED_DOCUMENTS: Final = 256  # documents whose vectors stay in memory
# A question is less like the passage that answers it than a paraphrase is like its message:
# measured on a server's rules, the questions a passage answers scored 0.30-0.41 with the local
# semantic model (0.28-0.61 with hashed trigrams, in English), unrelated ones at most 0.13
# (0.16), where recall's thresholds are 0.35 and 0.30. Unset AGENVOY_KNOWLEDGE_MIN_SCORE takes
# this, or the embedder's own threshold when lower.
KNOWLEDGE_MIN_SCORE: Final = 0.2
# How long a task's context waits for its passages (the embedder may be an endpoint that is
# slow or retrying): past it the task goes on without them.
CONTEXT_DEADLINE_SECONDS: Final = 5.0


class TargetInvalid(ValueError):
    pass


def check_target(target: str) -> str:
    """`target` checked: `profile:NAME`, or a binding target (`kind:key`)."""
    target = target.strip()
    kind, _, key = target.partition(":")
    if kind == "profile":
        if not NAME.fullmatch(key):
            raise TargetInvalid(f"target: {key[:60]!r} is not a profile name")
        return target
    try:
        parse_target(target)
    except BindingInvalid as exc:
        raise TargetInvalid(f"{exc}; or profile:NAME") from None
    return target


def targets_of(session_id: str, origin: Origin | None, profile: str) -> list[str]:
    """Every target whose documents a task of `session_id` from `origin` sees."""
    found = [f"{kind}:{key}" for kind, key in candidates(session_id, origin)]
    return [f"profile:{profile}", *found]


@dataclass(frozen=True, slots=True)
class _Vectors:
    model: str
    titles: list[str]
    sections: list[str]
    texts: list[str]
    matrix: np.ndarray  # one row per passage, unit length


class Knowledge:
    def __init__(
        self,
        archive: KnowledgeArchive,
        embedder: Embedder,
        settings: Settings,
        clock: Clock,
    ) -> None:
        self.archive = archive
        self.embedder = embedder
        self.clock = clock
        self.count = settings.knowledge_count
        self.min_score = (
            min(embedder.min_score, KNOWLEDGE_MIN_SCORE)
            if settings.knowledge_min_score is None
            else settings.knowledge_min_score
        )
        self.max_bytes = settings.knowledge_max_bytes
        self.hosts = [h.strip() for h in settings.knowledge_hosts.split(",") if h.strip()]
        self._cache: OrderedDict[int, _Vectors] = OrderedDict()

    # -- attaching -------------------------------------------------------------------------

    async def add(
        self,
        target: str,
        *,
        name: str,
        data: bytes,
        media_type: str = "",
        by: str,
        source: str = "",
    ) -> Document:
        """Attach a document's bytes to `target`. TargetInvalid, DocumentRefused (too large,
        an unknown type, unreadable), AlreadyAttached; EmbeddingFailed when the embedder is
        away (nothing is kept then)."""
        from gateway.knowledge.documents import DocumentRefused

        target = check_target(target)
        if len(data) > self.max_bytes:
            raise DocumentRefused(
                f"the document has {len(data):,} bytes; the most taken is {self.max_bytes:,} "
                "(AGENVOY_KNOWLEDGE_MAX_BYTES)"
            )
        kind = media_type_of(name, media_type)
        chunks = await asyncio.to_thread(chunks_of, data, kind)
        title = await asyncio.to_thread(title_of, data, kind, name or source or "document")
        vectors: list[bytes] = []
        for start in range(0, len(chunks), EMBED_BATCH):
            batch = chunks[start : start + EMBED_BATCH]
            # The section leads the text embedded: a passage is found by its heading too.
            embedded = await self.embedder.embed([f"{c.section}\n{c.text}" for c in batch])
            vectors += [row.astype("<f4").tobytes() for row in embedded]
        passages = [NewPassage(c.section, c.text, v) for c, v in zip(chunks, vectors, strict=True)]
        document = Document(
            id=0,
            target=target,
            title=title,
            source=(source or name)[:2000],
            media_type=kind,
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            chunks=len(passages),
            model=self.embedder.model,
            added_by=by,
            added_at=now_ms(),
        )
        kept = await self.archive.add(document, passages)
        log.info("knowledge attached", document=kept.id, target=target, passages=kept.chunks)
        return kept

    async def add_url(self, target: str, url: str, *, by: str) -> Document:
        """Fetch `url` once (an allowed host, at most the size limit) and attach what it
        answered. FetchRefused besides what `add` raises."""
        target = check_target(target)
        fetched = await fetch_document(url, allowed_hosts=self.hosts, max_bytes=self.max_bytes)
        return await self.add(
            target,
            name=fetched.name,
            data=fetched.data,
            media_type=fetched.content_type,
            by=by,
            source=fetched.url,
        )

    async def remove(self, document_id: int) -> Document | None:
        gone = await self.archive.remove(document_id)
        self._cache.pop(document_id, None)
        return gone

    async def reindex(self) -> int:
        """Embed every document's passages again with this embedder's model (after a model
        change); how many passages were embedded."""
        total = 0
        for document in await self.archive.documents():
            passages = await self.archive.passages(document.id)
            vectors: list[bytes] = []
            for start in range(0, len(passages), EMBED_BATCH):
                batch = passages[start : start + EMBED_BATCH]
                embedded = await self.embedder.embed([f"{p.section}\n{p.text}" for p in batch])
                vectors += [row.astype("<f4").tobytes() for row in embedded]
            if await self.archive.replace_vectors(document.id, self.embedder.model, vectors):
                total += len(vectors)
            self._cache.pop(document.id, None)
        return total

    # -- finding ---------------------------------------------------------------------------

    async def search(self, targets: list[str], text: str, limit: int) -> list[Cited]:
        """The `limit` passages of the targets' documents most similar to `text`, best first,
        none below the threshold. Documents embedded with another model are left out (until
        `agenvoy reindex`)."""
        if limit <= 0 or not text.strip():
            return []
        documents = [
            d for d in await self.archive.documents(targets) if d.model == self.embedder.model
        ]
        if not documents:
            return []
        query = (await self.embedder.embed([text]))[0]
        scored: list[Cited] = []
        for document in documents:
            vectors = await self._vectors(document)
            if vectors is None or vectors.matrix.shape[1] != len(query):
                continue
            scores = await asyncio.to_thread(np.dot, vectors.matrix, query)
            best = np.argsort(-scores)[:limit]
            scored += [
                Cited(
                    document.id,
                    vectors.titles[i],
                    vectors.sections[i],
                    vectors.texts[i],
                    float(scores[i]),
                )
                for i in best
                if scores[i] >= self.min_score
            ]
        scored.sort(key=lambda c: -c.score)
        return scored[:limit]

    async def for_task(
        self, session_id: str, origin: Origin | None, profile: str, text: str
    ) -> list[Cited]:
        """What a task's context is given: at most `count` passages for its message. A
        failure, or no answer within the deadline, gives nothing rather than failing or
        holding up the task."""
        if self.count <= 0:
            return []
        found = self.search(targets_of(session_id, origin, profile), text, self.count)
        try:
            if not self.embedder.remote:
                return await found
            return await self.clock.wait_for(found, CONTEXT_DEADLINE_SECONDS)
        except Exception as exc:  # knowledge is a help, never a reason for a task to fail
            log.warning("knowledge search failed", session=session_id, error=repr(exc))
            return []

    async def _vectors(self, document: Document) -> _Vectors | None:
        cached = self._cache.get(document.id)
        if cached is not None and cached.model == document.model:
            self._cache.move_to_end(document.id)
            return cached
        passages = await self.archive.passages(document.id)
        if not passages:
            return None  # removed since it was listed
        matrix = np.vstack([np.frombuffer(p.vector, dtype="<f4") for p in passages])
        vectors = _Vectors(
            document.model,
            [p.title for p in passages],
            [p.section for p in passages],
            [p.text for p in passages],
            matrix,
        )
        self._cache[document.id] = vectors
        while len(self._cache) > CACHED_DOCUMENTS:
            self._cache.popitem(last=False)
        return vectors
