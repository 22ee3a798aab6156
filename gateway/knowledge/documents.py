"""A document an admin attaches to the bot, turned into the chunks that get embedded.

The bot cites what it found as "document and section", so every chunk carries a section a
reader can find again: the path of headings above it in Markdown, the page in a PDF
("page 3"), the lines in plain text ("line 12", or a range of them). Chunks are whole
paragraphs packed up to a size; a paragraph too long for one chunk is cut at a sentence end,
else between words.

Whatever cannot be taken (an empty file, text that is not UTF-8, a PDF that is corrupt,
locked or only scanned images, a document too large) is refused with `DocumentRefused`, whose
message is written for the admin who attached it. Everything here is synchronous and pure:
the caller runs it in a thread. pypdf is imported only when a PDF is read.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

MEDIA_TYPES: Final = ("text/plain", "text/markdown", "application/pdf")
MAX_CHUNK_CHARS: Final = 1200
MAX_CHUNKS: Final = 2000
MAX_TITLE_CHARS: Final = 200

_EXTENSIONS: Final = {
    "txt": "text/plain",
    "text": "text/plain",
    "md": "text/markdown",
    "markdown": "text/markdown",
    "pdf": "application/pdf",
}
_ALIASES: Final = {"text/x-markdown": "text/markdown"}
# What joins a heading path ("Rules", then "Voice channels") and a range of lines in a citation.
PATH_SEPARATOR: Final = " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "
RANGE_DASH: Final = "\N{EN DASH}"

# Control characters other than whitespace are dropped; whitespace other than a line break is
# folded to one space. A lone surrogate cannot come from strict UTF-8, but a PDF's text can
# hold one, and it has no UTF-8 form to be stored in.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SPACES = re.compile(r"[^\S\n]+")
_WHITESPACE = re.compile(r"\s*")
_HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*))?")
_CLOSING_HASHES = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")
# Where a piece of a long paragraph may end: after a sentence's end (with any closing quote or
# bracket) followed by a space, after CJK full stops, or at a line break.
_SENTENCE_END = re.compile(r"[.!?…][\"'\u201d\u2019)\]]*(?=\s)|[\u3002\uff01\uff1f]|\n")


class DocumentRefused(ValueError):
    """A document that cannot be taken; the message says why, in words for an admin."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One piece of a document to embed: its place in the document, the section a citation
    names, and its text (never empty, at most the size asked for)."""

    ordinal: int
    section: str
    text: str


@dataclass(frozen=True, slots=True)
class _Piece:
    """Text with the 1-based numbers of the source lines it starts and ends on."""

    first: int
    last: int
    text: str


def media_type_of(name: str, declared: str = "") -> str:
    """The media type to read a document as: `declared` (a Content-Type, parameters such as
    charset ignored) when it is one the gateway reads, else the one the name's extension says."""
    kind = declared.partition(";")[0].strip().lower()
    kind = _ALIASES.get(kind, kind)
    if kind in MEDIA_TYPES:
        return kind
    _, dot, extension = name.rpartition(".")
    if dot and "/" not in extension and "\\" not in extension:
        found = _EXTENSIONS.get(extension.strip().lower())
        if found is not None:
            return found
    said = f" ({kind})" if kind else ""
    raise DocumentRefused(
        f"cannot tell what kind of document {name!r}{said} is: attach plain text (.txt), "
        "Markdown (.md) or a PDF (.pdf)"
    )


def chunks_of(data: bytes, media_type: str, *, max_chars: int = MAX_CHUNK_CHARS) -> list[Chunk]:
    """The document's chunks in document order, each at most `max_chars` characters."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be positive, not {max_chars}")
    if not data:
        raise DocumentRefused("the document is empty")
    sections: Iterable[tuple[str, _Piece]]
    if media_type == "text/plain":
        sections = ((_line_range(p), p) for p in _pack(_lines(_decode(data)), max_chars))
    elif media_type == "text/markdown":
        sections = (
            (name, piece)
            for name, lines in _markdown_sections(_decode(data))
            for piece in _pack(lines, max_chars)
        )
    elif media_type == "application/pdf":
        sections = (
            (f"page {number}", piece)
            for number, text in enumerate(_pdf_pages(data), start=1)
            for piece in _pack(_lines(text), max_chars)
        )
    else:
        raise DocumentRefused(f"documents of type {media_type!r} cannot be read")
    chunks: list[Chunk] = []
    for section, piece in sections:
        if len(chunks) == MAX_CHUNKS:
            raise DocumentRefused(
                f"the document is too long: it makes more than {MAX_CHUNKS} sections; "
                "split it into smaller documents"
            )
        chunks.append(Chunk(len(chunks), section, piece.text))
    if not chunks:
        if media_type == "application/pdf":
            raise DocumentRefused(
                "the PDF has no text to extract: a scanned PDF needs its text recognised "
                "(OCR) first"
            )
        raise DocumentRefused("the document has no text")
    return chunks


def title_of(data: bytes, media_type: str, fallback: str) -> str:
    """A title to list the document by: a Markdown document's first level-1 heading, a PDF's
    metadata title, else `fallback` (the file name)."""
    found = ""
    if media_type == "text/markdown":
        try:
            text = _decode(data)
        except DocumentRefused:
            text = ""
        headings = (heading for _, _, heading in _marked_lines(text) if heading)
        found = next((title for level, title in headings if level == 1 and title), "")
    elif media_type == "application/pdf":
        found = _pdf_title(data)
    return _tidy_title(found) or _tidy_title(fallback) or "untitled document"


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentRefused(
            f"the document is not UTF-8 text (an invalid byte at position {exc.start}): "
            "save it as UTF-8 and attach it again"
        ) from None


def _lines(text: str) -> list[tuple[int, str]]:
    """The text's lines, numbered from 1 as an editor shows them, each tidied."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [(number, _tidy(line)) for number, line in enumerate(text.split("\n"), start=1)]


def _tidy(line: str) -> str:
    line = _SURROGATE.sub("\ufffd", _CONTROL.sub("", line))
    return _SPACES.sub(" ", line).strip()


def _tidy_title(title: str) -> str:
    return _tidy(title.replace("\n", " "))[:MAX_TITLE_CHARS].rstrip()


def _paragraphs(lines: Iterable[tuple[int, str]]) -> Iterator[_Piece]:
    """Runs of non-blank lines; a line is blank when nothing is left of it once tidied."""
    run: list[tuple[int, str]] = []
    for number, line in [*lines, (0, "")]:
        if line:
            run.append((number, line))
        elif run:
            yield _Piece(run[0][0], run[-1][0], "\n".join(text for _, text in run))
            run = []


def _split(paragraph: _Piece, max_chars: int) -> Iterator[_Piece]:
    """A paragraph in pieces of at most `max_chars`, each keeping the lines it came from."""
    text, start, line = paragraph.text, 0, paragraph.first
    while len(text) - start > max_chars:
        end = start + _cut(text[start : start + max_chars + 1], max_chars)
        piece = text[start:end].rstrip()
        yield _Piece(line, line + piece.count("\n"), piece)
        # Lines are counted as the text is consumed: counting from the paragraph's start for
        # every piece would be quadratic in one huge paragraph.
        following = _WHITESPACE.match(text, end)
        after = following.end() if following else end
        line += text.count("\n", start, after)
        start = after
    if start < len(text):
        yield _Piece(line, paragraph.last, text[start:])


def _cut(window: str, max_chars: int) -> int:
    """Where the first piece of `window` ends: its last sentence end in the second half of
    the limit, else its last space, else (one word longer than the limit) at the limit."""
    ends = [m.end() for m in _SENTENCE_END.finditer(window) if m.end() <= max_chars]
    if ends and ends[-1] >= max_chars // 2:
        return ends[-1]
    for i in range(max_chars, 0, -1):
        if window[i].isspace():
            return i
    return max_chars


def _pack(lines: Iterable[tuple[int, str]], max_chars: int) -> Iterator[_Piece]:
    """Whole paragraphs packed into pieces of at most `max_chars`, in order."""
    held: list[_Piece] = []
    size = 0
    for paragraph in _paragraphs(lines):
        for piece in _split(paragraph, max_chars):
            if held and size + 2 + len(piece.text) > max_chars:
                yield _joined(held)
                held, size = [], 0
            size += (2 if held else 0) + len(piece.text)
            held.append(piece)
    if held:
        yield _joined(held)


def _joined(pieces: list[_Piece]) -> _Piece:
    return _Piece(pieces[0].first, pieces[-1].last, "\n\n".join(p.text for p in pieces))


def _line_range(piece: _Piece) -> str:
    if piece.first == piece.last:
        return f"line {piece.first}"
    return f"lines {piece.first}{RANGE_DASH}{piece.last}"


def _marked_lines(text: str) -> Iterator[tuple[int, str, tuple[int, str] | None]]:
    """Each raw line with its number and, when it is an ATX heading (not a `#` line inside
    fenced code), its level and title."""
    fence = ""
    for number, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), 1):
        opening = _FENCE.match(line)
        if fence:
            # A fence closes with the same character, at least as long, and nothing after.
            if opening and opening.group(1).startswith(fence) and not line.strip(" `~"):
                fence = ""
            yield number, line, None
            continue
        if opening:
            fence = opening.group(1)
            yield number, line, None
            continue
        heading = _HEADING.fullmatch(line)
        if heading is None:
            yield number, line, None
            continue
        title = _CLOSING_HASHES.sub("", heading.group(2) or "")
        yield number, line, (len(heading.group(1)), _tidy(title))


def _markdown_sections(text: str) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """Each part of the document under a heading, named by the path of headings above it.
    Text before the first heading is named after that heading (a title, usually)."""
    first = next((h[1] for _, _, h in _marked_lines(text) if h and h[1]), "start")
    path: list[tuple[int, str]] = []
    name = first
    lines: list[tuple[int, str]] = []
    for number, line, heading in _marked_lines(text):
        if heading is None:
            lines.append((number, _tidy(line)))
            continue
        yield name, lines
        level, title = heading
        path = [(lvl, t) for lvl, t in path if lvl < level] + [(level, title)]
        name = PATH_SEPARATOR.join(t for _, t in path if t) or first
        lines = []
    yield name, lines


def _pdf_pages(data: bytes) -> Iterator[str]:
    """Each page's text, in order."""
    from pypdf import PasswordType, PdfReader

    try:
        reader = PdfReader(io.BytesIO(data))
        # pypdf has already tried the empty password: a PDF locked only against changes opens.
        locked = reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED
        count = 0 if locked else len(reader.pages)
    except Exception as exc:
        raise _unreadable(exc) from None
    if locked:
        raise DocumentRefused("the PDF is encrypted: attach a copy without a password")
    for index in range(count):
        try:
            text = reader.pages[index].extract_text()
        except Exception as exc:
            raise _unreadable(exc) from None
        yield text


def _pdf_title(data: bytes) -> str:
    from pypdf import PdfReader

    try:
        metadata = PdfReader(io.BytesIO(data)).metadata
        title = metadata.title if metadata is not None else None
    except Exception:
        # The title only decorates a list; a PDF that cannot be read is refused elsewhere.
        return ""
    return str(title) if title else ""


def _unreadable(exc: Exception) -> DocumentRefused:
    reason = _tidy_title(str(exc)) or type(exc).__name__
    return DocumentRefused(f"not a readable PDF: {reason}")
