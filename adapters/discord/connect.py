"""Connecting the Discord adapter: one attempt (log in, open the gateway, wait for READY),
made again (adapters/reconnect.py) while Discord cannot be reached.

Once connected, discord.py keeps the gateway connection itself (it resumes or reconnects
after a drop); what it does not do is try a failed login again, which is what this is for.
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

import discord

from adapters.discord.client import GatewayClient
from gateway.logs import get_logger
from gateway.runtime import Runtime

log = get_logger(__name__)

INTENT_HELP: Final = (
    "Discord refused the MESSAGE CONTENT intent. Enable it in the Developer Portal: "
    "Applications → your bot → Bot → Privileged Gateway Intents → MESSAGE CONTENT INTENT."
)


class Connecting(Protocol):
    """What connecting asks of the adapter."""

    runtime: Runtime
    client: GatewayClient
    ready: asyncio.Event
    token: str

    def new_client(self) -> GatewayClient: ...


def refused(exc: BaseException) -> bool:
    """No retry helps a token Discord refuses or an intent the portal does not grant."""
    return isinstance(exc, (discord.LoginFailure, discord.PrivilegedIntentsRequired))


class IntentRefused(discord.PrivilegedIntentsRequired):
    """The intent refusal, with what to do about it as its message."""

    def __str__(self) -> str:
        return INTENT_HELP


async def connect(adapter: Connecting, ready_timeout: float) -> asyncio.Task[None]:
    """The running client, once READY came (or `ready_timeout` passed with discord.py still
    connecting, which it goes on doing by itself). Raises what stopped the client; the
    adapter then has a new client for the next attempt, as a closed one cannot start again."""
    client = adapter.client
    runner = asyncio.create_task(client.start(adapter.token))
    ready = asyncio.create_task(adapter.ready.wait())
    done, _ = await asyncio.wait(
        {runner, ready}, timeout=ready_timeout, return_when=asyncio.FIRST_COMPLETED
    )
    ready.cancel()
    if runner not in done:
        return runner
    exc = runner.exception()
    await client.close()  # its HTTP session, so none is left open behind the failed attempt
    adapter.client = adapter.new_client()
    if isinstance(exc, discord.PrivilegedIntentsRequired):
        log.error("discord adapter cannot start", reason=INTENT_HELP)
        raise IntentRefused(exc.shard_id) from exc
    raise exc or RuntimeError("the Discord client stopped during start-up")
