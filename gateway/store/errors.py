"""What the archive raises when it cannot be reached, for front-ends to answer plainly, and a
way to wait it out for a write that must happen whatever the wait."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter

from gateway.logs import get_logger
from gateway.store.space import StorageFull

log = get_logger(__name__)

T = TypeVar("T")


class DatabaseUnavailable(RuntimeError):
    """No working connection to the database: it refused, ended or stopped answering ours.
    Nothing of the work that raised it was committed; the same work may be tried again."""


class OutcomeUnknown(RuntimeError):
    """The connection ended while the work's COMMIT was on its way: the server may have
    committed it or not, and nobody can tell until the database is asked again. Not
    `DatabaseUnavailable`: running the same work again could do it twice."""


async def until_available(
    write: Callable[[], Awaitable[T]],
    *,
    sleep: Callable[[float], Awaitable[None]],
    what: str,
    initial: float = 0.5,
    maximum: float = 30.0,
    until_space: bool = False,
) -> T:
    """`write()`, again with backoff for as long as the database is unavailable: for a record
    that must be made once the database is back (the write must be idempotent). With
    `until_space`, for as long as the storage is full too: a record of something already done
    (a task's end) waits for room rather than being given up. A stop cancels the wait; what
    is left is the restart's, as after a crash."""
    waited: tuple[type[Exception], ...] = (DatabaseUnavailable,)
    if until_space:
        waited += (StorageFull,)
    try:
        return await write()
    except waited:
        pass  # only a write that met an unavailable database builds the retry machinery

    def told(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        why = "storage full" if isinstance(error, StorageFull) else "database unavailable"
        log.warning(f"{what}: {why}, waiting", error=str(error))

    retrying = AsyncRetrying(
        retry=retry_if_exception_type(waited),
        wait=wait_exponential_jitter(multiplier=initial, max=maximum, jitter=initial),
        sleep=sleep,
        before_sleep=told,
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            return await write()
    raise AssertionError("unreachable")  # pragma: no cover
