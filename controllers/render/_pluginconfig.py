"""``devicePlugin.config`` as NVIDIA's operator applies it to the device plugin, GPU feature
discovery and the MPS control daemon: NVIDIA's config-manager as an init container
(``ONESHOT=true``: picks the node's config before the operand starts) and a sidecar (watches
the node's ``nvidia.com/device-plugin.config`` label and sends the operand SIGHUP when it
changes, which is why the pod shares its process namespace, the MPS daemon's the host's), the
configs at ``/available-configs``, the chosen one linked at ``/config/config.yaml`` in an
emptyDir every container shares, ``CONFIG_FILE`` pointing the operand at it.

Unlike NVIDIA's operator, the pods never mount the user's ConfigMap: config-manager reads the
mounted files, so a bad edit of that ConfigMap would reach every node. Each operand mounts a
ConfigMap of its own (`copy_name`) holding the user's configs once `config_problems` accepts
them all and ``default`` names one of them; while any is refused, the render fails with
`InvalidDevicePluginConfig` and the controller keeps the last good copy and DaemonSet. The
copy's data hash is on the pod template, so a change of the configs rolls the pods (NVIDIA's
config-manager only reacts to the label); a change of a node's label does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from api.v1alpha1 import ClusterPolicy, Component, image_reference, wire
from controllers.render._engine import render_template
from controllers.render._errors import InvalidDevicePluginConfig
from controllers.render._facts import ClusterFacts, ConfigMapFacts
from controllers.render._meta import (
    CONFIG_HASH,
    NODE_NAME_ENV,
    DaemonSetContext,
    config_hash,
    daemonset_context,
    metadata,
)
from controllers.render._sharing import config_problems

__all__ = ["CONFIG_LABEL", "ConfigManager", "config_managed", "copy_name"]

CONFIG_LABEL = "nvidia.com/device-plugin.config"
"""The Node label whose value names the config a node runs (read by NVIDIA's config-manager)."""
_AVAILABLE = "/available-configs"
_CONFIG_DIR = "/config"
_CONFIG_FILE = "/config/config.yaml"
_AVAILABLE_VOLUME = "available-configs"
_CONFIG_VOLUME = "config"
_MOUNTS = (
    {"name": _CONFIG_VOLUME, "mountPath": _CONFIG_DIR},
    {"name": _AVAILABLE_VOLUME, "mountPath": _AVAILABLE},
)
_SIGHUP = "1"


@dataclass(frozen=True)
class ConfigManager:
    """What an operand's DaemonSet gets for ``devicePlugin.config``; empty when it is unset."""

    objects: list[dict[str, Any]] = field(default_factory=list)  # the copy of the configs
    init_containers: list[dict[str, Any]] = field(default_factory=list)
    containers: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    env: tuple[dict[str, Any], ...] = ()  # the operand's own container's
    mounts: list[dict[str, Any]] = field(default_factory=list)  # the operand's own container's
    pod_annotations: dict[str, str] = field(default_factory=dict)
    share_process_namespace: bool = False


def copy_name(component: str) -> str:
    """The ConfigMap of ``component`` that holds the accepted configs."""
    return f"gpuctrl-{component}-config"


def config_managed(
    policy: ClusterPolicy,
    facts: ClusterFacts,
    component: str,
    operand: Component,
    process: str,
    *,
    deploy_label: str,
    image_env: tuple[dict[str, Any], ...] = (),
    node_selector: Mapping[str, str] | None = None,
) -> tuple[ConfigManager, DaemonSetContext]:
    """``component``'s config-manager (`_config_manager`) and the context of its DaemonSet
    ``gpuctrl-<component>`` (`daemonset_context` with ``deploy_label``, ``node_selector`` and
    ``image_env``), which carries the config-manager's env and its copy's hash."""
    manager = _config_manager(policy, facts, component, operand, process)
    ds = daemonset_context(
        policy,
        facts,
        component,
        operand,
        f"gpuctrl-{component}",
        deploy_label=deploy_label,
        node_selector=node_selector,
        image_env=image_env + manager.env,
        pod_annotations=manager.pod_annotations,
    )
    return manager, ds


def _config_manager(
    policy: ClusterPolicy, facts: ClusterFacts, component: str, operand: Component, process: str
) -> ConfigManager:
    """The config-manager containers, volumes and copy ConfigMap of ``component``, configured
    by ``operand`` (its resources are the config-manager's too, as NVIDIA's), whose main
    process (the one signalled) is ``process``. Raises `MissingConfigMap` or
    `InvalidDevicePluginConfig` while the configs may not reach a node."""
    configs = _accepted(policy, facts)
    if configs is None:
        return ConfigManager()
    plugin = policy.spec.device_plugin
    copy = ConfigMapFacts(name=copy_name(component), data=configs.data)
    container: dict[str, Any] = {
        "image": image_reference(plugin),
        "imagePullPolicy": plugin.image_pull_policy,
        "command": ["config-manager"],
    }
    if operand.resources is not None:
        container["resources"] = wire(operand.resources)
    default = plugin.config.default or ""
    return ConfigManager(
        objects=render_template(
            "configmap.yaml.j2",
            metadata=metadata(policy, component, copy.name, facts.namespace),
            data=dict(copy.data),
        ),
        init_containers=[
            {
                "name": "config-manager-init",
                **container,
                "env": _env(oneshot=True, default=default, signal=None),
                "volumeMounts": list(_MOUNTS),
            }
        ],
        containers=[
            {
                "name": "config-manager",
                **container,
                "env": _env(oneshot=False, default=default, signal=process),
                "securityContext": {"privileged": True},
                "volumeMounts": list(_MOUNTS),
            }
        ],
        volumes=[
            {"name": _CONFIG_VOLUME, "emptyDir": {}},
            {"name": _AVAILABLE_VOLUME, "configMap": {"name": copy.name}},
        ],
        env=({"name": "CONFIG_FILE", "value": _CONFIG_FILE},),
        mounts=list(_MOUNTS),
        pod_annotations={CONFIG_HASH: config_hash([copy])},
        share_process_namespace=True,
    )


def _accepted(policy: ClusterPolicy, facts: ClusterFacts) -> ConfigMapFacts | None:
    """The user's ConfigMap of configs, every one of them accepted; None when none is set."""
    config = policy.spec.device_plugin.config
    found = facts.named_config_map("spec.devicePlugin.config.name", config.name)
    if found is None:
        return None
    problems = [str(p) for p in config_problems(found.data, policy.spec.mig.strategy)]
    if not found.data:
        problems.append("holds no config: each key is one (e.g. default, time-sliced-4)")
    elif config.default is not None and config.default not in found.data:
        known = ", ".join(sorted(found.data))
        problems.append(f"spec.devicePlugin.config.default: no config {config.default!r} ({known})")
    if problems:
        raise InvalidDevicePluginConfig(found.name, problems)
    return found


def _env(*, oneshot: bool, default: str, signal: str | None) -> list[dict[str, Any]]:
    """config-manager's env as NVIDIA's manifests and transform set it: the node's label,
    where the configs are and where the chosen one goes, the default, no config when neither
    the label nor the default names one (``FALLBACK_STRATEGIES=empty``), and whom to signal."""
    return [
        {"name": "ONESHOT", "value": str(oneshot).lower()},
        {"name": "KUBECONFIG", "value": ""},
        NODE_NAME_ENV,
        {"name": "NODE_LABEL", "value": CONFIG_LABEL},
        {"name": "CONFIG_FILE_SRCDIR", "value": _AVAILABLE},
        {"name": "CONFIG_FILE_DST", "value": _CONFIG_FILE},
        {"name": "DEFAULT_CONFIG", "value": default},
        {"name": "SEND_SIGNAL", "value": str(signal is not None).lower()},
        {"name": "SIGNAL", "value": _SIGHUP if signal is not None else ""},
        {"name": "PROCESS_TO_SIGNAL", "value": signal or ""},
        {"name": "FALLBACK_STRATEGIES", "value": "empty"},
    ]
