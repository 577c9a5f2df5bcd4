"""The webhook server on loopback: status codes, limits, handler errors, metrics, cert reload."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from prometheus_client import generate_latest

from gpuctrl.runtime import METRICS_REGISTRY
from gpuctrl.runtime.webhook import AdmissionRequest, AdmissionResponse, WebhookServer, patched
from gpuctrl.testing import write_secret_volume
from gpuctrl.testing._pki import self_signed_pair


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


@pytest_asyncio.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[WebhookServer, bytes]]:
    cert = secret_volume(tmp_path, "v1")
    server = WebhookServer(tmp_path, host="127.0.0.1", port=0, max_body_bytes=64 * 1024)
    server.register("/mutate", mutate)
    stop = asyncio.Event()
    task = asyncio.create_task(server.start(stop))
    await server.wait_listening()
    yield server, cert
    stop.set()
    await task


def client_context(cert: bytes) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=cert.decode())


async def post(server: WebhookServer, cert: bytes, body: bytes) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"https://127.0.0.1:{server.port}/mutate",
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


async def test_without_certificate_files_the_server_is_not_ready(tmp_path: Path) -> None:
    server = WebhookServer(tmp_path / "missing", host="127.0.0.1", port=0)
    stop = asyncio.Event()
    task = asyncio.create_task(server.start(stop))
    await server.wait_listening()
    assert not server.ready()
    stop.set()
    await task
