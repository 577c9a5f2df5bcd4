"""The driver: one DaemonSet per OS among the GPU nodes, with its repository mounts.

Each key of the repoConfig ConfigMap that the OS's package manager reads (``*.list`` and
``*.sources`` for apt, ``*.repo`` for yum and zypper) is mounted read-only with subPath at
``<folder>/<key>`` where the folder is the OS's repository folder, so files of the image with
other names survive; every certConfig key likewise into the OS's CA folder. Each nodeLocalPaths
entry that an enabled entry of those files refers into (a ``file://`` URI, a key file) is a
hostPath of type Directory mounted read-only at the same path, so the paths resolve; a driver
mounts no host folder its files do not use, which its nodes may lack (in a mixed cluster, the
rpm repository folder on the ubuntu nodes). A hash of the ConfigMap keys mounted on the pod
template rolls the pods when they change.
"""

from __future__ import annotations

import re
from typing import Any

from api.v1alpha1 import ClusterPolicy, image_reference
from controllers.render._account import Permissions, account_objects
from controllers.render._engine import render_template
from controllers.render._errors import MissingConfigMap, RenderError
from controllers.render._facts import (
    OS_ID_LABEL,
    OS_VERSION_LABEL,
    ClusterFacts,
    ConfigMapFacts,
    OsRelease,
)
from controllers.render._meta import (
    CONFIG_HASH,
    NODE_NAME_ENV,
    config_hash,
    daemonset_context,
    env_over,
)
from controllers.render._osfamily import OsFamily, family_of, unknown_os_message
from controllers.render._readers import used_folders

__all__ = [
    "CONFIG_HASH",
    "nodes_without_driver",
    "render_driver",
]

COMPONENT = "driver"
# The driver container's startup probe (a shell script, as NVIDIA's): the module is loaded and
# nvidia-smi answers; then the driver container's ready mark is written whole (renamed into
# place), holding the optional components' switches as NVIDIA's validator reads them (YAML).
STARTUP_PROBE = (
    "set -eu; mkdir -p /run/nvidia/validations; "
    'test -f /sys/module/nvidia/refcnt || { echo "the NVIDIA kernel module is not loaded"; '
    "exit 1; }; nvidia-smi; "
    'printf "GDRCOPY_ENABLED: %s\\nGDS_ENABLED: %s\\nGPU_DIRECT_RDMA_ENABLED: %s\\n" '
    '"${GDRCOPY_ENABLED:-false}" "${GDS_ENABLED:-false}" "${GPU_DIRECT_RDMA_ENABLED:-false}" '
    "> /run/nvidia/validations/.driver-ctr-ready.tmp; "
    "mv /run/nvidia/validations/.driver-ctr-ready.tmp /run/nvidia/validations/.driver-ctr-ready"
)
_DRIVER_ENV = ({"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},)
# NVIDIA's k8s-driver-manager (`driver-manager uninstall_driver`), before the driver container:
# the env NVIDIA's operator gives it (runc for it, GPU pods evicted, no drain), the user's
# driver.manager.env over it.
_MANAGER_ENV = (
    NODE_NAME_ENV,
    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
    {"name": "ENABLE_GPU_POD_EVICTION", "value": "true"},
    {"name": "ENABLE_AUTO_DRAIN", "value": "false"},
    {"name": "DRAIN_USE_FORCE", "value": "false"},
    {"name": "DRAIN_POD_SELECTOR_LABEL", "value": ""},
    {"name": "DRAIN_TIMEOUT_SECONDS", "value": "0s"},
    {"name": "DRAIN_DELETE_EMPTYDIR_DATA", "value": "false"},
    {"name": "OPERATOR_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
)
# What the driver manager calls: it pauses the node's operands (their deploy labels), finds
# and evicts the GPU pods, and reads the driver DaemonSet.
_PERMISSIONS = Permissions(
    namespace_rules=({"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]},),
    cluster_rules=(
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    ),
)


def render_driver(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """The driver's account and one DaemonSet per OS found among GPU nodes (none without)."""
    if not policy.spec.driver.enabled:
        return []
    repo = _config_map(facts, "spec.driver.repoConfig.configMapName", _repo_name(policy))
    certs = _config_map(facts, "spec.driver.certConfig.name", policy.spec.driver.cert_config.name)
    objects = account_objects(policy, facts, COMPONENT, _PERMISSIONS)
    for os in _operating_systems(facts):
        objects += _daemonset(policy, facts, os, repo, certs)
    return objects


def nodes_without_driver(policy: ClusterPolicy, facts: ClusterFacts) -> list[str]:
    """GPU nodes, by name, that no driver DaemonSet of `render_driver` selects because NFD has
    not labelled their OS (``ID``, ``VERSION_ID``); [] when the driver is disabled.

    `render` renders what it can for the other nodes; callers report these (``gpuctrl render``
    warns on stderr) so a node without a driver is never silent.
    """
    if not policy.spec.driver.enabled:
        return []
    return [node.name for node in facts.gpu_nodes() if node.os is None]


def _repo_name(policy: ClusterPolicy) -> str | None:
    return policy.spec.driver.repo_config.config_map_name


def _config_map(facts: ClusterFacts, path: str, name: str | None) -> ConfigMapFacts | None:
    if name is None:
        return None
    found = facts.config_map(name)
    if found is None:
        raise MissingConfigMap(path, name, facts.namespace)
    return found


def _operating_systems(facts: ClusterFacts) -> list[OsRelease]:
    found = {node.os for node in facts.gpu_nodes() if node.os is not None}
    return sorted(found, key=lambda os: (os.id, os.version_id))


def _daemonset(
    policy: ClusterPolicy,
    facts: ClusterFacts,
    os: OsRelease,
    repo: ConfigMapFacts | None,
    certs: ConfigMapFacts | None,
) -> list[dict[str, Any]]:
    driver = policy.spec.driver
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    mounted: list[ConfigMapFacts] = []
    used: list[str] = []
    if repo is not None:
        family = _family(os, "spec.driver.repoConfig.configMapName")
        repo = _keys_read_by(family, repo)
        _add_config_map(mounts, volumes, "repo-config", repo, family.repository_folder)
        mounted.append(repo)
        used = used_folders(family, repo, driver.repo_config.node_local_paths)
    if certs is not None:
        family = _family(os, "spec.driver.certConfig.name")
        _add_config_map(mounts, volumes, "cert-config", certs, family.ca_folder)
        mounted.append(certs)
    for index, path in enumerate(used):
        name = f"local-repository-{index}"
        mounts.append({"name": name, "mountPath": path, "readOnly": True})
        volumes.append({"name": name, "hostPath": {"path": path, "type": "Directory"}})
    hashed = [c for c in mounted if c.data]
    ds = daemonset_context(
        policy,
        facts,
        COMPONENT,
        driver,
        _daemonset_name(os),
        deploy_label="nvidia.com/gpu.deploy.driver",
        node_selector={OS_ID_LABEL: os.id, OS_VERSION_LABEL: os.version_id},
        image_env=_DRIVER_ENV,
        pod_annotations={CONFIG_HASH: config_hash(hashed)} if hashed else None,
        image=image_reference(driver, f"-{os.tag}"),
        on_delete=True,
    )
    manager = {
        "image": image_reference(driver.manager),
        "image_pull_policy": driver.manager.image_pull_policy,
        "env": env_over(_MANAGER_ENV, driver.manager.env),
    }
    return render_template(
        "driver.yaml.j2",
        ds=ds,
        manager=manager,
        mounts=mounts,
        volumes=volumes,
        startup_probe=STARTUP_PROBE,
    )


def _family(os: OsRelease, path: str) -> OsFamily:
    family = family_of(os.id)
    if family is None:
        raise RenderError(unknown_os_message(path, os))
    return family


def _keys_read_by(family: OsFamily, config_map: ConfigMapFacts) -> ConfigMapFacts:
    """The part of ``config_map`` that ``family``'s package manager reads."""
    data = {key: text for key, text in config_map.data.items() if family.reads(key)}
    return ConfigMapFacts(name=config_map.name, data=data)


def _add_config_map(
    mounts: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    volume: str,
    config_map: ConfigMapFacts,
    folder: str,
) -> None:
    if not config_map.data:
        return
    volumes.append({"name": volume, "configMap": {"name": config_map.name}})
    for key in sorted(config_map.data):
        mount = {"name": volume, "mountPath": f"{folder}/{key}", "subPath": key, "readOnly": True}
        mounts.append(mount)


def _daemonset_name(os: OsRelease) -> str:
    return "gpuctrl-driver-" + re.sub(r"[^a-z0-9.-]", "-", os.tag.lower()).strip("-.")
