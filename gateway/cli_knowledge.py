"""`agenvoy knowledge add|list|show|remove|search`: the documents the agent answers from, with
citations. They write the archive directly, embedding with the configured embedder; a running
gateway (every instance) finds a document from its next task on, without a restart."""

from __future__ import annotations

import getpass
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from gateway.cli_memory import with_memory
from gateway.cli_support import fail, printable

if TYPE_CHECKING:
    from gateway.knowledge.service import Knowledge
    from gateway.store.knowledge import Document

T = TypeVar("T")

knowledge_app = typer.Typer(
    help="Documents the agent answers from and cites (text, Markdown, PDF, or a URL).",
    no_args_is_help=True,
)
Target = Annotated[
    str,
    typer.Argument(
        help="Where it is known: profile:NAME, a place (discord-channel:123, discord-guild:…, "
        "telegram-chat:-100…, telegram-topic:CHAT:TOPIC) or session:SID."
    ),
]
DocumentId = Annotated[int, typer.Argument(help="The document's number (agenvoy knowledge list).")]


def _by() -> str:
    return f"terminal:{getpass.getuser()}"


def _with_knowledge(work: Callable[[Knowledge], Awaitable[T]]) -> T:
    """Run `work` on the archive's knowledge; a refused document ends the command (exit 2)."""
    from gateway.knowledge.documents import DocumentRefused
    from gateway.knowledge.fetch import FetchRefused
    from gateway.knowledge.service import TargetInvalid
    from gateway.store.knowledge import AlreadyAttached

    try:
        return with_memory(lambda _store, memory: work(memory.knowledge))
    except (TargetInvalid, DocumentRefused, FetchRefused, AlreadyAttached) as exc:
        fail(str(exc), 2)


def _line(d: Document) -> str:
    when = datetime.fromtimestamp(d.added_at / 1000, UTC).strftime("%Y-%m-%d %H:%M")
    passages = f"{d.chunks} passage" + ("" if d.chunks == 1 else "s")
    return (
        f"{d.id:>4}  {d.target}  {d.title}  ({d.media_type}, {passages}, "
        f"{d.size:,} bytes; {d.added_by}, {when} UTC)"
    )


@knowledge_app.command("add")
def add(
    target: Target,
    path: Annotated[
        Path | None, typer.Argument(help="A .txt, .md or .pdf file.", show_default=False)
    ] = None,
    url: Annotated[
        str | None, typer.Option("--url", help="Fetch it once (AGENVOY_KNOWLEDGE_HOSTS).")
    ] = None,
) -> None:
    """Attach a document (a file, or a URL fetched once) to a profile, a place or a session."""
    if (path is None) == (url is None):
        fail("give a file or --url, one of them", 2)

    async def work(knowledge: Knowledge) -> Document:
        if url is not None:
            return await knowledge.add_url(target, url, by=_by())
        assert path is not None
        try:
            size = path.stat().st_size
            if size > knowledge.max_bytes:
                fail(f"{path}: {size:,} bytes; the most taken is {knowledge.max_bytes:,}", 2)
            data = path.read_bytes()
        except OSError as exc:
            fail(f"{path}: {exc.strerror or exc}", 2)
        return await knowledge.add(target, name=path.name, data=data, by=_by())

    document = _with_knowledge(work)
    typer.echo(printable(f"attached: {_line(document)}"))


@knowledge_app.command("list")
def list_documents(
    target: Annotated[
        str | None, typer.Option("--target", "-t", help="Only this target's documents.")
    ] = None,
) -> None:
    """Every attached document (or one target's), oldest first."""

    async def work(knowledge: Knowledge) -> list[Document]:
        return await knowledge.archive.documents([target] if target else None)

    documents = _with_knowledge(work)
    if not documents:
        typer.echo("no documents attached (agenvoy knowledge add TARGET FILE)")
    for document in documents:
        typer.echo(printable(_line(document)))


@knowledge_app.command("show")
def show(document_id: DocumentId) -> None:
    """One document and its passages, each with the section a citation names."""

    async def work(knowledge: Knowledge) -> tuple[Document | None, list[tuple[str, str]]]:
        document = await knowledge.archive.document(document_id)
        passages = await knowledge.archive.passages(document_id)
        return document, [(p.section, p.text) for p in passages]

    document, passages = _with_knowledge(work)
    if document is None:
        fail(f"no document {document_id}", 1)
    typer.echo(printable(_line(document)))
    for section, text in passages:
        typer.echo(printable(f"§ {section}: {text}", body="    "))


@knowledge_app.command("remove")
def remove(document_id: DocumentId) -> None:
    """Remove a document and its passages."""

    async def work(knowledge: Knowledge) -> Document | None:
        return await knowledge.remove(document_id)

    gone = _with_knowledge(work)
    if gone is None:
        fail(f"no document {document_id}", 1)
    typer.echo(printable(f"removed: {_line(gone)}"))


@knowledge_app.command("search")
def search(
    target: Target,
    query: Annotated[str, typer.Argument(help="A message, as a member would write it.")],
) -> None:
    """The passages of a target's documents a message would find, best first."""
    from gateway.knowledge.cited import citation
    from gateway.knowledge.service import check_target

    async def work(knowledge: Knowledge) -> list[str]:
        found = await knowledge.search([check_target(target)], query, 10)
        return [f"{c.score:.3f}  [{c.document_id}] {citation(c)}: {c.text}" for c in found]

    lines = _with_knowledge(work)
    if not lines:
        typer.echo("nothing found above the threshold")
    for line in lines:
        typer.echo(printable(line))
