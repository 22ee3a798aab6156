"""The rows of knowledge: attached documents and their embedded passages (migration 0025).

A document belongs to one target (`profile:NAME`, a place's binding target, `session:SID`) and
is attached there once (by the SHA-256 of its bytes). Its passages and their vectors are
written with it in one transaction and deleted with it, so a task never reads half a document.
Nothing here needs numpy: vectors come and go as float32 bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, LargeBinary, UniqueConstraint, delete, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, Session, SQLModel, col, select

from gateway.store.db import Database


class KnowledgeDocumentRow(SQLModel, table=True):
    __tablename__ = "knowledge_document"
    __table_args__ = (
        UniqueConstraint("target", "sha256", name="uq_knowledge_document_target_sha256"),
    )

    id: int | None = Field(default=None, primary_key=True)
    target: str = Field(max_length=200, index=True)
    title: str = Field(max_length=200)
    source: str = Field(max_length=2000)
    media_type: str = Field(max_length=40)
    sha256: str = Field(max_length=64)
    size: int = Field(sa_type=BigInteger)
    chunks: int
    model: str = Field(max_length=200)
    added_by: str = Field(default="", max_length=200)
    added_at: int = Field(sa_type=BigInteger)


class KnowledgeChunkRow(SQLModel, table=True):
    __tablename__ = "knowledge_chunk"

    id: int | None = Field(default=None, primary_key=True)
    document_id: int = Field(index=True)
    ordinal: int
    section: str = Field(max_length=300)
    text: str
    vector: bytes = Field(sa_column=Column(LargeBinary, nullable=False))  # float32, little-endian


@dataclass(frozen=True, slots=True)
class Document:
    id: int
    target: str
    title: str
    source: str
    media_type: str
    sha256: str
    size: int
    chunks: int
    model: str
    added_by: str
    added_at: int  # Unix ms


@dataclass(frozen=True, slots=True)
class Passage:
    """A passage as a search reads it: where from, what it says, and its vector."""

    document_id: int
    title: str
    section: str
    text: str
    vector: bytes


@dataclass(frozen=True, slots=True)
class NewPassage:
    section: str
    text: str
    vector: bytes


class AlreadyAttached(ValueError):
    def __init__(self, document: Document) -> None:
        super().__init__(
            f"this document is attached to {document.target} already, as document "
            f"{document.id} ({document.title})"
        )
        self.document = document


def _document(row: KnowledgeDocumentRow) -> Document:
    assert row.id is not None
    return Document(
        row.id,
        row.target,
        row.title,
        row.source,
        row.media_type,
        row.sha256,
        row.size,
        row.chunks,
        row.model,
        row.added_by,
        row.added_at,
    )


def _same(session: Session, target: str, sha256: str) -> KnowledgeDocumentRow | None:
    stmt = select(KnowledgeDocumentRow).where(
        col(KnowledgeDocumentRow.target) == target, col(KnowledgeDocumentRow.sha256) == sha256
    )
    return session.exec(stmt).first()


class KnowledgeArchive:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def add(self, document: Document, passages: Sequence[NewPassage]) -> Document:
        """Keep `document` (its id ignored) and its passages in one transaction; the document
        as kept. AlreadyAttached when the same bytes are attached to that target already."""

        def work(session: Session) -> Document:
            existing = _same(session, document.target, document.sha256)
            if existing is not None:
                raise AlreadyAttached(_document(existing))
            row = KnowledgeDocumentRow(
                target=document.target,
                title=document.title,
                source=document.source,
                media_type=document.media_type,
                sha256=document.sha256,
                size=document.size,
                chunks=len(passages),
                model=document.model,
                added_by=document.added_by,
                added_at=document.added_at,
            )
            session.add(row)
            session.flush()
            assert row.id is not None
            session.add_all(
                KnowledgeChunkRow(
                    document_id=row.id, ordinal=i, section=p.section, text=p.text, vector=p.vector
                )
                for i, p in enumerate(passages)
            )
            return _document(row)

        try:
            return await self._db.write(work)
        except IntegrityError:
            # Attached by another writer between the look and the insert: say which.
            def again(session: Session) -> Document | None:
                row = _same(session, document.target, document.sha256)
                return _document(row) if row is not None else None

            found = await self._db.read(again)
            if found is None:
                raise
            raise AlreadyAttached(found) from None

    async def documents(self, targets: Sequence[str] | None = None) -> list[Document]:
        """The documents attached to `targets` (None: all), oldest first."""

        def work(session: Session) -> list[Document]:
            stmt = select(KnowledgeDocumentRow).order_by(col(KnowledgeDocumentRow.id))
            if targets is not None:
                stmt = stmt.where(col(KnowledgeDocumentRow.target).in_(list(targets)))
            return [_document(row) for row in session.exec(stmt).all()]

        return await self._db.read(work)

    async def document(self, document_id: int) -> Document | None:
        def work(session: Session) -> Document | None:
            row = session.get(KnowledgeDocumentRow, document_id)
            return _document(row) if row is not None else None

        return await self._db.read(work)

    async def passages(self, document_id: int) -> list[Passage]:
        """A document's passages in order (empty when it is gone)."""

        def work(session: Session) -> list[Passage]:
            doc = session.get(KnowledgeDocumentRow, document_id)
            if doc is None:
                return []
            stmt = (
                select(KnowledgeChunkRow)
                .where(col(KnowledgeChunkRow.document_id) == document_id)
                .order_by(col(KnowledgeChunkRow.ordinal))
            )
            return [
                Passage(document_id, doc.title, row.section, row.text, row.vector)
                for row in session.exec(stmt).all()
            ]

        return await self._db.read(work)

    async def remove(self, document_id: int) -> Document | None:
        """Remove a document and its passages; the document removed (None: there was none)."""

        def work(session: Session) -> Document | None:
            row = session.get(KnowledgeDocumentRow, document_id)
            if row is None:
                return None
            gone = _document(row)
            session.connection().execute(
                delete(KnowledgeChunkRow).where(col(KnowledgeChunkRow.document_id) == document_id)
            )
            session.delete(row)
            return gone

        return await self._db.write(work)

    async def replace_vectors(self, document_id: int, model: str, vectors: Sequence[bytes]) -> bool:
        """Give a document's passages, in order, the vectors of another model (`agenvoy
        reindex`); False when the document is gone or its passages changed in between."""

        def work(session: Session) -> bool:
            row = session.get(KnowledgeDocumentRow, document_id)
            if row is None or row.chunks != len(vectors):
                return False
            stmt = (
                select(KnowledgeChunkRow.id)
                .where(col(KnowledgeChunkRow.document_id) == document_id)
                .order_by(col(KnowledgeChunkRow.ordinal))
            )
            ids = list(session.exec(stmt).all())
            if len(ids) != len(vectors):
                return False
            for chunk_id, vector in zip(ids, vectors, strict=True):
                session.connection().execute(
                    update(KnowledgeChunkRow)
                    .where(col(KnowledgeChunkRow.id) == chunk_id)
                    .values(vector=vector)
                )
            row.model = model
            session.add(row)
            return True

        return await self._db.write(work)
