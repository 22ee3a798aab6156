"""Attached documents read into chunks: the section each chunk is cited by, how paragraphs are
packed and cut, and every kind of document that is refused, with the reason an admin reads."""

from __future__ import annotations

import io
import re

import pytest
from pypdf import PdfReader, PdfWriter

from gateway.knowledge.documents import (
    MAX_CHUNKS,
    MEDIA_TYPES,
    PATH_SEPARATOR,
    RANGE_DASH,
    Chunk,
    DocumentRefused,
    chunks_of,
    media_type_of,
    title_of,
)


def pdf(*pages: list[str], title: str = "") -> bytes:
    """A minimal PDF: each page shows its lines in Helvetica, one text object per page."""

    def literal(text: str) -> bytes:
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        return b"(" + escaped.encode("latin-1") + b")"

    page_ids = [4 + 2 * i for i in range(len(pages))]
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids ["
        + b" ".join(b"%d 0 R" % n for n in page_ids)
        + b"] /Count %d >>" % len(pages),
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    for page_id, lines in zip(page_ids, pages, strict=True):
        shown = b" T* ".join(literal(line) + b" Tj" for line in lines)
        stream = b"BT /F1 12 Tf 14 TL 72 720 Td " + shown + b" ET" if lines else b""
        objects[page_id] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (page_id + 1)
        )
        objects[page_id + 1] = b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
    info = 0
    if title:
        info = max(objects) + 1
        objects[info] = b"<< /Title " + literal(title) + b" >>"
    out = bytearray(b"%PDF-1.4\n")
    offsets: dict[int, int] = {}
    for number in sorted(objects):
        offsets[number] = len(out)
        out += b"%d 0 obj\n%s\nendobj\n" % (number, objects[number])
    xref = len(out)
    size = max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for number in range(1, size):
        out += b"%010d 00000 n \n" % offsets[number]
    out += b"trailer\n<< /Size %d /Root 1 0 R" % size
    out += b" /Info %d 0 R >>\n" % info if info else b" >>\n"
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def path(*headings: str) -> str:
    return PATH_SEPARATOR.join(headings)


def line_range(first: int, last: int) -> str:
    return f"lines {first}{RANGE_DASH}{last}"


def sections(chunks: list[Chunk]) -> list[str]:
    return [c.section for c in chunks]


def words(text: str) -> list[str]:
    return text.split()


# media_type_of


@pytest.mark.parametrize(
    ("name", "declared", "expected"),
    [
        ("notes.bin", "text/plain; charset=utf-8", "text/plain"),
        ("notes", "TEXT/Markdown", "text/markdown"),
        ("notes", "text/x-markdown; charset=UTF-8", "text/markdown"),
        ("manual", "application/pdf", "application/pdf"),
        ("rules.md", "application/octet-stream", "text/markdown"),
        ("rules.MARKDOWN", "", "text/markdown"),
        ("read.me.txt", "", "text/plain"),
        ("plain.text", "", "text/plain"),
        ("Manual.PDF", "", "application/pdf"),
        ("rules.md", "text/plain", "text/plain"),
    ],
)
def test_media_type_from_the_declared_type_else_the_extension(
    name: str, declared: str, expected: str
) -> None:
    assert media_type_of(name, declared) == expected


@pytest.mark.parametrize(
    ("name", "declared"),
    [("picture.png", "image/png"), ("archive", ""), ("a.docx", ""), ("dir.md/file", "")],
)
def test_media_type_refused_names_the_types_taken(name: str, declared: str) -> None:
    with pytest.raises(DocumentRefused) as refused:
        media_type_of(name, declared)
    message = str(refused.value)
    assert name in message
    assert ".txt" in message and ".md" in message and ".pdf" in message
    assert declared in message


def test_media_types_are_the_three_read() -> None:
    assert MEDIA_TYPES == ("text/plain", "text/markdown", "application/pdf")


# Markdown


def test_markdown_sections_are_heading_paths() -> None:
    text = (
        "# Server rules\nBe kind.\n\n"
        "## Voice channels\nMute when not talking.\n\n"
        "### Music bots ###\nOnly in #music.\n\n"
        "## Text channels\nStay on topic.\n\n"
        "# Appeals\nWrite to the mods.\n"
    )
    chunks = chunks_of(text.encode(), "text/markdown")
    assert [(c.ordinal, c.section, c.text) for c in chunks] == [
        (0, "Server rules", "Be kind."),
        (1, path("Server rules", "Voice channels"), "Mute when not talking."),
        (2, path("Server rules", "Voice channels", "Music bots"), "Only in #music."),
        (3, path("Server rules", "Text channels"), "Stay on topic."),
        (4, "Appeals", "Write to the mods."),
    ]


def test_markdown_skipped_levels_and_a_shallower_heading_reset_the_path() -> None:
    text = "# A\n### C\none\n## B\ntwo\n#### D\nthree\n"
    assert sections(chunks_of(text.encode(), "text/markdown")) == [
        path("A", "C"),
        path("A", "B"),
        path("A", "B", "D"),
    ]


def test_markdown_hash_lines_in_fenced_code_are_not_headings() -> None:
    text = (
        "# Setup\n"
        "Run this:\n\n"
        "```bash\n# install\npip install x\n## more\n```\n\n"
        "~~~~\n# also code\n```\n# still code\n~~~~\n\n"
        "## Next\nDone.\n"
    )
    chunks = chunks_of(text.encode(), "text/markdown")
    assert sections(chunks) == ["Setup", path("Setup", "Next")]
    assert "# install" in chunks[0].text
    assert "## more" in chunks[0].text
    assert "# still code" in chunks[0].text
    assert chunks[1].text == "Done."


def test_markdown_text_before_the_first_heading_takes_its_name() -> None:
    text = "Last updated May.\n\n# Handbook\nWelcome.\n"
    chunks = chunks_of(text.encode(), "text/markdown")
    assert [(c.section, c.text) for c in chunks] == [
        ("Handbook", "Last updated May."),
        ("Handbook", "Welcome."),
    ]


def test_markdown_without_headings_is_the_start() -> None:
    chunks = chunks_of(b"Just a note.\n\n#hashtag is not a heading\n", "text/markdown")
    assert sections(chunks) == ["start"]
    assert chunks[0].text == "Just a note.\n\n#hashtag is not a heading"


def test_markdown_heading_without_text_below_makes_no_chunk() -> None:
    chunks = chunks_of(b"# Title\n\n## Empty\n\n## Full\nbody\n", "text/markdown")
    assert [(c.ordinal, c.section) for c in chunks] == [(0, path("Title", "Full"))]


# Packing and cutting


def test_paragraphs_are_packed_whole_up_to_the_limit() -> None:
    paragraphs = [f"Paragraph {i} " + "x" * 20 for i in range(6)]  # 33 or so characters each
    text = "\n\n".join(paragraphs)
    chunks = chunks_of(text.encode(), "text/markdown", max_chars=75)
    assert all(len(c.text) <= 75 for c in chunks)
    # Two paragraphs and their blank line fit in 75; a third does not.
    assert [c.text.split("\n\n") for c in chunks] == [paragraphs[i : i + 2] for i in (0, 2, 4)]


def test_a_long_paragraph_is_cut_at_sentence_ends() -> None:
    sentences = [f"Sentence number {i} says something rather plain." for i in range(12)]
    text = " ".join(sentences)
    chunks = chunks_of(text.encode(), "text/plain", max_chars=120)
    assert len(chunks) > 1
    assert all(len(c.text) <= 120 for c in chunks)
    assert all(c.text.endswith(".") for c in chunks)
    assert words(" ".join(c.text for c in chunks)) == words(text)


def test_a_long_paragraph_without_sentences_is_cut_between_words() -> None:
    vocabulary = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]
    text = " ".join(vocabulary[i % len(vocabulary)] + str(i) for i in range(400))
    chunks = chunks_of(text.encode(), "text/plain", max_chars=97)
    assert all(0 < len(c.text) <= 97 for c in chunks)
    # No word is cut: the chunks' words are the text's, in order.
    assert words(" ".join(c.text for c in chunks)) == words(text)
    # And the cuts are near the limit, not early.
    assert all(len(c.text) > 80 for c in chunks[:-1])


def test_a_word_longer_than_the_limit_is_cut_at_the_limit() -> None:
    chunks = chunks_of(b"short " + b"y" * 25 + b" end", "text/plain", max_chars=10)
    assert [c.text for c in chunks] == ["short", "yyyyyyyyyy", "yyyyyyyyyy", "yyyyy end"]


def test_whitespace_is_tidied_and_nul_removed() -> None:
    text = "  a\t\tb   c\x00d \x07 \n\n\x00\n\n e\u00a0\u00a0f  "
    chunks = chunks_of(text.encode(), "text/plain", max_chars=6)
    assert [c.text for c in chunks] == ["a b cd", "e f"]
    assert all("\x00" not in c.text for c in chunks)


# Plain text


def test_plain_text_sections_are_exact_line_ranges() -> None:
    lines = [
        "First paragraph, line one",  # 1
        "and line two.",  # 2
        "",  # 3
        "   ",  # 4
        "Second, one line.",  # 5
        "",  # 6
        "Third starts",  # 7
        "goes on",  # 8
        "and ends.",  # 9
    ]
    chunks = chunks_of("\r\n".join(lines).encode(), "text/plain", max_chars=40)
    assert [(c.section, c.text) for c in chunks] == [
        (line_range(1, 2), "First paragraph, line one\nand line two."),
        ("line 5", "Second, one line."),
        (line_range(7, 9), "Third starts\ngoes on\nand ends."),
    ]


def test_plain_text_packed_paragraphs_span_their_lines() -> None:
    chunks = chunks_of(b"one\n\ntwo\n\n\nthree\nfour\n", "text/plain")
    assert [(c.section, c.text) for c in chunks] == [
        (line_range(1, 7), "one\n\ntwo\n\nthree\nfour")
    ]


def test_plain_text_pieces_of_a_long_paragraph_keep_their_lines() -> None:
    lines = [f"line {n} has some words in it" for n in range(1, 11)]  # 26 or 27 characters
    chunks = chunks_of("\n".join(lines).encode(), "text/plain", max_chars=60)
    assert all(len(c.text) <= 60 for c in chunks)
    for chunk in chunks:
        numbers = [int(n) for n in re.findall(r"line (\d+)", chunk.text)]
        expected = (
            f"line {numbers[0]}" if len(numbers) == 1 else line_range(numbers[0], numbers[-1])
        )
        assert chunk.section == expected
    covered = [int(n) for c in chunks for n in re.findall(r"line (\d+)", c.text)]
    assert covered == list(range(1, 11))


# Refusals and encodings


@pytest.mark.parametrize("kind", MEDIA_TYPES)
def test_an_empty_document_is_refused(kind: str) -> None:
    with pytest.raises(DocumentRefused, match="empty"):
        chunks_of(b"", kind)


@pytest.mark.parametrize("data", [b" \n\t\r\n", b"\x00\x00\n\x00"])
def test_a_document_without_text_is_refused(data: bytes) -> None:
    with pytest.raises(DocumentRefused, match="no text"):
        chunks_of(data, "text/plain")


@pytest.mark.parametrize("kind", ["text/plain", "text/markdown"])
def test_invalid_utf8_is_refused(kind: str) -> None:
    with pytest.raises(DocumentRefused, match="not UTF-8 text"):
        chunks_of("caf\u00e9".encode("latin-1"), kind)


def test_an_encoded_surrogate_is_invalid_utf8() -> None:
    with pytest.raises(DocumentRefused, match="not UTF-8 text"):
        chunks_of(b"half \xed\xb2\x80 a pair", "text/plain")


def test_a_utf8_bom_is_accepted_and_dropped() -> None:
    chunks = chunks_of(b"\xef\xbb\xbf# T\xc3\xadtulo\nTexto.\n", "text/markdown")
    assert [(c.section, c.text) for c in chunks] == [("Título", "Texto.")]
    assert chunks_of(b"\xef\xbb\xbfhello", "text/plain")[0].text == "hello"


def test_an_unknown_media_type_is_refused() -> None:
    with pytest.raises(DocumentRefused):
        chunks_of(b"hello", "image/png")


def test_too_many_chunks_are_refused() -> None:
    at_limit = "\n\n".join(f"p{i:05}" for i in range(MAX_CHUNKS)).encode()
    assert len(chunks_of(at_limit, "text/plain", max_chars=6)) == MAX_CHUNKS
    over = at_limit + b"\n\none more"
    with pytest.raises(DocumentRefused, match=f"more than {MAX_CHUNKS}"):
        chunks_of(over, "text/plain", max_chars=6)


def test_ordinals_count_in_document_order() -> None:
    chunks = chunks_of(b"a\n\nb\n\nc", "text/plain", max_chars=1)
    assert [(c.ordinal, c.text, c.section) for c in chunks] == [
        (0, "a", "line 1"),
        (1, "b", "line 3"),
        (2, "c", "line 5"),
    ]


# PDF


def test_pdf_sections_are_pages() -> None:
    data = pdf(["Welcome to the guild.", "Read the rules."], ["Second page (with parens)."])
    chunks = chunks_of(data, "application/pdf")
    assert sections(chunks) == ["page 1", "page 2"]
    assert words(chunks[0].text) == words("Welcome to the guild. Read the rules.")
    assert chunks[1].text == "Second page (with parens)."


def test_pdf_blank_page_is_skipped_and_numbering_kept() -> None:
    chunks = chunks_of(pdf(["one"], [], ["three"]), "application/pdf")
    assert [(c.ordinal, c.section, c.text) for c in chunks] == [
        (0, "page 1", "one"),
        (1, "page 3", "three"),
    ]


def test_pdf_chunks_never_span_pages() -> None:
    long_line = "Members must be polite at all times."
    data = pdf([long_line] * 6, ["tail"])
    chunks = chunks_of(data, "application/pdf", max_chars=80)
    assert all(len(c.text) <= 80 for c in chunks)
    assert sections(chunks) == ["page 1"] * (len(chunks) - 1) + ["page 2"]
    assert chunks[-1].text == "tail"
    assert words(" ".join(c.text for c in chunks[:-1])) == words(" ".join([long_line] * 6))


def test_pdf_with_only_blank_pages_is_refused_as_having_no_text() -> None:
    with pytest.raises(DocumentRefused, match=r"no text to extract.*scanned"):
        chunks_of(pdf([], []), "application/pdf")


@pytest.mark.parametrize(
    "data",
    [
        b"%PDF-1.4\nthis is not really a pdf at all",
        b"GIF89a" + bytes(range(256)),
        pdf(["hello there"])[:40],
    ],
    ids=["garbage-after-header", "not-a-pdf", "truncated"],
)
def test_a_corrupt_pdf_is_refused(data: bytes) -> None:
    with pytest.raises(DocumentRefused, match="not a readable PDF"):
        chunks_of(data, "application/pdf")


def test_an_encrypted_pdf_is_refused() -> None:
    writer = PdfWriter()
    writer.add_blank_page(width=612, height=792)
    writer.encrypt("pw")
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(DocumentRefused, match="encrypted: attach a copy without a password"):
        chunks_of(out.getvalue(), "application/pdf")


def test_a_pdf_locked_only_against_changes_is_read() -> None:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf(["Readable by anyone."]))))
    writer.encrypt("", owner_password="owner")
    out = io.BytesIO()
    writer.write(out)
    chunks = chunks_of(out.getvalue(), "application/pdf")
    assert [(c.section, c.text) for c in chunks] == [("page 1", "Readable by anyone.")]


# title_of


def test_title_of_markdown_is_its_first_level_one_heading() -> None:
    text = b"intro\n## Not this\n```\n# nor this\n```\n# Server rules #\n# Later\n"
    assert title_of(text, "text/markdown", "rules.md") == "Server rules"


def test_title_of_markdown_without_a_level_one_heading_is_the_fallback() -> None:
    assert title_of(b"## Only level two\n", "text/markdown", "rules.md") == "rules.md"
    assert title_of(b"\xff\xfe", "text/markdown", "bad.md") == "bad.md"


def test_title_of_plain_text_is_the_fallback() -> None:
    assert title_of(b"# Looks like a heading\n", "text/plain", "notes.txt") == "notes.txt"


def test_title_of_pdf_is_its_metadata_title() -> None:
    assert title_of(pdf(["x"], title="Member handbook"), "application/pdf", "h.pdf") == (
        "Member handbook"
    )
    assert title_of(pdf(["x"]), "application/pdf", "h.pdf") == "h.pdf"
    assert title_of(b"garbage", "application/pdf", "g.pdf") == "g.pdf"


def test_title_is_cleaned_and_bounded() -> None:
    assert title_of(b"# A\x00B\x1b[31m C\n", "text/markdown", "f") == "AB[31m C"
    assert title_of(b"", "text/plain", "bad\x00\nname\x07.txt ") == "bad name.txt"
    long = title_of(("# " + "w" * 500).encode(), "text/markdown", "f")
    assert long == "w" * 200
    assert title_of(b"", "text/plain", "\x00") == "untitled document"


def test_text_without_spaces_is_cut_after_its_full_stops() -> None:
    sentence = "\u4f1a\u5458\u5fc5\u987b\u6587\u660e\u53d1\u8a00\u3002"  # nine characters
    chunks = chunks_of((sentence * 5).encode(), "text/plain", max_chars=20)
    assert [c.text for c in chunks] == [sentence * 2, sentence * 2, sentence]
