"""A component's identity: its ServiceAccount and the RBAC objects that grant its rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.v1alpha1 import ClusterPolicy
from controllers.render._engine import render_template
from controllers.render._facts import ClusterFacts
from controllers.render._meta import metadata

__all__ = ["NODE_EVENTS_NAMESPACE", "READ_NODES", "Permissions", "account_objects"]

NODE_EVENTS_NAMESPACE = "default"
"""Where Events about Nodes live, as the kubelet's own do: besides the operand namespace, the
one namespace a component's Role may be in (so the controllers watch Roles there too)."""
READ_NODES = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
"""Read access to Nodes, which NVIDIA's manifests grant the device plugin and GFD."""


@dataclass(frozen=True)
class Permissions:
    """PolicyRules of a component: in the operator namespace, in `NODE_EVENTS_NAMESPACE`,
    cluster-wide."""

    namespace_rules: tuple[dict[str, Any], ...] = ()
    node_events_rules: tuple[dict[str, Any], ...] = ()
    cluster_rules: tuple[dict[str, Any], ...] = ()


def account_objects(
    policy: ClusterPolicy, facts: ClusterFacts, component: str, permissions: Permissions
) -> list[dict[str, Any]]:
    """ServiceAccount ``gpuctrl-<component>`` and the Roles/ClusterRole (+ bindings) it needs.

    One Role per namespace, the operator namespace's first; when the operator namespace is
    `NODE_EVENTS_NAMESPACE` both sets of rules are in its one Role.
    """
    name = f"gpuctrl-{component}"
    namespaced = metadata(policy, component, name, facts.namespace)
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    if permissions.namespace_rules:
        by_namespace[facts.namespace] = list(permissions.namespace_rules)
    if permissions.node_events_rules:
        rules = by_namespace.setdefault(NODE_EVENTS_NAMESPACE, [])
        rules.extend(permissions.node_events_rules)
    objects = render_template("serviceaccount.yaml.j2", metadata=namespaced)
    objects += render_template(
        "rbac.yaml.j2",
        account=namespaced,
        roles=[
            {"metadata": metadata(policy, component, name, namespace), "rules": rules}
            for namespace, rules in by_namespace.items()
        ],
        cluster_metadata=metadata(policy, component, name, None),
        cluster_rules=list(permissions.cluster_rules),
    )
    return objects
