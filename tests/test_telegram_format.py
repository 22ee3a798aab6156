from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.telegram.render import render_html
from adapters.telegram.split import (
    MIN_HTML_LIMIT,
    MIN_PLAIN_LIMIT,
    TELEGRAM_MESSAGE_LIMIT,
    split_html,
    split_plain,
    strip_html,
    utf16_len,
)

# --- a validator for Telegram's HTML subset -------------------------------------------------

# Tag -> attributes it may carry (with a pattern each value must match).
ALLOWED: dict[str, dict[str, str]] = {
    "b": {},
    "strong": {},
    "i": {},
    "em": {},
    "u": {},
    "ins": {},
    "s": {},
    "strike": {},
    "del": {},
    "tg-spoiler": {},
    "span": {"class": r"tg-spoiler"},
    "a": {"href": r"(?i)(https?|tg)://\S+"},
    "code": {"class": r"language-[A-Za-z0-9_+#.-]+"},
    "pre": {},
    "blockquote": {"expandable": r""},
    "tg-emoji": {"emoji-id": r"\d+"},
}
ENTITY = re.compile(r"&(?:amp|lt|gt|quot|#[0-9]+|#[xX][0-9a-fA-F]+);")
TAG = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?>")


class Invalid(AssertionError):
    pass


class _Validator(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict[str, str | None], list[str]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in ALLOWED:
            raise Invalid(f"tag <{tag}> is not allowed")
        allowed = ALLOWED[tag]
        values = dict(attrs)
        if len(values) != len(attrs):
            raise Invalid(f"repeated attribute on <{tag}>")
        for name, value in values.items():
            if name not in allowed or not re.fullmatch(allowed[name], value or ""):
                raise Invalid(f"attribute {name}={value!r} not allowed on <{tag}>")
        if tag == "a" and "href" not in values:
            raise Invalid("<a> without href")
        parent = self.stack[-1][0] if self.stack else None
        if parent == "code":
            raise Invalid(f"<{tag}> inside <code>")
        if parent == "pre" and tag != "code":
            raise Invalid(f"<{tag}> inside <pre>")
        if tag == "code" and "class" in values and parent != "pre":
            raise Invalid("a language class outside <pre>")
        if tag == "pre" and any(name in ("pre", "code") for name, _, _ in self.stack):
            raise Invalid("<pre> inside code")
        if tag == "a" and any(name == "a" for name, _, _ in self.stack):
            raise Invalid("nested links")
        self.stack.append((tag, values, []))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        raise Invalid(f"self-closing <{tag}/>")

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1][0] != tag:
            raise Invalid(f"</{tag}> does not close the innermost open element")
        _, _, content = self.stack.pop()
        inner = "".join(content)
        if not inner:
            raise Invalid(f"empty <{tag}>")
        if self.stack:
            self.stack[-1][2].append(inner)

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self.stack:
            self.stack[-1][2].append(data)

    def handle_comment(self, data: str) -> None:
        raise Invalid("comment")

    def handle_decl(self, decl: str) -> None:
        raise Invalid("declaration")

    def handle_pi(self, data: str) -> None:
        raise Invalid("processing instruction")

    def unknown_decl(self, data: str) -> None:
        raise Invalid("declaration")


def text_of(html: str) -> str:
    """Validate `html` as Telegram HTML and return its text content."""
    outside = TAG.sub("", html)
    if "<" in outside or ">" in outside:
        raise Invalid(f"unescaped < or > in {html!r}")
    if "&" in ENTITY.sub("", outside):
        raise Invalid(f"bare & or unsupported entity in {html!r}")
    validator = _Validator()
    validator.feed(html)
    validator.close()
    if validator.stack:
        raise Invalid(f"unclosed <{validator.stack[-1][0]}>")
    return "".join(validator.text)


@pytest.mark.parametrize(
    "bad",
    [
        "<b><i>x</b></i>",
        "<b>x",
        "x</b>",
        "<script>x</script>",
        "a < b",
        "a > b",
        "a & b",
        "&nbsp;",
        "<b></b>",
        "<code><b>x</b></code>",
        '<code class="language-py">x</code>',
        "<pre><b>x</b></pre>",
        '<a href="javascript:alert(1)">x</a>',
        '<a href="http://x"><a href="http://y">x</a></a>',
        "<b onclick='x'>x</b>",
        "<br/>",
        "<!-- x -->",
    ],
)
def test_validator_rejects(bad: str) -> None:
    with pytest.raises(Invalid):
        text_of(bad)


def test_validator_accepts_and_reads_text() -> None:
    html = '<b>a &amp; <i>b</i></b> <pre><code class="language-py">x &lt; 1</code></pre>'
    assert text_of(html) == "a & b x < 1"


# --- rendering ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("**bold**", "<b>bold</b>"),
        ("__bold__", "<b>bold</b>"),
        ("*italic*", "<i>italic</i>"),
        ("_italic_", "<i>italic</i>"),
        ("~~gone~~", "<s>gone</s>"),
        ("say `x = 1` now", "say <code>x = 1</code> now"),
        ("``a ` b``", "<code>a ` b</code>"),
        ("`` `tick` ``", "<code>`tick`</code>"),
        ("a **b** c *d* e", "a <b>b</b> c <i>d</i> e"),
        ("*italic **bold** italic*", "<i>italic <b>bold</b> italic</i>"),
        ("**bold *italic* bold**", "<b>bold <i>italic</i> bold</b>"),
        ("***both***", "<b><i>both</i></b>"),
        ("**~~struck bold~~**", "<b><s>struck bold</s></b>"),
        ("(*aside*)", "(<i>aside</i>)"),
        ("**Note:** read", "<b>Note:</b> read"),
        ("**a `b` c**", "<b>a <code>b</code> c</b>"),
        ("**outer __inner__ outer**", "<b>outer inner outer</b>"),
        ("_foo_bar_", "<i>foo_bar</i>"),
    ],
)
def test_inline_constructs(source: str, expected: str) -> None:
    html = render_html(source)
    assert html == expected
    text_of(html)


@pytest.mark.parametrize(
    "source",
    [
        "snake_case_words",
        "call my_func_name() now",
        "2*3*4 = 24",
        "a * b * c",
        "def f(*args, **kwargs):",
        "x**2 + y**2",
        "file__name__here",
        "a~~b~~c",
        "foo*bar* baz",
        "x_y_ z",
        "a**b** c",
        "* item one\n* item two",
        "**unclosed bold",
        "*unclosed italic",
        "~~unclosed strike",
        "`unclosed code",
        "** spaced **",
        "*a\n\nb*",
        "`a\n\nb`",
        "~single tilde~",
        "[label](http://example.com",
        "[label] (http://example.com)",
        "[](http://example.com)",
        "[label](http://exa mple.com)",
    ],
)
def test_non_markup_stays_literal(source: str) -> None:
    html = render_html(source)
    assert html == source
    assert text_of(html) == source


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        (
            "<script>alert('x')</script>",
            "&lt;script&gt;alert('x')&lt;/script&gt;",
        ),
        ("<b>not a tag</b>", "&lt;b&gt;not a tag&lt;/b&gt;"),
        ("&amp; stays literal", "&amp;amp; stays literal"),
        ('say "hi"', 'say "hi"'),
        ("**a < b**", "<b>a &lt; b</b>"),
        ("`<i>` & `&`", "<code>&lt;i&gt;</code> &amp; <code>&amp;</code>"),
    ],
)
def test_escaping(source: str, expected: str) -> None:
    html = render_html(source)
    assert html == expected
    text_of(html)


def test_fenced_code_block_with_language() -> None:
    source = "Run:\n```python\nif a < b and **c**:\n    print(`x` & _y_)\n```\nDone."
    html = render_html(source)
    assert html == (
        'Run:\n<pre><code class="language-python">if a &lt; b and **c**:\n'
        "    print(`x` &amp; _y_)</code></pre>\nDone."
    )
    assert text_of(html) == "Run:\nif a < b and **c**:\n    print(`x` & _y_)\nDone."


def test_fenced_code_block_without_language() -> None:
    assert render_html("```\n*not italic*\n```") == "<pre><code>*not italic*</code></pre>"


@pytest.mark.parametrize("info", ['"><script>', "a" * 40, "py{x}"])
def test_fenced_code_block_with_unusable_language_has_no_class(info: str) -> None:
    html = render_html(f"```{info}\ncode\n```")
    assert html == "<pre><code>code</code></pre>"


def test_fenced_code_block_language_keeps_only_first_word() -> None:
    html = render_html("```c++ title=main.cpp\nint x;\n```")
    assert html == '<pre><code class="language-c++">int x;</code></pre>'


def test_indented_fence_is_dedented() -> None:
    html = render_html("1. step\n   ```sh\n   ls -l\n     | wc\n   ```\n2. next")
    assert html == ('1. step\n<pre><code class="language-sh">ls -l\n  | wc</code></pre>\n2. next')


def test_longer_fence_contains_shorter_one() -> None:
    source = "````md\n```py\nx\n```\n````"
    assert render_html(source) == ('<pre><code class="language-md">```py\nx\n```</code></pre>')


def test_unclosed_fence_is_literal_text() -> None:
    source = "```py\nx = **1**\n"
    html = render_html(source)
    assert "<pre>" not in html
    assert html == "```py\nx = <b>1</b>\n"


@pytest.mark.parametrize(("body", "text"), [("", "a\n\nb"), ("  \n\t", "a\n  \n\t\nb")])
def test_blank_code_block_leaves_no_element(body: str, text: str) -> None:
    fence = "```\n" + body + ("\n" if body else "") + "```"
    html = render_html(f"a\n{fence}\nb")
    assert "<pre>" not in html
    assert text_of(html) == text


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("[docs](https://example.com/a)", '<a href="https://example.com/a">docs</a>'),
        ("[x](http://example.com)", '<a href="http://example.com">x</a>'),
        ("[me](tg://user?id=42)", '<a href="tg://user?id=42">me</a>'),
        ("[up](HTTPS://EXAMPLE.COM)", '<a href="HTTPS://EXAMPLE.COM">up</a>'),
        (
            '[q](https://e.com/?a=1&b="2"&c=<3>)',
            '<a href="https://e.com/?a=1&amp;b=&quot;2&quot;&amp;c=&lt;3&gt;">q</a>',
        ),
        (
            "[wiki](https://en.wikipedia.org/wiki/Foo_(bar))",
            '<a href="https://en.wikipedia.org/wiki/Foo_(bar)">wiki</a>',
        ),
        (
            "[**bold** `code` link](https://e.com)",
            '<a href="https://e.com"><b>bold</b> <code>code</code> link</a>',
        ),
        (
            "see [a [nested] label](https://e.com).",
            'see <a href="https://e.com">a [nested] label</a>.',
        ),
        (
            "[outer [inner](https://i.com)](https://o.com)",
            '<a href="https://o.com">outer [inner](https://i.com)</a>',
        ),
        (
            "**[bold link](https://e.com)**",
            '<b><a href="https://e.com">bold link</a></b>',
        ),
    ],
)
def test_links(source: str, expected: str) -> None:
    html = render_html(source)
    assert html == expected
    text_of(html)


@pytest.mark.parametrize(
    "source",
    [
        "[x](javascript:alert(1))",
        "[x](ftp://example.com/file)",
        "[x](mailto:a@b.c)",
        "[x](/relative/path)",
        "[x](example.com)",
        "[x](data:text/html,hi)",
    ],
)
def test_links_with_other_schemes_stay_text(source: str) -> None:
    html = render_html(source)
    assert "<a" not in html
    assert text_of(html) == source


def test_markers_inside_code_are_never_formatted() -> None:
    html = render_html("`**a** [b](https://c.d) ~~e~~`")
    assert html == "<code>**a** [b](https://c.d) ~~e~~</code>"


def test_nested_constructs_do_not_repeat_an_open_tag() -> None:
    html = render_html("~~**_[*x* `c`](https://a.b)_**~~")
    assert html == '<s><b><i><a href="https://a.b">x <code>c</code></a></i></b></s>'
    text_of(html)


def test_render_empty_and_whitespace() -> None:
    assert render_html("") == ""
    assert render_html(" \n\n ") == " \n\n "


def test_windows_line_ends_are_read_as_newlines() -> None:
    assert render_html("```py\r\nx\r\n```\r\n") == '<pre><code class="language-py">x</code></pre>\n'


# --- UTF-16 length --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("", 0),
        ("abc", 3),
        ("é", 1),
        ("日本", 2),
        ("😀", 2),
        ("a😀b", 4),
        ("👨\u200d👩\u200d👧", 8),
        ("🇺🇸", 4),
    ],
)
def test_utf16_len(text: str, units: int) -> None:
    assert utf16_len(text) == units


# --- splitting ------------------------------------------------------------------------------


def check_html_chunks(html: str, chunks: list[str], limit: int) -> None:
    assert chunks, "no chunks"
    for chunk in chunks:
        assert utf16_len(chunk) <= limit, (utf16_len(chunk), limit)
        assert text_of(chunk).strip(), f"chunk without text: {chunk!r}"
    assert "".join(text_of(chunk) for chunk in chunks) == text_of(html)


def long_reply() -> str:
    prose = "\n\n".join(
        f"Paragraph {n}: the **agent** explains _step {n}_ with `x < {n}` & more words here."
        for n in range(40)
    )
    code = "\n".join(
        f"    print({n} < {n + 1} and 'a & b')  # **not bold** line {n}" for n in range(90)
    )
    tail = " ".join(f"word{n}" for n in range(300))
    return f"{prose}\n\n```python\n{code}\n```\n\n{tail}"


def test_long_reply_splits_into_well_formed_chunks() -> None:
    source = long_reply()
    assert len(source) > 10_000
    html = render_html(source)
    chunks = split_html(html)
    assert len(chunks) >= 3
    check_html_chunks(html, chunks, TELEGRAM_MESSAGE_LIMIT)
    opener = '<pre><code class="language-python">'
    assert html.count(opener) == 1
    # The code block is cut in the middle: closed at the end of one chunk and reopened, with
    # its class, at the start of the next; the cut falls at a line break inside the code.
    cut = [
        n
        for n in range(len(chunks) - 1)
        if chunks[n].endswith("</code></pre>") and chunks[n + 1].startswith(opener)
    ]
    assert len(cut) == 1
    before = text_of(chunks[cut[0]])
    assert before.endswith("\n")
    assert text_of(chunks[cut[0] + 1]).startswith("    print(")
    # The prose before the code is cut at paragraph breaks.
    assert text_of(chunks[0]).endswith("\n\n")


def test_split_html_small_input_is_one_chunk() -> None:
    html = render_html("**hi** there")
    assert split_html(html) == [html]
    assert split_html("") == []


@pytest.mark.parametrize("limit", [0, 1, MIN_HTML_LIMIT - 1])
def test_split_html_rejects_tiny_limits(limit: int) -> None:
    with pytest.raises(ValueError):
        split_html("x", limit)


@pytest.mark.parametrize("limit", [0, 1])
def test_split_plain_rejects_tiny_limits(limit: int) -> None:
    assert MIN_PLAIN_LIMIT == 2
    with pytest.raises(ValueError):
        split_plain("x", limit)


def test_emoji_are_counted_in_utf16_units() -> None:
    text = "😀" * 3000  # 3000 characters, 6000 UTF-16 units
    plain = split_plain(text)
    assert plain == ["😀" * 2048, "😀" * 952]
    html = render_html(text)
    chunks = split_html(html)
    assert chunks == ["😀" * 2048, "😀" * 952]
    check_html_chunks(html, chunks, TELEGRAM_MESSAGE_LIMIT)


def test_emoji_in_bold_are_counted_in_utf16_units() -> None:
    html = render_html("**" + "😀" * 3000 + "**")
    chunks = split_html(html)
    assert len(chunks) == 2
    check_html_chunks(html, chunks, TELEGRAM_MESSAGE_LIMIT)
    assert chunks[0] == "<b>" + "😀" * 2044 + "</b>"


def test_prefers_paragraph_then_line_then_space() -> None:
    para = "a" * 60 + "\n\n" + "b" * 15 + "\n" + "c" * 10 + " " + "d" * 40
    assert split_plain(para, 100)[0] == "a" * 60 + "\n\n"
    line = "a" * 60 + "\n" + "b" * 25 + " " + "d" * 40
    assert split_plain(line, 100)[0] == "a" * 60 + "\n"
    space = "a" * 60 + " " + "b" * 25 + " " + "d" * 40
    assert split_plain(space, 100)[0] == "a" * 60 + " " + "b" * 25 + " "


def test_early_break_loses_to_a_later_space() -> None:
    # A paragraph break in the first half of the chunk would waste most of a message.
    text = "a" * 10 + "\n\n" + "b" * 70 + " " + "c" * 40
    assert split_plain(text, 100)[0] == "a" * 10 + "\n\n" + "b" * 70 + " "


def test_early_space_is_used_when_the_next_word_fits_a_chunk() -> None:
    text = "a" * 10 + " " + "b" * 95
    assert split_plain(text, 100) == ["a" * 10 + " ", "b" * 95]


def test_word_longer_than_the_limit_is_hard_cut() -> None:
    assert split_plain("x" * 250, 100) == ["x" * 100, "x" * 100, "x" * 50]
    # No tiny chunk before a word that cannot fit anyway.
    assert split_plain("a " + "x" * 250, 100) == ["a " + "x" * 98, "x" * 100, "x" * 52]


def test_whitespace_is_kept_at_the_end_of_the_earlier_chunk() -> None:
    text = "alpha beta   gamma\n\n\ndelta " * 20
    chunks = split_plain(text, 50)
    assert "".join(chunks) == text
    for chunk in chunks[:-1]:
        assert chunk[-1].isspace()
    for chunk in chunks[1:]:
        assert not chunk[0].isspace()


def test_hard_cut_keeps_combining_marks_with_their_letter() -> None:
    text = "e\u0301" * 100  # 200 code points, each pair one visible letter
    chunks = split_plain(text, 51)
    assert "".join(chunks) == text
    assert all(not chunk.startswith("\u0301") for chunk in chunks)
    assert all(utf16_len(chunk) <= 51 for chunk in chunks)


def test_hard_cut_keeps_joined_emoji_together() -> None:
    family = "👨\u200d👩\u200d👧"  # 8 units
    text = family * 30
    chunks = split_plain(text, 50)
    assert "".join(chunks) == text
    assert all(chunk.startswith("👨") for chunk in chunks)
    assert all(utf16_len(chunk) <= 50 for chunk in chunks)


def test_split_plain_small_input() -> None:
    assert split_plain("") == []
    assert split_plain("hello") == ["hello"]
    assert split_plain("x" * 4096) == ["x" * 4096]
    assert split_plain("x" * 4097) == ["x" * 4096, "x"]


def test_never_cuts_inside_an_entity() -> None:
    html = render_html("&<>" * 400)
    chunks = split_html(html, 64)
    check_html_chunks(html, chunks, 64)
    for chunk in chunks:
        assert re.fullmatch(r"(&amp;|&lt;|&gt;)+", chunk), chunk


def test_link_is_closed_and_reopened_with_its_href() -> None:
    label = " ".join(f"w{n}" for n in range(200))
    html = render_html(f'[{label}](https://example.com/?q="1"&r=2)')
    chunks = split_html(html, 200)
    assert len(chunks) > 3
    check_html_chunks(html, chunks, 200)
    opener = '<a href="https://example.com/?q=&quot;1&quot;&amp;r=2">'
    assert all(chunk.startswith(opener) and chunk.endswith("</a>") for chunk in chunks)


def test_nested_elements_are_reopened_in_order() -> None:
    words = " ".join(f"w{n}" for n in range(100))
    html = render_html(f"**bold *italic {words}* bold**")
    chunks = split_html(html, 100)
    check_html_chunks(html, chunks, 100)
    assert all(chunk.startswith("<b>") for chunk in chunks)
    middle = chunks[1:-1]
    assert middle
    assert all(chunk.startswith("<b><i>") and chunk.endswith("</i></b>") for chunk in middle)


def test_reopened_code_drops_its_class_when_the_budget_is_tight() -> None:
    lang = "x" * 30
    code = "\n".join(f"line {n}" for n in range(40))
    html = render_html(f"```{lang}\n{code}\n```")
    opener = f'<pre><code class="language-{lang}">'
    assert html.startswith(opener)
    limit = 80  # the opening and closing tags take 72 of it
    chunks = split_html(html, limit)
    check_html_chunks(html, chunks, limit)
    assert all(chunk.startswith("<pre><code>") for chunk in chunks[1:])
    assert all(chunk.endswith("</code></pre>") for chunk in chunks)


def test_reopened_code_keeps_its_class_when_there_is_room() -> None:
    code = "\n".join(f"line {n}" for n in range(40))
    html = render_html(f"```py\n{code}\n```")
    chunks = split_html(html, 120)  # the tags take 44
    assert len(chunks) > 3
    check_html_chunks(html, chunks, 120)
    assert all(chunk.startswith('<pre><code class="language-py">') for chunk in chunks)
    assert all(text_of(chunk).endswith("\n") for chunk in chunks[:-1])


def test_tag_too_long_for_any_chunk_is_left_out() -> None:
    url = "https://example.com/" + "p" * 100
    html = render_html(f"see [the page]({url}) now")
    chunks = split_html(html, 64)
    check_html_chunks(html, chunks, 64)
    assert not any("<a " in chunk for chunk in chunks)


def test_chunks_open_no_empty_element_at_a_cut() -> None:
    html = "x" * 50 + " " + "<b>" + "y" * 20 + "</b>"
    chunks = split_html(html, 60)
    assert chunks == ["x" * 50 + " ", "<b>" + "y" * 20 + "</b>"]


def test_elements_opened_right_before_a_hard_cut_move_to_the_next_chunk() -> None:
    # <b> fits after the x's but <i> does not: the chunk must not end with an empty <b>.
    html = "x" * 50 + "<b><i>yyy</i></b>"
    chunks = split_html(html, 60)
    assert chunks == ["x" * 50, "<b><i>yyy</i></b>"]


def test_language_class_is_only_written_directly_inside_pre() -> None:
    html = '<b><code class="language-py">' + "x" * 100 + "</code></b>"
    chunks = split_html(html, 64)
    assert len(chunks) == 3
    assert all(chunk.startswith("<b><code>x") for chunk in chunks)
    check_html_chunks("<b><code>" + "x" * 100 + "</code></b>", chunks, 64)


def test_strip_html() -> None:
    html = '<b>a &amp; <a href="https://x.y/?a=1&amp;b=2">b</a></b> &lt;3 &quot;q&quot; &#128512;'
    assert strip_html(html) == 'a & b <3 "q" 😀'
    assert strip_html(html) == text_of(html)
    assert strip_html("") == ""


# --- properties -----------------------------------------------------------------------------

FRAGMENTS = st.sampled_from(
    [
        "*",
        "**",
        "***",
        "_",
        "__",
        "~~",
        "~",
        "`",
        "``",
        "```",
        "```py\n",
        "\n```\n",
        "[",
        "]",
        "](",
        "(",
        ")",
        "https://e.com/",
        "tg://x",
        "javascript:",
        "<",
        ">",
        "&",
        '"',
        "&amp;",
        "<b>",
        " ",
        "  ",
        "\n",
        "\n\n",
        "\t",
        "word",
        "x",
        "snake_case",
        "2*3",
        "😀",
        "e\u0301",
        "\u200d",
        "日本",
    ]
)
MARKDOWNISH = st.lists(st.one_of(FRAGMENTS, st.text(max_size=8)), max_size=60).map("".join)
LONG_MARKDOWNISH = st.lists(
    st.one_of(FRAGMENTS, st.text(max_size=8), st.text(alphabet="ab", min_size=50, max_size=300)),
    max_size=300,
).map("".join)


@given(st.one_of(st.text(), MARKDOWNISH))
def test_rendered_html_is_always_well_formed(text: str) -> None:
    text_of(render_html(text))


@given(st.text(alphabet=st.characters(blacklist_characters="*_~`[\r")))
def test_text_without_markers_renders_to_the_same_text(text: str) -> None:
    assert text_of(render_html(text)) == text


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), MARKDOWNISH, LONG_MARKDOWNISH), st.integers(64, 4096))
def test_split_html_chunks_fit_are_well_formed_and_keep_the_text(text: str, limit: int) -> None:
    html = render_html(text)
    chunks = split_html(html, limit)
    if not html:
        assert chunks == []
        return
    assert chunks
    for chunk in chunks:
        assert utf16_len(chunk) <= limit
        text_of(chunk)
    assert "".join(text_of(chunk) for chunk in chunks) == text_of(html)
    assert "".join(strip_html(chunk) for chunk in chunks) == strip_html(html)


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LONG_MARKDOWNISH, st.integers(64, 400))
def test_split_html_with_small_limits(text: str, limit: int) -> None:
    html = render_html(text)
    chunks = split_html(html, limit)
    for chunk in chunks:
        assert utf16_len(chunk) <= limit
        text_of(chunk)
    assert "".join(text_of(chunk) for chunk in chunks) == text_of(html)


@settings(deadline=None)
@given(st.one_of(st.text(), MARKDOWNISH, LONG_MARKDOWNISH), st.integers(MIN_PLAIN_LIMIT, 4096))
def test_split_plain_chunks_fit_and_join_back_exactly(text: str, limit: int) -> None:
    chunks = split_plain(text, limit)
    assert "".join(chunks) == text
    assert all(chunk for chunk in chunks)
    assert all(utf16_len(chunk) <= limit for chunk in chunks)


@settings(deadline=None)
@given(LONG_MARKDOWNISH, st.integers(MIN_PLAIN_LIMIT, 200))
def test_split_plain_with_small_limits(text: str, limit: int) -> None:
    chunks = split_plain(text, limit)
    assert "".join(chunks) == text
    assert all(chunk and utf16_len(chunk) <= limit for chunk in chunks)
