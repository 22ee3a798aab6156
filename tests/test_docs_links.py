"""Every relative link in README.md and docs/*.md points at a file that exists, and at a
heading of it when it names one: a moved or renamed page, or a reworded heading, fails here
instead of leaving a dead link for a reader."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest

pytestmark = pytest.mark.fast

ROOT: Final = Path(__file__).parents[1]
LINK: Final = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING: Final = re.compile(r"^#{1,6} (.+?)\s*#*$")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def prose(text: str) -> str:
    """The text outside code fences and inline code, where a link is a link."""
    outside = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", outside)


def slug(heading: str) -> str:
    """The anchor GitHub makes of a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    found: set[str] = set()
    in_fence = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        match = HEADING.match(line) if not in_fence else None
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def dead_links(page: Path) -> list[str]:
    dead = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto: — not this repository's
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            dead.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            dead.append(f"{target}: no such heading")
    return dead


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    assert dead_links(page) == []


def test_the_link_check_finds_dead_links(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A `heading`, with punctuation!\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#a-heading-with-punctuation) [web](https://x.test/y)\n"
        "[gone](missing.md) [bad anchor](there.md#nope) ![pic](missing.png)\n"
        "`[not a link](nowhere.md)`\n```\n[in code](nowhere.md)\n```\n"
    )
    assert dead_links(page) == [
        "missing.md: no such file",
        "there.md#nope: no such heading",
        "missing.png: no such file",
    ]
