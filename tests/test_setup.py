"""`agenvoy setup`, run as the operator runs it: a real process on a pseudo-terminal (so its
secret prompts read without echo from the terminal, and Ctrl-C is the terminal's), against the
fake Telegram, Discord and OpenAI-compatible servers. Each step waits for the question it
answers, within a deadline."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import os
import pty
import re
import stat
import struct
import termios
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from dotenv import dotenv_values
from fakes.discord import FakeDiscord
from fakes.discord.gateway import INTENT_MEMBERS, INTENT_MESSAGE_CONTENT, INTENT_PRESENCES
from fakes.openai import FakeOpenAI
from fakes.telegram import FakeTelegram
from gateway_proc import EXE
from patience import patient

from adapters.discord.invite import INVITE_PERMISSIONS, invite_url
from adapters.setup_checks import LiveChecks
from gateway.cli_setup import PROVIDERS, SECRETS
from gateway.env_file import Change, masked, read_values, updated_text
from gateway.runtime import AGENTS

APPLICATION = 4242
COLOURS = re.compile(r"\x1b\[[0-9;]*m")
WAIT = 20.0  # seconds for one answer of the command: a start-up, a check


class Terminal:
    """A process on a pseudo-terminal of its own: it is the session leader, the terminal its
    controlling one, so `getpass` finds /dev/tty and ^C raises SIGINT in it."""

    def __init__(self, process: asyncio.subprocess.Process, master: int) -> None:
        self.process = process
        self.master = master
        self.raw = ""  # everything the terminal showed, \r\n as \n
        self._at = 0  # where the next expect() looks from
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._changed = asyncio.Event()
        self.closed = False
        asyncio.get_running_loop().add_reader(master, self._read)

    @classmethod
    async def spawn(cls, *args: str, cwd: Path, env: dict[str, str]) -> Terminal:
        master, slave = pty.openpty()
        # Wide enough that no line the command prints wraps.
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))

        def controlling_terminal() -> None:  # in the child, after setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        process = await asyncio.create_subprocess_exec(
            *args,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=controlling_terminal,
        )
        os.close(slave)
        return cls(process, master)

    def _read(self) -> None:
        try:
            data = os.read(self.master, 4096)
        except OSError:  # EIO: every process holding the terminal has closed it
            data = b""
        if not data:
            self.closed = True
            asyncio.get_running_loop().remove_reader(self.master)
        self.raw += self._decoder.decode(data, final=not data).replace("\r\n", "\n")
        self._changed.set()

    @property
    def seen(self) -> str:
        """What the terminal showed, without its colours."""
        return COLOURS.sub("", self.raw)

    async def expect(self, pattern: str, seconds: float = WAIT) -> re.Match[str]:
        """Wait for `pattern` (a regular expression) in what the terminal shows next."""
        deadline = asyncio.get_running_loop().time() + patient(seconds)
        compiled = re.compile(pattern)
        while True:
            seen = self.seen
            found = compiled.search(seen, self._at)
            if found:
                self._at = found.end()
                return found
            left = deadline - asyncio.get_running_loop().time()
            if self.closed or left <= 0:
                raise AssertionError(f"never showed {pattern!r}; it showed:\n{seen}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def answer(self, text: str) -> None:
        self.type(text + "\r")

    async def ended(self, seconds: float = WAIT) -> int:
        status = await asyncio.wait_for(self.process.wait(), patient(seconds))
        # What it printed last (the kernel keeps a closed pty's output for the reader).
        while not self.closed:
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), patient(5))
        return status

    async def close(self) -> None:
        if not self.closed:
            asyncio.get_running_loop().remove_reader(self.master)
        os.close(self.master)
        if self.process.returncode is None:  # a test that failed halfway
            self.process.kill()
            await self.process.wait()


def environment(tmp_path: Path, **settings: str) -> dict[str, str]:
    """The command's environment: none of this shell's AGENVOY_ settings, a home of its own,
    and the API addresses of the fakes."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("AGENVOY_")}
    env.pop("ANTHROPIC_API_KEY", None)
    env.update(NO_PROXY="127.0.0.1,localhost", AGENVOY_HOME=str(tmp_path / "home"), **settings)
    return env


@contextlib.asynccontextmanager
async def setup_at(folder: Path, env: dict[str, str]) -> AsyncIterator[Terminal]:
    terminal = await Terminal.spawn(EXE, "setup", cwd=folder, env=env)
    try:
        yield terminal
    finally:
        await terminal.close()


@pytest.fixture
async def discord() -> AsyncIterator[FakeDiscord]:
    """A Discord application with the Server Members and Presence intents on, and the Message
    Content one off."""
    async with FakeDiscord(
        application_id=APPLICATION, enabled_intents=INTENT_MEMBERS | INTENT_PRESENCES
    ) as fake:
        yield fake


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_first_run_checks_each_token_and_writes_the_env_file(
    tmp_path: Path, telegram: FakeTelegram, discord: FakeDiscord, model: FakeOpenAI
) -> None:
    env = environment(
        tmp_path,
        AGENVOY_TELEGRAM_API_URL=telegram.url,
        AGENVOY_DISCORD_API_URL=discord.api_base,
    )
    async with setup_at(tmp_path, env) as term:
        await term.expect(r"Provider \[offline\]: ")
        term.answer("openai")
        await term.expect(r"Endpoint \(base URL\) \[https://api.openai.com/v1\]: ")
        term.answer(model.url)
        await term.expect(r"Model \[gpt-4o-mini\]: ")
        term.answer("fake-model")
        await term.expect(r"API key, or env:NAME for a variable holding it \(none: Enter\): ")
        term.answer(model.api_key)
        await term.expect(r"ok    .* accepts the key \(2 models\)")

        await term.expect(r"Bot token: ")
        term.answer("123456:not-the-token")  # a wrong token: refused, and asked again
        await term.expect(r"FAIL  Telegram refused the token \(HTTP 401\): copy it again")
        await term.expect(r"Type it again, or press Enter to leave it out.\nBot token: ")
        term.answer(telegram.token)
        await term.expect(r"ok    Telegram: the bot @agenvoy_test_bot \(id 123456\)")

        await term.expect(r"Discord\n.*\nBot token: ")
        term.answer(discord.token)
        await term.expect(rf"ok    Discord: the application agenvoy-test \(id {APPLICATION}\)")
        await term.expect(r"WARN  the Message Content intent is not enabled.*Privileged Gateway")
        await term.expect(r"the Server Members intent is enabled")
        invite = await term.expect(r"Invite the bot to a server: (\S+)")
        assert invite.group(1) == invite_url(APPLICATION)
        assert f"permissions={INVITE_PERMISSIONS}" in invite.group(1)

        await term.expect(r"AGENVOY_TELEGRAM_TOKEN: \(not set\) → 1234…OKEN")
        await term.expect(r"Write them to \.env\? \[Y/n\]: ")
        term.answer("y")
        await term.expect(r"Wrote .*\.env \(mode 0600\)")
        assert await term.ended() == 0
    shown = term.seen

    written = tmp_path / ".env"
    assert mode_of(written) == 0o600
    assert not (tmp_path / ".env.bak").exists()  # there was nothing to keep
    assert dotenv_values(written) == {
        "AGENVOY_AGENT": "openai",
        "AGENVOY_OPENAI_BASE_URL": model.url,
        "AGENVOY_MODEL": "fake-model",
        "AGENVOY_OPENAI_API_KEY": model.api_key,
        "AGENVOY_TELEGRAM_TOKEN": telegram.token,
        "AGENVOY_DISCORD_TOKEN": discord.token,
    }
    # Typed without echo, shown only masked: no secret is ever on the screen whole.
    for secret in (model.api_key, telegram.token, discord.token, "123456:not-the-token"):
        assert secret not in shown

    # The gateway reads what was written: `agenvoy doctor`, from that folder.
    doctor = await asyncio.create_subprocess_exec(
        EXE,
        "doctor",
        cwd=tmp_path,
        env=environment(tmp_path),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(doctor.communicate(), patient(60))
    report = out.decode()
    assert doctor.returncode == 0, report
    assert re.search(r"^  agent +openai$", report, re.MULTILINE), report
    assert re.search(r"^  telegram_token +\*\*\*$", report, re.MULTILINE), report
    assert re.search(r"^  discord_token +\*\*\*$", report, re.MULTILINE), report
    assert re.search(rf"^  openai_base_url +{re.escape(model.url)}$", report, re.MULTILINE)


EXISTING = "# mine: kept as it is\nAGENVOY_LOG_LEVEL=DEBUG\nAGENVOY_TELEGRAM_TOKEN=111111:old\n"


async def test_an_existing_file_changes_only_as_shown_and_asked(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    written = tmp_path / ".env"
    written.write_text(EXISTING)
    written.chmod(0o644)
    env = environment(tmp_path, AGENVOY_TELEGRAM_API_URL=telegram.url)

    async def run(write: str) -> tuple[int, str]:
        async with setup_at(tmp_path, env) as term:
            await term.expect(r"This changes .*\.env")
            await term.expect(r"Provider \[offline\]: ")
            term.answer("")
            await term.expect(r"now: ••••••••\nBot token: ")  # the old one, masked
            term.answer(telegram.token)
            await term.expect(r"ok    Telegram")
            await term.expect(r"Discord\n.*\nBot token: ")
            term.answer("")  # skipped
            await term.expect(r"skipped")
            await term.expect(r"AGENVOY_AGENT: \(not set\) → offline")
            await term.expect(r"AGENVOY_TELEGRAM_TOKEN: •••••••• → 1234…OKEN")
            await term.expect(r"Write them to \.env\? \[Y/n\]: ")
            term.answer(write)
            return await term.ended(), term.seen

    status, shown = await run("n")
    assert status == 1 and "Nothing written" in shown
    assert written.read_text() == EXISTING

    status, shown = await run("y")
    assert status == 0, shown
    assert mode_of(written) == 0o600  # it was readable by all; it holds a token
    text = written.read_text()
    assert text.startswith("# mine: kept as it is\nAGENVOY_LOG_LEVEL=DEBUG\n")
    assert f"AGENVOY_TELEGRAM_TOKEN='{telegram.token}'\n" in text
    assert "111111:old" not in text
    backup = tmp_path / ".env.bak"
    assert backup.read_text() == EXISTING and mode_of(backup) == 0o600
    assert read_values(written)["AGENVOY_LOG_LEVEL"] == "DEBUG"


@pytest.mark.parametrize("stop", ["\x03", "\x04"], ids=["ctrl-c", "end-of-input"])
async def test_stopping_halfway_writes_nothing(
    tmp_path: Path, telegram: FakeTelegram, stop: str
) -> None:
    written = tmp_path / ".env"
    written.write_text(EXISTING)
    before = sorted(os.listdir(tmp_path))
    env = environment(tmp_path, AGENVOY_TELEGRAM_API_URL=telegram.url)
    async with setup_at(tmp_path, env) as term:
        await term.expect(r"Provider .*: ")
        term.answer("offline")
        await term.expect(r"Bot token: ")
        term.answer(telegram.token)  # Telegram is done ...
        await term.expect(r"ok    Telegram")
        await term.expect(r"Discord\n.*\nBot token: ")
        term.type(stop)  # ... and the operator stops at Discord's question
        await term.expect(r"setup canceled: .*\.env was not changed")
        assert await term.ended() == 130
    assert written.read_text() == EXISTING
    assert sorted(os.listdir(tmp_path)) == before  # no backup, no temporary file


async def test_an_unreachable_service_is_said_and_can_be_left_out(tmp_path: Path) -> None:
    # A port nothing listens on: the network refuses, unlike a token Telegram refuses.
    async with FakeTelegram() as gone:
        closed = gone.url
    env = environment(tmp_path, AGENVOY_TELEGRAM_API_URL=closed)
    async with setup_at(tmp_path, env) as term:
        await term.expect(r"Provider .*: ")
        term.answer("")
        await term.expect(r"Bot token: ")
        term.answer("123456:some-token")
        await term.expect(rf"FAIL  could not reach {re.escape(closed)}")
        await term.expect(r"Keep it anyway, unchecked\? \[y/N\]: ")
        term.answer("n")
        await term.expect(r"Type it again, or press Enter to leave it out.\nBot token: ")
        term.answer("")
        await term.expect(r"Discord\n.*\nBot token: ")
        term.answer("")
        await term.expect(r"Write them to \.env\? \[Y/n\]: ")
        term.answer("y")
        assert await term.ended() == 0
    assert dotenv_values(tmp_path / ".env") == {"AGENVOY_AGENT": "offline"}
    assert "some-token" not in term.seen


async def test_the_checks_tell_a_wrong_key_from_a_missing_intent_or_model(
    model: FakeOpenAI,
) -> None:
    checks = LiveChecks()
    async with FakeDiscord(application_id=APPLICATION) as every_intent_on:
        assert every_intent_on.enabled_intents & INTENT_MESSAGE_CONTENT
        api, token = every_intent_on.api_base, every_intent_on.token
        fine = await asyncio.to_thread(checks.discord, api, token)
        wrong = await asyncio.to_thread(checks.discord, api, "not.the.token")
    assert (fine.outcome, fine.warnings) == ("ok", ())
    assert (wrong.outcome, wrong.said) == (
        "refused",
        "Discord refused the token (HTTP 401): copy the token again (Bot → Reset Token)",
    )

    unknown = await asyncio.to_thread(checks.provider, "openai", model.url, model.api_key, "gpt-9")
    assert unknown.outcome == "ok"
    assert unknown.warnings == ("it does not list the model 'gpt-9'",)
    refused = await asyncio.to_thread(checks.provider, "openai", model.url, "sk-wrong", "x")
    assert (refused.outcome, refused.said) == ("refused", f"{model.url} refused the key (HTTP 401)")


def test_setup_offers_every_agent_the_runtime_builds() -> None:
    assert set(PROVIDERS) == set(AGENTS)


def test_values_are_written_so_the_gateway_reads_them_back(tmp_path: Path) -> None:
    tricky = "a b#c'd\\e\"f $g"
    text = updated_text(
        "A=1\n# note\nB=2",
        [
            Change("B", "2", tricky, secret=True),
            Change("A", "1", None, secret=False),  # removed
            Change("C", None, "${SOME_KEY}", secret=True),  # a reference, expanded on reading
        ],
    )
    path = tmp_path / ".env"
    path.write_text(text)
    assert text.startswith("# note\nB=")
    os.environ["SOME_KEY"] = "from-the-environment"
    try:
        assert dotenv_values(path) == {"B": tricky, "C": "from-the-environment"}
    finally:
        del os.environ["SOME_KEY"]
    assert masked("${SOME_KEY}", secret=True) == "env:SOME_KEY"
    assert masked("sk-0123456789abcdefghij", secret=True) == "sk-0…ghij"
    assert "AGENVOY_DISCORD_TOKEN" in SECRETS
