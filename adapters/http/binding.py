"""Who may reach the API: never the network without a token, and with a token only its holders.

`start_http` refuses to listen beyond loopback while no AGENVOY_API_TOKEN is set; once one is,
every route but the open ones needs `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import hmac
import ipaddress

from aiohttp import web
from aiohttp.typedefs import Handler

from adapters.http.errors import ApiError
from gateway.settings import Settings


class InsecureBinding(RuntimeError):
    """Listening beyond loopback without an API token would open the API to the network."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"refusing to serve the HTTP API on {host!r} without a token: set AGENVOY_API_TOKEN "
            "or bind to 127.0.0.1"
        )
        self.host = host


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and `localhost`; anything else (including "" = every interface) is not."""
    name = host.strip().lower()
    if name == "localhost":
        return True
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        return address in ipaddress.IPv4Network("127.0.0.0/8")
    return address == ipaddress.IPv6Address("::1")


def api_token(settings: Settings) -> str:
    """The configured token; an empty AGENVOY_API_TOKEN counts as none."""
    return settings.api_token.get_secret_value() if settings.api_token is not None else ""


def check_binding(host: str, settings: Settings) -> None:
    if not is_loopback(host) and not api_token(settings):
        raise InsecureBinding(host)


class BearerToken:
    """The token check, as middleware; with no token set every request passes."""

    def __init__(self, settings: Settings, open_paths: frozenset[str]) -> None:
        self._token = api_token(settings).encode()
        self._open_paths = open_paths

    @web.middleware
    async def check(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._token and request.path not in self._open_paths:
            scheme, _, given = request.headers.get("Authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not given.strip():
                raise ApiError(
                    401,
                    "unauthorized",
                    "this API needs an Authorization: Bearer <token> header",
                    {"WWW-Authenticate": 'Bearer realm="agenvoy"'},
                )
            if not hmac.compare_digest(given.strip().encode(), self._token):
                raise ApiError(403, "forbidden", "the bearer token is not valid")
        return await handler(request)
