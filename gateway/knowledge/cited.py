"""What knowledge hands an agent: the passages of attached documents found for a message, how
they read in a model's context (numbered, so the model can cite them as [1], [2]), and the
sources line the reply ends with, naming the document and section of each passage the reply
cited. Light on purpose (no numpy, no SQL): every agent imports it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from gateway.knowledge.documents import PATH_SEPARATOR

KNOWLEDGE_HEADER: Final = (
    "Passages of documents the admins of this chat attached, found for the new message. "
    "Answer from them where they bear on it, and cite each passage you use by its number in "
    "square brackets, e.g. [1]; say so when they do not answer the question:"
)
SOURCES: Final = "Sources:"
_MARKER = re.compile(r"\[(\d{1,2})\]")


@dataclass(frozen=True, slots=True)
class Cited:
    """One passage found for a message, and where it comes from."""

    document_id: int
    title: str  # the document's title (its first heading, its file name, its URL's)
    section: str  # "Rules > Voice channels", "page 3", "lines 12-30"
    text: str
    score: float  # cosine similarity to the message


def citation(item: Cited) -> str:
    """`Server rules § Voice channels`: the document, then the section within it (a heading
    path that starts with the document's own title does not say it twice)."""
    section = item.section
    if section.startswith(item.title):
        section = section[len(item.title) :].strip().removeprefix(PATH_SEPARATOR.strip()).strip()
    return f"{item.title} § {section}" if section else item.title


def knowledge_note(found: Sequence[Cited]) -> str:
    """The passages as one block of text for a model; "" for none."""
    if not found:
        return ""
    lines = [KNOWLEDGE_HEADER]
    for number, item in enumerate(found, start=1):
        lines.append(f"[{number}] ({citation(item)}) {item.text}")
    return "\n".join(lines)


def with_sources(reply: str, found: Sequence[Cited]) -> str:
    """`reply` ending with the sources it cited: each [n] marker that names a passage given
    to the model adds that passage's document and section, once, in the order cited. A reply
    citing nothing is left as it is: a source it did not draw on is not claimed."""
    if not found or not reply:
        return reply
    numbers: list[int] = []
    for match in _MARKER.finditer(reply):
        number = int(match.group(1))
        if 1 <= number <= len(found) and number not in numbers:
            numbers.append(number)
    if not numbers:
        return reply
    lines = [f"[{n}] {citation(found[n - 1])}" for n in numbers]
    return "\n".join([reply.rstrip(), "", SOURCES, *lines])


def as_json(item: Cited) -> dict[str, object]:
    return {
        "document_id": item.document_id,
        "title": item.title,
        "section": item.section,
        "text": item.text,
        "score": round(item.score, 4),
    }
