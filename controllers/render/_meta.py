"""Metadata and DaemonSet scaffolding every operand shares."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api.v1alpha1 import ClusterPolicy, Component, EnvVar, image_reference, wire
from controllers.render._facts import ClusterFacts, ConfigMapFacts

__all__ = [
    "COMPONENT",
    "CONFIG_HASH",
    "MANAGED_BY",
    "NODE_NAME_ENV",
    "NVIDIA_APPS",
    "SELECTOR",
    "DaemonSetContext",
    "config_hash",
    "daemonset_context",
    "env",
    "env_entries",
    "env_over",
    "metadata",
    "pod_selector",
]

MANAGED_BY = "app.kubernetes.io/managed-by"
COMPONENT = "app.kubernetes.io/component"
SELECTOR = "app"
"""The pod label NVIDIA's node agents find an operand's pods by (NVIDIA's k8s-driver-manager
waits for the GPU clients to stop, NVIDIA's MIG manager waits for them and deletes the
validator's pods, by ``app=<NVIDIA's value>``); valued as in `NVIDIA_APPS`, or with the
DaemonSet's name for the driver."""
NVIDIA_APPS: Mapping[str, str] = {
    "toolkit": "nvidia-container-toolkit-daemonset",
    "validator": "nvidia-operator-validator",
    "device-plugin": "nvidia-device-plugin-daemonset",
    "mps-control-daemon": "nvidia-device-plugin-mps-control-daemon",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "dcgm": "nvidia-dcgm",
    "dcgm-exporter": "nvidia-dcgm-exporter",
    "mig-manager": "nvidia-mig-manager",
    "node-status-exporter": "nvidia-node-status-exporter",
}
"""The `SELECTOR` value of each component's pods, NVIDIA's (assets/state-*): its DaemonSet then
selects them by `pod_selector`. The driver is not here: it has one DaemonSet per OS, each
selecting ``app=<its name>`` (a selector never changes in place, and replacing the driver's
DaemonSets would restart every driver), and no NVIDIA agent looks for its pods."""
CONFIG_HASH = "gpuctrl.io/config-hash"
"""The pod template annotation holding `config_hash` of the ConfigMaps its pods read: a change
of their content rolls the pods."""

# The operand's own pod environment: where it runs, filled in by the kubelet.
NODE_NAME_ENV = {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
"""The node a pod runs on, as the kubelet fills it in."""
_DOWNWARD_ENV = (
    NODE_NAME_ENV,
    {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
)


def metadata(
    policy: ClusterPolicy,
    component: str,
    name: str,
    namespace: str | None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Object metadata with the operator's labels and annotations and gpuctrl's own labels.

    gpuctrl's labels are applied last, so no user label can hide what gpuctrl manages.
    """
    operator = policy.spec.operator
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = {
        **operator.labels,
        **(labels or {}),
        MANAGED_BY: "gpuctrl",
        COMPONENT: component,
    }
    merged = {**operator.annotations, **(annotations or {})}
    if merged:
        meta["annotations"] = merged
    return meta


def pod_selector(component: str) -> dict[str, str]:
    """The labels that select ``component``'s pods for its one DaemonSet and its Services:
    gpuctrl's own, which no NVIDIA pod and no PodPolicy carries."""
    return {MANAGED_BY: "gpuctrl", COMPONENT: component}


def config_hash(config_maps: Iterable[ConfigMapFacts]) -> str:
    """A digest of the names and data of ``config_maps``."""
    content = {c.name: dict(c.data) for c in config_maps}
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def env_entries(values: Mapping[str, str | Mapping[str, Any]]) -> tuple[dict[str, Any], ...]:
    """Container env entries of ``values`` in their order: a string is a ``value``, a mapping a
    ``valueFrom``."""
    return tuple(
        {"name": name, "value": value}
        if isinstance(value, str)
        else {"name": name, "valueFrom": dict(value)}
        for name, value in values.items()
    )


def env(variables: list[EnvVar], *extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Container env: kubelet-filled variables, then ``extra``, then the user's ``variables``.

    Each name appears once, where it first appeared, holding the value of its last entry.
    """
    return env_over((*_DOWNWARD_ENV, *extra), variables)


def env_over(base: tuple[dict[str, Any], ...], variables: list[EnvVar]) -> list[dict[str, Any]]:
    """``base``, then the user's ``variables``: each name once, where it first appeared,
    holding the value of its last entry."""
    merged: dict[str, dict[str, Any]] = {}
    for variable in (*base, *(wire(v) for v in variables)):
        merged[variable["name"]] = variable
    return list(merged.values())


@dataclass(frozen=True)
class DaemonSetContext:
    """What the shared DaemonSet template needs; see templates/daemonset.yaml.j2."""

    metadata: dict[str, Any]
    selector: dict[str, str]
    update_strategy: dict[str, Any]
    pod_metadata: dict[str, Any]
    service_account: str
    priority_class_name: str
    node_selector: dict[str, str]
    affinity: dict[str, Any] | None
    tolerations: list[dict[str, Any]]
    image_pull_secrets: list[dict[str, str]]
    image: str
    image_pull_policy: str
    args: list[str]
    env: list[dict[str, Any]]
    resources: dict[str, Any] | None


def daemonset_context(
    policy: ClusterPolicy,
    facts: ClusterFacts,
    component: str,
    spec: Component,
    name: str,
    *,
    deploy_label: str,
    node_selector: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
    image: str | None = None,
    image_env: tuple[dict[str, Any], ...] = (),
    on_delete: bool = False,
) -> DaemonSetContext:
    """The context of operand DaemonSet ``name`` for ``component`` configured by ``spec``.

    Pods select nodes labelled ``deploy_label=true`` (NVIDIA's labels) plus the policy's
    ``daemonsets.nodeSelector`` and ``node_selector``; ``image`` overrides ``spec``'s image;
    ``image_env`` is what the image needs in its env (the user's ``env`` overrides it);
    ``on_delete``: OnDelete whatever ``daemonsets.updateStrategy`` says (the driver's pods are
    replaced by the upgrade controller alone). Its pods carry NVIDIA's ``app`` value
    (`NVIDIA_APPS`) and it selects them by `pod_selector`; a driver DaemonSet by
    ``app=<name>``.
    """
    daemonsets = policy.spec.daemonsets
    if component in NVIDIA_APPS:
        selector = pod_selector(component)
        pod_labels = {**daemonsets.labels, SELECTOR: NVIDIA_APPS[component]}
    else:
        selector = {SELECTOR: name}
        pod_labels = {**daemonsets.labels, **selector}
    annotations = {**daemonsets.annotations, **(pod_annotations or {})}
    pod_metadata = metadata(policy, component, name, None, pod_labels, annotations)
    del pod_metadata["name"]  # pods are named by the DaemonSet controller
    strategy: dict[str, Any] = {"type": "OnDelete" if on_delete else daemonsets.update_strategy}
    if strategy["type"] == "RollingUpdate":
        strategy["rollingUpdate"] = wire(daemonsets.rolling_update)
    return DaemonSetContext(
        metadata=metadata(policy, component, name, facts.namespace, daemonsets.labels),
        selector=selector,
        update_strategy=strategy,
        pod_metadata=pod_metadata,
        service_account=f"gpuctrl-{component}",
        priority_class_name=daemonsets.priority_class_name,
        node_selector={
            **daemonsets.node_selector,
            **(node_selector or {}),
            deploy_label: "true",
        },
        affinity=daemonsets.affinity,
        tolerations=[wire(t) for t in daemonsets.tolerations],
        image_pull_secrets=[{"name": s} for s in spec.image_pull_secrets],
        image=image or image_reference(spec),
        image_pull_policy=spec.image_pull_policy,
        args=list(spec.args),
        env=env(spec.env, *image_env),
        resources=wire(spec.resources) if spec.resources else None,
    )
