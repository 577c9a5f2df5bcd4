"""A component's identity: its ServiceAccount and the RBAC objects that grant its rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from api.v1alpha1 import ClusterPolicy
from controllers.render._engine import render_template
from controllers.render._facts import ClusterFacts
from controllers.render._meta import metadata

__all__ = ["Permissions", "account_objects"]


@dataclass(frozen=True)
class Permissions:
    """PolicyRules of a component: in the operator namespace and cluster-wide."""

    namespace_rules: tuple[dict[str, Any], ...] = ()
    cluster_rules: tuple[dict[str, Any], ...] = ()


def account_objects(
    policy: ClusterPolicy, facts: ClusterFacts, component: str, permissions: Permissions
) -> list[dict[str, Any]]:
    """ServiceAccount ``gpuctrl-<component>`` and the Role/ClusterRole (+ bindings) it needs."""
    name = f"gpuctrl-{component}"
    namespaced = metadata(policy, component, name, facts.namespace)
    objects = render_template("serviceaccount.yaml.j2", metadata=namespaced)
    objects += render_template(
        "rbac.yaml.j2",
        metadata=namespaced,
        cluster_metadata=metadata(policy, component, name, None),
        namespace_rules=list(permissions.namespace_rules),
        cluster_rules=list(permissions.cluster_rules),
    )
    return objects
