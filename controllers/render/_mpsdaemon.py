"""NVIDIA's MPS control daemon, as NVIDIA's operator deploys it (assets/state-mps-control-daemon
and ``TransformMPSControlDaemon``): whenever the device plugin is deployed, of its image, pull
policy, pull secrets and resources (not its args and env, which are the plugin's command line),
on the nodes with the device plugin's deploy label that GPU feature discovery labelled
``nvidia.com/mps.capable=true`` (their config shares GPUs by MPS).

An init container of the same image mounts a tmpfs at ``<root>/shm`` on the host
(``mps-control-daemon mount-shm``, its ``/mps`` propagated both ways), which the daemon uses as
its ``/dev/shm`` and the device plugin mounts into the pods it gives a shared GPU; the daemon
starts one MPS server per shared resource, with its pipes and logs under ``<root>``
(``devicePlugin.mps.root``). With ``devicePlugin.config`` it gets NVIDIA's config-manager as
the device plugin does (`controllers.render._pluginconfig`), its own copy of the accepted
configs, and SIGHUP when its node's config changes. The pod is in the host's PID namespace
(NVIDIA's asset since v25.3), which also lets the sidecar find the daemon to signal.
"""

from __future__ import annotations

from typing import Any

from api.v1alpha1 import ClusterPolicy
from controllers.render._account import READ_NODES, Permissions, account_objects
from controllers.render._agents import gated_pod, mig_env
from controllers.render._engine import render_template
from controllers.render._facts import ClusterFacts
from controllers.render._meta import env_entries
from controllers.render._pluginconfig import config_managed

__all__ = ["MPS_CAPABLE", "render_mps_control_daemon"]

COMPONENT = "mps-control-daemon"
MPS_CAPABLE = "nvidia.com/mps.capable"
"""``true`` on a node whose device plugin config shares its GPUs by MPS (GPU feature discovery
writes it), the only nodes the MPS control daemon runs on."""
# config-manager reads its Node's label.
_PERMISSIONS = Permissions(cluster_rules=(READ_NODES,))
_ENV = (
    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
    {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
)


def render_mps_control_daemon(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """The MPS control daemon's account and DaemonSet, with the device plugin (nothing while
    it is disabled): the env NVIDIA's operator gives it (the MIG strategy as the device plugin
    gets it), started once the validator's toolkit check passed; with ``devicePlugin.config``,
    NVIDIA's config-manager and the copy of the accepted configs (raises `RenderError` while
    they are refused)."""
    plugin = policy.spec.device_plugin
    if not plugin.enabled:
        return []
    manager, ds = config_managed(
        policy,
        facts,
        COMPONENT,
        plugin.model_copy(update={"args": [], "env": []}),  # the plugin's own, not NVIDIA's
        "mps-control-daemon",
        deploy_label="nvidia.com/gpu.deploy.device-plugin",
        image_env=_ENV + env_entries(mig_env(policy)),
        node_selector={MPS_CAPABLE: "true"},
    )
    return (
        account_objects(policy, facts, COMPONENT, _PERMISSIONS)
        + manager.objects
        + render_template(
            "mps-control-daemon.yaml.j2",
            ds=ds,
            config_manager=manager,
            mps_root=plugin.mps.root,
            **gated_pod(policy),
        )
    )
