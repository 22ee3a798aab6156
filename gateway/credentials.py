"""Who a bearer token stands for: the shared API token, per-user tokens, and the local
(terminal) credential with the window tokens signed by it.

- **Per-user tokens** are issued by `agenvoy token add NAME` (or `POST /v1/tokens`): shown
  once, kept only as their SHA-256 in the archive (gateway/store/tokens.py), so every instance
  on it accepts the same ones. A token is 32 random bytes, so a plain hash is as good as a slow
  one; what the table leaks is who has a token, not the token. (Homes from before kept them in
  `<home>/.store/api_tokens.json`, imported at the next start.)
- **The shared token** (`AGENVOY_API_TOKEN`) is one identity, `http:api`.
- **The local credential** (`<home>/.store/terminal.token`, mode 0600) is written by the
  gateway at start-up and stands for whoever can read the home: the gateway's owner. Local
  clients never send it; they send a token signed with it that names their user and, for a
  chat window, the window's hash (`local_token`). A window's hash alone, which other callers
  see in prompts, proves nothing.

Nothing here knows HTTP: the adapter hands in what came after `Bearer `.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from gateway.clock import Clock
from gateway.ids import HASH_RE

TERMINAL_FILE: Final = "terminal.token"
TOKENS_FILE: Final = "api_tokens.json"
LOCAL_PREFIX: Final = "agenvoy-local-"
ISSUED_PREFIX: Final = "agv_"
_LOCAL_TOKEN: Final = "agl1"
NAME_RE: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_DISPLAY_CHARS: Final = 64
# Names that already stand for someone: the shared token and callers without one.
RESERVED_NAMES: Final = frozenset({"api", "anonymous"})
# How stale the gateway's copy of the issued tokens may get: a revoked token stops working
# within this many seconds.
RELOAD_SECONDS: Final = 1.0
# How often the running gateway asks the archive for revocations: a revoked token's
# streams and waits end, and its schedules are suspended, within about this.
WATCH_SECONDS: Final = 0.25
# The request being checked (`Credentials.serving`): whose credentials, and how many looks at
# the archive had begun when it arrived.
_ARRIVED: ContextVar[tuple[object, int] | None] = ContextVar("agenvoy_arrived", default=None)


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a credential says the caller is."""

    platform: str  # "http" or "terminal"
    sender_id: str
    sender_name: str
    window_hash: str = ""  # the proven terminal window; "" for every other caller

    @property
    def key(self) -> str:
        return f"{self.platform}:{self.sender_id}"


ANONYMOUS: Final = Identity("http", "anonymous", "anonymous")
SHARED: Final = Identity("http", "api", "api")


class TokenRefused(ValueError):
    """A name or display name `agenvoy token add` will not issue."""


# -- the local credential ----------------------------------------------------------------------


def ensure_terminal_credential(store_dir: Path) -> str:
    """The local credential, written (mode 0600) the first time; kept across restarts so that
    open windows stay signed in."""
    store_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = store_dir / TERMINAL_FILE
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(LOCAL_PREFIX + secrets.token_hex(32) + "\n")
    os.chmod(path, 0o600)
    credential = read_terminal_credential(store_dir)
    if not credential:
        raise RuntimeError(f"{path} does not hold a local credential; remove it and restart")
    return credential


def read_terminal_credential(store_dir: Path) -> str:
    """The local credential, or "" when there is none this process may read."""
    try:
        text = (store_dir / TERMINAL_FILE).read_text().strip()
    except OSError:
        return ""
    return text if text.startswith(LOCAL_PREFIX) else ""


def is_local_credential(token: str) -> bool:
    return token.startswith(LOCAL_PREFIX)


def local_token(credential: str, sender: str, window_hash: str = "") -> str:
    """What a local client sends: its user and window, signed with the local credential."""
    name = base64.urlsafe_b64encode(sender.encode()).decode().rstrip("=")
    return f"{_LOCAL_TOKEN}.{window_hash}.{name}.{_sign(credential, window_hash, name)}"


def _sign(credential: str, window_hash: str, name: str) -> str:
    message = f"{_LOCAL_TOKEN}\n{window_hash}\n{name}".encode()
    return hmac.new(credential.encode(), message, hashlib.sha256).hexdigest()


def _read_local_token(credential: str, token: str) -> Identity | None:
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != _LOCAL_TOKEN:
        return None
    _, window_hash, name, mac = parts
    if window_hash and HASH_RE.fullmatch(window_hash) is None:
        return None
    if not hmac.compare_digest(mac.encode(), _sign(credential, window_hash, name).encode()):
        return None
    try:
        sender = base64.urlsafe_b64decode(name + "=" * (-len(name) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    if not _fit_name(sender):
        return None
    return Identity("terminal", sender, sender, window_hash)


def _fit_name(text: str) -> bool:
    return 0 < len(text) <= MAX_DISPLAY_CHARS and text.isprintable()


# -- issued tokens -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IssuedToken:
    name: str
    display: str
    digest: str  # SHA-256 of the token, hex

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "display": self.display, "sha256": self.digest}


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def tokens_path(store_dir: Path) -> Path:
    return store_dir / TOKENS_FILE


def load_tokens(path: Path) -> list[IssuedToken]:
    try:
        data: Any = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    return [
        IssuedToken(str(e["name"]), str(e.get("display") or e["name"]), str(e["sha256"]))
        for e in data.get("tokens", [])
    ]


def new_token(name: str, display: str = "") -> tuple[str, IssuedToken]:
    """A new token for `name` (the sender id it stands for) and what is kept of it: its hash.
    TokenRefused for a name or display name that cannot be issued."""
    if NAME_RE.fullmatch(name) is None:
        raise TokenRefused("a token name is 1-64 characters from A-Z a-z 0-9 _ . -")
    if name in RESERVED_NAMES:
        raise TokenRefused(f"{name!r} is reserved")
    display = display.strip() or name
    if not _fit_name(display):
        raise TokenRefused(f"a display name is 1-{MAX_DISPLAY_CHARS} printable characters")
    token = ISSUED_PREFIX + secrets.token_urlsafe(32)
    return token, IssuedToken(name, display, _digest(token))


class TokenSource(Protocol):
    """Where the issued tokens are kept (gateway/store/tokens.py)."""

    async def stamp(self) -> int:
        """A number that changes whenever a token is issued or revoked."""
        ...

    async def load(self) -> list[IssuedToken]: ...


# -- what the gateway checks -------------------------------------------------------------------


class Credentials:
    """Every credential the gateway accepts, and who each one stands for."""

    def __init__(
        self,
        *,
        shared: str,
        local: str,
        source: TokenSource,
        clock: Clock,
        issued: list[IssuedToken],
        stamp: int,
    ) -> None:
        self._shared = shared
        self._local = local
        self._source = source
        self._clock = clock
        self._issued = {t.digest: t for t in issued}
        self._stamp = stamp
        self._checked = clock.monotonic()
        self._change: asyncio.Future[None] | None = None
        # The look at the archive under way for anonymous callers, and the one that will begin
        # after it, shared by whoever asks meanwhile (`_look_begun_after_now`).
        self._looking: asyncio.Future[None] | None = None
        self._next_look: asyncio.Future[None] | None = None
        # Looks numbered as they begin; the number of the latest one that has ended.
        self._looks_begun = 0
        self._looked = 0

    @classmethod
    async def load(
        cls, *, shared: str, store_dir: Path, source: TokenSource, clock: Clock
    ) -> Credentials:
        """The local credential (written the first time) and the issued tokens as of now."""
        local = await asyncio.to_thread(ensure_terminal_credential, store_dir)
        stamp = await source.stamp()
        issued = await source.load()
        return cls(
            shared=shared, local=local, source=source, clock=clock, issued=issued, stamp=stamp
        )

    @property
    def required(self) -> bool:
        """Whether callers need a token: one is configured or issued (else they may come as
        `http:anonymous`, which only loopback allows), as far as this copy knows."""
        return bool(self._shared or self._issued)

    async def admits_anonymous(self) -> bool:
        """Whether a caller without a token is let in: none is configured or issued. Read
        afresh each time it would say yes, so a token issued a moment ago closes the door
        to the very next anonymous request (once one is required, nothing is read). Within
        a request (`serving`), a look begun after it arrived answers all its checks."""
        if self.required:
            return False
        arrived = _ARRIVED.get()
        if arrived is None or arrived[0] is not self or self._looked <= arrived[1]:
            await asyncio.shield(self._look_begun_after_now())
        return not self.required

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Around one request's checks: the authentication's look at the archive, begun after
        the request arrived, also answers the access check's "is this gateway open?" (each was
        a read of its own, on every anonymous message)."""
        token = _ARRIVED.set((self, self._looks_begun))
        try:
            yield
        finally:
            _ARRIVED.reset(token)

    async def identify(self, token: str) -> Identity | None:
        """Who `token` stands for, or None when it stands for nobody."""
        await self._refresh()
        if self._shared and hmac.compare_digest(token.encode(), self._shared.encode()):
            return SHARED
        if token.startswith(_LOCAL_TOKEN + "."):
            return _read_local_token(self._local, token)
        digest = _digest(token)
        if digest not in self._issued and token.startswith(ISSUED_PREFIX):
            # Issued a moment ago (here or on another instance) and not seen yet: the next look
            # at the archive, shared with whoever else asks meanwhile, finds it.
            await asyncio.shield(self._look_begun_after_now())
        found = self._issued.get(digest)
        return None if found is None else Identity("http", found.name, found.display)

    def fingerprint(self, identity: Identity, token: str) -> str:
        """What a sign-in made with `token` keeps of it (`still_accepts` checks it): the
        token's SHA-256, or for a local token, that of the local credential that signed it."""
        return _digest(self._local if identity.platform == "terminal" else token)

    async def still_accepts(
        self, identity_key: str, fingerprint: str, *, fresh: bool = False
    ) -> bool:
        """Whether the credential `fingerprint` was taken from is still accepted, for
        `identity_key`: False once that token is revoked, even if another is issued under the
        same name since. `fresh` asks the archive now rather than within a second."""
        await self._refresh(at_once=fresh)
        if identity_key == SHARED.key:
            return bool(self._shared) and hmac.compare_digest(fingerprint, _digest(self._shared))
        if identity_key.startswith("terminal:"):
            return hmac.compare_digest(fingerprint, _digest(self._local))
        found = self._issued.get(fingerprint)
        return found is not None and identity_key == f"http:{found.name}"

    def _look_begun_after_now(self) -> asyncio.Future[None]:
        """A look at the archive that begins after this call: a token issued before the call is
        seen. Callers that ask while one is under way share the next one, so a burst of
        anonymous requests, or of unknown tokens (and the two checks of one request), make one
        read a round, not one each."""
        if self._looking is not None and self._looking.get_loop() is not asyncio.get_running_loop():
            self._looking = self._next_look = None  # left by a loop that has ended
        if self._next_look is None:
            self._next_look = asyncio.ensure_future(self._look_after(self._looking))
        return self._next_look

    async def _look_after(self, under_way: asyncio.Future[None] | None) -> None:
        if under_way is not None:
            await asyncio.wait([under_way])  # it began before some of this look's callers
        self._looking, self._next_look = self._next_look, None
        self._looks_begun += 1
        number = self._looks_begun
        await self._refresh(at_once=True)
        self._looked = max(self._looked, number)

    async def _refresh(self, *, at_once: bool = False) -> None:
        now = self._clock.monotonic()
        if now - self._checked < RELOAD_SECONDS and not at_once:
            return
        self._checked = now
        try:
            stamp = await self._source.stamp()
            if stamp == self._stamp:
                return
            issued = await self._source.load()
        except Exception as exc:
            # An archive that does not answer keeps the tokens as last read: callers are
            # neither locked out nor let in on its account; the next look tries again.
            _warn_unread(exc)
            return
        self._issued = {t.digest: t for t in issued}
        self._stamp = stamp
        self._announce_change()

    # -- telling what holds a credential no more --------------------------------------------

    def changed(self) -> asyncio.Future[None]:
        """Done when this copy next sees the issued tokens change: what holds a stream or a
        wait open for a caller checks its credential again then."""
        if self._change is None or self._change.done():
            self._change = asyncio.get_running_loop().create_future()
        return self._change

    def _announce_change(self) -> None:
        if self._change is not None and not self._change.done():
            self._change.set_result(None)
        self._change = None

    def http_identities(self) -> frozenset[str]:
        """The HTTP identities a caller can be now: each issued token's, the shared token's
        when it is set, and `http:anonymous` while no token is needed."""
        keys = {f"http:{t.name}" for t in self._issued.values()}
        if self._shared:
            keys.add(SHARED.key)
        if not self.required:
            keys.add(ANONYMOUS.key)
        return frozenset(keys)

    async def watch(
        self, on_gone: Callable[[frozenset[str]], Awaitable[object]], *, every: float
    ) -> None:
        """Ask the archive for token changes every `every` seconds, for ever; a change is
        announced (`changed`) and the HTTP identities it took away handed to `on_gone`."""
        # Imported here: the client commands import this module, and the logging set-up
        # would bring the settings (pydantic) and structlog into every `agenvoy send`.
        from gateway.logs import get_logger

        log = get_logger(__name__)
        held = self.http_identities()
        while True:
            # Real time, not the gateway's clock: tokens are changed by people, in real time.
            await asyncio.sleep(every)
            await self._refresh(at_once=True)
            now = self.http_identities()
            gone, held = held - now, now
            if gone:
                try:
                    await on_gone(gone)
                except Exception:  # the next change must still be seen
                    log.exception("handling revoked credentials failed", identities=sorted(gone))


def _warn_unread(exc: Exception) -> None:
    from gateway.logs import get_logger  # as in `watch`: not for the client commands

    get_logger(__name__).warning("issued tokens not read", error=f"{type(exc).__name__}: {exc}")
