"""``FakeOpenAI``: the chat-completions server that answers from the test's script."""

from __future__ import annotations

import asyncio
import itertools
import time
import zlib
from collections import deque

from aiohttp import BodyPartReader, web

from ..base import DEFAULT_TIMEOUT, JSON, BodyPredicate, CallRecord, RecordingServer
from .answers import cut, json_error, message, stream, usage
from .replies import Cut, Error, Malformed, Reply, Slow, Text

CHAT_ROUTE = "POST /v1/chat/completions"
DEFAULT_API_KEY = "sk-test-fake"
DEFAULT_MODEL = "fake-model"
DEFAULT_EMBEDDING_MODEL = "fake-embed"
NO_SCRIPTED_REPLY = "(no scripted reply)"


class FakeOpenAI(RecordingServer[CallRecord]):
    """An OpenAI-compatible ``/v1/chat/completions`` server answering from a script."""

    def __init__(self, api_key: str = DEFAULT_API_KEY) -> None:
        super().__init__()
        self.api_key = api_key
        self._script: deque[Reply] = deque()
        self._ids = itertools.count(1)
        # ``/v1/audio/transcriptions``: each upload as received (model, file name, type,
        # bytes), and the answers queued for the next uploads (text, or an ``Error``).
        self.transcriptions: list[JSON] = []
        self._transcripts: deque[str | Error] = deque()
        # ``/v1/embeddings``: the models it serves, each request body as received, and errors
        # queued for the next requests (then vectors again).
        self.embedding_models = {DEFAULT_EMBEDDING_MODEL}
        self.embedding_requests: list[JSON] = []
        self._embedding_errors: deque[Error] = deque()

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle_chat)
        app.router.add_post("/v1/audio/transcriptions", self._handle_transcription)
        app.router.add_post("/v1/embeddings", self._handle_embeddings)
        app.router.add_get("/v1/models", self._handle_models)
        return app

    @property
    def url(self) -> str:
        """Base URL ``http://127.0.0.1:<port>/v1``; only valid after :meth:`start`."""
        return f"{super().url}/v1"

    # -- test-side control ---------------------------------------------------------------------

    def agent_settings(self, model: str = "fake-model") -> dict[str, str]:
        """The gateway's settings that make its agent the openai one, talking to this server."""
        return {
            "agent": "openai",
            "openai_base_url": self.url,
            "openai_api_key": self.api_key,
            "model": model,
        }

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one, in arrival order."""
        self._script.extend(replies)

    @property
    def pending(self) -> int:
        """How many scripted replies have not been used yet."""
        return len(self._script)

    @property
    def requests(self) -> list[JSON]:
        """Every authorised request body, in arrival order."""
        return [record.data for record in self.call_log]

    def reset(self) -> None:
        """Forget recorded requests and the remaining script."""
        self._forget_calls()
        self._script.clear()

    def last_messages(self) -> list[JSON]:
        """The ``messages`` of the latest recorded request."""
        if not self.call_log:
            raise AssertionError("FakeOpenAI has received no request")
        messages = self.call_log[-1].data.get("messages")
        return list(messages) if isinstance(messages, list) else []

    async def wait_for_request(
        self,
        predicate: BodyPredicate = lambda body: True,
        timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 - a per-call deadline reads best in tests
    ) -> JSON:
        """Wait for a recorded request whose body matches ``predicate`` and return the body.

        Requests received before the wait count too, but each is handed out once: waiting
        twice gives the first and then the second. The request is recorded before it is
        answered, so this also returns while a ``Slow`` reply is still sleeping. Raises
        ``AssertionError`` when nothing matches within ``timeout``.
        """
        record = await self._wait_for(
            lambda record: predicate(record.data), timeout, "matching chat completion request"
        )
        return record.data

    def script_transcripts(self, *answers: str | Error) -> None:
        """Queue transcription answers; without one, an upload is transcribed as
        ``transcript_of(data)``."""
        self._transcripts.extend(answers)

    def fail_embeddings(self, *errors: Error) -> None:
        """Queue error answers for the next ``/v1/embeddings`` requests."""
        self._embedding_errors.extend(errors)

    # -- request handling ----------------------------------------------------------------------

    async def _handle_chat(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization", "") != f"Bearer {self.api_key}":
            return json_error(
                401,
                "Incorrect API key provided",
                type_="invalid_request_error",
                code="invalid_api_key",
            )
        try:
            body = await request.json()
        except ValueError:
            return json_error(400, "We could not parse the JSON body of your request.")
        if not isinstance(body, dict):
            return json_error(400, "The request body must be a JSON object.")
        if not isinstance(body.get("messages"), list):
            return json_error(400, "Missing required parameter: 'messages'.", code=None)
        return await self._answer(
            request, CallRecord(CHAT_ROUTE, body), lambda record: self._reply(request, record)
        )

    async def _reply(self, request: web.Request, record: CallRecord) -> web.StreamResponse:
        self._fail_if_queued(record)
        body = record.data
        reply: Reply = self._script.popleft() if self._script else Text(NO_SCRIPTED_REPLY)
        while isinstance(reply, Slow):
            await asyncio.sleep(reply.seconds)
            reply = reply.reply
        if isinstance(reply, Error):
            return json_error(
                reply.status,
                reply.message,
                type_=reply.type,
                code=reply.code,
                retry_after=reply.retry_after,
            )
        completion_id = f"chatcmpl-fake-{next(self._ids)}"
        model = body.get("model") if isinstance(body.get("model"), str) else DEFAULT_MODEL
        if isinstance(reply, Cut):
            await cut(request, reply, completion_id, str(model), body)
        if body.get("stream") is True:
            return await stream(request, body, reply, completion_id, str(model))
        if isinstance(reply, Malformed):
            return web.Response(status=200, text=reply.line, content_type="application/json")
        answer, finish_reason = message(reply)
        return web.json_response(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": answer,
                        "logprobs": None,
                        "finish_reason": finish_reason,
                    }
                ],
                "usage": usage(body, reply),
            }
        )

    async def _handle_transcription(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization", "") != f"Bearer {self.api_key}":
            return json_error(401, "Incorrect API key provided", code="invalid_api_key")
        if not request.content_type.startswith("multipart/"):
            return json_error(400, "The request must be multipart/form-data.")
        fields: JSON = {}
        async for part in await request.multipart():
            if isinstance(part, BodyPartReader):
                if part.name == "file":
                    data = await part.read()
                    fields.update(filename=part.filename, type=part.headers.get("Content-Type"))
                    fields["file"] = bytes(data)
                else:
                    fields[str(part.name)] = await part.text()
        if "file" not in fields or not fields.get("model"):
            return json_error(400, "Missing required parameters: 'file' and 'model'.")
        self.transcriptions.append(fields)
        answer = self._transcripts.popleft() if self._transcripts else None
        if isinstance(answer, Error):
            return json_error(answer.status, answer.message, type_=answer.type, code=answer.code)
        return web.json_response({"text": answer or transcript_of(fields["file"])})

    async def _handle_models(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/models``: the chat model and the embedding models, as OpenAI lists them."""
        if request.headers.get("Authorization", "") != f"Bearer {self.api_key}":
            return json_error(401, "Incorrect API key provided", code="invalid_api_key")
        names = sorted({DEFAULT_MODEL, *self.embedding_models})
        listed = [{"id": name, "object": "model", "owned_by": "fake"} for name in names]
        return web.json_response({"object": "list", "data": listed})

    async def _handle_embeddings(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization", "") != f"Bearer {self.api_key}":
            return json_error(401, "Incorrect API key provided", code="invalid_api_key")
        try:
            body = await request.json()
        except ValueError:
            return json_error(400, "We could not parse the JSON body of your request.")
        if not isinstance(body, dict):
            return json_error(400, "The request body must be a JSON object.")
        model, given = body.get("model"), body.get("input")
        if model not in self.embedding_models:
            return json_error(404, f"The model `{model}` does not exist.", code="model_not_found")
        texts = [given] if isinstance(given, str) else given
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return json_error(400, "'input' must be a string or a non-empty list of strings.")
        self.embedding_requests.append(body)
        if self._embedding_errors:
            error = self._embedding_errors.popleft()
            return json_error(error.status, error.message, type_=error.type, code=error.code)
        data = [
            {"object": "embedding", "index": i, "embedding": embedding_of(t)}
            for i, t in enumerate(texts)
        ]
        words = sum(len(t.split()) for t in texts)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": model,
                "usage": {"prompt_tokens": words, "total_tokens": words},
            }
        )


EMBEDDING_DIM = 64


def embedding_of(text: str) -> list[float]:
    """What the fake embeds a text as: a hashed bag of its lower-cased words, so texts that
    share words are near and others are not; deterministic in every process."""
    vector = [0.0] * EMBEDDING_DIM
    for word in text.lower().split():
        vector[zlib.crc32(word.strip(".,!?").encode()) % EMBEDDING_DIM] += 1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


def transcript_of(data: bytes) -> str:
    """What the fake hears in an upload nobody scripted: deterministic, and tied to it."""
    return f"spoken words of {len(data)} bytes"
