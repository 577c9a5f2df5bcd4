"""The client waits out a 429 with Retry-After, and paces itself with qps/burst, on its clock.

The API server only throttles under API Priority and Fairness load that a test cannot make
on purpose, so a loopback HTTP server plays the throttling answer here (a transport peer, not
a model of Kubernetes objects)."""

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from kubernetes_asyncio.client import ApiClient, Configuration

from gpuctrl.runtime import Client, TooManyRequests
from gpuctrl.testing import FakeClock, eventually


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[int]]]:
    """A server answering 429 (Retry-After: 7) to the first two GETs, then 200; the list
    records each request's status."""
    answered: list[int] = []

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/always" or len(answered) < 2:
            answered.append(429)
            return web.json_response(
                {"kind": "Status", "reason": "TooManyRequests", "message": "slow down"},
                status=429,
                headers={"Retry-After": "7"},
            )
        answered.append(200)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", answered
    await runner.cleanup()


async def test_a_429_is_retried_after_its_retry_after(
    server: tuple[str, list[int]], clock: FakeClock
) -> None:
    url, answered = server
    async with ApiClient(Configuration(host=url)) as api:
        client = Client(api, clock=clock)
        task = asyncio.create_task(client.request("GET", "/api/v1/x"))
        await eventually(lambda: clock.next_deadline is not None, within=5, interval=0.01)
        assert clock.next_deadline == pytest.approx(7.0)
        await clock.step(6.9)
        assert len(answered) == 1  # waiting out Retry-After on the client's clock
        await clock.step(0.1)
        await eventually(lambda: clock.next_deadline is not None, within=5, interval=0.01)
        await clock.step(7.0)
        assert await task == {"ok": True}
        assert answered == [429, 429, 200]


async def test_retries_give_up_with_the_servers_error(
    server: tuple[str, list[int]], clock: FakeClock
) -> None:
    url, answered = server
    async with ApiClient(Configuration(host=url)) as api:
        client = Client(api, clock=clock, max_retries=2)
        task = asyncio.create_task(client.request("GET", "/always"))
        while not task.done():
            await asyncio.sleep(0.01)
            await clock.step(7.0)
        with pytest.raises(TooManyRequests, match="slow down"):
            await task
        assert answered == [429, 429, 429]


async def test_qps_and_burst_pace_requests(clock: FakeClock) -> None:
    async with ApiClient(Configuration(host="http://127.0.0.1:1")) as api:
        client = Client(api, qps=2.0, burst=3, clock=clock)
        assert client._bucket is not None
        delays = [client._bucket.when(None) for _ in range(6)]
    assert delays[:3] == [0.0, 0.0, 0.0]
    assert delays[3:] == pytest.approx([0.5, 1.0, 1.5])
