"""10,000 generated AdmissionReviews, valid and hostile, against the running webhook server.

The server runs in its own thread and event loop; the test posts over HTTPS with one kept-alive
connection. No answer may be a 5xx; every valid pod review is answered with a patch that applies
(with the jsonpatch library) and yields the pod an independent model of the policies expects.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.v1alpha1 import PodPolicy
from gpuctrl.runtime.webhook import WebhookServer
from gpuctrl.testing._pki import self_signed_pair
from webhooks._handler import MUTATE_PATH, PodPolicyHandler, PolicySet
from webhooks._mutate import mutate

pytestmark = pytest.mark.slow

NAMESPACE = "gpuctrl"
POLICIES = [
    PodPolicy.model_validate(
        {
            "metadata": {"name": "a-mesh"},
            "spec": {"meshes": ["istio", "linkerd"], "labels": {"team/x~y": "gpu"}},
        }
    ),
    PodPolicy.model_validate(
        {
            "metadata": {"name": "b-resources"},
            "spec": {
                "targets": {"components": ["validator-workloads", "driver"]},
                "resources": {"limits": {"cpu": "500m"}, "requests": {"memory": "64Mi"}},
                "annotations": {"a/b~c": "1"},
                "labels": {"team/x~y": "platform"},
            },
        }
    ),
]


def expected_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What the policies above make of a pod: an oracle written apart from `mutate`."""
    out = json.loads(json.dumps(pod))
    metadata = out.setdefault("metadata", {})
    created_labels = dict(metadata.get("labels") or {})
    component = created_labels.get("app.kubernetes.io/component")
    if component == "validator-workloads":
        labels = metadata["labels"] = dict(metadata.get("labels") or {})
        annotations = metadata["annotations"] = dict(metadata.get("annotations") or {})
        labels.setdefault("team/x~y", "gpu")  # what the pod came with is kept
        labels["sidecar.istio.io/inject"] = "false"  # an opt-out replaces it
        annotations["linkerd.io/inject"] = "disabled"
    if component in ("validator-workloads", "driver"):
        labels = metadata["labels"] = dict(metadata.get("labels") or {})
        annotations = metadata["annotations"] = dict(metadata.get("annotations") or {})
        if "team/x~y" not in created_labels:
            labels["team/x~y"] = "platform"
        annotations.setdefault("a/b~c", "1")
        for name in ("initContainers", "containers"):
            for container in out.get("spec", {}).get(name) or []:
                resources = container["resources"] = dict(container.get("resources") or {})
                resources["limits"] = {**(resources.get("limits") or {}), "cpu": "500m"}
                resources["requests"] = {**(resources.get("requests") or {}), "memory": "64Mi"}
    return out


keys = st.one_of(
    st.sampled_from(
        ["app", "team/x~y", "a/b~c", "sidecar.istio.io/inject", "linkerd.io/inject", "~", "~1"]
    ),
    st.text(min_size=1, max_size=8),
)
string_maps = st.one_of(st.none(), st.dictionaries(keys, st.text(max_size=6), max_size=4))
quantities = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
    st.sampled_from(["1", "250m", "1Gi"]),
    max_size=2,
)
containers = st.lists(
    st.fixed_dictionaries(
        {"name": st.text(min_size=1, max_size=5)},
        optional={
            "resources": st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {},
                    optional={"limits": st.one_of(st.none(), quantities), "requests": quantities},
                ),
            )
        },
    ),
    max_size=3,
)
components = st.sampled_from(["validator-workloads", "driver", "toolkit", "other", None])


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    labels = draw(string_maps)
    component = draw(components)
    if component is not None:
        labels = {**(labels or {}), "app.kubernetes.io/component": component}
    metadata: dict[str, Any] = {draw(st.sampled_from(["name", "generateName"])): "cuda-"}
    if labels is not None or draw(st.booleans()):
        metadata["labels"] = labels
    annotations = draw(string_maps)
    if annotations is not None:
        metadata["annotations"] = annotations
    spec: dict[str, Any] = {"containers": draw(containers)}
    if draw(st.booleans()):
        spec["initContainers"] = draw(containers)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def review(pod: Any, **request: Any) -> dict[str, Any]:
    body = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": NAMESPACE,
        "operation": "CREATE",
        "object": pod,
        **request,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)
hostile = st.one_of(
    st.binary(max_size=64),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(
        lambda p, k, v: json.dumps(review(p, **{k: v})).encode(),
        pods(),
        st.sampled_from(
            ["uid", "kind", "resource", "namespace", "operation", "object", "dryRun", "subResource"]
        ),
        json_values,
    ),
    st.builds(
        lambda p, v: json.dumps({**review(p), "apiVersion": v}).encode(), pods(), json_values
    ),
    st.builds(
        lambda v: json.dumps(review({"metadata": v, "spec": {"containers": v}})).encode(),
        json_values,
    ),
)


@pytest.fixture(scope="module")
def server_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, bytes]]:
    folder: Path = tmp_path_factory.mktemp("certs")
    cert, key = self_signed_pair("fuzz", ["127.0.0.1"])
    (folder / "tls.crt").write_bytes(cert)
    (folder / "tls.key").write_bytes(key)
    policies = PolicySet()
    policies.policies = {p.metadata["name"]: p for p in POLICIES}
    server = WebhookServer(folder, host="127.0.0.1", port=0, shutdown_delay=0)
    server.register(MUTATE_PATH, PodPolicyHandler(policies, NAMESPACE))
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    listening = threading.Event()

    async def serve() -> None:
        task = asyncio.create_task(server.start(stop))
        await server.wait_listening()
        listening.set()
        await task

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    listening.wait(10)
    assert server.port is not None
    yield server.port, cert
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)
    loop.close()


class Poster:
    """One kept-alive HTTPS connection to the server, reopened when the server closes it."""

    def __init__(self, port: int, cert: bytes) -> None:
        self._port = port
        self._context = ssl.create_default_context(cadata=cert.decode())
        self._connection: http.client.HTTPSConnection | None = None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()

    def post(self, body: bytes) -> tuple[int, bytes]:
        for _ in range(2):
            if self._connection is None:
                self._connection = http.client.HTTPSConnection(
                    "127.0.0.1", self._port, context=self._context, timeout=10
                )
            try:
                self._connection.request(
                    "POST", MUTATE_PATH, body, {"Content-Type": "application/json"}
                )
                response = self._connection.getresponse()
                return response.status, response.read()
            except (http.client.HTTPException, ConnectionError):
                self._connection.close()
                self._connection = None
        raise AssertionError("the server dropped the connection twice")


@pytest.fixture(scope="module")
def poster(server_port: tuple[int, bytes]) -> Iterator[Poster]:
    poster = Poster(*server_port)
    yield poster
    poster.close()


# 1,500 reviews per test keep `make test` in its time budget (5,000 took 24-36 s per test
# here); GPUCTRL_FUZZ_EXAMPLES=20000 for a deep run.
FUZZ_EXAMPLES = int(os.environ.get("GPUCTRL_FUZZ_EXAMPLES", "1500"))
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
    database=None,
)


@FUZZ
@given(pod=pods(), dry_run=st.booleans())
def test_every_valid_pod_review_gets_a_patch_that_yields_the_expected_pod(
    poster: Poster, pod: dict[str, Any], dry_run: bool
) -> None:
    status, body = poster.post(json.dumps(review(pod, dryRun=dry_run)).encode())
    assert status == 200
    answer = json.loads(body)["response"]
    assert answer["uid"] == "u-1"
    assert answer["allowed"] is True
    patch = json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []
    result = jsonpatch.apply_patch(pod, patch)
    assert result == expected_pod(pod)
    # Reinvocation on the patched pod: nothing more to do.
    assert list(mutate(result, POLICIES).patch) == []


@FUZZ
@given(body=hostile)
def test_hostile_reviews_never_get_a_5xx(poster: Poster, body: bytes) -> None:
    status, text = poster.post(body)
    assert status in (200, 400), (status, text)
    if status == 200:
        answer = json.loads(text)["response"]
        assert answer["allowed"] is True or answer["status"]["code"] in (400, 403)
    else:
        assert text.strip(), "a 400 names what is wrong"
