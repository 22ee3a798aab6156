"""The platform front-ends that follow live connections (gateway/connections.py): each platform
runs with the token it should have now, and is started, restarted with a new token, or stopped
when that changes, on every instance, without a restart of the gateway.

Composition-level, beside gateway/app.py: it is the one place besides it that knows which
module serves a platform. A change made on this instance is applied at once; one made
elsewhere (another instance, `agenvoy connection`) at the next check.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
from dataclasses import dataclass
from typing import Final

from gateway.adapter import Adapter
from gateway.connections import PLATFORMS, Connections, Wanted, live
from gateway.logs import get_logger, hide_also, redact
from gateway.runtime import Runtime

log = get_logger(__name__)

MODULES: Final = {"telegram": "adapters.telegram", "discord": "adapters.discord"}


@dataclass
class _Running:
    token: str
    adapter: Adapter


class PlatformSupervisor:
    def __init__(self, runtime: Runtime, connections: Connections) -> None:
        self.runtime = runtime
        self.connections = connections
        self.running: dict[str, _Running] = {}
        # The token each platform last failed to start with: not tried again every check,
        # only once its connection changes.
        self.refused: dict[str, str] = {}
        self._applying = asyncio.Lock()
        self._soon: set[asyncio.Task[None]] = set()
        connections.on_change.append(self.apply_soon)

    def platforms(self) -> list[str]:
        """The platforms this supervisor runs: a webhook Telegram is started with the HTTP
        server's routes instead (gateway/app.py)."""
        return [p for p in PLATFORMS if live(self.runtime.settings, p)]

    async def apply(self) -> None:
        """Bring every platform in line with its connection now; one pass at a time."""
        async with self._applying:
            wanted = await self.connections.wanted()
            for platform in self.platforms():
                await self._apply(wanted[platform])

    def apply_soon(self) -> None:
        task = asyncio.get_running_loop().create_task(self._apply_logged())
        self._soon.add(task)
        task.add_done_callback(self._soon.discard)

    async def _apply_logged(self) -> None:
        try:
            await self.apply()
        except Exception as exc:  # the next check tries again
            log.warning("platform connections not applied", error=repr(exc))

    async def _apply(self, wanted: Wanted) -> None:
        platform, token = wanted.platform, wanted.token
        current = self.running.get(platform)
        if current is not None and current.token == token:
            return
        if current is None and token is not None and self.refused.get(platform) == token:
            return
        states = self.connections.states
        if current is not None:
            log.info("platform disconnecting", platform=platform, now=wanted.source)
            del self.running[platform]
            await current.adapter.stop()
            self.runtime.platforms.forget(platform)
        self.refused.pop(platform, None)
        if token is None:
            states[platform] = wanted.problem or "not connected"
            return
        hide_also(token)  # the Bot API puts it in every URL, which the libraries log
        module = importlib.import_module(MODULES[platform])
        adapter: Adapter = module.create(self.runtime, token=token)
        try:
            await adapter.start()
        except Exception as exc:  # a token the platform refuses: said, and tried again on change
            # Some refusals quote the token: a page shows it masked, as the log does.
            said = redact(str(exc))
            log.error("platform cannot start", platform=platform, error=said)
            states[platform] = f"cannot start: {said}"
            self.refused[platform] = token
            with contextlib.suppress(Exception):
                await adapter.stop()
            return
        self.running[platform] = _Running(token, adapter)
        states[platform] = "connected"
        log.info("platform connected", platform=platform, token=wanted.source)

    async def stop(self) -> None:
        for task in list(self._soon):
            task.cancel()
        async with self._applying:
            for platform in list(self.running):
                await self.running.pop(platform).adapter.stop()
