"""``FakeAnthropic``: the Messages API server that answers from the test's script."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from aiohttp import web

from ..base import DEFAULT_TIMEOUT, JSON, BodyPredicate, CallRecord, RecordingServer
from .answers import content, cut, error_response, message, output_tokens, stop_reason, stream
from .answers import stream_error as stream_error_answer
from .cache import CacheUse, PromptCache
from .checks import Invalid, check_request
from .replies import Cut, Error, Reply, Slow, StreamError, Text

MESSAGES_ROUTE = "POST /v1/messages"
DEFAULT_API_KEY = "sk-ant-test-fake"
NO_SCRIPTED_REPLY = "(no scripted reply)"


@dataclass(frozen=True)
class Refusal:
    """Every request ``when`` accepts is answered with ``error``, not taken from the script."""

    when: BodyPredicate
    error: Error


class FakeAnthropic(RecordingServer[CallRecord]):
    """A ``/v1/messages`` server answering from a script, with prompt caching."""

    def __init__(
        self,
        api_key: str = DEFAULT_API_KEY,
        *,
        aliases: Mapping[str, str] | None = None,
        min_cache_tokens: int = 0,
    ) -> None:
        super().__init__()
        self.api_key = api_key
        # A requested name answered as another (an alias resolving to a dated model id).
        self.aliases = dict(aliases or {})
        self.cache = PromptCache(min_cache_tokens)
        # The cache use computed for each request that got an answer, in arrival order.
        self.cache_uses: list[CacheUse] = []
        self.headers: list[dict[str, str]] = []  # headers of each recorded request
        # Output tokens of each answer, in answer order (what a client's totals should add to).
        self.output_counts: list[int] = []
        self._script: deque[Reply] = deque()
        self._refusals: list[Refusal] = []
        self._ids = itertools.count(1)

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/messages", self._handle)
        return app

    # -- test-side control ---------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one, in arrival order."""
        self._script.extend(replies)

    def refuse(self, when: BodyPredicate, error: Error) -> None:
        """Answer every request ``when`` accepts with ``error`` from now on, however often a
        client retries (the script is left alone); e.g. a conversation the API rejects."""
        self._refusals.append(Refusal(when, error))

    @property
    def pending(self) -> int:
        return len(self._script)

    @property
    def requests(self) -> list[JSON]:
        """Every authorised, well-formed request body, in arrival order."""
        return [record.data for record in self.call_log]

    async def wait_for_request(
        self,
        predicate: BodyPredicate = lambda body: True,
        timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - a per-call deadline reads best in tests
    ) -> JSON:
        """Wait for a recorded request matching ``predicate`` (each handed out once)."""
        record = await self._wait_for(
            lambda record: predicate(record.data), timeout, "matching messages request"
        )
        return record.data

    # -- request handling ----------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("x-api-key", "") != self.api_key:
            return error_response(401, "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return error_response(400, "anthropic-version: header is required")
        try:
            body = await request.json()
        except ValueError:
            return error_response(400, "There was an issue with the JSON body of the request.")
        if not isinstance(body, dict):
            return error_response(400, "The request body must be a JSON object.")
        try:
            check_request(body)
        except Invalid as exc:
            return error_response(400, str(exc))
        self.headers.append(dict(request.headers))
        return await self._answer(
            request, CallRecord(MESSAGES_ROUTE, body), lambda record: self._reply(request, record)
        )

    async def _reply(self, request: web.Request, record: CallRecord) -> web.StreamResponse:
        self._fail_if_queued(record)
        body = record.data
        refused = next((r.error for r in self._refusals if r.when(body)), None)
        reply: Reply
        if refused is not None:
            reply = refused
        else:
            reply = self._script.popleft() if self._script else Text(NO_SCRIPTED_REPLY)
        while isinstance(reply, Slow):
            await asyncio.sleep(reply.seconds)
            reply = reply.reply
        if isinstance(reply, Error):
            return error_response(reply.status, reply.message, reply.type, reply.retry_after)
        requested = str(body["model"])
        model = self.aliases.get(requested, requested)
        message_id = f"msg_fake_{next(self._ids):04d}"
        use = self.cache.use(body)
        self.cache_uses.append(use)
        start = message(message_id, model, {**use.usage(), "output_tokens": 1})
        if isinstance(reply, Cut):
            await cut(request, reply, start)
        if isinstance(reply, StreamError):
            return await stream_error_answer(request, reply, start)
        blocks = content(body, reply)
        self.output_counts.append(output_tokens(blocks))
        if body.get("stream") is True:
            return await stream(request, reply, blocks, start)
        whole = message(
            message_id, model, {**use.usage(), "output_tokens": output_tokens(blocks)}, blocks
        )
        return web.json_response({**whole, "stop_reason": stop_reason(reply)})
