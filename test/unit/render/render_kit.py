"""Rendering one operand's pod for the render tests: a GPU node with NFD's labels, the policy
from a spec mapping."""

from __future__ import annotations

from typing import Any

from api.v1alpha1 import load_cluster_policy
from controllers.render import ClusterFacts, render_component

NFD = "feature.node.kubernetes.io"
NODES = [
    {
        "metadata": {
            "name": "gpu-0",
            "labels": {
                f"{NFD}/pci-10de.present": "true",
                f"{NFD}/system-os_release.ID": "ubuntu",
                f"{NFD}/system-os_release.VERSION_ID": "22.04",
            },
        }
    }
]


def pod_of(component: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The pod spec of ``component``'s DaemonSet for a policy with ``spec``, on `NODES`."""
    policy = load_cluster_policy({"spec": spec or {}})
    facts = ClusterFacts.from_objects("gpuctrl", NODES, [])
    [ds] = [o for o in render_component(component, policy, facts) if o["kind"] == "DaemonSet"]
    pod: dict[str, Any] = ds["spec"]["template"]["spec"]
    return pod
