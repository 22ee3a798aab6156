"""One event of a session's audit trail (`action.log`) and its line.

One event is one line::

    [YYYY-MM-DD HH:MM:SS.mmm][<window_hash>][<kind>][<task_hash>][<identity>] <body>

The timestamp is UTC with millisecond precision. Either hash may be empty, written `[]`.
`identity` is whom the event happened for (`platform:sender id`, as `Origin.sender_key`):
the task's requester, a schedule's creator, a subagent's parent's requester. A record
without one (the gateway's own lines) has no identity bracket at all, and so has every line
written before identities were kept: both read back with an empty identity. In the bracket,
every character outside `A-Z a-z 0-9 _ . : @ + -` is written as `%XX` of its UTF-8 bytes, so
the bracket never holds `]`, a space or a line break.

A record with an empty body ends at its last bracket. Lines written before task hashes
existed have no task bracket (`[ts][window][kind] body`); they are still read, with an empty
task hash. The forms are told apart by what follows the kind bracket: another bracket in the
current form, a space (or the end of the line) in the older one.

The body is escaped so that an event can never span two lines: `\\` becomes `\\\\`, newline
`\\n`, carriage return `\\r`, tab `\\t`, every other C0/C1 control character and DEL `\\xNN`,
and U+2028, U+2029 and lone surrogates `\\uNNNN`. Unescaping gives back the exact body. A
backslash not followed by one of those forms is read as itself, so a hand-edited or foreign
line is still readable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final

from gateway.ids import validate_hash

KIND_RE: Final = re.compile(r"[a-z_]{1,32}", re.ASCII)
# As long as an identity key may be where the archive keeps one (`usage.identity`).
MAX_IDENTITY: Final = 200


class ActionKind(StrEnum):
    user = "user"
    text_delta = "text_delta"
    text = "text"
    tool_call = "tool_call"
    tool_result = "tool_result"
    confirm = "confirm"
    ask_user = "ask_user"
    answer = "answer"
    done = "done"
    error = "error"
    canceled = "canceled"
    system = "system"


class InvalidActionKind(ValueError):
    """A kind outside `[a-z_]{1,32}`."""

    def __init__(self, value: object) -> None:
        shown = repr(value)
        if len(shown) > 40:
            shown = shown[:40] + "…"
        super().__init__(f"invalid action kind {shown}: expected 1-32 characters from a-z _")


# --- body escaping -------------------------------------------------------------------------

_ESCAPE_RE: Final = re.compile("[\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_SHORT_ESCAPES: Final = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPE_RE: Final = re.compile(r"\\(?:([\\nrt])|x([0-9A-Fa-f]{2})|u([0-9A-Fa-f]{4}))")
_SHORT_UNESCAPES: Final = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _unescape_match(match: re.Match[str]) -> str:
    short, byte, wide = match.groups()
    if short is not None:
        return _SHORT_UNESCAPES[short]
    return chr(int(byte if byte is not None else wide, 16))


def escape_body(body: str) -> str:
    """Escape `body` so it holds no line break of any kind and encodes as UTF-8."""
    return _ESCAPE_RE.sub(_escape_char, body)


def unescape_body(text: str) -> str:
    """Invert `escape_body`; an unrecognised backslash sequence is kept as written."""
    if "\\" not in text:
        return text
    return _UNESCAPE_RE.sub(_unescape_match, text)


# --- identity -------------------------------------------------------------------------------

_IDENTITY_PLAIN: Final = re.compile(r"[A-Za-z0-9_.:@+-]", re.ASCII)
_IDENTITY_ALL_PLAIN: Final = re.compile(r"[A-Za-z0-9_.:@+-]*", re.ASCII)
_SURROGATE_RE: Final = re.compile("[\ud800-\udfff]")
_PERCENT_RE: Final = re.compile(r"(?:%[0-9A-F]{2})+", re.ASCII)


def encode_identity(identity: str) -> str:
    """`identity` as its bracket holds it: plain characters kept, the rest `%XX` per byte."""
    if _IDENTITY_ALL_PLAIN.fullmatch(identity):  # nearly every identity: one look, not one a char
        return identity
    return "".join(
        char if _IDENTITY_PLAIN.fullmatch(char) else "".join(f"%{b:02X}" for b in char.encode())
        for char in identity
    )


def decode_identity(text: str) -> str:
    """Invert `encode_identity`; bytes that are not UTF-8 read as U+FFFD."""
    return _PERCENT_RE.sub(
        lambda m: bytes.fromhex(m.group().replace("%", "")).decode("utf-8", "replace"), text
    )


def _check_identity(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"identity must be a str, not {type(value).__name__}")
    if len(value) > MAX_IDENTITY:
        raise ValueError(f"identity is longer than {MAX_IDENTITY} characters")
    # A lone surrogate has no UTF-8 form; what reads back is U+FFFD, so it is that from here.
    return _SURROGATE_RE.sub("\ufffd", str.__str__(value))


# --- records -------------------------------------------------------------------------------

_LINE_RE: Final = re.compile(
    r"\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3})\]"
    r"\[(?P<window>[A-Za-z0-9_-]{0,64})\]"
    r"\[(?P<kind>[a-z_]{1,32})\]"
    r"(?:"
    r"\[(?P<task>[A-Za-z0-9_-]{0,64})\]"
    r"(?:\[(?P<identity>(?:[A-Za-z0-9_.:@+-]|%[0-9A-F]{2}){1,1200})\])?"
    r"(?: (?P<body>.*))?"
    r"|(?: (?P<old_body>.*))?"
    r")",
    re.ASCII,
)


def _check_kind(kind: object) -> str:
    if not isinstance(kind, str) or KIND_RE.fullmatch(kind) is None:
        raise InvalidActionKind(kind)
    try:
        return ActionKind(kind)
    except ValueError:
        # Kinds added by newer writers are kept as they are rather than rejected.
        return str.__str__(kind)


def _check_hash(value: object, what: str) -> str:
    if value == "":
        return ""
    # str.__str__ drops any str subclass, whose formatting could differ from its value.
    return str.__str__(validate_hash(value, what))


def _to_log_time(at: object) -> datetime:
    if not isinstance(at, datetime):
        raise TypeError(f"at must be a datetime, not {type(at).__name__}")
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError("at must be timezone-aware")
    try:
        utc = at.astimezone(UTC)
    except OverflowError as exc:
        raise ValueError(f"at is out of range once converted to UTC: {at!r}") from exc
    # The line keeps milliseconds only; truncating here makes a record equal to its re-read.
    return utc.replace(microsecond=utc.microsecond // 1000 * 1000, fold=0)


def _format_time(at: datetime) -> str:
    # Explicit padding: strftime("%Y") does not zero-pad years before 1000 on glibc.
    return (
        f"{at.year:04d}-{at.month:02d}-{at.day:02d} "
        f"{at.hour:02d}:{at.minute:02d}:{at.second:02d}.{at.microsecond // 1000:03d}"
    )


@dataclass(frozen=True, slots=True)
class ActionRecord:
    """One action.log event.

    `at` is normalised to UTC and truncated to milliseconds, the precision the line keeps.
    `kind` is an `ActionKind` when known and a plain `str` otherwise. `identity` is whom the
    event happened for, "" when for no one in particular.
    """

    at: datetime
    window_hash: str
    kind: str
    task_hash: str
    body: str
    identity: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.body, str):
            raise TypeError(f"body must be a str, not {type(self.body).__name__}")
        object.__setattr__(self, "at", _to_log_time(self.at))
        object.__setattr__(self, "window_hash", _check_hash(self.window_hash, "window hash"))
        object.__setattr__(self, "kind", _check_kind(self.kind))
        object.__setattr__(self, "task_hash", _check_hash(self.task_hash, "task hash"))
        object.__setattr__(self, "identity", _check_identity(self.identity))

    def format_line(self) -> str:
        """The record as one line, without the trailing newline."""
        head = f"[{_format_time(self.at)}][{self.window_hash}][{self.kind}][{self.task_hash}]"
        if self.identity:
            head += f"[{encode_identity(self.identity)}]"
        if not self.body:
            return head
        return f"{head} {escape_body(self.body)}"


def parse_line(line: str | bytes) -> ActionRecord | None:
    """Read one action.log line, or return None if it is not a record. Never raises.

    One trailing `\\n`, `\\r\\n` or `\\r` and a leading byte-order mark are ignored; a line
    feed anywhere else makes it not a record.
    """
    if isinstance(line, bytes | bytearray | memoryview):
        text = bytes(line).decode("utf-8", errors="replace")
    elif isinstance(line, str):
        text = line
    else:
        return None
    text = text.removeprefix("\ufeff").removesuffix("\n").removesuffix("\r")
    match = _LINE_RE.fullmatch(text)
    if match is None:
        return None
    ts = match["ts"]
    try:
        at = datetime(
            int(ts[0:4]),
            int(ts[5:7]),
            int(ts[8:10]),
            int(ts[11:13]),
            int(ts[14:16]),
            int(ts[17:19]),
            int(ts[20:23]) * 1000,
            tzinfo=UTC,
        )
    except ValueError:
        return None
    task = match["task"]
    raw_body = match["body"] if task is not None else match["old_body"]
    try:
        return ActionRecord(
            at=at,
            window_hash=match["window"],
            kind=match["kind"],
            task_hash=task or "",
            body=unescape_body(raw_body or ""),
            identity=decode_identity(match["identity"] or ""),
        )
    except ValueError:
        return None
