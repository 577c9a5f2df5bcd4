"""The MutatingWebhookConfiguration ``gpuctrl-pod-policy``: its content, and keeping it so.

Its name sorts before ``istio-sidecar-injector`` and ``istio-revision-tag-*``: the apiserver
calls configurations in name order, so the mesh opt-out label gpuctrl adds is on the pod
before Istio's objectSelector is evaluated, and Istio's injector is then never called. Only
pods labelled ``app.kubernetes.io/managed-by: gpuctrl`` in the operands' namespace (selected by
its ``kubernetes.io/metadata.name`` label, which the apiserver sets on every namespace since
1.21) are sent to it, and never the kubelet's mirror pods (a ``matchConditions`` rule, 1.28+),
so an outage of the webhook can never block anybody else's pods.

It holds two webhooks calling the same endpoint, which differ in what an outage does:

- ``pod-policy.gpuctrl.io``: the validator's workload pods (``failurePolicy: Fail``). These
  run to completion, so a mesh sidecar injected for want of the opt-out would hang them: such
  a pod is refused until the webhook answers, and the validator creates it again.
- ``operand-pod-policy.gpuctrl.io``: every other gpuctrl pod, the driver, toolkit, validator
  and device plugin (``failurePolicy: Ignore``). A webhook outage must never keep them off a
  new or rebooted node: such a pod then starts without its PodPolicies' changes.
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
    "OPERAND_WEBHOOK_NAME",
    "WEBHOOK_NAME",
    "WEBHOOK_NAMES",
    "ConfigurationKeeper",
    "ensure_configuration",
    "published_bundle",
    "read_configuration",
    "webhook_configuration",
]

log = logging.getLogger("gpuctrl.webhook")

CONFIGURATION_NAME = "gpuctrl-pod-policy"
WEBHOOK_NAME = "pod-policy.gpuctrl.io"
OPERAND_WEBHOOK_NAME = "operand-pod-policy.gpuctrl.io"
WEBHOOK_NAMES = (WEBHOOK_NAME, OPERAND_WEBHOOK_NAME)
_MANAGED = {"app.kubernetes.io/managed-by": "gpuctrl"}
_COMPONENT = "app.kubernetes.io/component"
_WORKLOADS = "validator-workloads"
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
            _webhook(
                WEBHOOK_NAME,
                {"matchLabels": {**_MANAGED, _COMPONENT: _WORKLOADS}},
                "Fail",
                client_config,
                ca_bundle,
                namespace,
            ),
            _webhook(
                OPERAND_WEBHOOK_NAME,
                {
                    "matchLabels": _MANAGED,
                    "matchExpressions": [
                        {"key": _COMPONENT, "operator": "NotIn", "values": [_WORKLOADS]}
                    ],
                },
                "Ignore",
                client_config,
                ca_bundle,
                namespace,
            ),
        ],
    }


def _webhook(
    name: str,
    object_selector: dict[str, Any],
    failure_policy: str,
    client_config: dict[str, Any],
    ca_bundle: bytes,
    namespace: str,
) -> dict[str, Any]:
    return {
        "name": name,
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
        "objectSelector": object_selector,
        "matchConditions": [NOT_A_MIRROR_POD],
        "failurePolicy": failure_policy,
        "sideEffects": "None",
        "timeoutSeconds": 5,
        "reinvocationPolicy": "IfNeeded",
        "admissionReviewVersions": ["v1"],
        "matchPolicy": "Equivalent",
    }


def published_bundle(configuration: dict[str, Any] | None) -> bytes | None:
    """The caBundle (PEM) the apiserver trusts for every one of gpuctrl's webhooks: None
    without any, empty while they disagree (a change half made: nothing new is trusted yet)."""
    if configuration is None:
        return None
    bundles = {
        base64.b64decode(webhook.get("clientConfig", {}).get("caBundle", ""))
        for webhook in configuration.get("webhooks") or ()
        if webhook.get("name") in WEBHOOK_NAMES
    }
    if not bundles:
        return None
    return bundles.pop() if len(bundles) == 1 else b""


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
                if w.get("name") in WEBHOOK_NAMES
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
