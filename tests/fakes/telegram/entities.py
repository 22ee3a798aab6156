"""Message entities: Telegram's HTML parse mode, the entities a client adds to typed text,
and lengths in UTF-16 code units, the unit every Telegram offset and limit counts in."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..base import JSON


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units, the unit Telegram counts in."""
    return len(text.encode("utf-16-le")) // 2


class HtmlParseError(ValueError):
    """Raised for HTML that the Bot API would reject."""


_HTML_ENTITY_TYPES = {
    "b": "bold",
    "strong": "bold",
    "i": "italic",
    "em": "italic",
    "u": "underline",
    "ins": "underline",
    "s": "strikethrough",
    "strike": "strikethrough",
    "del": "strikethrough",
    "a": "text_link",
    "code": "code",
    "pre": "pre",
    "tg-spoiler": "spoiler",
    "span": "spoiler",
    "blockquote": "blockquote",
}


_TAG_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9-]*")
_ATTR_NAME_RE = re.compile(r"[A-Za-z_:][-A-Za-z0-9_:.]*")
_CHAR_REF_RE = re.compile(r"&(lt|gt|amp|quot|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});")
_NAMED_REFS = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_BOT_COMMAND_RE = re.compile(r"/[A-Za-z0-9_]+(?:@[A-Za-z0-9_]+)?")
_MENTION_RE = re.compile(r"(?<![\w@/])@[A-Za-z0-9_]{5,32}\b")


@dataclass
class _OpenTag:
    name: str
    offset: int
    attrs: dict[str, str]
    language: str | None = None


def _byte_offset(source: str, index: int) -> int:
    return len(source[:index].encode("utf-8"))


def _decode_char_ref(ref: str) -> str:
    if ref in _NAMED_REFS:
        return _NAMED_REFS[ref]
    code = int(ref[2:], 16) if ref[1] in "xX" else int(ref[1:])
    if not 0 < code <= 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        return "\ufffd"
    return chr(code)


def _unescape(value: str) -> str:
    return _CHAR_REF_RE.sub(lambda m: _decode_char_ref(m.group(1)), value)


def parse_html(source: str) -> tuple[str, list[JSON]]:
    """Parse Telegram-flavoured HTML into plain text and message entities.

    Accepts only the tags the Bot API documents for ``parse_mode="HTML"`` and raises
    :class:`HtmlParseError` with a Bot API style message for anything else: unknown or void
    tags such as ``<br>``, a bare ``<``, unclosed or mismatched tags.
    """
    out: list[str] = []
    length = 0  # UTF-16 length of the text produced so far
    stack: list[_OpenTag] = []
    entities: list[JSON] = []
    i = 0
    n = len(source)

    def emit(text: str) -> None:
        nonlocal length
        out.append(text)
        length += utf16_len(text)

    while i < n:
        ch = source[i]
        if ch == "&":
            ref = _CHAR_REF_RE.match(source, i)
            if ref:
                emit(_decode_char_ref(ref.group(1)))
                i = ref.end()
            else:
                emit(ch)
                i += 1
            continue
        if ch != "<":
            emit(ch)
            i += 1
            continue
        if source.startswith("</", i):
            end = source.find(">", i)
            if end < 0:
                raise HtmlParseError(f"Unclosed end tag at byte offset {_byte_offset(source, i)}")
            name = source[i + 2 : end].strip().lower()
            if not stack:
                raise HtmlParseError(
                    f'Unexpected end tag "{name}" at byte offset {_byte_offset(source, i)}'
                )
            tag = stack.pop()
            if name != tag.name:
                raise HtmlParseError(
                    f"Unmatched end tag at byte offset {_byte_offset(source, i)}, "
                    f'expected "</{tag.name}>", found "</{name}>"'
                )
            _close_tag(tag, length, stack, entities)
            i = end + 1
            continue
        match = _TAG_NAME_RE.match(source, i + 1)
        name = match.group(0).lower() if match else ""
        if name not in _HTML_ENTITY_TYPES:
            raise HtmlParseError(
                f'Unsupported start tag "{name}" at byte offset {_byte_offset(source, i)}'
            )
        assert match is not None
        attrs, i = _parse_attributes(source, match.end(), name, tag_start=i)
        if name == "span" and attrs.get("class") != "tg-spoiler":
            raise HtmlParseError('Tag "span" must have class "tg-spoiler"')
        stack.append(_OpenTag(name, length, attrs))
    if stack:
        raise HtmlParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1].name}"')
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return "".join(out), entities


def _parse_attributes(
    source: str, j: int, name: str, *, tag_start: int
) -> tuple[dict[str, str], int]:
    attrs: dict[str, str] = {}
    n = len(source)
    while True:
        while j < n and source[j].isspace():
            j += 1
        if j >= n:
            raise HtmlParseError(
                f"Unclosed start tag at byte offset {_byte_offset(source, tag_start)}"
            )
        if source[j] == ">":
            return attrs, j + 1
        attr = _ATTR_NAME_RE.match(source, j)
        if not attr:
            raise HtmlParseError(
                f'Unexpected character in the tag "{name}" at byte offset {_byte_offset(source, j)}'
            )
        attr_name = attr.group(0).lower()
        j = attr.end()
        while j < n and source[j].isspace():
            j += 1
        value = ""
        if j < n and source[j] == "=":
            j += 1
            while j < n and source[j].isspace():
                j += 1
            if j < n and source[j] in "\"'":
                quote = source[j]
                end = source.find(quote, j + 1)
                if end < 0:
                    raise HtmlParseError(
                        "Unclosed end of an attribute value at byte offset "
                        f"{_byte_offset(source, j)}"
                    )
                value = source[j + 1 : end]
                j = end + 1
            else:
                start = j
                while j < n and not source[j].isspace() and source[j] != ">":
                    j += 1
                value = source[start:j]
        attrs[attr_name] = _unescape(value)


def _close_tag(tag: _OpenTag, end: int, stack: list[_OpenTag], entities: list[JSON]) -> None:
    parent = stack[-1] if stack else None
    if tag.name == "code" and parent is not None and parent.name == "pre":
        cls = tag.attrs.get("class", "")
        if cls.startswith("language-"):
            parent.language = cls.removeprefix("language-")
        return
    size = end - tag.offset
    if size <= 0:
        return
    kind = _HTML_ENTITY_TYPES[tag.name]
    entity: JSON = {"type": kind, "offset": tag.offset, "length": size}
    if kind == "text_link":
        href = tag.attrs.get("href")
        if not href:
            return
        entity["url"] = href
    elif kind == "pre" and tag.language:
        entity["language"] = tag.language
    elif kind == "blockquote" and "expandable" in tag.attrs:
        entity["type"] = "expandable_blockquote"
    entities.append(entity)


def auto_entities(text: str) -> list[JSON]:
    """The entities the Telegram app adds to typed text: a leading ``/command`` and every
    ``@username``."""
    entities: list[JSON] = []
    command = _BOT_COMMAND_RE.match(text)
    if command:
        entities.append({"type": "bot_command", "offset": 0, "length": utf16_len(command[0])})
    for mention in _MENTION_RE.finditer(text):
        entities.append(
            {
                "type": "mention",
                "offset": utf16_len(text[: mention.start()]),
                "length": utf16_len(mention[0]),
            }
        )
    return entities
