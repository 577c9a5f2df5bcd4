"""``MeshInjector``: a real mutating webhook that behaves like Istio's sidecar injector.

Served on loopback over HTTPS (a self-signed certificate for 127.0.0.1) and registered with
the apiserver as the MutatingWebhookConfiguration ``istio-sidecar-injector`` with Istio's own
selectors: namespaces labelled ``istio-injection=enabled`` (`enable`), and the objectSelector
``sidecar.istio.io/inject NotIn ["false"]``, ``reinvocationPolicy: Never``, ``failurePolicy:
Fail``. Each pod it is called for gets an ``istio-init`` init container and an ``istio-proxy``
that never exits (a `BEHAVIOR_ANNOTATION` for the simulated kubelet). Since the pod's opt-out
label is matched by the objectSelector, a labelled pod never reaches the injector.

Two modes, as Istio has:

- classic (the default): ``istio-init`` is added after the pod's own init containers and
  ``istio-proxy`` after its containers, as a regular container, so a run-to-completion pod with
  it never reaches Succeeded;
- ``native_sidecar=True`` (Istio's ``ENABLE_NATIVE_SIDECARS``, Kubernetes 1.29+): the pod's init
  containers become ``istio-init``, then ``istio-proxy`` as a sidecar (``restartPolicy:
  Always``), then the pod's own; its containers are left alone, and the kubelet stops the proxy
  once they have finished.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiohttp import web
from kubernetes_asyncio.client import ApiClient

from gpuctrl.runtime import Client, Resource

from ._behavior import BEHAVIOR_ANNOTATION
from ._pki import self_signed_pair

__all__ = ["MeshInjector"]

_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io/v1",
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
    namespaced=False,
)
_NAMESPACES = Resource("v1", "Namespace", "namespaces", namespaced=False)


class MeshInjector:
    """Istio's injector, for the apiserver behind ``api`` (see the module docstring).

    ``async with MeshInjector(api) as mesh:`` serves and registers it; `enable` turns injection
    on for a namespace; `injected` lists the pods it changed (their names, or generateName
    prefixes). With `native_sidecar` (which may be changed at any time: it applies to the pods
    admitted afterwards) the proxy is a native sidecar instead of a container. On exit the
    configuration is deleted and the server stopped.
    """

    SIDECAR = "istio-proxy"
    INIT = "istio-init"

    def __init__(
        self, api: ApiClient, *, name: str = "istio-sidecar-injector", native_sidecar: bool = False
    ) -> None:
        self.name = name
        self.native_sidecar = native_sidecar
        self.injected: list[str] = []
        self._client = Client(api)
        self._runner: web.AppRunner | None = None

    async def enable(self, namespace: str) -> None:
        """Label ``namespace`` ``istio-injection=enabled``, as Istio's users do."""
        patch = {"metadata": {"labels": {"istio-injection": "enabled"}}}
        await self._client.merge_patch(_NAMESPACES, namespace, patch)

    async def __aenter__(self) -> Self:
        cert, key = self_signed_pair("istio-sidecar-injector", ["127.0.0.1"])
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        with tempfile.TemporaryDirectory() as folder:
            (Path(folder) / "tls.crt").write_bytes(cert)
            (Path(folder) / "tls.key").write_bytes(key)
            context.load_cert_chain(Path(folder) / "tls.crt", Path(folder) / "tls.key")
        app = web.Application()
        app.router.add_post("/inject", self._inject)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        port = int(self._runner.addresses[0][1])
        await self._client.create(_CONFIGURATIONS, self._configuration(port, cert))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._client.delete(_CONFIGURATIONS, self.name)
        if self._runner is not None:
            await self._runner.cleanup()

    async def _inject(self, request: web.Request) -> web.Response:
        review = await request.json()
        pod = review["request"]["object"]
        metadata = pod.get("metadata") or {}
        self.injected.append(metadata.get("name") or metadata.get("generateName", ""))
        annotations = dict(metadata.get("annotations") or {})
        behavior = json.loads(annotations.get(BEHAVIOR_ANNOTATION, "{}"))
        annotations[BEHAVIOR_ANNOTATION] = json.dumps(
            {**behavior, self.SIDECAR: {"neverExits": True}}
        )
        patch = [
            {"op": "add", "path": "/metadata/annotations", "value": annotations},
            *self._containers_patch(pod.get("spec", {}).get("initContainers") or []),
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

    def _containers_patch(self, own_inits: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The JSON patch operations that add the init container and the proxy to a pod whose
        init containers are `own_inits`."""
        init = {"name": self.INIT, "image": "istio/proxyv2"}
        proxy = {"name": self.SIDECAR, "image": "istio/proxyv2"}
        if self.native_sidecar:
            inits = [init, {**proxy, "restartPolicy": "Always"}, *own_inits]
            return [{"op": "add", "path": "/spec/initContainers", "value": inits}]
        return [
            {"op": "add", "path": "/spec/containers/-", "value": proxy},
            {"op": "add", "path": "/spec/initContainers", "value": [*own_inits, init]},
        ]

    def _configuration(self, port: int, cert: bytes) -> dict[str, Any]:
        return {
            "apiVersion": _CONFIGURATIONS.api_version,
            "kind": _CONFIGURATIONS.kind,
            "metadata": {"name": self.name},
            "webhooks": [
                {
                    "name": "namespace.sidecar-injector.istio.io",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{port}/inject",
                        "caBundle": base64.b64encode(cert).decode(),
                    },
                    "rules": [
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"istio-injection": "enabled"}},
                    "objectSelector": {
                        "matchExpressions": [
                            {
                                "key": "sidecar.istio.io/inject",
                                "operator": "NotIn",
                                "values": ["false"],
                            }
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
