"""The live checks of `agenvoy setup` (gateway/cli_setup.py): one cheap request each, which
tells a wrong key or token from a service that cannot be reached.

- a model provider: its list of models (`GET {base}/models`, or the Anthropic API's
  `GET /v1/models`), which needs the key and costs nothing;
- a Telegram bot token: `getMe`;
- a Discord bot token: the application it belongs to (adapters/discord/invite.py asks), whose
  flags say which privileged intents are switched on, and whose id makes the invite link.

Light to import (`agenvoy --help` loads it): aiohttp and the rest come in when a check runs.
A token is never part of what is said: Telegram's is in the URL, so an error quoting the URL is
scrubbed of it.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from gateway.cli_setup import Verdict
from gateway.env_file import masked

TIMEOUT_SECONDS: Final = 15.0
# The application flags of the privileged intents Discord has switched on: the plain one for a
# verified bot, the _LIMITED one for a bot in fewer than 100 servers.
PRESENCE_FLAGS: Final = (1 << 12) | (1 << 13)
MEMBERS_FLAGS: Final = (1 << 14) | (1 << 15)
MESSAGE_CONTENT_FLAGS: Final = (1 << 18) | (1 << 19)
PORTAL: Final = "https://discord.com/developers/applications/{id}/bot"


class _Unreachable(Exception):
    """The service could not be asked (its address, the network, a timeout)."""


async def _get(url: str, headers: dict[str, str]) -> tuple[int, Any]:
    """`GET url`: the status, and the JSON body (None when there is none)."""
    import aiohttp

    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)) as http,
            http.get(url, headers=headers) as response,
        ):
            try:
                body = await response.json(content_type=None)
            except ValueError:
                body = None
            return response.status, body
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise _Unreachable(str(exc) or type(exc).__name__) from exc


def _scrubbed(text: str, secret: str) -> str:
    return text.replace(secret, masked(secret, secret=True)) if secret else text


class LiveChecks:
    """The `Checks` of gateway/cli_setup.py, against the real services (or what the settings'
    API addresses point at)."""

    def provider(self, agent: str, base_url: str, key: str, model: str) -> Verdict:
        return asyncio.run(self._provider(agent, base_url.rstrip("/"), key, model))

    def telegram(self, api_url: str, token: str) -> Verdict:
        return asyncio.run(self._telegram(api_url.rstrip("/"), token))

    def discord(self, api_url: str, token: str) -> Verdict:
        return asyncio.run(self._discord(api_url, token))

    async def _provider(self, agent: str, base: str, key: str, model: str) -> Verdict:
        if agent == "claude":
            from gateway.agents.anthropic_stream import API_VERSION

            url = f"{base}/v1/models"
            headers = {"x-api-key": key, "anthropic-version": API_VERSION}
        else:
            url = f"{base}/models"
            headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            status, body = await _get(url, headers)
        except _Unreachable as exc:
            return Verdict("unreachable", f"could not reach {base}: {_scrubbed(str(exc), key)}")
        if status in (401, 403):
            wrong = "refused the key" if key else "wants a key"
            return Verdict("refused", f"{base} {wrong} (HTTP {status})")
        if status == 404:
            # Not every OpenAI-compatible server lists its models: the key is tried on the
            # first message instead.
            return Verdict("ok", f"{base} answers, but lists no models: the key is not checked")
        if status != 200:
            return Verdict("unreachable", f"{base} answered HTTP {status}")
        listed = _model_ids(body)
        said = f"{base} accepts the key ({len(listed)} models)"
        if listed and model not in listed:
            return Verdict("ok", said, (f"it does not list the model {model!r}",))
        return Verdict("ok", said)

    async def _telegram(self, api: str, token: str) -> Verdict:
        try:
            status, body = await _get(f"{api}/bot{token}/getMe", {})
        except _Unreachable as exc:
            return Verdict("unreachable", f"could not reach {api}: {_scrubbed(str(exc), token)}")
        if status in (401, 404):  # what the Bot API answers a token it does not know
            return Verdict(
                "refused",
                f"Telegram refused the token (HTTP {status}): copy it again from @BotFather "
                "(/mybots → your bot → API Token)",
            )
        bot = body.get("result") if isinstance(body, dict) and body.get("ok") else None
        if status != 200 or not isinstance(bot, dict):
            return Verdict("unreachable", f"Telegram answered HTTP {status}")
        notes = []
        if not bot.get("can_read_all_group_messages"):
            notes.append(
                "privacy mode is on: in groups the bot gets commands, mentions and replies to "
                "it, which is what the gateway answers (docs/telegram.md)"
            )
        said = f"Telegram: the bot @{bot.get('username', '?')} (id {bot.get('id', '?')})"
        return Verdict("ok", said, notes=tuple(notes))

    async def _discord(self, api: str, token: str) -> Verdict:
        from adapters.discord.invite import InviteUnavailable, application, invite_url

        try:
            app = await application(api, token)
        except InviteUnavailable as exc:
            said = _scrubbed(str(exc), token)
            if exc.refused:
                return Verdict("refused", f"{said}: copy the token again (Bot → Reset Token)")
            return Verdict("unreachable", said)
        portal = PORTAL.format(id=app.id)
        warnings = []
        if not app.flags & MESSAGE_CONTENT_FLAGS:
            warnings.append(
                "the Message Content intent is not enabled: Discord refuses the bot's "
                "connection without it (the gateway asks for it). Turn it on under Privileged "
                f"Gateway Intents at {portal}"
            )
        members = "enabled" if app.flags & MEMBERS_FLAGS else "not enabled"
        notes = (
            f"the Server Members intent is {members}: the gateway does not need it (it asks "
            f"Discord for a member when it must); it is under Privileged Gateway Intents at "
            f"{portal}",
            f"Invite the bot to a server: {invite_url(app.id)}",
        )
        said = f"Discord: the application {app.name or '?'} (id {app.id})"
        return Verdict("ok", said, tuple(warnings), notes)


def _model_ids(body: Any) -> set[str]:
    """The model ids of a `/models` answer (`{"data": [{"id": …}, …]}`), as both APIs list
    them."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return set()
    return {str(item["id"]) for item in data if isinstance(item, dict) and "id" in item}
