"""The web console at `/ui`: a sub-application of the API's aiohttp app, so it shares its
runtime, its credentials and its guard (Host checks), and adds its own sign-in (a cookie) and
forms (with CSRF tokens). Pages are rendered on the server (Jinja2, autoescaped); a small
script follows a running task through server-sent events. No build step."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

import jinja2
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from adapters.http.context import Context
from adapters.http.errors import known_error
from adapters.web.auth import ConsoleAuth
from adapters.web.config import ConfigPages, add_config_routes
from adapters.web.connections import ConnectionPages, add_connection_routes
from adapters.web.files import Files, with_attachment_links
from adapters.web.knowledge import KnowledgePages, add_knowledge_routes
from adapters.web.live import LiveEvents
from adapters.web.overview import Overview
from adapters.web.pages import Pages
from adapters.web.profiles import ProfilePages, add_routes
from adapters.web.start import register as add_start_page
from gateway.credentials import Credentials

CONSOLE_PREFIX: Final = "/ui"
_HERE: Final = Path(__file__).parent


def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    # A file's URL changes with its content, so a browser never keeps an old script.
    versions = {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()[:12]
        for path in (_HERE / "static").iterdir()
    }
    env.globals["static"] = lambda name: f"{CONSOLE_PREFIX}/static/{name}?v={versions[name]}"
    env.filters["with_attachment_links"] = with_attachment_links
    return env


def _html_errors(pages: Pages) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return pages.render(
                "error.html", None, status=exc.status, message=exc.text or exc.reason
            )
        except Exception as exc:
            known = known_error(exc)
            if known is None:
                raise
            return pages.render("error.html", None, status=known.status, message=known.message)

    return middleware


GUARDING_HEADERS: Final = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


async def _guarded_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every console response, pages, files, redirects and event streams alike: a browser
    never guesses a type other than the one given, and never tells another site which console
    page (with a session id in its address) a link was followed from. Same-origin rather than
    no-referrer: with no-referrer a browser sends `Origin: null` on the console's own forms,
    which their cross-site check then refuses."""
    for name, value in GUARDING_HEADERS.items():
        response.headers.setdefault(name, value)


# Where a browser pointed at the gateway's address lands: the console.
ENTRY_PATHS: Final = ("/", CONSOLE_PREFIX)


async def _to_console(_request: web.Request) -> web.Response:
    # Served by the API's app, not the console's: the console's guarding headers set here.
    raise web.HTTPFound(f"{CONSOLE_PREFIX}/", headers=GUARDING_HEADERS)


def add_entry_redirects(app: web.Application) -> None:
    """`/` and `/ui` lead to the console's `/ui/` (the sub-application serves only below it)."""
    for path in ENTRY_PATHS:
        app.router.add_get(path, _to_console)


def build_console(ctx: Context, credentials: Credentials) -> web.Application:
    runtime = ctx.runtime
    auth = ConsoleAuth(
        credentials,
        runtime.store.console_signins,
        runtime.clock,
        runtime.settings.console_signin_hours,
    )
    pages = Pages(ctx, auth, _templates())
    live = LiveEvents(ctx, auth)
    overview = Overview(ctx, pages)
    console = web.Application(middlewares=[_html_errors(pages)])
    console.on_response_prepare.append(_guarded_headers)
    console.router.add_get("/", pages.sessions)
    console.router.add_get("/login", pages.login_form)
    console.router.add_post("/login", pages.login)
    console.router.add_post("/logout", pages.logout)
    console.router.add_get("/session/{sid}", pages.session)
    console.router.add_post("/session/{sid}/send", pages.send)
    console.router.add_get("/session/{sid}/events", live.stream)
    console.router.add_get("/session/{sid}/file", Files(pages).serve)
    console.router.add_post("/session/{sid}/cancel/{task}", pages.cancel)
    console.router.add_post("/session/{sid}/settings", pages.configure)
    console.router.add_get("/approvals", pages.approvals)
    console.router.add_get("/search", overview.search)
    console.router.add_get("/usage", overview.usage)
    console.router.add_get("/health", overview.health)
    console.router.add_post("/answer", pages.answer)
    add_routes(console, ProfilePages(ctx, pages))
    add_knowledge_routes(console, KnowledgePages(ctx, pages))
    add_connection_routes(console, ConnectionPages(ctx, pages))
    add_config_routes(console, ConfigPages(ctx, pages))
    add_start_page(console, ctx, pages)
    console.router.add_static("/static", _HERE / "static")
    return console
