"""The webhook server on loopback: status codes, limits, handler errors, metrics, cert reload,
slow and idle clients, the connection cap and graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client import generate_latest

from gpuctrl.runtime import METRICS_REGISTRY
from gpuctrl.runtime.webhook import (
    AdmissionRequest,
    AdmissionResponse,
    WebhookServer,
    allowed,
    patched,
)
from gpuctrl.testing import eventually, write_secret_volume
from gpuctrl.testing._pki import self_signed_pair

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
MIB = 1024 * 1024


def secret_volume(folder: Path, version: str) -> bytes:
    """Swap the Secret volume in ``folder`` to a new self-signed pair; return its certificate."""
    cert, key = self_signed_pair(f"webhook-{version}", ["127.0.0.1"])
    write_secret_volume(folder, {"tls.crt": cert, "tls.key": key})
    return cert


async def mutate(request: AdmissionRequest) -> AdmissionResponse:
    if request.object.get("boom"):
        raise RuntimeError("handler bug")
    labels = request.object.get("metadata", {}).get("labels") or {}
    return patched(request.object, {**request.object, "metadata": {"labels": {**labels, "x": "1"}}})


@contextlib.asynccontextmanager
async def serving(
    folder: Path, stop: asyncio.Event | None = None, **options: Any
) -> AsyncIterator[tuple[WebhookServer, bytes]]:
    """A server with ``mutate`` at ``/mutate`` on a free loopback port, without a shutdown
    delay unless ``options`` give one; stopped (``stop`` set) and awaited on exit."""
    cert = secret_volume(folder, "v1")
    options.setdefault("shutdown_delay", 0)
    server = WebhookServer(folder, host="127.0.0.1", port=0, **options)
    server.register("/mutate", mutate)
    stop = stop or asyncio.Event()
    task = asyncio.create_task(server.start(stop))
    await server.wait_listening()
    try:
        yield server, cert
    finally:
        stop.set()
        await task


@pytest_asyncio.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[WebhookServer, bytes]]:
    async with serving(tmp_path, max_body_bytes=64 * 1024) as started:
        yield started


def client_context(cert: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=cert.decode())


async def post(
    server: WebhookServer, cert: bytes, body: bytes, path: str = "/mutate"
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"https://127.0.0.1:{server.port}{path}",
            data=body,
            headers={"Content-Type": "application/json"},
            ssl=client_context(cert),
        ) as response,
    ):
        text = await response.text()
        return response.status, json.loads(text) if response.status == 200 else text


def review(obj: dict[str, Any]) -> bytes:
    request = {
        "uid": "abc",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "object": obj,
    }
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(body).encode()


async def test_a_review_is_answered_with_its_uid_and_patch(
    served: tuple[WebhookServer, bytes],
) -> None:
    server, cert = served
    assert server.ready()
    status, body = await post(server, cert, review({"metadata": {}}))
    assert status == 200
    assert body["response"]["uid"] == "abc"
    assert body["response"]["patchType"] == "JSONPatch"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"not json", "not JSON", id="garbage"),
        pytest.param(b"x" * (65 * 1024), "over 65536 bytes", id="too-big"),
        pytest.param(
            b'{"apiVersion": "v1", "kind": "Pod"}', "expected apiVersion", id="wrong-kind"
        ),
    ],
)
async def test_bad_bodies_get_400_naming_the_problem_and_the_server_keeps_serving(
    served: tuple[WebhookServer, bytes], body: bytes, message: str
) -> None:
    server, cert = served
    status, text = await post(server, cert, body)
    assert status == 400
    assert message in text
    assert (await post(server, cert, review({})))[0] == 200


async def test_a_handler_error_is_denied_with_500_status_and_counted(
    served: tuple[WebhookServer, bytes],
) -> None:
    server, cert = served

    def panics() -> float:
        value = METRICS_REGISTRY.get_sample_value(
            "controller_runtime_webhook_panics_total", {"webhook": "/mutate"}
        )
        return value or 0.0

    before = panics()
    status, body = await post(server, cert, review({"boom": True}))
    assert status == 200
    assert body["response"]["allowed"] is False
    assert body["response"]["status"]["code"] == 500
    assert "handler bug" in body["response"]["status"]["message"]
    assert panics() == before + 1
    metrics = generate_latest(METRICS_REGISTRY).decode()
    assert 'controller_runtime_webhook_requests_total{code="200",webhook="/mutate"}' in metrics
    assert "controller_runtime_webhook_latency_seconds_bucket" in metrics
    assert 'controller_runtime_webhook_requests_in_flight{webhook="/mutate"} 0.0' in metrics


async def test_a_swapped_secret_volume_reaches_new_connections(
    served: tuple[WebhookServer, bytes], tmp_path: Path
) -> None:
    server, old = served
    new = secret_volume(tmp_path, "v2")
    assert server.certs.reload()
    assert server.certs.certificate == new
    assert (await post(server, new, review({})))[0] == 200
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await post(server, old, review({}))


async def test_a_mismatched_pair_keeps_the_old_certificate(
    served: tuple[WebhookServer, bytes], tmp_path: Path
) -> None:
    server, cert = served
    _, other_key = self_signed_pair("other", ["127.0.0.1"])
    (tmp_path / "tls.key").resolve().write_bytes(other_key)
    assert not server.certs.reload()
    assert server.ready()
    assert (await post(server, cert, review({})))[0] == 200


async def test_without_certificate_files_the_server_is_not_ready(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Files not written yet (a certificate manager is about to) are waited for: not ready,
    and said at info, not as a warning on every start."""
    server = WebhookServer(tmp_path / "missing", host="127.0.0.1", port=0, shutdown_delay=0)
    stop = asyncio.Event()
    with caplog.at_level("INFO", logger="gpuctrl.runtime.webhook"):
        task = asyncio.create_task(server.start(stop))
        await server.wait_listening()
        assert not server.ready()
        stop.set()
        await task
    waiting = [r for r in caplog.records if "waiting for a serving certificate" in r.getMessage()]
    assert [r.levelname for r in waiting] == ["INFO"]
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


@contextlib.asynccontextmanager
async def connected(server: WebhookServer, cert: bytes | None) -> AsyncIterator[Streams]:
    """A connection to ``server``, over TLS trusting ``cert`` or (None) plain TCP."""
    context = client_context(cert) if cert is not None else None
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=context)
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await writer.wait_closed()


def head(length: int, path: str = "/mutate") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """Read one HTTP response: its status, headers (lower-case names) and body."""
    status = int((await reader.readline()).split()[1])
    headers = {}
    while (line := await reader.readline()) != b"\r\n":
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, await reader.readexactly(int(headers["content-length"]))


async def exchange(streams: Streams, body: bytes) -> int:
    """POST ``body`` to ``/mutate`` over an open connection; the answer's status."""
    reader, writer = streams
    writer.write(head(len(body)) + body)
    return (await answer(reader))[0]


async def seconds_until_closed(reader: asyncio.StreamReader, limit: float = 5.0) -> float:
    """Read and drop everything until the server closes the connection (TimeoutError after
    ``limit`` seconds); how long that took."""
    started = time.monotonic()
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        async with asyncio.timeout(limit):
            while await reader.read(64 * 1024):
                pass
    return time.monotonic() - started


async def until(condition: Callable[[], bool]) -> None:
    """Let real I/O happen until ``condition`` holds (5 s at most)."""
    await eventually(condition, within=5, interval=0.01)


def rss() -> int:
    """This process's resident memory in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("requests", [pytest.param(0, id="fresh"), pytest.param(1, id="reused")])
async def test_an_idle_connection_is_closed_after_the_idle_timeout(
    tmp_path: Path, requests: int
) -> None:
    async with (
        serving(tmp_path, idle_timeout=0.5) as (server, cert),
        connected(server, cert) as streams,
    ):
        for _ in range(requests):
            assert await exchange(streams, review({})) == 200
        assert 0.3 < await seconds_until_closed(streams[0]) < 5


async def test_a_header_trickling_in_is_cut_off_at_the_idle_timeout(tmp_path: Path) -> None:
    async def trickle(writer: asyncio.StreamWriter) -> None:
        writer.write(b"POST /mutate HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        while True:
            await asyncio.sleep(0.1)
            writer.write(b"X-Slow: 1\r\n")

    async with (
        serving(tmp_path, idle_timeout=0.5) as (server, cert),
        connected(server, cert) as (reader, writer),
    ):
        trickling = asyncio.create_task(trickle(writer))
        try:
            assert 0.3 < await seconds_until_closed(reader) < 5
        finally:
            trickling.cancel()


async def test_a_connection_without_a_tls_handshake_is_closed_after_the_handshake_timeout(
    tmp_path: Path,
) -> None:
    async with (
        serving(tmp_path, handshake_timeout=0.5) as (server, _),
        connected(server, None) as (reader, _),
    ):
        await until(lambda: server.open_connections == 1)
        assert 0.3 < await seconds_until_closed(reader) < 5
        await until(lambda: server.open_connections == 0)


async def test_a_body_stalling_after_its_headers_gets_408_within_the_body_timeout(
    tmp_path: Path,
) -> None:
    async with (
        serving(tmp_path, body_timeout=0.5, idle_timeout=30) as (server, cert),
        connected(server, cert) as (reader, writer),
    ):
        started = time.monotonic()
        writer.write(head(100) + b'{"apiVersion":')
        status, _, body = await asyncio.wait_for(answer(reader), 5)
        assert (status, body) == (408, b"the body did not arrive within 0.5 s\n")
        assert 0.3 < time.monotonic() - started < 5
        assert await seconds_until_closed(reader) < 5


async def test_connections_over_the_cap_are_closed_at_once_and_served_once_others_close(
    tmp_path: Path,
) -> None:
    async with (
        serving(tmp_path, max_connections=3) as (server, cert),
        contextlib.AsyncExitStack() as held,
    ):
        streams = [await held.enter_async_context(connected(server, cert)) for _ in range(3)]
        await until(lambda: server.open_connections == 3)
        with pytest.raises((ConnectionError, ssl.SSLError)):
            async with asyncio.timeout(3), connected(server, cert):
                pass
        for each in streams:
            assert await exchange(each, review({})) == 200
        await held.aclose()
        await until(lambda: server.open_connections == 0)
        async with connected(server, cert) as again:
            assert await exchange(again, review({})) == 200


async def test_a_flood_of_connections_holds_at_most_the_cap_and_its_memory(
    tmp_path: Path,
) -> None:
    """Connections that never start TLS cost the server as much as idle TLS ones (asyncio's
    256 KiB TLS buffer is taken at accept) and this client almost nothing, so RSS measures the
    server. Uncapped, 300 of them take about 90 MB."""
    async with serving(tmp_path, max_connections=50, handshake_timeout=60) as (server, _):
        async with contextlib.AsyncExitStack() as flood:
            before = rss()
            readers = [
                (await flood.enter_async_context(connected(server, None)))[0] for _ in range(300)
            ]
            await until(lambda: sum(reader.at_eof() for reader in readers) == 250)
            assert server.open_connections == 50
            peak = rss()
        await until(lambda: server.open_connections == 0)
        after = rss()
    assert peak - before < 30 * MIB
    assert after - before < 30 * MIB


class Gate:
    """A handler that waits until ``release`` is set, noting in ``entered`` that it was called."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, request: AdmissionRequest) -> AdmissionResponse:
        self.entered.set()
        await self.release.wait()
        return allowed()


def refuses(server: WebhookServer) -> bool:
    """Whether ``server`` refuses a new connection (loopback answers at once either way)."""
    try:
        socket.create_connection(("127.0.0.1", server.port or 0), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


async def test_a_stopped_server_is_unready_but_serves_through_the_delay_then_drains(
    tmp_path: Path,
) -> None:
    cert = secret_volume(tmp_path, "v1")
    server = WebhookServer(tmp_path, host="127.0.0.1", port=0, shutdown_delay=1.5)
    server.register("/mutate", mutate)
    server.register("/slow", gate := Gate())
    stop = asyncio.Event()
    task = asyncio.create_task(server.start(stop))
    try:
        await server.wait_listening()
        in_flight = asyncio.create_task(post(server, cert, review({}), "/slow"))
        await gate.entered.wait()
        stopped = time.monotonic()
        stop.set()
        assert not server.ready()
        async with connected(server, cert) as (reader, writer):
            writer.write(head(len(review({}))) + review({}))
            status, headers, _ = await answer(reader)
        assert (status, headers["connection"]) == (200, "close")
        await eventually(lambda: refuses(server), within=5, interval=0.05)
        assert time.monotonic() - stopped > 1.4
        assert not task.done()
        gate.release.set()
        assert (await in_flight)[0] == 200
        await asyncio.wait_for(task, 5)
    finally:
        gate.release.set()
        stop.set()
        await task


async def test_requests_in_flight_past_the_drain_timeout_are_cut_off(tmp_path: Path) -> None:
    cert = secret_volume(tmp_path, "v1")
    server = WebhookServer(tmp_path, host="127.0.0.1", port=0, shutdown_delay=0, drain_timeout=0.3)
    server.register("/slow", gate := Gate())
    stop = asyncio.Event()
    task = asyncio.create_task(server.start(stop))
    await server.wait_listening()
    in_flight = asyncio.create_task(post(server, cert, review({}), "/slow"))
    await gate.entered.wait()
    stop.set()
    await asyncio.wait_for(task, 5)
    with pytest.raises(aiohttp.ClientError):
        await in_flight
