"""The Claude Code CLI under test: the real one (npm) or the fake one (fake_claude.py), and
the fake Messages API the real one talks to; what the tests of both share.

The real CLI (npm `@anthropic-ai/claude-code`, installed by `.ci/run` under
`.tools/claude-code/`, or named by `AGENVOY_TEST_CLAUDE_BIN`) talks to the fake Messages API
(`ANTHROPIC_BASE_URL`), with a HOME of its own and no traffic beyond loopback. Each test scripts
that API for the real CLI; the fake CLI acts on words of the message instead (`!write`, `!env`,
`!agent`) and is told through its own variables what the API would have refused. Missing, the
real CLI's tests skip with the reason (fail in CI, `AGENVOY_REQUIRE_SERVICES`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakes.anthropic import FakeAnthropic
from support import skip_or_fail

from gateway.runtime import Runtime
from gateway.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
FAKE = Path(__file__).with_name("fake_claude.py")
REAL = Path(
    os.environ.get("AGENVOY_TEST_CLAUDE_BIN")
    or ROOT / ".tools" / "claude-code" / "node_modules" / ".bin" / "claude"
)
# What the gateway holds that the CLI must never see.
SECRETS = {
    "AGENVOY_API_TOKEN": "gateway-api-token-secret",
    "AGENVOY_TELEGRAM_TOKEN": "123:telegram-bot-secret",
    "PGPASSWORD": "db-password-secret",
    "OPENAI_API_KEY": "sk-openai-secret",
}


@dataclass
class Cli:
    """One CLI under test, and the fake Messages API the real one talks to."""

    kind: str  # "fake" or "real"
    bin: Path
    api: FakeAnthropic
    home: Path  # the CLI's HOME

    @property
    def real(self) -> bool:
        return self.kind == "real"

    @property
    def marker(self) -> bytes:
        """A variable only this test's CLI processes (and what they start) have."""
        if self.real:
            return f"ANTHROPIC_BASE_URL={self.api.url}".encode()
        return f"FAKE_CLAUDE_LOG={os.environ['FAKE_CLAUDE_LOG']}".encode()

    def processes(self) -> dict[int, list[bytes]]:
        """The environment of each live process of this test's CLI (from /proc)."""
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                env = (entry / "environ").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue  # gone meanwhile, or not ours to read
            if self.marker in env and state != "Z":
                found[int(entry.name)] = env
        return found

    def script(self, *replies: Any) -> None:
        """What the API answers the real CLI (the fake CLI ignores the API)."""
        if self.real:
            self.api.script(*replies)

    def options(self) -> dict[str, Any]:
        return {
            "agent": "claude-code",
            "claude_code_bin": str(self.bin),
            "model": "sonnet",
            "claude_code_env": "FAKE_CLAUDE_*",
        }


@pytest.fixture(params=["fake", "real"])
async def claude(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Cli]:
    home = tmp_path / "claude-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    async with FakeAnthropic() as api:
        if request.param == "real":
            if not os.access(REAL, os.X_OK):
                skip_or_fail(
                    f"the Claude Code CLI is not installed at {REAL} (`npm install --prefix "
                    ".tools/claude-code @anthropic-ai/claude-code`, as .ci/run does)"
                )
            monkeypatch.setenv("ANTHROPIC_BASE_URL", api.url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", api.api_key)
            # Nothing beyond loopback: no telemetry, no update checks.
            monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            yield Cli("real", REAL, api, home)
            return
        wrapper = tmp_path / "bin" / "claude"
        wrapper.parent.mkdir()
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
        wrapper.chmod(0o755)
        monkeypatch.setenv("FAKE_CLAUDE_LOG", str(tmp_path / "claude-calls.jsonl"))
        monkeypatch.delenv("FAKE_CLAUDE_API_ERROR", raising=False)
        monkeypatch.delenv("FAKE_CLAUDE_FORGET", raising=False)
        yield Cli("fake", wrapper, api, home)


async def start(claude: Cli, home: Path, **extra: Any) -> Runtime:
    options = {"home": home, **claude.options(), **extra}
    return await Runtime.start(Settings(_env_file=None, **options))


@pytest.fixture
async def runtime(claude: Cli, tmp_path: Path) -> AsyncIterator[Runtime]:
    rt = await start(claude, tmp_path / "home")
    rt.engine.runner.after_task.clear()  # no summaries in between: each CLI call is the test's
    try:
        yield rt
    finally:
        await rt.close()


def workspace(runtime: Runtime, sid: str) -> Path:
    return runtime.store.files(sid).dir / "workspace"


def calls_of(tmp_path: Path) -> list[dict[str, Any]]:
    """The fake CLI's calls, oldest first."""
    return [json.loads(line) for line in (tmp_path / "claude-calls.jsonl").read_text().splitlines()]


def resume_files(runtime: Runtime, sid: str) -> list[dict[str, Any]]:
    folder = runtime.settings.sessions_dir / sid / ".claude_code"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
