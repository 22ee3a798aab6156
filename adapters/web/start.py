"""The console's Getting started page (`/ui/start`), for gateway admins only (others get 403, as
for the profiles' pages): the steps `agenvoy setup` asks at a terminal, in its order — the model
provider, Telegram, Discord — each with what this instance runs with and what to do next.

Everything shown is read from the running gateway's settings, its platforms' states (the health
page's) and, for Discord, the application its token is of. A key or token is shown only as set
or not set; a key `agenvoy setup` wrote to `.env` as a reference (`${NAME}`) by the variable it
names. The settings do not change while the gateway runs: a change takes `agenvoy setup` (or an
edit of `.env`) and a restart, which the page says.

While nothing is configured (the offline agent, and no bot token: none in the environment, none
connected live), the sessions list points gateway admins here.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from aiohttp import web
from pydantic import SecretStr

from adapters.discord.invite import Application, InviteUnavailable, application, invite_url
from adapters.http.context import Context
from adapters.setup_checks import MEMBERS_FLAGS, MESSAGE_CONTENT_FLAGS, PORTAL
from adapters.web.pages import Pages
from gateway.cli_setup import PROVIDERS
from gateway.client_settings import ENV_FILE
from gateway.connections import Connections
from gateway.env_file import read_values, referenced_name
from gateway.health import PlatformState
from gateway.settings import Settings, mask_url

FORBIDDEN: Final = "only gateway admins see how the gateway is set up"
# The page waits this long for Discord to say which application the token is of: a Discord
# that does not answer leaves the invite link out rather than holding the page up.
ASK_DISCORD_SECONDS: Final = 5.0
# What replaces a secret that an error quoted (Telegram's token is part of its URLs).
HIDDEN: Final = "(token)"
# Where to read on: paths in the gateway's source folder, which the console does not serve.
READ_ON: Final = (
    ("docs/setup.md", "what agenvoy setup asks, checks and writes"),
    ("docs/models.md", "each model provider and its settings"),
    ("docs/telegram.md", "the Telegram bot: groups, privacy mode, admins"),
    ("docs/discord.md", "the Discord bot: intents, the invite, ids"),
    ("docs/profiles.md", "other agents for some places or callers"),
    ("docs/web-console.md", "this console"),
    (".env.example", "every setting, with a comment each"),
)


def is_set(secret: SecretStr | None) -> bool:
    return secret is not None and bool(secret.get_secret_value())


async def nothing_configured(settings: Settings, connections: Connections) -> bool:
    """No model provider and no chat platform: what a gateway fresh from `pip install` runs.
    A platform's token is the one it connects with now: the environment's, or one connected
    live by reference (`agenvoy connection set`), which may come and go while it runs."""
    if settings.agent != "offline":
        return False
    wanted = await connections.wanted()
    return all(w.token is None for w in wanted.values())


@dataclass(frozen=True, slots=True)
class ModelStep:
    """The agent that answers, as the settings name it. `key_variable` is "" for an agent that
    takes no key; `reference` the variable a `${NAME}` key in `.env` names ("" for none);
    `found_at` where the Claude Code CLI was found ("" when it was not)."""

    agent: str
    what: str
    model: str
    model_variable: str
    endpoint: str
    endpoint_variable: str
    key_variable: str
    key_set: bool
    reference: str
    command: str
    found_at: str

    @property
    def done(self) -> bool:
        if self.agent == "openai":
            # An endpoint may take no key (Ollama, vLLM); a reference that did not resolve is
            # a key meant but missing.
            return self.key_set or not self.reference
        if self.agent == "claude":
            return self.key_set
        if self.agent == "claude-code":
            return bool(self.found_at)
        return False  # offline, or a name the gateway does not know


def model_step(settings: Settings, env_file: Path, environ: Mapping[str, str]) -> ModelStep:
    """What `settings` answer with. Blocking (reads `env_file`, looks the CLI up on PATH): run
    it in a thread."""
    agent = settings.agent
    claude = agent == "claude"
    key_variable = {"openai": "AGENVOY_OPENAI_API_KEY", "claude": "AGENVOY_ANTHROPIC_API_KEY"}
    variable = key_variable.get(agent, "")
    key = settings.anthropic_api_key if claude else settings.openai_api_key
    reference = ""
    if variable and variable not in environ:
        # The environment wins over the file: the file's value counts only when it is unset.
        written = read_values(env_file).get(variable, "")
        reference = referenced_name(written) or ""
    command = settings.claude_code_bin if agent == "claude-code" else ""
    endpoint = {"openai": settings.openai_base_url, "claude": settings.anthropic_base_url}
    return ModelStep(
        agent=agent,
        what=PROVIDERS.get(agent, ""),
        model=settings.anthropic_model if claude else settings.model,
        model_variable="AGENVOY_ANTHROPIC_MODEL" if claude else "AGENVOY_MODEL",
        # A URL may carry a password: shown as `agenvoy doctor` shows it.
        endpoint=mask_url(endpoint.get(agent, "")),
        endpoint_variable="AGENVOY_ANTHROPIC_BASE_URL" if claude else "AGENVOY_OPENAI_BASE_URL",
        key_variable=variable,
        key_set=bool(variable) and is_set(key),
        reference=reference,
        command=command,
        found_at=(shutil.which(command) or "") if command else "",
    )


@dataclass(frozen=True, slots=True)
class PlatformStep:
    """A chat platform: whether its token is set, and its state on this instance (None: not
    tried yet, or no token)."""

    variable: str
    token_set: bool
    state: PlatformState | None


@dataclass(frozen=True, slots=True)
class DiscordApp:
    """What Discord said of the token's application, or why it could not be asked (`problem`)."""

    app: Application | None
    problem: str

    @property
    def invite(self) -> str:
        return invite_url(self.app.id) if self.app is not None else ""

    @property
    def portal(self) -> str:
        return PORTAL.format(id=self.app.id) if self.app is not None else ""

    @property
    def message_content(self) -> bool:
        return self.app is not None and bool(self.app.flags & MESSAGE_CONTENT_FLAGS)

    @property
    def members(self) -> bool:
        return self.app is not None and bool(self.app.flags & MEMBERS_FLAGS)


def scrubbed(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, HIDDEN)
    return text


def _secrets(settings: Settings) -> list[str]:
    keys = (
        settings.telegram_token,
        settings.discord_token,
        settings.openai_api_key,
        settings.anthropic_api_key,
    )
    return [key.get_secret_value() for key in keys if key is not None]


class StartPage:
    def __init__(self, ctx: Context, pages: Pages, env_file: Path = Path(ENV_FILE)) -> None:
        self.ctx = ctx
        self.pages = pages
        # Where `agenvoy run` reads .env: relative, so from the folder the gateway runs in.
        self.env_file = env_file
        # Once Discord named a token's application, it is not asked again for that token (a
        # live connection may change the token: gateway/connections.py).
        self._application: tuple[str, Application] | None = None

    async def page(self, request: web.Request) -> web.Response:
        viewer = await self.pages.viewer(request)
        # Asked strictly, as the profiles' pages ask: an archive that cannot be reached
        # answers 503 here rather than a refusal.
        if not (await self.ctx.access.caller(viewer.origin())).gateway_admin:
            raise web.HTTPForbidden(text=FORBIDDEN)
        runtime = self.ctx.runtime
        settings = runtime.settings
        # The tokens the platforms connect with now: the environment's, or a live connection's.
        wanted = await runtime.connections.wanted()
        secrets = _secrets(settings) + [w.token for w in wanted.values() if w.token]
        states = runtime.platforms.states()

        def platform(name: str, variable: str) -> PlatformStep:
            token_set = wanted[name].token is not None
            state = states.get(name) if token_set else None
            if state is not None:
                state = replace(state, reason=scrubbed(state.reason, secrets))
            source = wanted[name].source
            where = variable if source in ("environment", "not configured") else source
            return PlatformStep(where, token_set, state)

        model = await asyncio.to_thread(model_step, settings, self.env_file, dict(os.environ))
        discord = platform("discord", "AGENVOY_DISCORD_TOKEN")
        known = None
        token = wanted["discord"].token
        if token is not None:
            known = await self._discord_app(settings.discord_api_url, token, secrets)
        return self.pages.render(
            "start.html",
            viewer,
            instance=settings.instance_id,
            model=model,
            telegram=platform("telegram", "AGENVOY_TELEGRAM_TOKEN"),
            discord=discord,
            app=known,
            read_on=READ_ON,
        )

    async def _discord_app(self, api_url: str, token: str, secrets: list[str]) -> DiscordApp:
        """The application `token` is of: the question `agenvoy setup` and `agenvoy discord
        invite` ask, at the same address (AGENVOY_DISCORD_API_URL)."""
        if self._application is not None and self._application[0] == token:
            return DiscordApp(self._application[1], "")
        try:
            async with asyncio.timeout(ASK_DISCORD_SECONDS):
                found = await application(api_url, token)
        except InviteUnavailable as exc:
            return DiscordApp(None, scrubbed(str(exc), secrets))
        except TimeoutError:
            return DiscordApp(None, f"Discord did not answer within {ASK_DISCORD_SECONDS:g} s")
        self._application = (token, found)
        return DiscordApp(found, "")


def register(console: web.Application, ctx: Context, pages: Pages) -> None:
    """Serve the page at `/start`, and tell the sessions list whether to point gateway admins
    to it (asked at each showing: a live connection may be made or removed meanwhile)."""
    runtime = ctx.runtime

    async def first_run() -> bool:
        return await nothing_configured(runtime.settings, runtime.connections)

    pages.first_run = first_run
    console.router.add_get("/start", StartPage(ctx, pages).page)
