from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adapters.discord.split import split_message


def fences_balanced(chunk: str) -> bool:
    return sum(line.lstrip().startswith("```") for line in chunk.splitlines()) % 2 == 0


def test_short_text_is_one_chunk() -> None:
    assert split_message("hello") == ["hello"]


def test_long_reply_with_code_block() -> None:
    code = "\n".join(f"x_{i} = {i}  # comment" for i in range(300))
    text = "Intro paragraph.\n\n```python\n" + code + "\n```\n\nOutro " + "word " * 300
    assert len(text) > 5000
    chunks = split_message(text)
    assert len(chunks) >= 3
    assert all(len(c) <= 2000 for c in chunks)
    assert all(fences_balanced(c) for c in chunks)
    assert sum(c.count("```python") for c in chunks) >= 2  # reopened with its language
    body = "".join(chunks).replace("\n```\n```python\n", "\n").replace("```\n```python\n", "")
    assert "x_0 = 0" in body and "x_299 = 299" in body


def test_prefers_line_breaks() -> None:
    text = ("a" * 50 + "\n") * 60
    chunks = split_message(text, 500)
    assert all(c.endswith("\n") for c in chunks[:-1])


@given(st.text(min_size=1, max_size=6000))
def test_chunks_fit_and_keep_plain_text(text: str) -> None:
    chunks = split_message(text.replace("`", "'"), 300)
    assert all(len(c) <= 300 for c in chunks)
    assert "".join(chunks) == text.replace("`", "'") or not text.replace("`", "'").strip()
