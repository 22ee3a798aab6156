"""The link that adds the bot to a server: its scopes, and exactly the permissions the adapter
uses. The gateway logs it when the bot connects; `agenvoy discord invite` prints it.

A permission the bot lacks in a channel shows up only when it tries to use it there (a reply
that cannot be sent), so the invite asks for all of them at once — and for nothing more: a
bot that cannot manage anything cannot be made to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import urlencode

import aiohttp

AUTHORIZE_URL: Final = "https://discord.com/oauth2/authorize"
# `bot` adds the bot user; `applications.commands` lets the gateway's slash commands show up.
SCOPES: Final = ("bot", "applications.commands")
# What each permission is for, named as discord.py's `Permissions` names them.
PERMISSIONS_USED: Final = {
    "view_channel": "see the channels it serves, and their messages",
    "send_messages": "replies, prompts and notices",
    "send_messages_in_threads": "the same in threads, each a session of its own",
    "read_message_history": "answer a message as a reply to it; read what was posted while "
    "the gateway was away",
}
# Their sum, as the invite link carries it: 1024 + 2048 + 65536 + 274877906944.
INVITE_PERMISSIONS: Final = 274_877_975_552


def invite_url(application_id: int | str) -> str:
    query = {
        "client_id": str(application_id),
        "scope": " ".join(SCOPES),
        "permissions": str(INVITE_PERMISSIONS),
    }
    return f"{AUTHORIZE_URL}?{urlencode(query)}"


class InviteUnavailable(Exception):
    """Discord did not say which application the token is of; `refused`: because it refused
    the token (rather than not being reachable, or answering something else)."""

    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused


@dataclass(frozen=True, slots=True)
class Application:
    """The bot's application as Discord describes it: `flags` say which privileged intents
    are switched on for it (`agenvoy setup` tells the operator)."""

    id: int
    name: str
    flags: int


ASK_TIMEOUT_SECONDS: Final = 15.0


async def application_id(api_url: str, token: str) -> int:
    """The id of the application whose bot `token` is, asked of Discord."""
    return (await application(api_url, token)).id


async def application(api_url: str, token: str) -> Application:
    """The application whose bot `token` is, asked of Discord."""
    url = f"{api_url.rstrip('/')}/oauth2/applications/@me"
    headers = {"Authorization": f"Bot {token}"}
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=ASK_TIMEOUT_SECONDS)) as http,
            http.get(url, headers=headers) as response,
        ):
            if response.status == 401:
                raise InviteUnavailable("Discord refused the token (HTTP 401)", refused=True)
            if response.status != 200:
                raise InviteUnavailable(f"Discord answered HTTP {response.status}")
            body = await response.json()
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise InviteUnavailable(f"Discord could not be asked: {exc or type(exc).__name__}") from exc
    try:
        return Application(int(body["id"]), str(body.get("name", "")), int(body.get("flags") or 0))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InviteUnavailable("Discord's answer names no application") from exc
