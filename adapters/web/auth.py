"""Who is looking at the console: the token they signed in with, kept in an HttpOnly,
SameSite=Strict cookie, and checked by the same credentials as the API on every request.

Every form that changes something carries a CSRF token derived from the cookie (HMAC), so a
page elsewhere can neither read it nor forge the form; a request with an `Origin` must come
from the console's own origin.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from multidict import MultiDictProxy

from gateway.credentials import ANONYMOUS, Credentials, Identity
from gateway.events import Origin
from gateway.ids import new_window_hash

Form = MultiDictProxy[Any]
COOKIE: Final = "agenvoy_console"
CSRF_FIELD: Final = "csrf"
# Signs the CSRF tokens of this process; a restart only asks open forms to be sent again.
_CSRF_KEY: Final = secrets.token_bytes(32)


class SignInNeeded(Exception):
    """The request has no valid sign-in: the page sends the browser to the sign-in form."""


@dataclass(frozen=True, slots=True)
class Viewer:
    identity: Identity
    token: str  # "" when no token is needed

    @property
    def name(self) -> str:
        return self.identity.sender_name or self.identity.sender_id

    def origin(self) -> Origin:
        """As the API's routes name their caller: a per-request label, never a window."""
        identity = self.identity
        return Origin(
            identity.platform,
            sender_id=identity.sender_id,
            sender_name=identity.sender_name,
            window_hash=identity.window_hash or new_window_hash(),
        )

    @property
    def csrf(self) -> str:
        return hmac.new(_CSRF_KEY, self.token.encode(), hashlib.sha256).hexdigest()


class ConsoleAuth:
    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    async def sign_in(self, token: str) -> Identity | None:
        readable = token.isascii() and token.isprintable() and 0 < len(token) <= 512
        return await self._credentials.identify(token) if readable else None

    async def viewer(self, request: web.Request) -> Viewer:
        token = request.cookies.get(COOKIE, "")
        if not token and await self._credentials.admits_anonymous():
            return Viewer(ANONYMOUS, "")
        identity = await self.sign_in(token) if token else None
        if identity is None:
            raise SignInNeeded
        return Viewer(identity, token)

    @staticmethod
    def check_form(request: web.Request, viewer: Viewer, form: Form) -> None:
        """Refuse a change that did not come from a console page."""
        origin = request.headers.get("Origin")
        own = f"{request.scheme}://{request.host}"
        if origin is not None and origin != own:
            raise web.HTTPForbidden(text="this form was sent from another site")
        given = str(form.get(CSRF_FIELD, ""))
        if not hmac.compare_digest(given, viewer.csrf):
            raise web.HTTPForbidden(text="this form is stale or forged; reload the page")


def remember(response: web.StreamResponse, request: web.Request, token: str) -> None:
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="Strict",
        secure=request.secure,
        path="/ui",
    )


def forget(response: web.StreamResponse) -> None:
    response.del_cookie(COOKIE, path="/ui")
