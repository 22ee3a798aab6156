"""What every fake platform server shares: an aiohttp app on a free port of 127.0.0.1 that
records each call the bot makes, lets a test wait for one, and can answer the next calls with
a queued failure.

Waits never poll: recording a call, answering it and any other change a test may wait for
notify one ``asyncio.Condition``. Every wait has a deadline (:data:`DEFAULT_TIMEOUT` unless
given, stretched in parallel test workers: ``tests/patience.py``) and fails with an
``AssertionError`` that lists what was recorded, so a missing call shows up as a readable
failure instead of a hung test.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from aiohttp import web
from patience import patient

JSON = dict[str, Any]
BodyPredicate = Callable[[JSON], bool]

DEFAULT_TIMEOUT = 5.0


@dataclass
class Upload:
    """A file the bot sent in a multipart request."""

    field: str
    filename: str | None
    content_type: str | None
    data: bytes


@dataclass
class CallRecord:
    """One request the bot made.

    ``route`` is what waits and failures match it by. ``status`` stays None until the call
    has been answered; a call whose connection was dropped on purpose has ``dropped`` set
    instead. ``response`` is the JSON answer, error bodies included, for fakes that keep it.
    ``time`` is the ``time.monotonic()`` of arrival, so tests can check how long a client
    backed off.
    """

    route: str
    body: JSON | None
    status: int | None = field(default=None, kw_only=True)
    response: Any = field(default=None, kw_only=True)
    dropped: bool = field(default=False, kw_only=True)
    time: float = field(default_factory=time.monotonic, kw_only=True)

    @property
    def data(self) -> JSON:
        """The body, ``{}`` for a request that had none."""
        return self.body if self.body is not None else {}

    @property
    def answered(self) -> bool:
        return self.status is not None or self.dropped

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def outcome(self) -> str:
        return "dropped" if self.dropped else str(self.status or "pending")

    def summary(self) -> str:
        """How the call shows up in a failed wait's message."""
        return f"{self.route}->{self.outcome}"


R = TypeVar("R", bound=CallRecord)


@dataclass
class _Failure(Generic[R]):
    matches: Callable[[R], bool]
    error: Exception | None  # None: drop the connection instead of answering
    remaining: int


class DropConnection(Exception):
    """Raised by a request handler to close the connection without answering."""


def drop_connection(request: web.Request) -> web.Response:
    """Cut the client off, the way a crashed server or a proxy timeout looks to it."""
    assert request.transport is not None
    request.transport.abort()
    # aiohttp still wants a response; writing it to the aborted transport fails quietly.
    return web.Response()


class LocalServer:
    """Serves an app on 127.0.0.1 with a port the OS picks; usable as `async with`.

    Tasks started with :meth:`_spawn` are cancelled when the server stops.
    """

    _runner: web.AppRunner | None = None
    _port: int | None = None
    # A port chosen before start (0: the OS picks one), for a client configured with the
    # address before the fake is up: a platform that answers only after the gateway started.
    listen_port: int = 0

    def __init__(self) -> None:
        self._background: set[asyncio.Task[Any]] = set()

    def _app(self) -> web.Application:
        raise NotImplementedError

    async def _started(self) -> None:
        """Runs once the port is open."""

    async def _stopping(self) -> None:
        """Runs before background tasks are cancelled and the port is closed."""

    async def start(self) -> None:
        """Start listening on a free port of 127.0.0.1."""
        if self._runner is not None:
            return
        # A fake owes nothing to a request still being answered at the end of a test.
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.05)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.listen_port)
        await site.start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        await self._started()

    async def stop(self) -> None:
        """Stop the server; answers still in progress are cut off."""
        if self._runner is None:
            return
        await self._stopping()
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        runner, self._runner = self._runner, None
        await runner.cleanup()

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``; only valid after :meth:`start`."""
        return f"http://127.0.0.1:{self.port}"

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class RecordingServer(LocalServer, Generic[R]):
    """A local server that keeps every call in ``call_log`` and queues failures.

    A fake answers a request through :meth:`_answer` and, where the real service would start
    handling it, calls :meth:`_fail_if_queued`. It decides how a route string matches a
    record by overriding :meth:`_route_matches`.
    """

    # Routes a client calls so often (long polls) that listing them would bury the rest.
    _unlisted_routes: frozenset[str] = frozenset()

    def __init__(self) -> None:
        super().__init__()
        self.call_log: list[R] = []
        self._handed_out: set[int] = set()
        self._failures: list[_Failure[R]] = []
        self._cond = asyncio.Condition()
        # Called with each call's record once it is answered (status set, or dropped), before
        # the answer goes out: for a caller that needs the moment of every call without a
        # wait that scans the whole log, such as a benchmark timing thousands of them.
        self.on_answered: Callable[[R], None] | None = None

    # -- test side -----------------------------------------------------------------------------

    def calls_to(self, route: str) -> list[JSON | None]:
        """Bodies of every recorded call matching ``route``, in order."""
        return [r.body for r in self.call_log if self._route_matches(route, r)]

    async def wait_for_call(
        self,
        route: str,
        predicate: BodyPredicate = lambda body: True,
        timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - a per-call deadline reads best in tests
        *,
        ok: bool | None = True,
    ) -> JSON:
        """Wait until a call matching ``route`` and ``predicate`` has been answered.

        Returns the request body (``{}`` when there was none). By the time it returns the
        fake's state reflects the call, though the bot may still be handling the answer.
        ``ok=True`` matches only successful answers, ``ok=False`` only errors and dropped
        connections, ``None`` either. Calls made before the wait count too, but each call is
        handed out once: waiting twice gives the first matching call and then the second.
        """
        record = await self.wait_for_record(route, predicate, timeout, ok=ok)
        return record.data

    async def wait_for_record(
        self,
        route: str,
        predicate: BodyPredicate = lambda body: True,
        timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109
        *,
        ok: bool | None = True,
    ) -> R:
        """Like :meth:`wait_for_call` but returns the whole record (status, response)."""

        def matches(record: R) -> bool:
            return (
                record.answered
                and (ok is None or record.ok == ok)
                and self._route_matches(route, record)
                and predicate(record.data)
            )

        return await self._wait_for(matches, timeout, f"matching {route} call (ok={ok})")

    def drop_next(self, route: str, *, times: int = 1, when: BodyPredicate | None = None) -> None:
        """Close the connection of the next ``times`` calls matching ``route`` unanswered.

        ``when`` limits this to calls whose body it accepts. Queued failures (this and the
        fake's ``fail_next``) apply in the order they were queued.
        """
        self._queue_failure(route, None, times=times, when=when)

    # -- for the fakes -------------------------------------------------------------------------

    def _route_matches(self, route: str, record: R) -> bool:
        return route == record.route

    def _queue_failure(
        self, route: str, error: Exception | None, *, times: int, when: BodyPredicate | None
    ) -> None:
        if times < 1:
            raise ValueError("a failure applies to at least one call")

        def matches(record: R) -> bool:
            return self._route_matches(route, record) and (when is None or when(record.data))

        self._failures.append(_Failure(matches, error, times))

    def _fail_if_queued(self, record: R) -> None:
        """Raise the first queued failure that applies to ``record``, using it up once."""
        for failure in self._failures:
            if failure.matches(record):
                failure.remaining -= 1
                if not failure.remaining:
                    self._failures.remove(failure)
                raise failure.error if failure.error is not None else DropConnection

    async def _answer(
        self,
        request: web.Request,
        record: R,
        respond: Callable[[R], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """Record the call, answer it with ``respond`` and record how it was answered.

        Waiters see the call twice: when it arrives and once it has its status. A
        :class:`DropConnection` out of ``respond`` closes the connection; any other exception
        is a bug in the fake, recorded as the 500 aiohttp answers after logging it.
        """
        async with self._cond:
            self.call_log.append(record)
            self._cond.notify_all()
        try:
            response = await respond(record)
        except DropConnection:
            record.dropped = True
            return drop_connection(request)
        except Exception:
            record.status = 500
            raise
        else:
            record.status = response.status
            return response
        finally:
            if self.on_answered is not None and record.answered:
                self.on_answered(record)
            await self._notify()

    async def _wait_for(self, matches: Callable[[R], bool], timeout: float, what: str) -> R:  # noqa: ASYNC109
        """Wait for a recorded call that ``matches`` and was not handed out; hand it out."""
        found: list[int] = []

        def ready() -> bool:
            for index, record in enumerate(self.call_log):
                if index not in self._handed_out and matches(record):
                    found.append(index)
                    return True
            return False

        timeout = patient(timeout)
        try:
            async with asyncio.timeout(timeout), self._cond:
                await self._cond.wait_for(ready)
        except TimeoutError:
            seen = [r.summary() for r in self.call_log if r.route not in self._unlisted_routes]
            raise AssertionError(
                f"no {what} within {timeout}s; {len(self._handed_out)} of "
                f"{len(self.call_log)} recorded calls already handed out; calls seen: {seen}"
            ) from None
        self._handed_out.add(found[0])
        return self.call_log[found[0]]

    async def _wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:  # noqa: ASYNC109
        timeout = patient(timeout)
        try:
            async with asyncio.timeout(timeout), self._cond:
                await self._cond.wait_for(ready)
        except TimeoutError:
            raise AssertionError(f"no {what} within {timeout}s") from None

    def _forget_calls(self) -> None:
        self.call_log.clear()
        self._handed_out.clear()

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    def _wake(self) -> None:
        """Notify waiters from synchronous code (the condition needs its lock held)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop running: nobody can be waiting
        self._spawn(self._notify())
