"""Agent replies as Telegram messages: Markdown-ish text to Bot API HTML, and message splitting.

`render_html` turns the loose Markdown an agent writes into the HTML that `parse_mode="HTML"`
accepts: fenced code blocks, inline code, bold, italic, strikethrough and http(s)/tg links.
Everything else is text, with `&`, `<` and `>` escaped. Markers that do not pair up stay as
literal text, and the output is always well-formed and uses only tags Telegram knows.

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

All functions here are pure: no I/O, standard library only.
"""

from __future__ import annotations

import html as _html
import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

__all__ = [
    "MIN_HTML_LIMIT",
    "MIN_PLAIN_LIMIT",
    "TELEGRAM_MESSAGE_LIMIT",
    "render_html",
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


# ---------------------------------------------------------------------------------------------
# Rendering


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _escape_attr(text: str) -> str:
    return _escape(text).replace('"', "&quot;")


# A fenced code block: an opening line of three or more backticks (optionally indented, an
# info string without backticks after it), then the body, then a line of at least as many
# backticks. An opening fence that is never closed is not a code block.
_FENCE_OPEN: Final = re.compile(r"(?P<indent>[ \t]*)(?P<fence>`{3,})(?P<info>[^`]*)")
_FENCE_CLOSE: Final = re.compile(r"[ \t]*(?P<fence>`{3,})[ \t]*")
_LANG: Final = re.compile(r"[A-Za-z0-9_+#.-]{1,32}")
# A blank line (possibly several): emphasis and code spans never reach across one.
_PARAGRAPH_BREAK: Final = re.compile(r"(\n(?:[ \t]*\n)+)")
_LINK_SCHEME: Final = re.compile(r"(?:https?|tg)://\S+", re.IGNORECASE)
# Deeper emphasis than this is left as literal markers (keeps the recursion bounded).
_MAX_NESTING: Final = 12


def render_html(text: str) -> str:
    """Render an agent's Markdown-ish reply as Telegram Bot API HTML (parse_mode="HTML").

    - a fenced code block (three or more backticks, optional language) becomes
      `<pre><code class="language-LANG">...</code></pre>` (no class without a usable language);
      an opening fence that is never closed stays literal text;
    - `code` (any run of backticks closed by a run of the same length) becomes `<code>`;
    - `**bold**` and `__bold__` become `<b>`, `*italic*` and `_italic_` become `<i>`,
      `~~strike~~` becomes `<s>`;
    - `[label](url)` becomes `<a href="url">` when the url is http://, https:// or tg://;
      any other link stays literal text.

    An emphasis marker opens only where it is not preceded by a letter or digit and is
    followed by a non-space, and closes only where it is preceded by a non-space and not
    followed by a letter or digit, so `snake_case_names` and `2*3*4` stay as written. Emphasis
    and code spans stay within a paragraph. Code is escaped, never formatted. Markers that do
    not pair up are literal text. Windows line ends are read as plain newlines.
    """
    text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    line_start = [0] * len(lines)
    for index in range(1, len(lines)):
        line_start[index] = line_start[index - 1] + len(lines[index - 1]) + 1
    closers: list[tuple[int, int]] = []  # (line, fence width) of every possible closing line
    for index, line in enumerate(lines):
        match = _FENCE_CLOSE.fullmatch(line)
        if match:
            closers.append((index, len(match["fence"])))
    closer_lines = [line for line, _ in closers]
    widest_from = [0] * (len(closers) + 1)  # the widest closing fence at or after each closer
    for at in range(len(closers) - 1, -1, -1):
        widest_from[at] = max(closers[at][1], widest_from[at + 1])

    parts: list[str] = []
    prose_start = 0
    index = 0
    while index < len(lines) - 1:
        opening = _FENCE_OPEN.fullmatch(lines[index])
        if opening is not None:
            width = len(opening["fence"])
            at = bisect_right(closer_lines, index)
            if widest_from[at] >= width:
                while closers[at][1] < width:
                    at += 1
                closing = closers[at][0]
                parts.append(_render_prose(text[prose_start : line_start[index]]))
                parts.append(
                    _render_code(lines[index + 1 : closing], opening["indent"], opening["info"])
                )
                # The newline after the closing fence stays with the text that follows.
                prose_start = line_start[closing] + len(lines[closing])
                index = closing + 1
                continue
        index += 1
    parts.append(_render_prose(text[prose_start:]))
    return "".join(parts)


def _render_code(lines: list[str], indent: str, info: str) -> str:
    if indent:
        lines = [_dedent(line, indent) for line in lines]
    body = "\n".join(lines)
    if not body.strip():
        # Telegram refuses empty entities: an empty block leaves only its whitespace.
        return _escape(body)
    words = info.split()
    lang = words[0] if words else ""
    if _LANG.fullmatch(lang):
        return f'<pre><code class="language-{_escape_attr(lang)}">{_escape(body)}</code></pre>'
    return f"<pre><code>{_escape(body)}</code></pre>"


def _dedent(line: str, indent: str) -> str:
    if line.startswith(indent):
        return line[len(indent) :]
    cut = 0
    while cut < len(indent) and cut < len(line) and line[cut] in " \t":
        cut += 1
    return line[cut:]


def _render_prose(text: str) -> str:
    parts = _PARAGRAPH_BREAK.split(text)
    # re.split with a group alternates paragraph, separator, paragraph, ...
    return "".join(
        _escape(part) if index % 2 else _InlineRenderer(_atoms(part)).render()
        for index, part in enumerate(parts)
    )


@dataclass(frozen=True, slots=True)
class _Code:
    """An inline code span, already rendered; opaque to the emphasis and link parser."""

    html: str


_Atom = str | _Code

_BACKTICK_RUN: Final = re.compile(r"`+")


def _atoms(paragraph: str) -> list[_Atom]:
    """Split a paragraph into single characters, with each code span as one atom."""
    atoms: list[_Atom] = []
    pos = 0
    length = len(paragraph)
    while pos < length:
        tick = paragraph.find("`", pos)
        if tick < 0:
            atoms.extend(paragraph[pos:])
            break
        atoms.extend(paragraph[pos:tick])
        run = _BACKTICK_RUN.match(paragraph, tick)
        assert run is not None
        width = run.end() - tick
        closing = re.compile(rf"(?<!`)`{{{width}}}(?!`)").search(paragraph, run.end())
        content = paragraph[run.end() : closing.start()] if closing else ""
        if closing is None or not content.strip():
            atoms.extend(run.group())
            pos = run.end()
            continue
        if len(content) > 2 and content[0] == " " and content[-1] == " ":
            content = content[1:-1]
        atoms.append(_Code(f"<code>{_escape(content)}</code>"))
        pos = closing.end()
    return atoms


def _is_space(atom: _Atom | None) -> bool:
    return isinstance(atom, str) and atom.isspace()


def _is_word(atom: _Atom | None) -> bool:
    return isinstance(atom, str) and atom.isalnum()


# Marker character -> (marker length, tag), the longer marker tried first.
_EMPHASIS: Final[dict[str, tuple[tuple[int, str], ...]]] = {
    "*": ((2, "b"), (1, "i")),
    "_": ((2, "b"), (1, "i")),
    "~": ((2, "s"),),
}


def _run_fits(run_length: int, marker: int) -> bool:
    """Whether a run of marker characters can act as a marker of the given length.

    A single marker needs a run of one, a double marker a run of two or three (`***x***` is
    bold around italic).
    """
    return run_length == marker or (marker == 2 and run_length == 3)


class _InlineRenderer:
    """Emphasis, strikethrough and links over one paragraph's atoms, rendered to HTML."""

    def __init__(self, atoms: list[_Atom]) -> None:
        self.atoms = atoms
        count = len(atoms)
        # For each index, where the run of equal marker characters around it starts and ends.
        self.run_start = list(range(count))
        self.run_end = [index + 1 for index in range(count)]
        for index in range(1, count):
            atom = atoms[index]
            if isinstance(atom, str) and atom in _EMPHASIS and atoms[index - 1] == atom:
                self.run_start[index] = self.run_start[index - 1]
        for index in range(count - 2, -1, -1):
            atom = atoms[index]
            if isinstance(atom, str) and atom in _EMPHASIS and atoms[index + 1] == atom:
                self.run_end[index] = self.run_end[index + 1]
        # Closers that do not depend on the enclosing segment, by (character, marker length).
        self.closers: dict[tuple[str, int], list[int]] = {}
        for char, markers in _EMPHASIS.items():
            for width, _tag in markers:
                self.closers[(char, width)] = [
                    index
                    for index in range(1, count - width + 1)
                    if atoms[index] == char
                    and self.run_end[index] == index + width
                    and _run_fits(index + width - self.run_start[index], width)
                    and not _is_space(atoms[index - 1])
                    and not _is_word(atoms[index + width] if index + width < count else None)
                ]
        # Matching square brackets, and matching parentheses within a run without whitespace
        # or code (where a link target can be).
        self.bracket: dict[int, int] = {}
        self.paren: dict[int, int] = {}
        brackets: list[int] = []
        parens: list[int] = []
        for index, atom in enumerate(atoms):
            if atom == "[":
                brackets.append(index)
            elif atom == "]" and brackets:
                self.bracket[brackets.pop()] = index
            if isinstance(atom, _Code) or atom.isspace():
                parens.clear()
            elif atom == "(":
                parens.append(index)
            elif atom == ")" and parens:
                self.paren[parens.pop()] = index

    def render(self) -> str:
        return self._render(0, len(self.atoms), frozenset(), 0)

    def _render(self, start: int, end: int, active: frozenset[str], depth: int) -> str:
        atoms = self.atoms
        out: list[str] = []
        text: list[str] = []
        index = start
        while index < end:
            atom = atoms[index]
            if isinstance(atom, _Code):
                out.append(_escape("".join(text)))
                text.clear()
                out.append(atom.html)
                index += 1
                continue
            rendered: tuple[str, int] | None = None
            if atom == "[" and "a" not in active:
                rendered = self._link(index, end, active, depth)
            elif atom in _EMPHASIS and depth < _MAX_NESTING:
                rendered = self._emphasis(index, start, end, active, depth)
            if rendered is None:
                text.append(atom)
                index += 1
                continue
            out.append(_escape("".join(text)))
            text.clear()
            out.append(rendered[0])
            index = rendered[1]
        out.append(_escape("".join(text)))
        return "".join(out)

    def _emphasis(
        self, index: int, start: int, end: int, active: frozenset[str], depth: int
    ) -> tuple[str, int] | None:
        atoms = self.atoms
        char = atoms[index]
        assert isinstance(char, str)
        if index > start and (atoms[index - 1] == char or _is_word(atoms[index - 1])):
            return None
        run = min(self.run_end[index], end) - index
        for width, tag in _EMPHASIS[char]:
            if not _run_fits(run, width) or index + width >= end:
                continue
            if _is_space(atoms[index + width]):
                continue
            closer = self._closer(char, width, index + width, end)
            if closer is None:
                continue
            inner = self._render(index + width, closer, active | {tag}, depth + 1)
            html = inner if tag in active else f"<{tag}>{inner}</{tag}>"
            return html, closer + width
        return None

    def _closer(self, char: str, width: int, content: int, end: int) -> int | None:
        """The first closing marker for content starting at `content`, within the segment."""
        atoms = self.atoms
        found: int | None = None
        candidates = self.closers[(char, width)]
        at = bisect_left(candidates, content + 1)
        if at < len(candidates) and candidates[at] + width <= end:
            found = candidates[at]
        # At the end of an enclosing segment the run may continue into the enclosing closer.
        last = end - width
        if (
            last > content
            and (found is None or last < found)
            and all(atoms[k] == char for k in range(last, end))
            and _run_fits(end - max(self.run_start[last], content), width)
            and not _is_space(atoms[last - 1])
        ):
            found = last
        return found

    def _link(
        self, index: int, end: int, active: frozenset[str], depth: int
    ) -> tuple[str, int] | None:
        atoms = self.atoms
        close = self.bracket.get(index)
        if close is None or close + 1 >= end or atoms[close + 1] != "(":
            return None
        label = atoms[index + 1 : close]
        if not any(isinstance(atom, _Code) or not atom.isspace() for atom in label):
            return None
        url_end = self.paren.get(close + 1)
        if url_end is None or url_end >= end:
            return None
        url = atoms[close + 2 : url_end]
        href = "".join(atom for atom in url if isinstance(atom, str))
        if not _LINK_SCHEME.fullmatch(href):
            return None
        inner = self._render(index + 1, close, active | {"a"}, depth + 1)
        return f'<a href="{_escape_attr(href)}">{inner}</a>', url_end + 1


# ---------------------------------------------------------------------------------------------
# Splitting

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
