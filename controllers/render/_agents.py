"""gpuctrl's node agents (toolkit, validator) and NVIDIA's device plugin.

The agents read their settings from environment variables holding camelCase JSON of the API
types, so an agent parses them with the same models the policy used:

- toolkit: ``GPUCTRL_CONTAINERD`` (`api.v1alpha1.ContainerdSettings`; ``runtimeClassName``
  always set, other unset fields detected on the node), ``GPUCTRL_INSTALL_DIR``, and the
  host's root mounted at ``/host``.
- validator: one init container per check running ``gpuctrl validate <check>`` (driver,
  toolkit, cuda, plugin); the cuda and plugin checks get ``GPUCTRL_VALIDATOR_WORKLOADS``
  (`api.v1alpha1.ValidatorWorkloads`; ``configMapName`` and ``runtimeClassName`` always set:
  the ConfigMap of the templates in the operator namespace, the workload pods' runtime class).
"""

from __future__ import annotations

import json
from typing import Any

from api.v1alpha1 import ClusterPolicy, ValidatorWorkloads, wire
from controllers.render._account import Permissions, account_objects
from controllers.render._engine import render_template
from controllers.render._errors import MissingConfigMap, RenderError
from controllers.render._facts import ClusterFacts
from controllers.render._meta import daemonset_context, env, metadata

__all__ = [
    "WORKLOADS_CONFIG_MAP",
    "effective_workloads",
    "render_device_plugin",
    "render_toolkit",
    "render_validator",
    "runtime_handler",
]

WORKLOADS_CONFIG_MAP = "gpuctrl-validator-workloads"
WORKLOAD_TEMPLATE_KEYS = ("cuda.yaml", "plugin.yaml")
_CHECKS = ("driver", "toolkit", "cuda", "plugin")
_WORKLOAD_CHECKS = ("cuda", "plugin")  # the checks that create workload pods
_READ_NODES = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
_AGENT_PERMISSIONS = Permissions(cluster_rules=(_READ_NODES,))
_VALIDATOR_PERMISSIONS = Permissions(
    namespace_rules=(
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["create", "delete", "get", "list", "watch"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
    ),
    cluster_rules=(_READ_NODES,),
)


def _json_env(name: str, value: Any) -> dict[str, str]:
    return {"name": name, "value": json.dumps(value, sort_keys=True)}


def render_toolkit(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """The toolkit agent's account and DaemonSet (nothing when disabled)."""
    toolkit = policy.spec.toolkit
    if not toolkit.enabled:
        return []
    containerd = toolkit.containerd.model_copy(
        update={"runtime_class_name": runtime_handler(policy)}
    )
    ds = daemonset_context(
        policy,
        facts,
        "toolkit",
        toolkit,
        "gpuctrl-toolkit",
        deploy_label="nvidia.com/gpu.deploy.container-toolkit",
    )
    variables = env(
        toolkit.env,
        _json_env("GPUCTRL_CONTAINERD", wire(containerd)),
        {"name": "GPUCTRL_INSTALL_DIR", "value": toolkit.install_dir},
    )
    objects = account_objects(policy, facts, "toolkit", _AGENT_PERMISSIONS)
    return objects + render_template("toolkit.yaml.j2", ds=ds, env=variables)


def runtime_handler(policy: ClusterPolicy) -> str:
    """The containerd runtime the NVIDIA RuntimeClass points at."""
    spec = policy.spec
    return spec.toolkit.containerd.runtime_class_name or spec.operator.runtime_class


def effective_workloads(policy: ClusterPolicy) -> ValidatorWorkloads:
    """The validator's workload settings with the template ConfigMap and runtime class filled in."""
    workloads = policy.spec.validator.workloads
    return workloads.model_copy(
        update={
            "config_map_name": workloads.config_map_name or WORKLOADS_CONFIG_MAP,
            "runtime_class_name": workloads.runtime_class_name
            or policy.spec.operator.runtime_class,
        }
    )


def render_validator(
    policy: ClusterPolicy, facts: ClusterFacts, templates: dict[str, str]
) -> list[dict[str, Any]]:
    """The validator's account, DaemonSet and the ConfigMap of the built-in ``templates``."""
    validator = policy.spec.validator
    if not validator.enabled:
        return []
    _check_user_templates(policy, facts)
    ds = daemonset_context(
        policy,
        facts,
        "validator",
        validator,
        "gpuctrl-validator",
        deploy_label="nvidia.com/gpu.deploy.operator-validator",
    )
    workloads = _json_env("GPUCTRL_VALIDATOR_WORKLOADS", wire(effective_workloads(policy)))
    checks = [
        {
            "name": name,
            "env": env(
                getattr(validator, name).env + validator.env,
                *([workloads] if name in _WORKLOAD_CHECKS else []),
            ),
        }
        for name in _CHECKS
    ]
    objects = account_objects(policy, facts, "validator", _VALIDATOR_PERMISSIONS)
    objects += render_template("validator.yaml.j2", ds=ds, checks=checks)
    objects += render_template(
        "configmap.yaml.j2",
        metadata=metadata(policy, "validator", WORKLOADS_CONFIG_MAP, facts.namespace),
        data=templates,
    )
    return objects


def _check_user_templates(policy: ClusterPolicy, facts: ClusterFacts) -> None:
    name = policy.spec.validator.workloads.config_map_name
    if name is None:
        return
    path = "spec.validator.workloads.configMapName"
    found = facts.config_map(name)
    if found is None:
        raise MissingConfigMap(path, name, facts.namespace)
    missing = [key for key in WORKLOAD_TEMPLATE_KEYS if key not in found.data]
    if missing:
        raise RenderError(f"{path}: ConfigMap {name!r} lacks the key(s) {', '.join(missing)}")


def render_device_plugin(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """NVIDIA's device plugin's account and DaemonSet (nothing when disabled)."""
    plugin = policy.spec.device_plugin
    if not plugin.enabled:
        return []
    ds = daemonset_context(
        policy,
        facts,
        "device-plugin",
        plugin,
        "gpuctrl-device-plugin",
        deploy_label="nvidia.com/gpu.deploy.device-plugin",
    )
    objects = account_objects(policy, facts, "device-plugin", _AGENT_PERMISSIONS)
    return objects + render_template("device-plugin.yaml.j2", ds=ds)
