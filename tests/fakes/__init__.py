"""Local fake platform servers for tests that drive the real client libraries."""

from .telegram import ApiError, FakeTelegram, HtmlParseError, Upload, parse_html, utf16_len

__all__ = ["ApiError", "FakeTelegram", "HtmlParseError", "Upload", "parse_html", "utf16_len"]
