"""An operand's Service: the pods of its DaemonSet on one named TCP port."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.v1alpha1 import ClusterPolicy
from controllers.render._engine import render_template
from controllers.render._facts import ClusterFacts
from controllers.render._meta import NVIDIA_APPS, SELECTOR, metadata, pod_selector

__all__ = ["service_objects"]


def service_objects(
    policy: ClusterPolicy,
    facts: ClusterFacts,
    component: str,
    name: str,
    port: tuple[str, int],
    *,
    type_: str = "ClusterIP",
    internal_traffic_policy: str = "Local",
    annotations: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Service ``name`` selecting ``component``'s pods on ``port`` (its name and number, the
    same on the pods); ``Local`` by default: a client reaches the pod on its own node. It
    carries the pods' ``app`` label too, NVIDIA's value (a ServiceMonitor's job)."""
    port_name, number = port
    labels = {SELECTOR: NVIDIA_APPS[component]}
    return render_template(
        "service.yaml.j2",
        metadata=metadata(policy, component, name, facts.namespace, labels, annotations),
        type=type_,
        internal_traffic_policy=internal_traffic_policy,
        selector=pod_selector(component),
        port_name=port_name,
        port=number,
    )
