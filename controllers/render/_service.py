"""An operand's Service: the pods of its DaemonSet on one named TCP port."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.v1alpha1 import ClusterPolicy
from controllers.render._engine import render_template
from controllers.render._facts import ClusterFacts
from controllers.render._meta import SELECTOR, metadata

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
    """Service ``name`` of ``component`` selecting the pods of DaemonSet ``name`` on ``port``
    (its name and number, the same on the pods); ``Local`` by default: a client reaches the
    pod on its own node. It carries the pods' ``app`` label too (a ServiceMonitor's job)."""
    port_name, number = port
    return render_template(
        "service.yaml.j2",
        metadata=metadata(policy, component, name, facts.namespace, {SELECTOR: name}, annotations),
        type=type_,
        internal_traffic_policy=internal_traffic_policy,
        selector={SELECTOR: name},
        port_name=port_name,
        port=number,
    )
