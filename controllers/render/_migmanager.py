"""NVIDIA's MIG manager, as NVIDIA's operator deploys it (assets/state-mig-manager and
``TransformMIGManager``), on the nodes labelled ``nvidia.com/gpu.deploy.mig-manager=true`` (the
node labeller gives that label to MIG-capable GPU nodes only).

Its two config files, the mig-parted config and the host's GPU clients, are always gpuctrl's
copies (`config_copies`): gpuctrl's defaults, or the ConfigMaps ``migManager.config.name`` and
``gpuClientsConfig.name`` name once they pass the checks of `controllers.render._migparted`
(and the config defines ``config.default``). A refused one is a `RenderError` naming the field
and the ConfigMap; the last good copy and DaemonSet run on.
"""

from __future__ import annotations

from typing import Any

from api.v1alpha1 import ClusterPolicy
from controllers.render._account import Permissions, account_objects
from controllers.render._agents import VALIDATOR_DRIVER_ROOT, cdi_hook_path, gated_pod
from controllers.render._configcopy import config_copies
from controllers.render._engine import render_template
from controllers.render._errors import RenderError
from controllers.render._facts import ClusterFacts, ConfigMapFacts
from controllers.render._meta import daemonset_context, env_entries
from controllers.render._migparted import (
    CLIENTS_KEY,
    CONFIG_KEY,
    DEFAULT_GPU_CLIENTS,
    DEFAULT_MIG_PARTED_CONFIG,
    gpu_clients_problems,
    mig_config_names,
    mig_parted_problems,
)

__all__ = ["CLIENTS_COPY", "CONFIG_COPY", "MIG_MANAGER", "render_mig_manager"]

MIG_MANAGER = "mig-manager"
CONFIG_COPY = "gpuctrl-mig-parted-config"
"""The ConfigMap the MIG manager's pods mount its mig-parted config from (gpuctrl's)."""
CLIENTS_COPY = "gpuctrl-gpu-clients"
"""The ConfigMap the MIG manager's pods mount the GPU clients file from (gpuctrl's)."""
_CONFIG_DIR = "/mig-parted-config"
_CLIENTS_DIR = "/gpu-clients"
# Its own Node's labels (mig.config, mig.config.state, the GPU clients' deploy labels, which
# its script writes with kubectl label: a PATCH) and the GPU client pods it waits for and
# deletes on its node, as NVIDIA's RBAC grants (NVIDIA's also grants update on nodes, which
# mig-manager v0.10.0 never calls).
_PERMISSIONS = Permissions(
    namespace_rules=(
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
    ),
    cluster_rules=(
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
    ),
)


def render_mig_manager(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """The MIG manager's account, its two config copies and its DaemonSet (nothing when
    disabled). Raises `RenderError` while a named config is missing or refused."""
    manager = policy.spec.mig_manager
    if not manager.enabled:
        return []
    config = ConfigMapFacts(name=CONFIG_COPY, data={CONFIG_KEY: _mig_parted_config(policy, facts)})
    clients = ConfigMapFacts(name=CLIENTS_COPY, data={CLIENTS_KEY: _gpu_clients(policy, facts)})
    copies, annotations = config_copies(policy, facts, MIG_MANAGER, [config, clients])
    ds = daemonset_context(
        policy,
        facts,
        MIG_MANAGER,
        manager,
        f"gpuctrl-{MIG_MANAGER}",
        deploy_label="nvidia.com/gpu.deploy.mig-manager",
        pod_annotations=annotations,
        image_env=_env(policy),
    )
    return [
        *account_objects(policy, facts, MIG_MANAGER, _PERMISSIONS),
        *copies,
        *render_template(
            "mig-manager.yaml.j2",
            ds=ds,
            driver_root=VALIDATOR_DRIVER_ROOT,
            config_dir=_CONFIG_DIR,
            clients_dir=_CLIENTS_DIR,
            config_map=CONFIG_COPY,
            clients_map=CLIENTS_COPY,
            **gated_pod(policy),
        ),
    ]


def _env(policy: ClusterPolicy) -> tuple[dict[str, Any], ...]:
    """The env NVIDIA's operator gives the MIG manager: its config files, the namespace of the
    GPU client pods it stops (its own), and with CDI the CDI hook the toolkit installed."""
    values: dict[str, Any] = {
        "CONFIG_FILE": f"{_CONFIG_DIR}/{CONFIG_KEY}",
        "GPU_CLIENTS_FILE": f"{_CLIENTS_DIR}/{CLIENTS_KEY}",
        "DEFAULT_GPU_CLIENTS_NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
    }
    if policy.spec.cdi.enabled:
        values["CDI_ENABLED"] = "true"
        if hook := cdi_hook_path(policy):
            values["NVIDIA_CDI_HOOK_PATH"] = hook
    return env_entries(values)


def _named(facts: ClusterFacts, path: str, name: str | None, key: str) -> str | None:
    """The text at ``key`` of the ConfigMap named at ``path`` (None when none is named)."""
    found = facts.named_config_map(path, name)
    if found is None:
        return None
    text = found.data.get(key)
    if text is None:
        raise RenderError(f"{path}: ConfigMap {found.name!r} lacks the key {key}")
    return text


def _mig_parted_config(policy: ClusterPolicy, facts: ClusterFacts) -> str:
    config = policy.spec.mig_manager.config
    path = "spec.migManager.config.name"
    text = _named(facts, path, config.name, CONFIG_KEY)
    if text is None:
        return DEFAULT_MIG_PARTED_CONFIG
    where = f"{path}: {CONFIG_KEY} of ConfigMap {config.name!r}"
    if problems := mig_parted_problems(text):
        raise RenderError(f"{where}: {'; '.join(problems)}")
    if config.default and config.default not in mig_config_names(text):
        raise RenderError(
            f"{where} defines no config {config.default!r}, which spec.migManager.config.default "
            "gives MIG-capable nodes without an nvidia.com/mig.config label"
        )
    return text


def _gpu_clients(policy: ClusterPolicy, facts: ClusterFacts) -> str:
    name = policy.spec.mig_manager.gpu_clients_config.name
    path = "spec.migManager.gpuClientsConfig.name"
    text = _named(facts, path, name, CLIENTS_KEY)
    if text is None:
        return DEFAULT_GPU_CLIENTS
    if problems := gpu_clients_problems(text):
        raise RenderError(f"{path}: {CLIENTS_KEY} of ConfigMap {name!r}: {'; '.join(problems)}")
    return text
