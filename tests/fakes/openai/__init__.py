"""A fake OpenAI-compatible chat-completions server for tests of the agent's model client.

Point a client at it with::

    async with FakeOpenAI() as fake:
        fake.script(Text("hello"), ToolCalls([("call_1", "read_file", {"name": "a.txt"})]))
        client = SomeClient(base_url=fake.url, api_key=fake.api_key)

The server listens on 127.0.0.1 on a free port and serves ``POST /v1/chat/completions``
, ``POST /v1/embeddings`` (``embedding_of(text)``, a hashed bag of words, for the models in
``embedding_models``; ``fail_embeddings`` queues errors) and
``POST /v1/audio/transcriptions`` (multipart; answers ``transcript_of(data)`` or what
``script_transcripts`` queued; uploads are kept in ``transcriptions``).
Replies come from a script the test queues with :meth:`FakeOpenAI.script`, one reply per
request, in arrival order; once the script runs out every request gets
``Text("(no scripted reply)")``. Both the plain JSON answer and the ``stream: true``
server-sent-events answer are produced, including ``stream_options.include_usage``.

Every authorised request body is kept in ``requests``; :meth:`FakeOpenAI.wait_for_request`
waits for one. Requests with a wrong or missing key get a 401 and are not recorded.
``drop_next(CHAT_ROUTE)`` closes the connection of the next request before the script is
consulted.

Not simulated: models other than echoing the requested name, ``n > 1``, logprobs, looking at images,
the Responses API and real tokenisation (tokens are counted as whitespace-separated words).

Modules: ``replies`` (the script entries), ``answers`` (error bodies, messages, usage, the
event stream) and ``server`` (``FakeOpenAI``).
"""

from .replies import Cut, Error, Malformed, Reply, Slow, Text, ToolCalls
from .server import (
    CHAT_ROUTE,
    DEFAULT_EMBEDDING_MODEL,
    NO_SCRIPTED_REPLY,
    FakeOpenAI,
    embedding_of,
    transcript_of,
)

__all__ = [
    "CHAT_ROUTE",
    "DEFAULT_EMBEDDING_MODEL",
    "NO_SCRIPTED_REPLY",
    "Cut",
    "Error",
    "FakeOpenAI",
    "Malformed",
    "Reply",
    "Slow",
    "Text",
    "ToolCalls",
    "embedding_of",
    "transcript_of",
]
