"""Agent replies as Telegram HTML: the loose Markdown an agent writes, turned into the markup
`parse_mode="HTML"` accepts.

`render_html` handles fenced code blocks, inline code, bold, italic, strikethrough and
http(s)/tg links. Everything else is text, with `&`, `<` and `>` escaped. Markers that do not
pair up stay as literal text, and the output is always well-formed and uses only tags Telegram
knows. Cutting the result to Telegram's size limit is `adapters.telegram.split`'s job.

Pure: no I/O, standard library only.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Final

__all__ = ["render_html"]


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
