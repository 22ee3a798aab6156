"""A TCP relay between a client and a real server that a test can freeze: every connection stays
open but no byte passes, as with a database host that stopped answering without closing
anything (a hung server, a network partition). Thawed, the bytes held back flow again. Or cut:
every connection ends and new ones are refused, as with a host that went down, until it is
restored on the same port."""

from __future__ import annotations

import asyncio
import contextlib


class Relay:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> Relay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._end_pipes()
        await self._server.wait_closed()

    async def restore(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _end_pipes(self) -> None:
        for pipe in list(self._pipes):
            pipe.cancel()
        for pipe in list(self._pipes):
            with contextlib.suppress(asyncio.CancelledError):
                await pipe
        for writer in self._writers:
            writer.close()
        self._writers.clear()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers += [writer, up_writer]
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            pipe = asyncio.create_task(self._pipe(source, sink))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._end_pipes()
        if self._server is not None:
            await self._server.wait_closed()
