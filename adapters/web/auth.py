"""Who is looking at the console: a server-side sign-in (gateway/store/console_signins.py)
named by a random id in an HttpOnly, SameSite=Strict cookie. The token a viewer signs in with
is checked once and never stored; the sign-in ends when they sign out, when it expires
(`AGENVOY_CONSOLE_SIGNIN_HOURS`), or when that token is revoked, which every request checks.

Every form that changes something carries a CSRF token derived from the sign-in's id, so a page
elsewhere can neither read it nor forge the form, and any instance can check it; a request
with an `Origin` must come from the console's own origin.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from multidict import MultiDictProxy

from gateway.clock import Clock
from gateway.credentials import ANONYMOUS, Credentials, Identity
from gateway.events import Origin
from gateway.ids import new_window_hash
from gateway.logs import get_logger
from gateway.store.console_signins import ConsoleSignins, SignIn

log = get_logger(__name__)

Form = MultiDictProxy[Any]
COOKIE: Final = "agenvoy_console"
CSRF_FIELD: Final = "csrf"
# Signs the CSRF tokens of an open gateway's anonymous viewers, who have no sign-in.
_ANONYMOUS_CSRF: Final = secrets.token_hex(32)
MAX_TOKEN_CHARS: Final = 512
MAX_COOKIE_CHARS: Final = 128


class SignInNeeded(Exception):
    """The request has no valid sign-in: the page sends the browser to the sign-in form."""


@dataclass(frozen=True, slots=True)
class Viewer:
    identity: Identity
    signin_id: str  # "" for an open gateway's anonymous viewer
    signin: SignIn | None = None
    # Whether the pages may offer what only gateway admins do (the profiles): set by the
    # pages for each request, from the same rule the API asks (gateway/access.py).
    gateway_admin: bool = False

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
        # Not the id itself, which only the cookie carries: a page's source shows this.
        secret = self.signin_id or _ANONYMOUS_CSRF
        return hashlib.sha256(f"console-csrf\n{secret}".encode()).hexdigest()


def _identity(signin: SignIn) -> Identity:
    platform, _, sender = signin.identity.partition(":")
    return Identity(platform, sender, signin.name or sender)


class ConsoleAuth:
    def __init__(
        self, credentials: Credentials, signins: ConsoleSignins, clock: Clock, hours: float
    ) -> None:
        self._credentials = credentials
        self._signins = signins
        self._clock = clock
        self._lasts_ms = int(hours * 3_600_000)

    async def sign_in(self, token: str) -> str | None:
        """A new sign-in for whoever `token` stands for (its id), or None for a bad token."""
        readable = token.isascii() and token.isprintable() and 0 < len(token) <= MAX_TOKEN_CHARS
        identity = await self._credentials.identify(token) if readable else None
        if identity is None:
            return None
        signin_id = await self._signins.start(
            identity.key,
            identity.sender_name,
            self._credentials.fingerprint(identity, token),
            now=self._clock.now_ms(),
            lasts_ms=self._lasts_ms,
        )
        log.info("console sign-in", by=identity.key)
        return signin_id

    async def sign_out(self, viewer: Viewer) -> None:
        if viewer.signin_id:
            await self._signins.end(viewer.signin_id)

    async def viewer(self, request: web.Request) -> Viewer:
        signin_id = request.cookies.get(COOKIE, "")
        found = await self._current(signin_id) if signin_id else None
        if found is not None:
            return Viewer(_identity(found), signin_id, found)
        if await self._credentials.admits_anonymous():
            return Viewer(ANONYMOUS, "")
        raise SignInNeeded

    async def still_signed_in(self, viewer: Viewer) -> bool:
        """Whether `viewer`'s sign-in still stands, the issued tokens read afresh (an open
        stream asks this every moment)."""
        if not viewer.signin_id:
            return await self._credentials.admits_anonymous()
        return await self._current(viewer.signin_id, fresh=True) is not None

    async def _current(self, signin_id: str, *, fresh: bool = False) -> SignIn | None:
        if len(signin_id) > MAX_COOKIE_CHARS:
            return None
        found = await self._signins.find(signin_id, now=self._clock.now_ms())
        if found is None:
            return None
        if not await self._credentials.still_accepts(found.identity, found.credential, fresh=fresh):
            # Every sign-in that token made ends with it, on every instance, at once.
            ended = await self._signins.end_made_with(found.credential)
            log.info("console sign-ins of a revoked token ended", by=found.identity, ended=ended)
            return None
        return found

    @staticmethod
    def check_form(request: web.Request, viewer: Viewer, form: Form) -> None:
        """Refuse a change that did not come from a console page."""
        origin = request.headers.get("Origin")
        own = f"{request.scheme}://{request.host}"
        if origin is not None and origin != own:
            raise web.HTTPForbidden(text="this form was sent from another site")
        given = str(form.get(CSRF_FIELD, ""))
        if not hmac.compare_digest(given.encode(), viewer.csrf.encode()):
            raise web.HTTPForbidden(text="this form is stale or forged; reload the page")


def remember(response: web.StreamResponse, request: web.Request, signin_id: str) -> None:
    response.set_cookie(
        COOKIE,
        signin_id,
        httponly=True,
        samesite="Strict",
        secure=request.secure,
        path="/ui",
    )


def forget(response: web.StreamResponse) -> None:
    response.del_cookie(COOKIE, path="/ui")
