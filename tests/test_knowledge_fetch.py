"""gateway/knowledge/fetch.py against a real HTTP server on 127.0.0.1: the allow-list, redirects
held to it, the size limit announced and unannounced, errors and timeouts in words."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.knowledge.fetch import Fetched, FetchRefused, fetch_document, host_allowed

DOC = b"# Opening hours\n\nMonday to Friday, 9 to 5.\n"
LIMIT = 4096
LOCAL = ["127.0.0.1"]


@dataclass(frozen=True, slots=True)
class Server:
    base: str  # http://127.0.0.1:PORT
    port: int
    requests: list[str]  # the paths asked for, in order


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    requests: list[str] = []
    # Handlers that must not finish while a test looks wait on it; set only to let the server
    # stop without waiting out their connections.
    release = asyncio.Event()

    @web.middleware
    async def record(request: web.Request, handler: Handler) -> web.StreamResponse:
        requests.append(request.path_qs)
        return await handler(request)

    async def doc(request: web.Request) -> web.Response:
        return web.Response(body=DOC, headers={"Content-Type": "text/markdown; charset=utf-8"})

    async def big(request: web.Request) -> web.StreamResponse:
        # Announces more than the limit, then sends a little and stalls: a client that read the
        # body before looking at the length would hang here until its timeout.
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.content_length = 10 * 1024 * 1024
        await response.prepare(request)
        await response.write(b"x" * 100)
        await release.wait()
        return response

    async def endless(request: web.Request) -> web.StreamResponse:
        # No length: chunked, past the limit, then stalls, so only counting stops the client.
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(LIMIT // 1024 + 2):
            await response.write(b"y" * 1024)
        await release.wait()
        return response

    async def stalled(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="too late")

    async def hop(request: web.Request) -> web.Response:
        left = int(request.match_info["left"])
        target = f"/hop/{left - 1}" if left > 1 else "/files/Read%20Me.md"
        raise web.HTTPFound(target)

    async def relative(request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently("../doc.md")

    async def elsewhere(request: web.Request) -> web.Response:
        # The same server under a name the allow-list does not hold.
        raise web.HTTPFound(f"http://localhost:{request.url.port}/doc.md")

    async def to_ftp(request: web.Request) -> web.Response:
        raise web.HTTPFound("ftp://127.0.0.1/doc.md")

    async def loop(request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    app = web.Application(middlewares=[record])
    app.router.add_get("/", doc)
    app.router.add_get("/doc.md", doc)
    app.router.add_get("/files/Read Me.md", doc)
    app.router.add_get("/big", big)
    app.router.add_get("/endless", endless)
    app.router.add_get("/stalled", stalled)
    app.router.add_get("/hop/{left}", hop)
    app.router.add_get("/old/relative", relative)
    app.router.add_get("/elsewhere", elsewhere)
    app.router.add_get("/to-ftp", to_ftp)
    app.router.add_get("/loop", loop)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = int(runner.addresses[0][1])
    try:
        yield Server(f"http://127.0.0.1:{port}", port, requests)
    finally:
        release.set()
        await runner.cleanup()


async def fetch(url: str, **options: float) -> Fetched:
    return await fetch_document(
        url,
        allowed_hosts=LOCAL,
        max_bytes=int(options.pop("max_bytes", LIMIT)),
        timeout=options.pop("timeout", 10.0),
        max_redirects=int(options.pop("max_redirects", 3)),
    )


async def refused(url: str, **options: float) -> str:
    with pytest.raises(FetchRefused) as caught:
        await fetch(url, **options)
    return str(caught.value)


@pytest.mark.parametrize(
    ("host", "allowed", "expected"),
    [
        ("docs.example.org", ["docs.example.org"], True),
        ("Docs.Example.ORG.", ["docs.example.org"], True),
        ("docs.example.org", ["DOCS.example.org."], True),
        ("other.example.org", ["docs.example.org"], False),
        ("docs.example.org.evil.com", ["docs.example.org"], False),
        ("a.example.org", ["*.example.org"], True),
        ("deep.a.example.org", ["*.example.org"], True),
        ("example.org", ["*.example.org"], False),
        ("badexample.org", ["*.example.org"], False),
        ("example.org", ["*."], False),
        ("docs.example.org", [], False),
        ("", ["docs.example.org"], False),
        ("::1", ["[::1]"], True),
        ("127.0.0.1", ["10.0.0.1", "127.0.0.1"], True),
    ],
)
def test_host_allowed(host: str, allowed: list[str], expected: bool) -> None:
    assert host_allowed(host, allowed) is expected


async def test_fetches_a_document(server: Server) -> None:
    got = await fetch(f"{server.base}/doc.md#section")
    assert got == Fetched(f"{server.base}/doc.md", DOC, "text/markdown", "doc.md")
    assert server.requests == ["/doc.md"]


async def test_a_body_of_exactly_the_limit_is_kept(server: Server) -> None:
    got = await fetch(f"{server.base}/doc.md", max_bytes=len(DOC))
    assert got.data == DOC


async def test_name_is_decoded_or_the_host(server: Server) -> None:
    assert (await fetch(f"{server.base}/files/Read%20Me.md")).name == "Read Me.md"
    assert (await fetch(server.base)).name == "127.0.0.1"


@asynccontextmanager
async def raw_server(answer: bytes) -> AsyncIterator[str]:
    """A server that sends `answer` as it is, then closes: what aiohttp's own server would not
    send (no Content-Type, no length at all)."""

    async def reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(reply, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_no_content_type_is_empty() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nno type"
    async with raw_server(answer) as base:
        got = await fetch(f"{base}/notes")
    assert (got.data, got.content_type, got.name) == (b"no type", "", "notes")


async def test_a_body_read_until_close_is_cut_off_too() -> None:
    # Neither a length nor chunks: the body ends when the connection does.
    answer = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"z" * (LIMIT + 1)
    async with raw_server(answer) as base:
        assert "larger than 4 KB" in await refused(f"{base}/notes")
        assert (await fetch(f"{base}/notes", max_bytes=LIMIT + 1)).data == b"z" * (LIMIT + 1)


async def test_announced_length_over_the_limit_is_refused_unread(server: Server) -> None:
    message = await refused(f"{server.base}/big", max_bytes=5 * 1024 * 1024)
    assert "larger than 5 MB" in message


async def test_unannounced_body_over_the_limit_is_cut_off(server: Server) -> None:
    message = await refused(f"{server.base}/endless")
    assert "larger than 4 KB" in message


async def test_redirects_are_followed_to_the_final_url(server: Server) -> None:
    got = await fetch(f"{server.base}/old/relative")
    assert (got.url, got.data) == (f"{server.base}/doc.md", DOC)
    got = await fetch(f"{server.base}/hop/3")
    assert got.url == f"{server.base}/files/Read%20Me.md"
    assert got.name == "Read Me.md"


async def test_one_redirect_too_many_is_refused(server: Server) -> None:
    message = await refused(f"{server.base}/hop/3", max_redirects=2)
    assert "more than 2" in message
    assert server.requests == ["/hop/3", "/hop/2", "/hop/1"]


async def test_a_redirect_loop_is_refused(server: Server) -> None:
    message = await refused(f"{server.base}/loop")
    assert "redirects more than 3 times" in message
    assert server.requests == ["/loop"] * 4


async def test_a_redirect_to_a_host_not_listed_is_refused(server: Server) -> None:
    message = await refused(f"{server.base}/elsewhere")
    assert f"redirected to http://localhost:{server.port}/doc.md" in message
    assert "AGENVOY_KNOWLEDGE_HOSTS" in message
    assert server.requests == ["/elsewhere"]  # nothing asked of the host not listed


async def test_a_redirect_out_of_http_is_refused(server: Server) -> None:
    assert "not http or https" in await refused(f"{server.base}/to-ftp")


async def test_an_error_status_is_refused_by_name(server: Server) -> None:
    message = await refused(f"{server.base}/missing.md")
    assert "404 Not Found" in message
    assert "Traceback" not in message


async def test_a_server_too_slow_is_refused(server: Server) -> None:
    message = await refused(f"{server.base}/stalled", timeout=0.5)
    assert message.startswith(f"could not fetch {server.base}/stalled: ")
    assert "0.5 s" in message


async def test_a_closed_port_is_refused_in_words() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    # Bound, never listening, then closed: nothing answers there.
    message = await refused(f"http://127.0.0.1:{port}/doc.md")
    assert message.startswith(f"could not fetch http://127.0.0.1:{port}/doc.md: cannot connect")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://127.0.0.1/doc.md", "not http or https"),
        ("file:///etc/passwd", "not http or https"),
        ("http:///doc.md", "no host"),
        ("http://[::1/doc.md", "not a valid URL"),
        ("http://127.0.0.1:99999/doc.md", "not a valid URL"),
        ("http://docs.example.org/doc.md", "docs.example.org, which is not allowed"),
    ],
)
async def test_url_shapes_refused(url: str, words: str) -> None:
    assert words in await refused(url)


async def test_credentials_refused_without_repeating_them() -> None:
    message = await refused("http://admin:hunter2@127.0.0.1/doc.md")
    assert "user name or password" in message
    assert "hunter2" not in message


async def test_an_empty_allow_list_says_urls_are_off(server: Server) -> None:
    with pytest.raises(FetchRefused, match=r"until the operator lists .* AGENVOY_KNOWLEDGE_HOSTS"):
        await fetch_document(f"{server.base}/doc.md", allowed_hosts=[], max_bytes=LIMIT)
    assert server.requests == []


async def test_a_proxy_from_the_environment_is_not_used(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nproxied!"
    async with raw_server(answer) as proxy:
        for name in ("http_proxy", "HTTP_PROXY"):
            monkeypatch.setenv(name, proxy)
        for name in ("no_proxy", "NO_PROXY"):
            monkeypatch.delenv(name, raising=False)
        assert (await fetch(f"{server.base}/doc.md")).data == DOC
