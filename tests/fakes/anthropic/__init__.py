"""A fake Anthropic Messages API server for tests of the claude agent.

    async with FakeAnthropic() as fake:
        fake.script(Text("hello"), ToolUse([("toolu_1", "read_file", {"name": "a.txt"})]))
        settings = Settings(anthropic_base_url=fake.url, anthropic_api_key=fake.api_key, ...)

It serves ``POST /v1/messages`` on 127.0.0.1: a wrong ``x-api-key`` gets a 401, a missing
``anthropic-version`` header or a request the real API would refuse (``checks``) a 400, not
recorded. Otherwise the request is recorded (``requests``, ``headers``) and answered with the
next scripted reply — streamed as the API's server-sent events when ``stream`` is true, one
JSON message otherwise. With extended thinking on, every answer opens with a signed thinking
block, and the signature is checked when the block comes back. Usage counts words as tokens
and simulates prompt caching from the request's ``cache_control`` breakpoints (``cache``):
``cache_uses`` keeps what each request read and wrote, ``output_counts`` the output tokens of
each answer. ``refuse`` answers every request matching a predicate with an error (the Claude
Code CLI retries a refused request several times; a script entry would run out).

The Claude Code CLI (``ANTHROPIC_BASE_URL``) is served too: it posts to ``/v1/messages?beta=true``
with its ``anthropic-beta`` header, and a first request holding a ``system`` role message is
refused here (400) and sent again without one, as the CLI does on its own.

Not simulated: images, documents, server tools, the batch and token-counting endpoints,
cache expiry, ``stop_sequences``, ``tool_choice`` and non-streamed thinking redaction.

Modules: ``replies`` (script entries), ``checks`` (400s), ``cache`` (prompt caching),
``answers`` (error bodies and the event stream) and ``server`` (``FakeAnthropic``).
"""

from .replies import Cut, Error, Reply, Slow, StreamError, Text, ToolUse
from .server import MESSAGES_ROUTE, NO_SCRIPTED_REPLY, FakeAnthropic

__all__ = [
    "MESSAGES_ROUTE",
    "NO_SCRIPTED_REPLY",
    "Cut",
    "Error",
    "FakeAnthropic",
    "Reply",
    "Slow",
    "StreamError",
    "Text",
    "ToolUse",
]
