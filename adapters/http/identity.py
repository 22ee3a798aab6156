"""Who is asking: the bearer token decides (gateway/credentials.py), never a header.

Without a token configured or issued, a caller without one is `http:anonymous`; with one, a
caller without one is refused (401) and a token that stands for nobody too (403). The local
clients (the `agenvoy` commands and chat windows) always sign in with a token signed by the
local credential, whatever else is configured.
"""

from __future__ import annotations

from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from adapters.http.errors import ApiError
from adapters.http.standing import STANDING, Standing
from gateway.credentials import ANONYMOUS, Credentials, Identity

IDENTITY: Final = web.RequestKey("agenvoy_identity", Identity)


class Authenticate:
    """The middleware that puts the caller's identity on every request but the open ones."""

    def __init__(
        self, credentials: Credentials, open_paths: frozenset[str], *, open_prefix: str = ""
    ) -> None:
        self._credentials = credentials
        self._open_paths = open_paths
        self._open_prefix = f"{open_prefix}/" if open_prefix else ""

    def _open(self, path: str) -> bool:
        prefix = self._open_prefix
        return path in self._open_paths or (bool(prefix) and (path + "/").startswith(prefix))

    @web.middleware
    async def check(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._open(request.path):
            return await handler(request)
        with self._credentials.serving():
            return await self._checked(request, handler)

    async def _checked(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        identity = request[IDENTITY] = await self._identify(request)

        async def holds() -> bool:
            # Asked later (a stream, a wait): a look begun after this moment, not the request's.
            with self._credentials.serving():
                try:
                    return await self._identify(request) == identity
                except ApiError:
                    return False

        # The handler runs in this task: its streams and waits find the standing there.
        token = STANDING.set(Standing(holds, self._credentials.changed))
        try:
            return await handler(request)
        finally:
            STANDING.reset(token)

    async def _identify(self, request: web.Request) -> Identity:
        header = request.headers.get("Authorization", "")
        if not header and await self._credentials.admits_anonymous():
            return ANONYMOUS
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ApiError(
                401,
                "unauthorized",
                "this API needs an Authorization: Bearer <token> header",
                {"WWW-Authenticate": 'Bearer realm="agenvoy"'},
            )
        token = given.strip()
        # Headers arrive as text that may hold anything; no token is other than plain ASCII.
        readable = token.isascii() and token.isprintable()
        identity = await self._credentials.identify(token) if readable else None
        if identity is None:
            raise ApiError(403, "forbidden", "the bearer token is not valid")
        return identity
