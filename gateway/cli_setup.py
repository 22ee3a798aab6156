"""`agenvoy setup`: the first run at a terminal. It asks for the model provider and its key, and
for a Telegram and a Discord bot token (each may be left out), checks each with the service it
is for, shows what it will change, and writes the `.env` file the gateway reads (mode 0600;
docs/setup.md says why there and not in the profile secrets file).

Nothing is written until the last question is answered: Ctrl-C or end of input before that
leaves the file as it was and ends with status 130. Secrets are typed without echo and shown
only masked.

The live checks talk to Telegram, Discord and model providers, which the core does not: they
are handed in by the composition root (`gateway/cli.py`) as a `Checks`, from
`adapters/setup_checks.py`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal, Protocol

import typer

from gateway.client_settings import ENV_FILE
from gateway.env_file import (
    UnwritableValue,
    as_reference,
    changes,
    masked,
    read_values,
    referenced_name,
    set_in_environment,
    write,
)

# The agents gateway/runtime.py's `one_agent` builds (tests/test_setup.py holds the two lists
# together; importing the runtime here would cost every `agenvoy` command its start-up).
PROVIDERS: Final = {
    "offline": "answers without a model or a network: a first look (the default)",
    "openai": "any OpenAI-compatible endpoint: OpenAI, Ollama, vLLM, LM Studio, OpenRouter…",
    "claude": "the Anthropic Messages API",
    "claude-code": "the Claude Code CLI on this machine",
}
DEFAULTS: Final = {
    "AGENVOY_OPENAI_BASE_URL": "https://api.openai.com/v1",
    "AGENVOY_MODEL": "gpt-4o-mini",
    "AGENVOY_ANTHROPIC_BASE_URL": "https://api.anthropic.com",
    "AGENVOY_ANTHROPIC_MODEL": "claude-sonnet-4-5",
    "AGENVOY_CLAUDE_CODE_BIN": "claude",
    "AGENVOY_TELEGRAM_API_URL": "https://api.telegram.org",
    "AGENVOY_DISCORD_API_URL": "https://discord.com/api/v10",
}
SECRETS: Final = frozenset(
    {
        "AGENVOY_OPENAI_API_KEY",
        "AGENVOY_ANTHROPIC_API_KEY",
        "AGENVOY_TELEGRAM_TOKEN",
        "AGENVOY_DISCORD_TOKEN",
    }
)
# Ctrl-C's status in a shell (128 + SIGINT): what a canceled setup ends with.
CANCELED: Final = 130

Outcome = Literal["ok", "refused", "unreachable"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a service said of a key or token: `ok`, `refused` (it is wrong) or `unreachable`
    (it could not be asked, or answered something else); `said` in one line, `warnings` of
    what works but not fully, `notes` to show (an invite link)."""

    outcome: Outcome
    said: str
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


class Checks(Protocol):
    """The live checks, each one request to the service (with a timeout)."""

    def provider(self, agent: str, base_url: str, key: str, model: str) -> Verdict: ...

    def telegram(self, api_url: str, token: str) -> Verdict: ...

    def discord(self, api_url: str, token: str) -> Verdict: ...


Wanted = dict[str, str | None]


def register(app: typer.Typer, checks: Checks) -> None:
    """Add `agenvoy setup` to `app`, checking with `checks`."""

    def setup(
        env_file: Annotated[
            Path, typer.Option("--env-file", help="The file to write (the gateway reads ./.env).")
        ] = Path(ENV_FILE),
        yes: Annotated[
            bool, typer.Option("--yes", "-y", help="Write the changes without asking.")
        ] = False,
    ) -> None:
        """Connect a model provider, Telegram and Discord: asks at the terminal, checks each
        key and token with its service, and writes them to .env (mode 0600)."""
        # A link is followed: the file it points at is the one the gateway reads.
        path = env_file.expanduser().resolve()
        try:
            Setup(path, checks).run(yes)
        except (typer.Abort, KeyboardInterrupt, EOFError):
            typer.echo("")
            typer.secho(f"setup canceled: {path} was not changed", fg="yellow", err=True)
            raise typer.Exit(CANCELED) from None

    app.command()(setup)


def _secret_prompt(question: str) -> str:
    return str(typer.prompt(question, default="", show_default=False, hide_input=True)).strip()


def _show(verdict: Verdict) -> None:
    colour = {"ok": "green", "refused": "red", "unreachable": "red"}[verdict.outcome]
    label = "ok  " if verdict.outcome == "ok" else "FAIL"
    typer.secho(f"  {label}  {verdict.said}", fg=colour)
    for warning in verdict.warnings:
        typer.secho(f"  WARN  {warning}", fg="yellow")
    for note in verdict.notes:
        typer.echo(f"        {note}")


class Setup:
    """One run of the questions, gathering the settings to write."""

    def __init__(self, path: Path, checks: Checks) -> None:
        self.path = path
        self.checks = checks
        self.current = read_values(path)
        self.wanted: Wanted = {}

    def setting(self, key: str) -> str:
        """A setting as the gateway will read it: the environment, then the file, then its
        default (the API addresses the checks use: a test or a proxy sets them)."""
        return os.environ.get(key) or self.current.get(key) or DEFAULTS.get(key, "")

    def run(self, yes: bool) -> None:
        exists = "changes" if self.path.is_file() else "creates"
        typer.secho("agenvoy setup", bold=True)
        typer.echo(
            f"This {exists} {self.path} (mode 0600). Secrets are typed without echo; Enter "
            "keeps what is there, '-' removes it. Ctrl-C stops without writing anything."
        )
        self.provider()
        self.telegram()
        self.discord()
        self.finish(yes)

    # -- the model provider ---------------------------------------------------------------------

    def provider(self) -> None:
        typer.secho("\nModel provider: the agent that answers", bold=True)
        for name, what in PROVIDERS.items():
            typer.echo(f"  {name:<12} {what}")
        now = self.current.get("AGENVOY_AGENT", "offline")
        while True:
            agent = str(
                typer.prompt("Provider", default=now if now in PROVIDERS else "offline")
            ).strip()
            if agent in PROVIDERS:
                break
            typer.echo(f"  one of: {', '.join(PROVIDERS)}")
        self.wanted["AGENVOY_AGENT"] = agent
        if agent == "openai":
            self.openai()
        elif agent == "claude":
            self.claude()
        elif agent == "claude-code":
            self.claude_code()

    def ask(self, key: str, question: str, default: str = "") -> str:
        default = self.current.get(key) or default or DEFAULTS[key]
        value = str(typer.prompt(question, default=default)).strip()
        self.wanted[key] = value
        return value

    def openai(self) -> None:
        base = self.ask("AGENVOY_OPENAI_BASE_URL", "Endpoint (base URL)")
        model = self.ask("AGENVOY_MODEL", "Model")
        self.secret(
            "AGENVOY_OPENAI_API_KEY",
            "API key, or env:NAME for a variable holding it (none: Enter)",
            lambda key: self.checks.provider("openai", base, key, model),
            check_empty=True,
        )

    def claude(self) -> None:
        model = self.ask("AGENVOY_ANTHROPIC_MODEL", "Model")
        base = self.setting("AGENVOY_ANTHROPIC_BASE_URL")
        if "ANTHROPIC_API_KEY" in os.environ and "AGENVOY_ANTHROPIC_API_KEY" not in self.current:
            typer.echo("  (ANTHROPIC_API_KEY is set here: the gateway reads it if you leave this)")
        self.secret(
            "AGENVOY_ANTHROPIC_API_KEY",
            "API key, or env:NAME for a variable holding it",
            lambda key: self.checks.provider("claude", base, key, model),
        )

    def claude_code(self) -> None:
        while True:
            command = self.ask("AGENVOY_CLAUDE_CODE_BIN", "The Claude Code CLI (a command or path)")
            found = shutil.which(command)
            if found:
                typer.secho(f"  ok    found at {found}", fg="green")
                break
            typer.secho(f"  FAIL  {command!r} is not a command here", fg="red")
            if typer.confirm("  Keep it anyway (installed later)?", default=False):
                break
        self.ask("AGENVOY_MODEL", "Model", "sonnet")  # the CLI's names: sonnet, opus…

    # -- the chat platforms ---------------------------------------------------------------------

    def telegram(self) -> None:
        typer.secho("\nTelegram", bold=True)
        typer.echo("  A bot token from @BotFather (/newbot), like 123456789:AA…; Enter skips.")
        api = self.setting("AGENVOY_TELEGRAM_API_URL")
        self.secret(
            "AGENVOY_TELEGRAM_TOKEN", "Bot token", lambda token: self.checks.telegram(api, token)
        )

    def discord(self) -> None:
        typer.secho("\nDiscord", bold=True)
        typer.echo(
            "  The bot token of your application (Developer Portal → Bot → Reset Token); "
            "Enter skips."
        )
        api = self.setting("AGENVOY_DISCORD_API_URL")
        self.secret(
            "AGENVOY_DISCORD_TOKEN", "Bot token", lambda token: self.checks.discord(api, token)
        )

    # -- a secret, asked until it checks out or is left out -------------------------------------

    def secret(
        self,
        key: str,
        question: str,
        check: Callable[[str], Verdict],
        *,
        check_empty: bool = False,
    ) -> None:
        """Ask for `key`'s secret until its check passes, the operator keeps one that could
        not be checked, or leaves it as it is (Enter) or removes it ('-').

        Enter at the first question checks the secret already in the file; after a failure
        it leaves the setting alone. With `check_empty`, no secret at all is checked too (an
        endpoint that takes none)."""
        current = self.current.get(key)
        if current is not None:
            typer.echo(f"  now: {masked(current, secret=True)}")
        first = True
        while True:
            typed = _secret_prompt(question)
            if typed == "-":
                if current is not None:
                    typer.echo("  it will be removed")
                    self.wanted[key] = None
                return
            if typed:
                value = as_reference(typed) or typed
                typer.echo(f"  got {masked(value, secret=True)}")
            elif first and current is not None:
                value = current
            elif first and check_empty:
                value = ""
            else:
                typer.echo("  left as it is" if current is not None else "  skipped")
                return
            first = False
            verdict = self.checked(value, check)
            if verdict is None or verdict.outcome == "ok":
                if typed:
                    self.wanted[key] = value
                return
            if verdict.outcome == "unreachable" and typer.confirm(
                "  Keep it anyway, unchecked?", default=False
            ):
                if typed:
                    self.wanted[key] = value
                return
            typer.echo("  Type it again, or press Enter to leave it out.")

    def checked(self, value: str, check: Callable[[str], Verdict]) -> Verdict | None:
        """`check`'s verdict on `value` (shown); None when it cannot be checked here: a
        reference to a variable this shell does not have."""
        name = referenced_name(value)
        if name is not None:
            if not os.environ.get(name):
                typer.secho(
                    f"  WARN  {name} is not set here, so it is not checked: the gateway reads "
                    "it when it starts, from its own environment",
                    fg="yellow",
                )
                return None
            value = os.environ[name]
        typer.echo("  checking…")
        verdict = check(value)
        _show(verdict)
        return verdict

    # -- writing --------------------------------------------------------------------------------

    def finish(self, yes: bool) -> None:
        todo = changes(self.current, self.wanted, SECRETS)
        if not todo:
            typer.echo(f"\nNothing to change in {self.path}.")
            return
        typer.secho(f"\nChanges to {self.path}:", bold=True)
        for change in todo:
            before = masked(change.before, secret=change.secret)
            after = masked(change.after, secret=change.secret)
            typer.echo(f"  {change.key}: {before} → {after}")
        for key in set_in_environment([change.key for change in todo]):
            typer.secho(
                f"  WARN  {key} is set in this shell's environment, which wins over the file",
                fg="yellow",
            )
        if not yes and not typer.confirm(f"Write them to {self.path.name}?", default=True):
            typer.echo(f"Nothing written: {self.path} was not changed.")
            raise typer.Exit(1)
        try:
            backup = write(self.path, todo)
        except (OSError, UnwritableValue) as exc:
            typer.secho(f"cannot write {self.path}: {exc}", fg="red", err=True)
            raise typer.Exit(1) from None
        typer.secho(f"Wrote {self.path} (mode 0600).", fg="green")
        if backup is not None:
            typer.echo(f"The previous file is kept as {backup} (mode 0600).")
        typer.echo(
            "Next: `agenvoy doctor` shows what the gateway will use, `agenvoy run` starts it "
            "(from this folder, where it reads .env). Run `agenvoy setup` again to change them."
        )
