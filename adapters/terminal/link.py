"""The chat window's connection to the gateway.

One HTTP client speaks for the window (its sender and its hash); the shown session's event
stream is kept up across gateway restarts; a message goes out only once that stream is live, so
no event of its task can slip by; and the prompts the gateway holds for this window are found
again after a switch, a restart, or a window that closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from adapters.http_client import (
    GatewayClient,
    GatewayError,
    GatewayRestarting,
    GatewayUnavailable,
)
from adapters.terminal.outcome import waiting_behind
from adapters.terminal.widgets import OpenPrompt, describe_confirm
from gateway.clock import Clock
from gateway.events import Event

STREAM_RETRY_SECONDS = 1.0
LIVE_TIMEOUT_SECONDS = 10.0


class Listener(Protocol):
    """What the window does with what comes over the link."""

    @property
    def session_id(self) -> str:
        """The session shown; the stream of another one ends."""
        ...

    async def show_event(self, event: Event) -> None: ...

    async def stream_refused(self, error: GatewayError) -> None:
        """The gateway will not stream the session (it is not retried)."""
        ...

    def connection_lost(self, why: str) -> None:
        """The stream broke (`why` says how); the link is reconnecting."""
        ...

    def connection_back(self) -> None: ...


class GatewayLink:
    def __init__(self, base_url: str, token: str, sender: str, clock: Clock) -> None:
        self._base_url, self._token, self._sender = base_url, token, sender
        self._clock = clock
        self._client: GatewayClient | None = None
        self.window_hash = ""
        # Set while the shown session's stream is subscribed.
        self.live = asyncio.Event()
        self._lost = False

    @property
    def client(self) -> GatewayClient:
        assert self._client is not None, "the link opens when the window mounts"
        return self._client

    async def open(self, window_hash: str) -> None:
        self.window_hash = window_hash
        # With the local credential the window signs its hash, which then alone answers the
        # prompts of the tasks it starts.
        self._client = GatewayClient(
            self._base_url, self._token, self._sender, window_hash=window_hash
        )
        await self._client.__aenter__()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.__aexit__(None, None, None)

    async def follow(self, session_id: str, listener: Listener) -> None:
        """The session's events to `listener` for as long as it shows the session; reconnects
        when the gateway blinks."""
        while session_id == listener.session_id:
            why = "lost the gateway"
            try:
                async for event in self.client.events(
                    session_id, on_live=lambda: self._on_live(listener)
                ):
                    await listener.show_event(event)
            except GatewayRestarting:
                why = "the gateway is restarting"
            except GatewayUnavailable:
                pass
            except GatewayError as exc:
                await listener.stream_refused(exc)
                return
            if not self._lost:
                self._lost = True
                listener.connection_lost(why)
            self.live.clear()
            await self._clock.sleep(STREAM_RETRY_SECONDS)

    def _on_live(self, listener: Listener) -> None:
        self.live.set()
        if self._lost:
            self._lost = False
            listener.connection_back()

    async def wait_live(self) -> None:
        """Until the shown session's stream is live; `GatewayUnavailable` if it does not
        come up in time."""
        try:
            await self._clock.wait_for(self.live.wait(), LIVE_TIMEOUT_SECONDS)
        except TimeoutError:
            raise GatewayUnavailable("not connected to the gateway") from None

    async def submit(
        self, session_id: str, text: str, attachments: Sequence[dict[str, str]] = ()
    ) -> dict[str, Any]:
        """Hand `text` to the session once its stream is live (its task's events follow there)."""
        try:
            await self.wait_live()
        except GatewayUnavailable:
            raise GatewayUnavailable(
                "not connected to the gateway; the message was not sent (Up brings it back)"
            ) from None
        return await self.client.submit(session_id, text, attachments)

    async def earlier(self, session_id: str, limit: int) -> list[dict[str, Any]]:
        """The session's latest messages, read once its stream is live: a message stored
        meanwhile then shows live or among these, never nowhere."""
        await self.wait_live()
        return await self.client.history(session_id, limit)

    async def waiting_behind(self, session_id: str, task_hash: str) -> str | None:
        """How to answer the prompt a queued task waits behind, if it waits behind one."""
        behind = waiting_behind(await self.client.pending(session_id), task_hash)
        return behind[1] if behind is not None else None

    async def open_prompts(self, session_id: str) -> list[OpenPrompt]:
        """The prompts of this window waiting in `session_id`, to be asked (again)."""
        found = []
        for prompt in await self.client.pending(session_id):
            if prompt.get("origin", {}).get("window_hash") != self.window_hash:
                continue
            task_hash = str(prompt["task_hash"])
            if prompt.get("kind") == "confirm":
                text = describe_confirm(str(prompt.get("tool", "")), prompt.get("args") or {})
                found.append(OpenPrompt(task_hash, "confirm", text))
            else:
                options = tuple(str(o) for o in prompt.get("options") or ())
                question = str(prompt.get("question", ""))
                found.append(OpenPrompt(task_hash, "ask_user", question, options))
        return found

    async def waiting_elsewhere(self, session_id: str) -> list[str]:
        """Sessions other than `session_id` where a prompt of this window's hash waits."""
        found = []
        for prompt in await self.client.pending():
            sid = str(prompt.get("session_id", ""))
            if prompt["origin"].get("window_hash") == self.window_hash and sid != session_id:
                found.append(sid)
        return found
