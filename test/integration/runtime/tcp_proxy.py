"""A TCP proxy for tests that can stop forwarding without closing anything: what a half-open
connection (a NAT or load balancer that lost its state) looks like to both ends; or that holds
what clients send for as long as a test likes: a slow request."""

import asyncio
import contextlib
from pathlib import Path
from urllib.parse import urlsplit

import yaml


def upstream_of(kubeconfig: Path) -> tuple[str, int]:
    """The host and port of ``kubeconfig``'s (first) server."""
    config = yaml.safe_load(kubeconfig.read_text())
    server = urlsplit(config["clusters"][0]["cluster"]["server"])
    assert server.hostname is not None
    assert server.port is not None
    return server.hostname, server.port


def through(kubeconfig: Path, port: int, path: Path) -> Path:
    """A copy of ``kubeconfig`` whose server is 127.0.0.1:``port``."""
    config = yaml.safe_load(kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path.write_text(yaml.safe_dump(config))
    return path


class FreezableProxy:
    """Forwards 127.0.0.1:`port` to ``upstream``; `freeze` stops every connection open now
    from forwarding another byte (new connections forward normally); `hold` keeps what clients
    send from the upstream until `let_go` (``held`` is set once something waits)."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._flowing = asyncio.Event()  # clear while held: client bytes wait for it
        self._flowing.set()
        self.held = asyncio.Event()
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

    def hold(self) -> None:
        """Forward nothing clients send from now on (connections included) until `let_go`."""
        self.held.clear()
        self._flowing.clear()

    def let_go(self) -> None:
        """Forward what `hold` kept, and all that follows, at once."""
        self._flowing.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        self._writers += [writer, up_writer]
        frozen = asyncio.Event()
        self._frozen.append(frozen)
        for source, sink, upward in ((reader, up_writer, True), (up_reader, writer, False)):
            task = asyncio.create_task(self._pump(source, sink, frozen, upward))
            self._tasks.add(task)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        frozen: asyncio.Event,
        upward: bool,
    ) -> None:
        with contextlib.suppress(ConnectionError):
            while not frozen.is_set():
                data = await source.read(65536)
                if not data or frozen.is_set():
                    break
                if upward and not self._flowing.is_set():
                    self.held.set()
                    await self._flowing.wait()
                sink.write(data)
                await sink.drain()
            if not frozen.is_set():
                sink.close()
                return
            await asyncio.Event().wait()  # frozen: hold the sockets open, forward nothing
