"""The MutatingWebhookConfiguration ``gpuctrl-pod-policy``: its content, and keeping it so.

Its name sorts before ``istio-sidecar-injector`` and ``istio-revision-tag-*``: the apiserver
calls configurations in name order, so the mesh opt-out label gpuctrl adds is on the pod
before Istio's objectSelector is evaluated, and Istio's injector is then never called. Only
pods labelled ``app.kubernetes.io/managed-by: gpuctrl`` in the operands' namespace (selected by
its ``kubernetes.io/metadata.name`` label, which the apiserver sets on every namespace since
1.21) are sent to it, and never the kubelet's mirror pods (a ``matchConditions`` rule, 1.28+),
so an outage of the webhook (``failurePolicy: Fail``) can never block anybody else's pods.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path
from typing import Any

from gpuctrl.runtime import AlreadyExists, ApiError, Client, Clock, NotFound, Resource, SystemClock
from gpuctrl.runtime.webhook import CERT_FILE

__all__ = [
    "CONFIGURATION_NAME",
    "MUTATING_WEBHOOK_CONFIGURATIONS",
    "WEBHOOK_NAME",
    "ConfigurationKeeper",
    "ensure_configuration",
    "published_bundle",
    "read_configuration",
    "webhook_configuration",
]

log = logging.getLogger("gpuctrl.webhook")

CONFIGURATION_NAME = "gpuctrl-pod-policy"
WEBHOOK_NAME = "pod-policy.gpuctrl.io"
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io/v1",
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
    namespaced=False,
)


# Static pods' mirrors, made by a kubelet: never sent, whatever their labels.
NOT_A_MIRROR_POD = {
    "name": "not-a-mirror-pod",
    "expression": "!has(object.metadata.annotations) || "
    "!('kubernetes.io/config.mirror' in object.metadata.annotations)",
}


def webhook_configuration(
    client_config: dict[str, Any], ca_bundle: bytes, namespace: str
) -> dict[str, Any]:
    """The configuration calling the webhook at ``client_config`` (``{"url": ...}`` or
    ``{"service": {...}}``) for the pods of ``namespace``, trusting the PEM ``ca_bundle``."""
    return {
        "apiVersion": MUTATING_WEBHOOK_CONFIGURATIONS.api_version,
        "kind": MUTATING_WEBHOOK_CONFIGURATIONS.kind,
        "metadata": {
            "name": CONFIGURATION_NAME,
            "labels": {"app.kubernetes.io/managed-by": "gpuctrl"},
        },
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "clientConfig": {**client_config, "caBundle": base64.b64encode(ca_bundle).decode()},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "objectSelector": {"matchLabels": {"app.kubernetes.io/managed-by": "gpuctrl"}},
                "matchConditions": [NOT_A_MIRROR_POD],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "timeoutSeconds": 5,
                "reinvocationPolicy": "IfNeeded",
                "admissionReviewVersions": ["v1"],
                "matchPolicy": "Equivalent",
            }
        ],
    }


def published_bundle(configuration: dict[str, Any] | None) -> bytes | None:
    """The caBundle (PEM) the apiserver trusts for gpuctrl's webhook, None without one."""
    if configuration is None:
        return None
    for webhook in configuration.get("webhooks") or ():
        if webhook.get("name") == WEBHOOK_NAME:
            return base64.b64decode(webhook.get("clientConfig", {}).get("caBundle", ""))
    return None


async def read_configuration(client: Client) -> dict[str, Any] | None:
    """The configuration as stored, None when absent."""
    try:
        configuration: dict[str, Any] = await client.get(
            MUTATING_WEBHOOK_CONFIGURATIONS, CONFIGURATION_NAME
        )
    except NotFound:
        return None
    return configuration


async def ensure_configuration(
    client: Client, ca_bundle: bytes, client_config: dict[str, Any] | None, namespace: str
) -> None:
    """Make the stored configuration trust ``ca_bundle``. With ``client_config`` (the
    ``--webhook-url`` mode) create it or reset all of it to `webhook_configuration` for the
    pods of ``namespace``; without, only set the caBundle of one that exists (the install
    manifests own the rest). A concurrent change is left for the next call."""
    stored = await read_configuration(client)
    if client_config is not None:
        desired = webhook_configuration(client_config, ca_bundle, namespace)
        if stored is None:
            try:
                await client.create(MUTATING_WEBHOOK_CONFIGURATIONS, desired)
            except AlreadyExists:
                return  # another replica was first
            log.info("created MutatingWebhookConfiguration %s", CONFIGURATION_NAME)
            return
        updated = {**stored, "webhooks": desired["webhooks"]}
    elif stored is None:
        return
    else:
        encoded = base64.b64encode(ca_bundle).decode()
        updated = {
            **stored,
            "webhooks": [
                {**w, "clientConfig": {**w.get("clientConfig", {}), "caBundle": encoded}}
                if w.get("name") == WEBHOOK_NAME
                else w
                for w in stored.get("webhooks") or ()
            ],
        }
    if updated != stored:
        try:
            await client.replace(MUTATING_WEBHOOK_CONFIGURATIONS, updated)
        except ApiError as error:
            if error.status not in (404, 409):
                raise
            return
        log.info("updated MutatingWebhookConfiguration %s", CONFIGURATION_NAME)


class ConfigurationKeeper:
    """Without managed certificates: every ``interval`` seconds, makes the configuration (for
    the pods of ``namespace``) trust the CA of ``cert_dir`` (``ca.crt`` when present, else the
    self-signed ``tls.crt``)."""

    needs_leader = False

    def __init__(
        self,
        client: Client,
        cert_dir: Path,
        client_config: dict[str, Any],
        namespace: str,
        *,
        interval: float = 10.0,
        clock: Clock | None = None,
    ) -> None:
        self._client = client
        self._cert_dir = cert_dir
        self._client_config = client_config
        self._namespace = namespace
        self._interval = interval
        self._clock: Clock = clock if clock is not None else SystemClock()

    async def start(self, stop: asyncio.Event) -> None:
        """Keep the configuration until ``stop`` is set; a failed pass is logged and retried."""
        while True:
            try:
                bundle = self._bundle()
                if bundle is not None:
                    await ensure_configuration(
                        self._client, bundle, self._client_config, self._namespace
                    )
            except Exception:
                log.exception(
                    "keeping %s failed; retrying in %s s", CONFIGURATION_NAME, self._interval
                )
            if await self._clock.wait(stop, self._interval):
                return

    def _bundle(self) -> bytes | None:
        for name in ("ca.crt", CERT_FILE):
            try:
                return (self._cert_dir / name).read_bytes()
            except FileNotFoundError:
                continue
        return None
