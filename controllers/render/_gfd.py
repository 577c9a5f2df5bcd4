"""GPU feature discovery: NVIDIA's ``gpu-feature-discovery`` (of the device plugin's image),
as NVIDIA's operator deploys it (assets/gpu-feature-discovery and its transform)."""

from __future__ import annotations

from typing import Any

from api.v1alpha1 import ClusterPolicy
from controllers.render._account import READ_NODES, Permissions, account_objects
from controllers.render._agents import gated_pod, mig_env
from controllers.render._engine import render_template
from controllers.render._facts import ClusterFacts
from controllers.render._meta import env_entries
from controllers.render._pluginconfig import config_managed

__all__ = ["FEATURES_DIR", "render_gfd"]

COMPONENT = "gpu-feature-discovery"
FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
"""Where node-feature-discovery's local source reads feature files (on the host, and here)."""
# NVIDIA's account: Nodes read cluster-wide; its own pod and NFD's NodeFeature objects (the
# NodeFeature API, how NFD learns its labels when its local source is off) in the namespace.
_PERMISSIONS = Permissions(
    namespace_rules=(
        {
            "apiGroups": ["nfd.k8s-sigs.io"],
            "resources": ["nodefeatures"],
            "verbs": ["get", "list", "watch", "create", "update"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
    ),
    cluster_rules=(READ_NODES,),
)
_ENV = (
    {"name": "GFD_SLEEP_INTERVAL", "value": "60s"},
    {"name": "GFD_FAIL_ON_INIT_ERROR", "value": "true"},
    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
)


def render_gfd(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """GPU feature discovery's account and DaemonSet (nothing when disabled): the env NVIDIA's
    operator gives its image (the MIG strategy as the device plugin gets it), started once the
    validator's toolkit check passed; with ``devicePlugin.config``, NVIDIA's config-manager
    (of the device plugin's image, as NVIDIA's) and the copy of the accepted configs."""
    gfd = policy.spec.gfd
    if not gfd.enabled:
        return []
    manager, ds = config_managed(
        policy,
        facts,
        COMPONENT,
        gfd,
        "gpu-feature-discovery",
        deploy_label="nvidia.com/gpu.deploy.gpu-feature-discovery",
        image_env=_ENV + env_entries(mig_env(policy)),
    )
    objects = account_objects(policy, facts, COMPONENT, _PERMISSIONS)
    return (
        objects
        + manager.objects
        + render_template(
            "gfd.yaml.j2",
            ds=ds,
            config_manager=manager,
            host_network=gfd.host_network,
            features_dir=FEATURES_DIR,
            **gated_pod(policy),
        )
    )
