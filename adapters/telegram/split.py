"""Cutting Telegram messages to size: rendered HTML, or plain text, in chunks that each fit.

Telegram measures messages in UTF-16 code units (`utf16_len`). `split_html` cuts rendered HTML
into chunks that each fit a limit and are well-formed on their own: an element cut in two is
closed at the end of one chunk and opened again, with the same attributes, at the start of the
next. `split_plain` does the same for plain text, the fallback when Telegram rejects the
markup; `strip_html` turns a rendered chunk back into that plain text.

Where the splitters cut: at a whitespace boundary, that is after a run of spaces and tabs and
before the next visible character, or, when the run holds newlines, right after its last
newline (so the next line keeps its indentation). Among the boundaries in the second half of
the chunk, a paragraph break (two or more newlines) is preferred, then a line break, then a
space. Without one there, the last whitespace boundary of the chunk is used, unless the word
after it could not fit in a chunk anyway; then, or when the chunk holds no boundary at all,
the text is cut hard at the limit (never inside a tag or an entity, and not between a
character and a combining mark or emoji modifier that follows it). No character is ever
dropped or added: the whitespace at a cut ends the earlier chunk, so joining the chunks' text
gives back the original text exactly. An empty input gives no chunks.

Pure: no I/O, standard library only.
"""

from __future__ import annotations

import html as _html
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

__all__ = [
    "MIN_HTML_LIMIT",
    "MIN_PLAIN_LIMIT",
    "TELEGRAM_MESSAGE_LIMIT",
    "split_html",
    "split_plain",
    "strip_html",
    "utf16_len",
]

TELEGRAM_MESSAGE_LIMIT: Final = 4096
# The smallest limits the splitters accept: a chunk must always have room for one
# indivisible piece (a character outside the BMP is 2 units, an HTML entity up to 12).
MIN_PLAIN_LIMIT: Final = 2
MIN_HTML_LIMIT: Final = 16


def utf16_len(s: str) -> int:
    """The length of `s` as Telegram counts it: UTF-16 code units."""
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


_TEXT: Final = 0
_OPEN: Final = 1
_CLOSE: Final = 2


@dataclass(frozen=True, slots=True)
class _Token:
    kind: int
    raw: str
    text: str = ""  # the character a text token stands for (entities unescaped)
    name: str = ""  # the tag name of an opening or closing tag
    cost: int = 0  # utf16_len(raw)


class _Element(NamedTuple):
    """An element open at some point of the source; `emitted` is its opening tag as written
    into the current chunk, or None when the chunk carries its content without it."""

    name: str
    source: str
    emitted: str | None


# Tags, and the entities Telegram accepts (named ones are bounded so a token stays small).
_HTML_TOKEN: Final = re.compile(
    r"<(?P<close>/?)(?P<name>[A-Za-z][A-Za-z0-9-]*)(?:\s[^<>]*)?>"
    r"|&(?:#[0-9]{1,8}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,9});"
)
_BREAKS: Final = frozenset(" \t\n\r")
_ZWJ: Final = "\u200d"


def _char_tokens(text: str) -> list[_Token]:
    return [_Token(_TEXT, char, char, "", utf16_len(char)) for char in text]


def _tokenize(html: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    for match in _HTML_TOKEN.finditer(html):
        tokens.extend(_char_tokens(html[pos : match.start()]))
        raw = match.group()
        name = match["name"]
        if name is None:
            tokens.append(_Token(_TEXT, raw, _html.unescape(raw), "", len(raw)))
        else:
            kind = _CLOSE if match["close"] else _OPEN
            tokens.append(_Token(kind, raw, "", name.lower(), utf16_len(raw)))
        pos = match.end()
    tokens.extend(_char_tokens(html[pos:]))
    return tokens


def strip_html(html: str) -> str:
    """The text of (Telegram) HTML: tags dropped, entities unescaped."""
    return "".join(token.text for token in _tokenize(html) if token.kind == _TEXT)


def split_plain(text: str, limit: int = TELEGRAM_MESSAGE_LIMIT) -> list[str]:
    """Split plain text into chunks of at most `limit` UTF-16 code units.

    Cuts where the module docstring describes; `"".join(chunks) == text` always holds.
    """
    if limit < MIN_PLAIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_PLAIN_LIMIT}, not {limit}")
    if not text:
        return []
    if utf16_len(text) <= limit:
        return [text]
    return _Splitter(_char_tokens(text), limit).split()


def split_html(html: str, limit: int = TELEGRAM_MESSAGE_LIMIT) -> list[str]:
    """Split well-formed Telegram HTML (such as `render_html` output) into chunks of at most
    `limit` UTF-16 code units, markup included, each well-formed on its own.

    A cut never falls inside a tag or an entity. Elements open at a cut are closed at the end
    of the chunk (innermost first) and opened again with the same tags at the start of the
    next one. Those tags count against the limit: when they would take half of it or more, the
    continuation of a code block drops its language class, and when they leave no room for
    the next piece of text, the outermost elements are left out of the continuation too (an
    opening tag too long for any chunk is likewise left out; its text stays). The text of the
    chunks (`strip_html`) joins back to the text of `html` exactly.

    Telegram applies its 4096 limit to the text after parsing the markup; counting the markup
    too, as here, errs on the safe side.
    """
    if limit < MIN_HTML_LIMIT:
        raise ValueError(f"limit must be at least {MIN_HTML_LIMIT}, not {limit}")
    if not html:
        return []
    if utf16_len(html) <= limit:
        return [html]
    return _Splitter(_tokenize(html), limit).split()


def _close_tag(name: str) -> str:
    return f"</{name}>"


def _extends_previous(char: str) -> bool:
    """Whether a character belongs with the one before it (combining mark, joiner, modifier)."""
    if len(char) != 1:
        return False
    return (
        unicodedata.category(char) in ("Mn", "Me", "Mc")
        or char == _ZWJ
        or "\ufe00" <= char <= "\ufe0f"
        or "\U0001f3fb" <= char <= "\U0001f3ff"
        or "\U000e0020" <= char <= "\U000e007f"
        or "\U000e0100" <= char <= "\U000e01ef"
    )


@dataclass(slots=True)
class _Cut:
    index: int  # the token the next chunk starts with
    kept: int  # how many pieces of the chunk's output come before the cut
    total: int  # the chunk's length if cut here, closing tags included
    elements: list[_Element]


# Cut classes, best first.
_PARAGRAPH: Final = 2
_LINE: Final = 1
_SPACE: Final = 0


class _Splitter:
    def __init__(self, tokens: Sequence[_Token], limit: int) -> None:
        self.tokens = tokens
        self.limit = limit
        count = len(tokens)
        # boundary[i]: the cut class of the position before token i, or -1 when it is not a
        # whitespace boundary.
        # next_cost[i]: the cost of the first text token at or after i (0 at the end).
        # word_end[i]: the first whitespace text token at or after i (count at the end).
        # offset[i]: the cost of tokens[:i].
        self.boundary = [-1] * (count + 1)
        self.next_cost = [0] * (count + 1)
        self.word_end = [count] * (count + 1)
        self.offset = [0] * (count + 1)
        newlines = -1  # newlines in the whitespace run before the position; -1: no run
        last_newline = -1  # the token index of the run's last newline
        for index, token in enumerate(tokens):
            self.offset[index + 1] = self.offset[index] + token.cost
            if token.kind != _TEXT:
                continue
            if token.text in _BREAKS:
                newlines = max(newlines, 0)
                if token.text == "\n":
                    newlines += 1
                    last_newline = index
                continue
            if newlines > 0:
                # Right after the last newline, so the next line keeps its indentation.
                first = last_newline + 1
                last = first
                while tokens[last].kind != _TEXT:
                    last += 1
            elif newlines == 0:
                first = last = index
                while first > 0 and tokens[first - 1].kind != _TEXT:
                    first -= 1
            if newlines >= 0:
                run_class = _PARAGRAPH if newlines >= 2 else _LINE if newlines else _SPACE
                for position in range(first, last + 1):
                    self.boundary[position] = run_class
            newlines = -1
        for index in range(count - 1, -1, -1):
            token = tokens[index]
            is_text = token.kind == _TEXT
            self.next_cost[index] = token.cost if is_text else self.next_cost[index + 1]
            is_break = is_text and token.text in _BREAKS
            self.word_end[index] = index if is_break else self.word_end[index + 1]

    def split(self) -> list[str]:
        chunks: list[str] = []
        position = 0
        stack: list[_Element] = []
        while True:
            # A chunk never starts by closing what it would just have reopened.
            while position < len(self.tokens) and self.tokens[position].kind == _CLOSE:
                _pop(stack, self.tokens[position].name)
                position += 1
            if position >= len(self.tokens):
                return chunks
            chunk, position, stack = self._chunk(position, stack)
            chunks.append(chunk)

    def _reopen(self, stack: Sequence[_Element], budget: int) -> list[_Element]:
        def cost(elements: Sequence[_Element]) -> int:
            return sum(
                utf16_len(element.emitted) + len(_close_tag(element.name))
                for element in elements
                if element.emitted is not None
            )

        elements = [element._replace(emitted=element.source) for element in stack]
        if cost(elements) <= min(budget, self.limit // 2):
            return elements
        # Markup taking half the chunk or more: a code block goes on without its language.
        elements = [
            element._replace(emitted="<code>") if element.name == "code" else element
            for element in elements
        ]
        outermost = 0
        while cost(elements) > budget and outermost < len(elements):
            elements[outermost] = elements[outermost]._replace(emitted=None)
            outermost += 1
        return elements

    def _opening(self, token: _Token, elements: Sequence[_Element]) -> str:
        """The opening tag to write for `token`: a language class only directly inside <pre>."""
        if token.name == "code" and token.raw != "<code>":
            parent = elements[-1] if elements else None
            if parent is None or parent.name != "pre" or parent.emitted is None:
                return "<code>"
        return token.raw

    def _chunk(self, start: int, stack: Sequence[_Element]) -> tuple[str, int, list[_Element]]:
        tokens, limit = self.tokens, self.limit
        elements = self._reopen(stack, limit - self.next_cost[start])
        out = [element.emitted for element in elements if element.emitted is not None]
        size = sum(utf16_len(piece) for piece in out)
        closing = sum(
            len(_close_tag(element.name)) for element in elements if element.emitted is not None
        )
        texts = 0  # text tokens in this chunk
        visible = False  # whether any of them is not whitespace
        best: dict[int, _Cut] = {}
        index = start
        while index < len(tokens):
            run_class = self.boundary[index]
            if visible and run_class >= 0 and tokens[index - 1].kind != _OPEN:
                best[run_class] = _Cut(index, len(out), size + closing, list(elements))
            token = tokens[index]
            if token.kind == _TEXT:
                if size + token.cost + closing > limit:
                    break
                out.append(token.raw)
                size += token.cost
                texts += 1
                visible = visible or token.text not in _BREAKS
            elif token.kind == _OPEN:
                opening = self._opening(token, elements)
                close_length = len(_close_tag(token.name))
                needed = utf16_len(opening) + close_length + self.next_cost[index + 1]
                if size + closing + needed <= limit:
                    elements.append(_Element(token.name, token.raw, opening))
                    out.append(opening)
                    size += utf16_len(opening)
                    closing += close_length
                elif texts:
                    break
                else:
                    # Not even a fresh chunk has room for it: carry its content without it.
                    elements.append(_Element(token.name, token.raw, None))
            else:
                for element in reversed(_pop(elements, token.name)):
                    if element.emitted is not None:
                        tag = _close_tag(element.name)
                        out.append(tag)
                        size += len(tag)
                        closing -= len(tag)
            index += 1
        else:
            out.extend(_close_tag(e.name) for e in reversed(elements) if e.emitted is not None)
            return "".join(out), len(tokens), []
        cut = self._choose(best)
        if cut is not None:
            del out[cut.kept :]
            elements = cut.elements
            resume = cut.index
        else:
            resume = index
            # Elements opened just before the cut would be empty here: open them next time.
            while tokens[resume - 1].kind == _OPEN:
                if elements.pop().emitted is not None:
                    out.pop()
                resume -= 1
            # A hard cut through text: keep a character with the marks and joiners after it.
            if resume == index:
                limit_back = max(resume - 16, start)
                while (
                    resume > limit_back
                    and texts > 1
                    and tokens[resume - 1].kind == _TEXT
                    and (_extends_previous(tokens[resume].text) or tokens[resume - 1].text == _ZWJ)
                ):
                    out.pop()
                    texts -= 1
                    resume -= 1
        out.extend(_close_tag(e.name) for e in reversed(elements) if e.emitted is not None)
        return "".join(out), resume, elements

    def _choose(self, best: dict[int, _Cut]) -> _Cut | None:
        for run_class in (_PARAGRAPH, _LINE, _SPACE):
            cut = best.get(run_class)
            if cut is not None and cut.total >= self.limit // 2:
                return cut
        if not best:
            return None
        latest = max(best.values(), key=lambda cut: cut.index)
        # An early cut only pays when the word after it then fits in a chunk whole.
        word = self.offset[self.word_end[latest.index]] - self.offset[latest.index]
        return latest if word < self.limit else None


def _pop(elements: list[_Element], name: str) -> list[_Element]:
    """Remove and return the open element `name` and any left open inside it (outermost
    first); nothing when no such element is open (a stray closing tag)."""
    for position in range(len(elements) - 1, -1, -1):
        if elements[position].name == name:
            popped = elements[position:]
            del elements[position:]
            return popped
    return []
