"""What every fake platform server shares: an aiohttp app on a free port of 127.0.0.1."""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Self

from aiohttp import web


@dataclass
class Upload:
    """A file the bot sent in a multipart request."""

    field: str
    filename: str | None
    content_type: str | None
    data: bytes


class LocalServer:
    """Serves an app on 127.0.0.1 with a port the OS picks; usable as `async with`."""

    _runner: web.AppRunner | None = None
    _port: int | None = None

    async def start(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    async def _serve(self, app: web.Application) -> None:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])

    async def _unserve(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

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
