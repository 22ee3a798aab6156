"""A document an admin attaches by URL, fetched once.

The gateway fetches on an admin's word, from inside the operator's network, so what it may reach
is the operator's choice: only hosts listed in `AGENVOY_KNOWLEDGE_HOSTS`, only http and https,
no credentials in the URL, and every redirect held to the same rules (a listed host must not
become a way to reach an unlisted one). The body is counted as it arrives, so a server that
announces no length, or sends more than it announced, is cut off at the limit rather than
filling memory. Every way it can go wrong ends as a `FetchRefused` worded for the admin.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp
from yarl import URL

SETTING = "AGENVOY_KNOWLEDGE_HOSTS"
USER_AGENT = "agenvoy-gateway knowledge fetch"
_CHUNK = 64 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


class FetchRefused(ValueError):
    """A URL not fetched; the message says why in words for an admin (never a traceback)."""


@dataclass(frozen=True, slots=True)
class Fetched:
    url: str  # the final URL (after redirects)
    data: bytes
    content_type: str  # the Content-Type's media type, lower-case, no parameters ("" if none)
    name: str  # the last path segment of the final URL, percent-decoded, or the host


def host_allowed(host: str, allowed: Sequence[str]) -> bool:
    """An entry `docs.example.org` matches that host exactly (case-insensitive, a trailing dot
    ignored); `*.example.org` matches any subdomain of it (not example.org itself). An empty
    list allows nothing."""
    host = host.strip().lower().rstrip(".")
    if not host:
        return False
    for entry in allowed:
        # Brackets let an operator write an IPv6 address as it appears in a URL.
        entry = entry.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")
        if entry.startswith("*."):
            suffix = entry[1:]  # ".example.org": the dot keeps "badexample.org" out
            if len(suffix) > 1 and host.endswith(suffix) and len(host) > len(suffix):
                return True
        elif entry and host == entry:
            return True
    return False


def _size(n: int) -> str:
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{n} byte" if n == 1 else f"{n} bytes"


def _check(url: URL, allowed: Sequence[str], redirected: bool) -> None:
    """Refuse a URL outside the rules; `redirected` says where it came from, for the message."""
    where = f"it redirected to {url}, which" if redirected else "the URL"
    if url.scheme not in ("http", "https"):
        raise FetchRefused(f"{where} is not http or https: only web addresses are fetched")
    if url.user is not None or url.password is not None:
        # The URL is not repeated: it holds a secret.
        raise FetchRefused(
            "a URL with a user name or password in it is not fetched: "
            "put the document where it can be read without one"
        )
    if not url.host:
        raise FetchRefused(f"{where} has no host")
    if not host_allowed(url.host, allowed):
        raise FetchRefused(
            f"{where} is on {url.host}, which is not allowed: the operator lists the hosts "
            f"documents may come from in {SETTING}"
        )


def _parse(text: str, base: URL | None = None) -> URL:
    try:
        url = URL(text.strip())
        if base is not None:
            url = base.join(url)
        url.port  # noqa: B018 -- an out-of-range port shows only when asked for
    except ValueError as error:
        raise FetchRefused(f"not a valid URL: {text!r} ({error})") from None
    return url.with_fragment(None)  # the fragment is the reader's, never sent


def _reason(error: aiohttp.ClientError) -> str:
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        return f"the certificate of {error.host} is not trusted"
    if isinstance(error, aiohttp.ClientConnectorError):
        cause = error.os_error
        if isinstance(cause, socket.gaierror):  # its errno is not an OS one
            return f"cannot find the host {error.host} ({cause.strerror})"
        detail = os.strerror(cause.errno) if cause.errno else str(cause)
        return f"cannot connect to {error.host}:{error.port} ({detail.lower()})"
    return str(error) or type(error).__name__


def _media_type(header: str | None) -> str:
    return (header or "").split(";", 1)[0].strip().lower()


def _name(url: URL) -> str:
    segments = [part for part in url.parts if part and part != "/"]
    return segments[-1] if segments else url.host or ""


async def _read(response: aiohttp.ClientResponse, url: URL, max_bytes: int) -> bytes:
    too_big = f"the document at {url} is larger than {_size(max_bytes)}, the limit"
    length = response.content_length
    if length is not None and length > max_bytes:
        raise FetchRefused(too_big)
    body = bytearray()
    # Counted as it comes: the announced length may be missing, or wrong.
    async for chunk in response.content.iter_chunked(_CHUNK):
        body += chunk
        if len(body) > max_bytes:
            raise FetchRefused(too_big)
    return bytes(body)


async def fetch_document(
    url: str,
    *,
    allowed_hosts: Sequence[str],
    max_bytes: int,
    timeout: float = 30.0,  # noqa: ASYNC109 - one deadline for the whole fetch, redirects too
    max_redirects: int = 3,
) -> Fetched:
    """The document at `url`, fetched once, following at most `max_redirects` redirects."""
    if not allowed_hosts:
        raise FetchRefused(
            f"documents are not fetched from URLs until the operator lists the hosts "
            f"they may come from in {SETTING}"
        )
    current = _parse(url)
    _check(current, allowed_hosts, redirected=False)
    session = aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout),
        headers={"User-Agent": USER_AGENT},
        trust_env=False,  # an environment's proxy would fetch from somewhere else
    )
    try:
        async with session:
            redirects = 0
            while True:
                async with session.get(current, allow_redirects=False) as response:
                    location = response.headers.get("Location")
                    if response.status in _REDIRECTS and location is not None:
                        redirects += 1
                        if redirects > max_redirects:
                            raise FetchRefused(
                                f"{url} redirects more than {max_redirects} times; "
                                f"give the document's own URL"
                            )
                        current = _parse(location, base=current)
                        _check(current, allowed_hosts, redirected=True)
                        continue
                    if not 200 <= response.status < 300:
                        status = f"{response.status} {response.reason or ''}".rstrip()
                        raise FetchRefused(f"{current} answered {status}, not the document")
                    data = await _read(response, current, max_bytes)
                    content_type = _media_type(response.headers.get("Content-Type"))
                    break
    except TimeoutError:
        raise FetchRefused(
            f"could not fetch {current}: no whole answer within {timeout:g} s"
        ) from None
    except aiohttp.ClientError as error:
        raise FetchRefused(f"could not fetch {current}: {_reason(error)}") from None
    return Fetched(url=str(current), data=data, content_type=content_type, name=_name(current))
