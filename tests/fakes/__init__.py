"""Local fake platform servers for tests that drive the real client libraries."""

from .base import Upload
from .telegram import ApiError, FakeTelegram, HtmlParseError, parse_html, utf16_len

__all__ = ["ApiError", "FakeTelegram", "HtmlParseError", "Upload", "parse_html", "utf16_len"]
