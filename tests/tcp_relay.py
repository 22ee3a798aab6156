"""A TCP relay between a client and a real server that a test can freeze: every connection stays
open but no byte passes, as with a database host that stopped answering without closing
anything (a hung server, a network partition). Thawed, the bytes held back flow again. Or cut:
every connection ends and new ones are refused, as with a host that went down, until it is
restored on the same port. Or cut right after a COMMIT landed (`cut_after_commit`): the server
committed, and the client never hears so."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass


@dataclass
class _Link:
    """What the relay has seen of one connection's current transaction."""

    marked: bool = False  # a statement carried the marker since the last BEGIN
    committing: bool = False  # and its COMMIT went to the server


class Relay:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._marker: bytes | None = None
        self._tripped = asyncio.Event()
        self._tripping: asyncio.Task[None] | None = None

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

    def cut_after_commit(self, marker: bytes) -> asyncio.Event:
        """Arm the relay: the first transaction that sends `marker` (text of one of its
        statements) has its COMMIT reach the server, whose answer is then held back while every
        connection is cut. The event is set once it is cut; `restore` opens it again."""
        self._marker = marker
        self._tripped.clear()
        return self._tripped

    async def _trip(self) -> None:
        await self.cut()
        self._tripped.set()

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
        link = _Link()
        for source, sink, up in ((reader, up_writer, True), (up_reader, writer, False)):
            pipe = asyncio.create_task(self._pipe(source, sink, link, up=up))
            self._pipes.add(pipe)
            pipe.add_done_callback(self._pipes.discard)

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, link: _Link, *, up: bool
    ) -> None:
        try:
            while data := await source.read(65536):
                await self._flowing.wait()
                if up and self._marker is not None:
                    # Seen before the bytes go on: the server cannot answer them sooner.
                    if b"BEGIN" in data:
                        link.marked = False
                    if self._marker in data:
                        link.marked = True
                    if link.marked and b"COMMIT" in data:
                        link.committing = True
                elif not up and link.committing:
                    # The server's answer to that COMMIT: it committed; the client never knows.
                    self._marker, link.committing = None, False
                    self._tripping = asyncio.create_task(self._trip())
                    return
                sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            sink.close()

    async def close(self) -> None:
        if self._tripping is not None:
            await self._tripping
        if self._server is not None:
            self._server.close()
        await self._end_pipes()
        if self._server is not None:
            await self._server.wait_closed()
