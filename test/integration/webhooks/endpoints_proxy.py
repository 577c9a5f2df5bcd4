"""A Service for tests where no Service network exists: a TCP load balancer on loopback that
sends each new connection to one of its backends whose readiness probe passes, polled as the
endpoints controller and kube-proxy would (``poll`` seconds apart), so a pod that stops being
ready stops getting new connections a little later, as on a real cluster."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import aiohttp


class EndpointsProxy:
    """Forwards 127.0.0.1:`port` to the ready ones of `backends` (``(serving_port,
    probe_port)``, changed by the test at will), round-robin."""

    def __init__(self, poll: float = 0.3) -> None:
        self.backends: list[tuple[int, int]] = []
        self.ready: list[int] = []
        self._poll = poll
        self._turn = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> EndpointsProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        self._spawn(self._probe_forever())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, work: object) -> None:
        task = asyncio.ensure_future(work)  # type: ignore[call-overload]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _probe_forever(self) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as session:
            while True:
                ready = []
                for serving, probe in list(self.backends):
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                        async with session.get(f"http://127.0.0.1:{probe}/readyz") as answer:
                            if answer.status == 200:
                                ready.append(serving)
                self.ready = ready
                await asyncio.sleep(self._poll)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ready = list(self.ready)
        if not ready:
            writer.close()
            return
        port = ready[next(self._turn) % len(ready)]
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()  # what a client of a Service sees when its pod is gone
            return
        self._spawn(_pipe(reader, up_writer))
        self._spawn(_pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(64 * 1024):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()
