"""A fake Discord REST API and gateway websocket for tests that drive the real discord.py client.

Point discord.py at it with :func:`point_discord_py_at`::

    async with FakeDiscord() as fake:
        fake.add_guild(1, "Guild", channels=[fake.text_channel(10, "general")])
        with point_discord_py_at(fake):
            client = discord.Client(intents=intents, guild_ready_timeout=0.05)
            task = asyncio.create_task(client.start(fake.token))

The server listens on 127.0.0.1 on a free port. REST lives under ``/api/v10`` and the gateway
websocket under ``/gateway`` (and ``/gateway/``). Tests feed gateway events with the
``inject_*`` helpers and inspect what the bot did through ``calls``, ``sent_messages()``,
``ephemeral_responses``, ``modals`` and ``wait_for_call()``. A route key names an endpoint
as ``"METHOD /template"`` (placeholder names do not matter, e.g.
``"POST /channels/{id}/messages"``) or as a concrete ``"METHOD /channels/10/messages"``.

Not simulated: permissions (inject ``403`` with ``fail_next``), rate-limit buckets (inject
``429`` with ``fail_next``), presences, voice, and endpoints missing from the route tables:
those answer 404 JSON.

One module per concern, each a layer of :class:`FakeDiscord`:

- ``payloads``: builders for users, channels, threads, roles, members, guilds, messages
- ``api``: REST error bodies, exact-content-type JSON responses, the call record
- ``state``: the guilds, channels, users and messages the fake knows
- ``gateway``: the websocket (HELLO, IDENTIFY, RESUME, heartbeats, dispatches)
- ``messages``: building, checking, editing and deleting messages; injecting one
- ``rest``: routing, request bodies, error injection, channel endpoints
- ``interactions``: interaction injection, callbacks, original response, followups
- ``commands``: application command registration and slash command invocations
- ``server``: ``FakeDiscord`` and :func:`point_discord_py_at`
"""

from .api import ApiError, RestCall
from .payloads import member, role, text_channel, thread, user
from .server import FakeDiscord, point_discord_py_at

__all__ = [
    "ApiError",
    "FakeDiscord",
    "RestCall",
    "member",
    "point_discord_py_at",
    "role",
    "text_channel",
    "thread",
    "user",
]
