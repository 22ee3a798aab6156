"""What keeps browsers out: a page on another site, or one that rebinds its own name to this
machine (DNS rebinding), must not reach the API through a visitor's browser.

- The `Host` header must name this server: a loopback name, the address it is bound to, or one
  of `AGENVOY_HTTP_ALLOWED_HOSTS`; bound to every interface, any IP literal too (a rebinding
  page always uses a name). Anything else answers 421 `wrong_host`.
- A request carrying an `Origin` (every cross-site fetch and form does) answers 403
  `cross_origin` unless the origin is one of `AGENVOY_HTTP_ALLOWED_ORIGINS`; those get CORS
  headers and their preflights are answered.
- A body is JSON only: one of any other `Content-Type` (a form's `text/plain`, even holding
  JSON) answers 415 `unsupported_media_type`.

Routes other front-ends contribute (the Telegram webhook) are reached by their platforms under
public names, so they are left to their own checks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Final

from aiohttp import web
from aiohttp.typedefs import Handler

from adapters.http.binding import is_loopback
from adapters.http.errors import ApiError
from gateway.settings import Settings

EVERY_INTERFACE: Final = frozenset({"", "0.0.0.0", "::"})
_ALLOWED_HEADERS: Final = "Authorization, Content-Type, X-Agenvoy-Window"
_ALLOWED_METHODS: Final = "GET, POST, PUT, DELETE"
_JSON: Final = "application/json"


def _split(value: str) -> frozenset[str]:
    return frozenset(part.strip().lower() for part in value.split(",") if part.strip())


def _host_name(host: str) -> str:
    """The name of a Host header, without its port: `[::1]:80` → `::1`."""
    name = host.strip().lower()
    if name.startswith("["):
        return name[1 : name.find("]")] if "]" in name else name
    return name.rpartition(":")[0] if name.count(":") == 1 else name


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Guard:
    def __init__(
        self, settings: Settings, bind_host: str, skipped: Iterable[str], *, forms_under: str = ""
    ) -> None:
        self._hosts = _split(settings.http_allowed_hosts) | {bind_host.strip("[]").lower()}
        self._any_ip = bind_host in EVERY_INTERFACE
        self._origins = _split(settings.http_allowed_origins)
        self._skipped = frozenset(skipped)
        self._forms = f"{forms_under}/" if forms_under else ""

    def _pages(self, request: web.Request) -> bool:
        """The console's pages: sent by its own forms, from its own origin."""
        return bool(self._forms) and (request.path + "/").startswith(self._forms)

    def _host_allowed(self, host: str | None) -> bool:
        if host is None:
            return True  # HTTP/1.0 without Host: not what a browser sends
        name = _host_name(host)
        return name in self._hosts or is_loopback(name) or (self._any_ip and _is_ip(name))

    def _guarded(self, request: web.Request) -> bool:
        resource = request.match_info.route.resource
        return resource is None or resource.canonical not in self._skipped

    @web.middleware
    async def check(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self._guarded(request):
            return await handler(request)
        if not self._host_allowed(request.headers.get("Host")):
            raise ApiError(421, "wrong_host", "this server does not answer for that Host")
        if self._pages(request):
            # Its forms and same-origin fetches; their CSRF tokens are checked by the console.
            return await handler(request)
        origin = request.headers.get("Origin")
        if origin is not None:
            if origin.lower() not in self._origins:
                raise ApiError(403, "cross_origin", "requests from web pages are not allowed")
            if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
                return web.Response(
                    status=204,
                    headers={
                        "Access-Control-Allow-Methods": _ALLOWED_METHODS,
                        "Access-Control-Allow-Headers": _ALLOWED_HEADERS,
                        "Access-Control-Max-Age": "600",
                    },
                )
        # An empty body may come with any type (aiohttp's client says octet-stream).
        if request.body_exists and request.content_type != _JSON:
            raise ApiError(415, "unsupported_media_type", "a request body must be application/json")
        return await handler(request)

    async def cors_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        """On every answer to an allowed origin (streams included, hence a signal)."""
        origin = request.headers.get("Origin")
        if origin is not None and origin.lower() in self._origins and self._guarded(request):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Vary"] = "Origin"
