"""The node status exporter, as NVIDIA's operator deploys it (assets/state-node-status-exporter)
but running gpuctrl's agent, whose ``validate metrics`` serves NVIDIA's gauges."""

from __future__ import annotations

from typing import Any

from api.v1alpha1 import ClusterPolicy
from controllers.render._account import Permissions, account_objects
from controllers.render._agents import DRIVER_CHECK_PATHS, VALIDATOR_HOST_ROOT
from controllers.render._engine import render_template
from controllers.render._facts import ClusterFacts
from controllers.render._meta import daemonset_context
from controllers.render._service import service_objects

__all__ = ["NODE_STATUS_PORT", "render_node_status_exporter"]

COMPONENT = "node-status-exporter"
NODE_STATUS_PORT = 8000
"""The exporter's metrics port (NVIDIA's)."""
# Its own Node, for the GPUs the device plugin advertises there (NVIDIA's account reads Nodes).
_PERMISSIONS = Permissions(
    cluster_rules=({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},)
)
# NVIDIA's env of its image: no GPU handed to it by a runtime (it reads the host's devices).
_ENV = ({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},)


def render_node_status_exporter(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """The exporter's account, DaemonSet and node-local metrics Service (nothing when disabled,
    as by default)."""
    exporter = policy.spec.node_status_exporter
    if not exporter.enabled:
        return []
    name = f"gpuctrl-{COMPONENT}"
    ds = daemonset_context(
        policy,
        facts,
        COMPONENT,
        exporter,
        name,
        deploy_label="nvidia.com/gpu.deploy.node-status-exporter",
        image_env=_ENV,
    )
    args = [
        "validate",
        "metrics",
        "--port",
        str(NODE_STATUS_PORT),
        *DRIVER_CHECK_PATHS,
        "--node",
        "$(NODE_NAME)",
        *ds.args,
    ]
    return [
        *account_objects(policy, facts, COMPONENT, _PERMISSIONS),
        *render_template(
            "node-status-exporter.yaml.j2",
            ds=ds,
            args=args,
            port=NODE_STATUS_PORT,
            host_root=VALIDATOR_HOST_ROOT,
        ),
        *service_objects(
            policy,
            facts,
            COMPONENT,
            name,
            ("node-status", NODE_STATUS_PORT),
            annotations={
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(NODE_STATUS_PORT),
            },
        ),
    ]
