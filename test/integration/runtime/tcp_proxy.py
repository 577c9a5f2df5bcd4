"""A TCP proxy for tests that can stop forwarding without closing anything: what a half-open
connection (a NAT or load balancer that lost its state) looks like to both ends."""

import asyncio
import contextlib


class FreezableProxy:
    """Forwards 127.0.0.1:`port` to ``upstream``; `freeze` stops every connection open now
    from forwarding another byte (new connections forward normally)."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._frozen: list[asyncio.Event] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.port = 0
        self.connections = 0

    async def __aenter__(self) -> "FreezableProxy":
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    def freeze(self) -> None:
        """Stop forwarding on every connection open now."""
        for frozen in self._frozen:
            frozen.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        self._writers += [writer, up_writer]
        frozen = asyncio.Event()
        self._frozen.append(frozen)
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink, frozen))
            self._tasks.add(task)

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, frozen: asyncio.Event
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while not frozen.is_set():
                data = await source.read(65536)
                if not data or frozen.is_set():
                    break
                sink.write(data)
                await sink.drain()
            if not frozen.is_set():
                sink.close()
                return
            await asyncio.Event().wait()  # frozen: hold the sockets open, forward nothing
