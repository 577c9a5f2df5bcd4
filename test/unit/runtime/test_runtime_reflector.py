"""The reflector's requests and recovery, against a scripted `gpuctrl.runtime.Client` (a part
gpuctrl owns): the watch query and its client-side timeout, connection errors answered by a
growing backoff on the injected clock and a re-watch without a relist, 410 Gone by a relist.
The same paths run against a real API server in test/integration/runtime."""

import asyncio
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from gpuctrl.runtime import METADATA_ONLY, Client, Gone, Resource
from gpuctrl.runtime._reflector import Reflector
from gpuctrl.testing import FakeClock

CONFIGMAPS = Resource("v1", "ConfigMap", "configmaps")

Step = dict[str, Any] | BaseException
"""One step of a scripted watch: an event to yield, or an error to raise."""


def cm(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


class ScriptedClient(Client):
    """Lists answer one ConfigMap at resourceVersion 10; each watch plays the next script
    (then ends), and once the scripts are used up a watch stays open without events."""

    def __init__(self, api: ApiClient, watches: Iterable[list[Step]]) -> None:
        super().__init__(api)
        self.lists: list[dict[str, Any]] = []
        self.watches: list[tuple[dict[str, Any], aiohttp.ClientTimeout]] = []
        self.accepts: list[str] = []
        self.metadata_only: list[bool] = []
        self._scripts = list(watches)

    async def list_batches(
        self, path: str, query: Mapping[str, str | int | bool], *, accept: str = ""
    ) -> AsyncGenerator[tuple[dict[str, Any], list[dict[str, Any]]], None]:
        self.lists.append(dict(query))
        self.accepts.append(accept)
        yield {"resourceVersion": "10"}, [cm("a", "10")]
        yield {"resourceVersion": "10"}, []

    async def watch(
        self,
        path: str,
        query: Mapping[str, str | int | bool],
        limits: aiohttp.ClientTimeout,
        *,
        metadata_only: bool = False,
    ) -> AsyncGenerator[dict[str, Any], None]:
        self.watches.append((dict(query), limits))
        self.metadata_only.append(metadata_only)
        if not self._scripts:
            await asyncio.Event().wait()  # an open watch with nothing to say
        for step in self._scripts.pop(0):
            if isinstance(step, BaseException):
                raise step
            yield step


class Sink:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def replace_streamed(self, batches: AsyncIterable[Iterable[dict[str, Any]]]) -> None:
        async for items in batches:
            self.seen += [("list", item["metadata"]["resourceVersion"]) for item in items]

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self.seen.append((event_type, obj["metadata"]["resourceVersion"]))


@pytest.fixture
async def api() -> AsyncIterator[ApiClient]:
    async with ApiClient(Configuration()) as api:
        yield api


@asynccontextmanager
async def reflecting(client: ScriptedClient, clock: FakeClock, sink: Sink) -> AsyncIterator[None]:
    """Run a reflector on ``client`` (stepped until it waits) until the block ends."""
    task = asyncio.create_task(Reflector(client, CONFIGMAPS, sink, clock=clock).run())
    try:
        await clock.step()
        yield
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_watch_asks_for_bookmarks_and_a_bounded_timeout(
    api: ApiClient, clock: FakeClock
) -> None:
    client = ScriptedClient(api, [])
    async with reflecting(client, clock, Sink()):
        assert client.lists == [{"resourceVersion": "0"}]
        [(query, limits)] = client.watches
        assert query["allowWatchBookmarks"] is True
        assert query["resourceVersion"] == "10"
        assert 300 <= query["timeoutSeconds"] <= 600
        assert limits.total is not None
        assert query["timeoutSeconds"] < limits.total <= query["timeoutSeconds"] + 60
        assert limits.sock_read is not None  # a dead stream ends ...
        assert 60 < limits.sock_read < 90  # ... a little after a bookmark was due


async def test_watches_the_server_ends_at_once_with_nothing_back_off(
    api: ApiClient, clock: FakeClock
) -> None:
    client = ScriptedClient(api, [[], [], [], []])  # four watches closed at once, empty
    async with reflecting(client, clock, Sink()):
        pauses: list[float] = []
        while (deadline := clock.next_deadline) is not None:
            pauses.append(deadline - clock.now())
            await clock.step(pauses[-1])
    assert len(client.watches) == 5  # not thousands: each empty watch waited first
    assert len(client.lists) == 1
    initial = [0.8, 1.6, 3.2, 6.4]
    assert all(0.75 * d <= p <= d for p, d in zip(pauses, initial, strict=True)), pauses


async def test_metadata_only_lists_and_watches_partial_objects(
    api: ApiClient, clock: FakeClock
) -> None:
    client = ScriptedClient(api, [])
    sink = Sink()
    task = asyncio.create_task(
        Reflector(client, CONFIGMAPS, sink, metadata_only=True, clock=clock).run()
    )
    await clock.step()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.accepts == [METADATA_ONLY]
    assert "as=PartialObjectMetadataList;g=meta.k8s.io;v=v1" in METADATA_ONLY
    assert client.metadata_only == [True]


@pytest.mark.parametrize(
    "error",
    [
        aiohttp.ClientConnectionError("connection reset"),
        aiohttp.ServerDisconnectedError(),
        TimeoutError(),
        ConnectionRefusedError(111, "refused"),
    ],
    ids=["client-connection", "server-disconnected", "timeout", "refused"],
)
async def test_connection_errors_back_off_and_rewatch_without_a_relist(
    api: ApiClient, clock: FakeClock, error: BaseException
) -> None:
    scripts: list[list[Step]] = [
        [{"type": "MODIFIED", "object": cm("a", "11")}, error],
        [error],
        [error],
        [{"type": "BOOKMARK", "object": cm("", "12")}],  # ends normally: backoff reset
        [error],
    ]
    sink = Sink()
    client = ScriptedClient(api, scripts)
    async with reflecting(client, clock, sink):
        pauses: list[float] = []
        while (deadline := clock.next_deadline) is not None:
            pauses.append(deadline - clock.now())
            await clock.step(pauses[-1])
        assert len(client.lists) == 1
        assert [q["resourceVersion"] for q, _ in client.watches] == [
            "10",
            "11",
            "11",
            "11",
            "12",
            "12",
        ]
        assert sink.seen == [("list", "10"), ("MODIFIED", "11")]
    initial = [0.8, 1.6, 3.2, 0.8]  # doubling, jittered into [75 %, 100 %]; reset by the bookmark
    assert len(pauses) == len(initial)
    assert all(0.75 * d <= p <= d for p, d in zip(pauses, initial, strict=True)), pauses


async def test_gone_relists_from_the_last_resource_version(
    api: ApiClient, clock: FakeClock
) -> None:
    scripts: list[list[Step]] = [
        [
            {"type": "MODIFIED", "object": cm("a", "11")},
            Gone(410, "Expired", "too old resource version"),
        ]
    ]
    client = ScriptedClient(api, scripts)
    async with reflecting(client, clock, Sink()):
        assert client.lists == [{"resourceVersion": "0"}, {"resourceVersion": "11"}]
        assert clock.next_deadline is None  # no pause before a relist


async def test_quiet_watches_ended_by_the_read_timeout_rewatch_at_once(
    api: ApiClient, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 25 item 7: a watch of a quiet resource ends by the read timeout; that is a normal
    end (re-watched at once, backoff reset, no warning), not a failure."""
    quiet: list[Step] = [aiohttp.SocketTimeoutError("Timeout on reading data from socket")]
    scripts: list[list[Step]] = [
        [aiohttp.ClientConnectionError("connection reset")],  # a real failure: 0.8 s
        quiet,
        quiet,
        quiet,
        [{"type": "MODIFIED", "object": cm("a", "11")}, aiohttp.ClientConnectionError("reset")],
        quiet,
        [aiohttp.ClientConnectionError("connection reset")],
    ]
    sink = Sink()
    client = ScriptedClient(api, scripts)
    with caplog.at_level("DEBUG", logger="gpuctrl.runtime.reflector"):
        async with reflecting(client, clock, sink):
            pauses: list[float] = []
            while (deadline := clock.next_deadline) is not None:
                pauses.append(deadline - clock.now())
                await clock.step(pauses[-1])
            assert sink.seen == [("list", "10"), ("MODIFIED", "11")]
            assert len(client.watches) == len(scripts) + 1
            assert len(client.lists) == 1
    # Only the three connection errors waited, each the first step of a backoff the quiet
    # ends had reset.
    assert len(pauses) == 3
    assert all(0.6 <= p <= 0.8 for p in pauses), pauses
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 3
    assert not [r for r in warnings if "Timeout on reading" in r.getMessage()]


class SlowHeadClient(ScriptedClient):
    """Lists whose first network chunk ends before the list's metadata (as a slow or
    restarting apiserver sends it), or that never hold a resourceVersion (``versionless``)."""

    def __init__(self, api: ApiClient, *, versionless: int = 0) -> None:
        super().__init__(api, [])
        self._versionless = versionless

    async def list_batches(
        self, path: str, query: Mapping[str, str | int | bool], *, accept: str = ""
    ) -> AsyncGenerator[tuple[dict[str, Any], list[dict[str, Any]]], None]:
        self.lists.append(dict(query))
        head: dict[str, Any] = {}
        yield head, []  # the first chunk: not yet past the list's head
        if self._versionless:
            self._versionless -= 1
            return
        head["resourceVersion"] = "10"
        yield head, [cm("a", "10")]
        yield head, []


async def test_a_first_chunk_shorter_than_the_lists_head_is_no_error(api: ApiClient) -> None:
    client, clock, sink = SlowHeadClient(api), FakeClock(), Sink()
    async with reflecting(client, clock, sink):
        assert sink.seen == [("list", "10")]
        assert len(client.lists) == 1


async def test_a_list_without_a_resource_version_is_retried_not_fatal(api: ApiClient) -> None:
    client, clock, sink = SlowHeadClient(api, versionless=1), FakeClock(), Sink()
    async with reflecting(client, clock, sink):
        await clock.step(2.0)  # past the first back-off
        assert len(client.lists) == 2
        assert sink.seen == [("list", "10")]
