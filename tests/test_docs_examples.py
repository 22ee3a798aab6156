"""The examples in README.md and docs/*.md do what the pages say: each ```console block is run
against a real gateway (`agenvoy run`: the offline agent, a home of its own, a free port) and
its output compared with the page's. The convention, in docs/development.md:

- a line starting with `$ ` is a command (a line ending in `\\` goes on on the next one); the
  lines after it, up to the next command, are its expected standard output, in which `...`
  stands for any text (a line of its own: any lines);
- `17989`, the default port, is replaced with the test gateway's; `agenvoy` and
  `.venv/bin/agenvoy` are this checkout's, with the test gateway's home;
- `curl` runs with `--fail-with-body`, so an HTTP error status fails the example, and every
  command must exit 0;
- a block that talks to a gateway (a `curl` or `agenvoy` command) and cannot run here is
  marked by the line `<!-- docs-test: skip: <why> -->` just before it; one neither runnable
  nor marked fails `test_every_command_example_is_run_or_marked`.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest
from gateway_proc import Gateway, free_port

ROOT: Final = Path(__file__).parents[1]
DEFAULT_PORT: Final = "17989"
SKIP_MARK: Final = re.compile(r"^<!-- docs-test: skip: .+ -->$")
FENCE: Final = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
# A command that talks to a gateway: curl, or the agenvoy command (not `agenvoy run`).
TALKS: Final = re.compile(r"^(?:\$ )?(?:curl|(?:\.venv/bin/)?agenvoy) (?!run\b)", re.MULTILINE)
VENV: Final = Path(sys.executable).parent.parent


@dataclass(frozen=True)
class Example:
    command: str
    expected: str


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    body: str
    skipped: bool

    def examples(self) -> list[Example]:
        examples: list[Example] = []
        lines = self.body.splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                raise AssertionError(f"{self.where}: output before any command: {lines[i]!r}")
            command = lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = f"{command[:-1].rstrip()} {lines[i].strip()}"
            i += 1
            output = []
            while i < len(lines) and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            examples.append(Example(command, "\n".join(output)))
        return examples

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        line = text.count("\n", 0, match.start()) + 1
        skipped = bool(SKIP_MARK.match(before))
        found.append(Block(page, line, match.group(1), match.group(2), skipped))
    return found


def runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.language == "console" and not b.skipped]


def matches(expected: str, output: str) -> bool:
    pattern = re.escape(expected.strip()).replace(re.escape("..."), ".*?")
    return re.fullmatch(pattern, output.strip(), re.DOTALL) is not None


async def run(example: Example, gateway: Gateway, place: Path) -> tuple[int, str, str]:
    command = example.command.replace(DEFAULT_PORT, str(gateway.port))
    command = re.sub(r"^curl ", "curl --fail-with-body ", command)
    env = {
        **os.environ,
        "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "AGENVOY_HOME": str(gateway.home),
        "AGENVOY_HTTP_PORT": str(gateway.port),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        command,
        cwd=place,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return await proc.wait(), out.decode(), err.decode()


RUNNABLE: Final = [page for page in pages() if runnable(page)]


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda page: page.relative_to(ROOT).as_posix())
async def test_the_pages_examples_answer_what_they_show(page: Path, tmp_path: Path) -> None:
    place = tmp_path / "work"  # where a reader runs them: `.venv/bin/agenvoy` is there
    place.mkdir()
    (place / ".venv").symlink_to(VENV)
    gateway = Gateway(tmp_path / "home", free_port(), AGENVOY_AGENT="offline")
    gateway.cwd = place
    await gateway.start()
    try:
        for block in runnable(page):
            for example in block.examples():
                status, out, err = await run(example, gateway, place)
                assert status == 0, f"{block.where}: `{example.command}` exited {status}: {err}"
                assert matches(example.expected, out), (
                    f"{block.where}: `{example.command}` printed\n{out}\nnot\n{example.expected}"
                )
    finally:
        await gateway.close()


@pytest.mark.fast
def test_every_command_example_is_run_or_marked() -> None:
    unmarked = [
        block.where
        for page in pages()
        for block in blocks(page)
        if TALKS.search(block.body) and block.language != "console" and not block.skipped
    ]
    assert unmarked == []


@pytest.mark.fast
def test_no_example_puts_an_exclamation_mark_in_double_quotes() -> None:
    """bash expands `!…` in double quotes from its history (`event not found`)."""
    double_quoted_bang = re.compile(r'^(?:\$ )?\S*agenvoy [^\n]*"[^"\n]*![^"\n]*"', re.MULTILINE)
    found = [
        block.where
        for page in pages()
        for block in blocks(page)
        if double_quoted_bang.search(block.body)
    ]
    assert found == []


@pytest.mark.fast
def test_the_output_convention() -> None:
    assert matches('{"a":1,...}', '{"a":1,"b":2}\n')
    assert matches("event: user\n...\nevent: done\n...", "event: user\nx\ny\nevent: done\nz")
    assert not matches('{"a":1,...}', '{"a":2,"b":1}')
    assert not matches("echo: hello", "echo: hello!")
    block = Block(ROOT / "README.md", 1, "console", "$ curl a \\\n    b\nout\n$ agenvoy x\n", False)
    assert block.examples() == [Example("curl a b", "out"), Example("agenvoy x", "")]
