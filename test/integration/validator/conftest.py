"""Fixtures of the validator's integration tests: the template ConfigMap and a mesh injector.

`mesh_injector` stands in for Istio's sidecar injector: a real mutating admission webhook,
served on loopback and called by the real apiserver, that adds a never-exiting ``istio-proxy``
container to every pod created in the test's namespace - unless the pod carries Istio's
opt-out label ``sidecar.istio.io/inject: "false"`` (matched by the webhook's objectSelector,
as Istio's own configuration does).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest_asyncio
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from gpuctrl.runtime import new_api_client
from gpuctrl.testing import BEHAVIOR_ANNOTATION, ControlPlane
from gpuctrl.validator import builtin_template

CONFIGMAP = "gpuctrl-validator-workloads"
SIDECAR = "istio-proxy"


# The runtime classes the tests' pods name; the apiserver refuses pods naming a missing one.
RUNTIME_CLASSES = ("nvidia", "nvidia-legacy")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def runtime_classes(control_plane: ControlPlane) -> AsyncIterator[tuple[str, ...]]:
    """The RuntimeClasses the operator would create, for one test module: they are
    cluster-scoped, and other tests (render -> create) create ones of the same names."""
    async with await new_api_client(control_plane.kubeconfig) as api:
        node = client.NodeV1Api(api)
        for name in RUNTIME_CLASSES:
            await node.create_runtime_class({"metadata": {"name": name}, "handler": name})
        yield RUNTIME_CLASSES
        for name in RUNTIME_CLASSES:
            await node.delete_runtime_class(name)


@pytest_asyncio.fixture(loop_scope="session")
async def workload_templates(
    kube_api: ApiClient, namespace: str, runtime_classes: tuple[str, ...]
) -> str:
    """The built-in templates in the ConfigMap the agent reads by default; returns its name."""
    data = {key: builtin_template(key) for key in ("cuda.yaml", "plugin.yaml")}
    await client.CoreV1Api(kube_api).create_namespaced_config_map(
        namespace, {"metadata": {"name": CONFIGMAP}, "data": data}
    )
    return CONFIGMAP


@pytest_asyncio.fixture(loop_scope="session")
async def mesh_injector(
    kube_api: ApiClient, namespace: str, tmp_path: Path
) -> AsyncIterator[list[str]]:
    """Injects a never-exiting sidecar into the namespace's pods; yields the injected pods' names
    (generateName prefixes for pods created with one)."""
    injected: list[str] = []
    cert_pem, context = _serving_tls(tmp_path)

    async def inject(request: web.Request) -> web.Response:
        return await _inject(request, injected)

    app = web.Application()
    app.router.add_post("/inject", inject)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    core = client.CoreV1Api(kube_api)
    await core.patch_namespace(namespace, {"metadata": {"labels": {"mesh-test": namespace}}})
    admission = client.AdmissionregistrationV1Api(kube_api)
    name = f"mesh-injector-{namespace}"
    await admission.create_mutating_webhook_configuration(
        _webhook_configuration(name, namespace, port, cert_pem)
    )
    try:
        yield injected
    finally:
        await admission.delete_mutating_webhook_configuration(name)
        await runner.cleanup()


async def _inject(request: web.Request, injected: list[str]) -> web.Response:
    review = await request.json()
    pod = review["request"]["object"]
    metadata = pod.get("metadata", {})
    injected.append(metadata.get("name") or metadata.get("generateName", ""))
    annotations = dict(metadata.get("annotations") or {})
    behavior = json.loads(annotations.get(BEHAVIOR_ANNOTATION, "{}"))
    annotations[BEHAVIOR_ANNOTATION] = json.dumps({**behavior, SIDECAR: {"neverExits": True}})
    patch = [
        {"op": "add", "path": "/spec/containers/-", "value": {"name": SIDECAR, "image": "proxy"}},
        {"op": "add", "path": "/metadata/annotations", "value": annotations},
    ]
    response = {
        "uid": review["request"]["uid"],
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(json.dumps(patch).encode()).decode(),
    }
    return web.json_response(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    )


def _webhook_configuration(name: str, namespace: str, port: int, cert_pem: bytes) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "sidecar-injector.mesh.test",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/inject",
                    "caBundle": base64.b64encode(cert_pem).decode(),
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "namespaceSelector": {"matchLabels": {"mesh-test": namespace}},
                "objectSelector": {
                    "matchExpressions": [
                        {"key": "sidecar.istio.io/inject", "operator": "NotIn", "values": ["false"]}
                    ]
                },
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "timeoutSeconds": 5,
            }
        ],
    }


def _serving_tls(folder: Path) -> tuple[bytes, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1 (PEM) and a server context serving it."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mesh-injector")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    cert_file, key_file = folder / "injector.crt", folder / "injector.key"
    cert_file.write_bytes(cert_pem)
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return cert_pem, context
