"""gpuctrl's node agents (toolkit, validator) and NVIDIA's device plugin.

The agents' command lines are the contract (``gpuctrl toolkit --help``, ``gpuctrl validate
--help``); the kubelet fills the ``$(VAR)`` references in them from the container's env:

- toolkit: ``toolkit run --host-root /host`` (the host's root is mounted there) with the
  runtime dir, state dir and runtime name, plus the options for the policy's set
  `api.v1alpha1.ContainerdSettings` fields; the agent detects the rest on the node. An init
  container of NVIDIA's container-toolkit image (``toolkit.runtimeImage``) first runs NVIDIA's
  installer (``nvidia-toolkit``) with ``ROOT=<installDir>``, so the runtimes, their wrappers
  and their ``.config/nvidia-container-runtime/config.toml`` land in the runtime dir,
  ``<installDir>/toolkit`` on the host. v1.17's installer always configures a runtime too:
  it is given a throw-away containerd config inside its own container, restart mode ``none``
  and ``NO_DAEMON``, so it exits after installing and leaves containerd to the agent.
- validator: one init container per check running ``validate <check> --output-dir
  /run/nvidia/validations`` (NVIDIA's folder; driver, toolkit, cuda, plugin), a hostPath shared
  by every container of the pod, so each ``<check>-ready`` lands on the host. The toolkit check
  runs nvidia-smi in its own container (``NVIDIA_VISIBLE_DEVICES=all`` under the NVIDIA runtime
  class, which the validator and device-plugin pods use). The cuda and plugin checks get
  ``--node $(NODE_NAME) --namespace $(NAMESPACE)`` and ``--overrides
  $(GPUCTRL_VALIDATOR_WORKLOADS)`` (JSON of `api.v1alpha1.ValidatorWorkloads`; ``configMapName``
  and ``runtimeClassName`` always set), and their own pod's name and uid in
  ``GPUCTRL_POD_NAME``/``GPUCTRL_POD_UID`` so the workload pods are owned by it.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any

from api.v1alpha1 import (
    CONTAINERD_DEFAULTS,
    ClusterPolicy,
    ToolkitSpec,
    ValidatorWorkloads,
    image_reference,
    wire,
)
from controllers.render._account import READ_NODES, Permissions, account_objects
from controllers.render._engine import render_template
from controllers.render._errors import RenderError
from controllers.render._facts import ClusterFacts
from controllers.render._meta import daemonset_context, env, env_entries, metadata
from controllers.render._pluginconfig import config_managed

__all__ = [
    "WORKLOADS_CONFIG_MAP",
    "cdi_hook_path",
    "effective_workloads",
    "mig_env",
    "render_device_plugin",
    "render_toolkit",
    "render_validator",
    "runtime_handler",
    "set_as_default",
    "toolkit_writable_paths",
]

WORKLOADS_CONFIG_MAP = "gpuctrl-validator-workloads"
WORKLOAD_TEMPLATE_KEYS = ("cuda.yaml", "plugin.yaml")
_CHECKS = ("driver", "toolkit", "cuda", "plugin")
_WORKLOAD_CHECKS = ("cuda", "plugin")  # the checks that create workload pods
_DEVICE_PLUGIN_PERMISSIONS = Permissions(cluster_rules=(READ_NODES,))
# The toolkit agent never calls the API: its account has no rules, its pod no token.
_TOOLKIT_PERMISSIONS = Permissions()
# What `gpuctrl validate cuda|plugin` calls: its workload pods, their logs, the templates'
# ConfigMap, and Events on the Node (in NODE_EVENTS_NAMESPACE).
_VALIDATOR_PERMISSIONS = Permissions(
    namespace_rules=(
        {
            "apiGroups": [""],
            "resources": ["pods"],
            "verbs": ["create", "delete", "get", "list", "watch"],
        },
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
    ),
    node_events_rules=({"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},),
)
# The host's root as the toolkit agent sees it, and where it keeps its journal (a host path).
TOOLKIT_HOST_ROOT = "/host"
TOOLKIT_STATE_DIR = "/var/lib/gpuctrl/toolkit"
# In the agent's container (not a host path): there while installed and handling SIGTERM, so
# the pod is Ready only once deleting it would run cleanup (the readiness probe tests it).
TOOLKIT_READY_FILE = "/run/gpuctrl/toolkit-ready"
# Where CDI specs live on every node (NVIDIA's installer and device plugin write them there).
CDI_ROOT = "/var/run/cdi"
# The CDI kind of the management containers' spec that NVIDIA's installer writes.
MANAGEMENT_CDI_KIND = "management.nvidia.com/gpu"
# CRI-O's drop-in folder, which the agent writes its 99-nvidia.toml into.
_CRIO_DROP_IN_DIR = "/etc/crio/crio.conf.d"
# Where the containerd distributions the agent detects keep their config (see
# api.v1alpha1.CONTAINERD_DEFAULTS), one folder above the folder each is detected by.
_DETECTED_CONFIG_DIRS = ("/etc/containerd", "/var/lib/rancher", "/var/snap")
# NVIDIA's installer (tools/container/nvidia-toolkit in nvidia-container-toolkit v1.17) reads
# these; the containerd config it insists on writing is a file in the init container only.
_INSTALLER_RUNTIME_CONFIG = "/tmp/unused-containerd-config.toml"
# The driver root the toolkit's config names without a driver container: the host's own root.
_HOST_DRIVER_ROOT = "/"
# The validator's mounts: the host's root for the driver check; a driver container's root;
# the status folder (the same path on the host and in every container).
VALIDATOR_HOST_ROOT = "/host"
VALIDATOR_DRIVER_ROOT = "/run/nvidia/driver"
VALIDATOR_STATUS_DIR = "/run/nvidia/validations"
# The validator pod's main container keeps the pod up; on SIGTERM (the pod deleted, a rollout)
# it removes the status files it is given, as NVIDIA's preStop does, so no operand trusts the
# checks of a validator that is gone, and exits 0 (a bare sleep as PID 1 ignores SIGTERM).
_HOLD_SCRIPT = "trap 'rm -f -- \"$@\"; exit 0' TERM; sleep infinity & wait"
# The toolkit's first init container: the driver check, retried for up to an hour (a driver
# container builds its modules first) before the init container restarts.
DRIVER_CHECK_PATHS = [
    "--output-dir",
    VALIDATOR_STATUS_DIR,
    "--host-root",
    VALIDATOR_HOST_ROOT,
    "--driver-root",
    VALIDATOR_DRIVER_ROOT,
]
"""The agent's options of where the driver check looks and the status files are (the
validator's, the toolkit's driver check, the node status exporter)."""
_DRIVER_VALIDATION_ARGS = ["validate", "driver", "--wait", "--timeout", "3600", *DRIVER_CHECK_PATHS]
# What NVIDIA's operator sets for its device plugin image (assets/state-device-plugin and
# TransformDevicePlugin); see _device_plugin_env for what depends on the policy.
_DEVICE_PLUGIN_ENV = {
    "PASS_DEVICE_SPECS": "true",
    "FAIL_ON_INIT_ERROR": "true",
    "DEVICE_LIST_STRATEGY": "envvar",
    "DEVICE_ID_STRATEGY": "uuid",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "all",
}
_POD_ENV = (
    {"name": "GPUCTRL_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {"name": "GPUCTRL_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
)


def _json_env(name: str, value: Any) -> dict[str, str]:
    return {"name": name, "value": json.dumps(value, sort_keys=True)}


def render_toolkit(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """The toolkit agent's account (no RBAC, no API token in its pod) and DaemonSet (nothing
    when disabled)."""
    toolkit = policy.spec.toolkit
    if not toolkit.enabled:
        return []
    ds = daemonset_context(
        policy,
        facts,
        "toolkit",
        toolkit,
        "gpuctrl-toolkit",
        deploy_label="nvidia.com/gpu.deploy.container-toolkit",
    )
    objects = account_objects(policy, facts, "toolkit", _TOOLKIT_PERMISSIONS)
    args = _toolkit_args(policy) + ds.args
    installer = {
        "image": image_reference(toolkit.runtime_image),
        "install_dir": toolkit.install_dir,
        "env": _installer_env(policy),
        "cdi": policy.spec.cdi.enabled,
    }
    writable = [
        {"name": _volume_name(i, path), "path": path, "mount": TOOLKIT_HOST_ROOT + path}
        for i, path in enumerate(toolkit_writable_paths(policy))
    ]
    driver_validation = {
        "args": _DRIVER_VALIDATION_ARGS + _driver_container_flag(policy),
        "host_root": VALIDATOR_HOST_ROOT,
        "status_dir": VALIDATOR_STATUS_DIR,
    }
    return objects + render_template(
        "toolkit.yaml.j2",
        ds=ds,
        args=args,
        installer=installer,
        driver_validation=driver_validation,
        ready_file=TOOLKIT_READY_FILE,
        writable=writable,
        status_dir=VALIDATOR_STATUS_DIR,
        cdi_root=CDI_ROOT,
    )


def _runtime_dir(toolkit: ToolkitSpec) -> str:
    """The host folder NVIDIA's installer puts the runtimes in: ``<installDir>/toolkit``."""
    return posixpath.join(toolkit.install_dir, "toolkit")


def _installer_env(policy: ClusterPolicy) -> list[dict[str, str]]:
    """The env of NVIDIA's installer: install into ``<installDir>/toolkit`` and exit, leaving
    the node's containerd alone. The driver root is gpuctrl's driver container's when the
    policy deploys one, else the host's; the init container sources ``driver-ready`` over it,
    as NVIDIA's entrypoint does. With CDI the installer also writes the management
    containers' CDI spec to ``/var/run/cdi`` and puts the NVIDIA runtime in CDI mode (what
    NVIDIA's operator sets for its toolkit image)."""
    toolkit = policy.spec.toolkit
    driver_root = VALIDATOR_DRIVER_ROOT if policy.spec.driver.enabled else _HOST_DRIVER_ROOT
    values = {
        "ROOT": toolkit.install_dir,
        "RUNTIME_DIR": _runtime_dir(toolkit),
        "NO_DAEMON": "true",
        "RUNTIME": "containerd",
        "RUNTIME_CONFIG": _INSTALLER_RUNTIME_CONFIG,
        "RUNTIME_RESTART_MODE": "none",
        "NVIDIA_DRIVER_ROOT": driver_root,
        "NVIDIA_VISIBLE_DEVICES": "void",
        "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND": MANAGEMENT_CDI_KIND,
    }
    if policy.spec.cdi.enabled:
        values |= {
            "CDI_ENABLED": "true",
            "CDI_OUTPUT_DIR": CDI_ROOT,
            "NVIDIA_CONTAINER_RUNTIME_MODE": "cdi",
        }
    return list(env_entries(values))


def _volume_name(index: int, path: str) -> str:
    """A volume name (a DNS label) that says which host folder it is: ``rw-1-etc-containerd``."""
    slug = re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")
    return f"rw-{index}-{slug}"[:63].rstrip("-")


def set_as_default(policy: ClusterPolicy) -> bool:
    """Whether the NVIDIA runtime becomes the container runtime's default: as the policy says,
    else as NVIDIA's operator does (not with CDI, which needs no runtime; without CDI it is
    NVIDIA's installer's default, so pods without ``runtimeClassName`` keep getting GPUs)."""
    explicit = policy.spec.toolkit.containerd.set_as_default
    return explicit if explicit is not None else not policy.spec.cdi.enabled


def toolkit_writable_paths(policy: ClusterPolicy) -> list[str]:
    """The host folders the toolkit agent writes, each mounted read-write over the read-only
    host root: its state folder, and the runtime's config folder. For containerd that is the
    folder of ``configPath``, else of the distribution's config, else (detected per node) the
    folders under which each distribution keeps it (``/var/lib/rancher``, ``/var/snap``: not
    the folders whose presence the agent detects a distribution by)."""
    containerd = policy.spec.toolkit.containerd
    if policy.spec.operator.default_runtime == "crio":
        configs = [_CRIO_DROP_IN_DIR]
    elif containerd.config_path is not None:
        configs = [posixpath.dirname(containerd.config_path)]
    elif containerd.distribution is not None:
        configs = [posixpath.dirname(str(CONTAINERD_DEFAULTS[containerd.distribution].config_path))]
    else:
        configs = list(_DETECTED_CONFIG_DIRS)
    return [TOOLKIT_STATE_DIR, *configs]


def _toolkit_args(policy: ClusterPolicy) -> list[str]:
    """``gpuctrl toolkit run`` options: fixed ones, the runtime's, then one per set containerd
    field."""
    toolkit = policy.spec.toolkit
    containerd = toolkit.containerd
    args = [
        "toolkit",
        "run",
        "--host-root",
        TOOLKIT_HOST_ROOT,
        "--runtime-dir",
        _runtime_dir(toolkit),
        "--state-dir",
        TOOLKIT_STATE_DIR,
        "--runtime-name",
        runtime_handler(policy),
        "--ready-file",
        TOOLKIT_READY_FILE,
    ]
    if set_as_default(policy):
        args.append("--set-as-default")
    if policy.spec.operator.default_runtime == "crio":
        return [*args, "--runtime", "crio"]
    if policy.spec.cdi.enabled:
        args.append("--enable-cdi")
    for option, value in (
        ("--distribution", containerd.distribution),
        ("--config", containerd.config_path),
        ("--socket", containerd.socket_path),
        ("--drop-in-mode", containerd.drop_in_mode),
        ("--restart-mode", containerd.restart_mode),
    ):
        if value is not None:
            args += [option, value]
    return args


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
    workloads = effective_workloads(policy)
    checks = [
        {
            "name": name,
            "args": _validator_args(name, policy, workloads) + ds.args,
            # The check's own env comes last, so it wins over the validator's general env.
            "env": env(validator.env + getattr(validator, name).env, *_check_env(name, workloads)),
        }
        for name in _CHECKS
    ]
    objects = account_objects(policy, facts, "validator", _VALIDATOR_PERMISSIONS)
    objects += render_template(
        "validator.yaml.j2",
        ds=ds,
        checks=checks,
        runtime_class=policy.spec.operator.runtime_class,
        status_dir=VALIDATOR_STATUS_DIR,
        main_command=_validator_main_command(),
    )
    objects += render_template(
        "configmap.yaml.j2",
        metadata=metadata(policy, "validator", WORKLOADS_CONFIG_MAP, facts.namespace),
        data=templates,
    )
    return objects


def _validator_main_command() -> list[str]:
    """The validator's main container's command: hold the pod, and on SIGTERM remove each
    check's status file (``<check>-ready`` in `VALIDATOR_STATUS_DIR`, as `gpuctrl validate`
    writes it) and exit 0."""
    files = [posixpath.join(VALIDATOR_STATUS_DIR, f"{check}-ready") for check in _CHECKS]
    return ["sh", "-c", _HOLD_SCRIPT, "validator", *files]


def _driver_container_flag(policy: ClusterPolicy) -> list[str]:
    """The driver check's ``--driver-container`` where gpuctrl deploys the driver: it then
    waits for the driver container's ready mark, as NVIDIA's validator does."""
    return ["--driver-container"] if policy.spec.driver.enabled else []


def _validator_args(check: str, policy: ClusterPolicy, workloads: ValidatorWorkloads) -> list[str]:
    """``gpuctrl validate <check>`` options; the ``$(VAR)`` are filled in by the kubelet."""
    common = ["validate", check, "--output-dir", VALIDATOR_STATUS_DIR]
    if check == "driver":
        return ["validate", check, *DRIVER_CHECK_PATHS, *_driver_container_flag(policy)]
    if check not in _WORKLOAD_CHECKS:
        return common
    return [
        *common,
        "--node",
        "$(NODE_NAME)",
        "--namespace",
        "$(NAMESPACE)",
        "--overrides",
        "$(GPUCTRL_VALIDATOR_WORKLOADS)",
        "--image",
        workloads.image,
        "--image-pull-policy",
        workloads.image_pull_policy,
    ]


def _check_env(check: str, workloads: ValidatorWorkloads) -> tuple[dict[str, Any], ...]:
    """gpuctrl's env of one check's container (the user's env comes after it)."""
    if check == "toolkit":  # nvidia-smi in this container, through the NVIDIA runtime
        return ({"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},)
    if check in _WORKLOAD_CHECKS:
        return (*_POD_ENV, _json_env("GPUCTRL_VALIDATOR_WORKLOADS", wire(workloads)))
    return ()


def _check_user_templates(policy: ClusterPolicy, facts: ClusterFacts) -> None:
    path = "spec.validator.workloads.configMapName"
    found = facts.named_config_map(path, policy.spec.validator.workloads.config_map_name)
    if found is None:
        return
    name = found.name
    missing = [key for key in WORKLOAD_TEMPLATE_KEYS if key not in found.data]
    if missing:
        raise RenderError(f"{path}: ConfigMap {name!r} lacks the key(s) {', '.join(missing)}")


def gated_pod(policy: ClusterPolicy) -> dict[str, str]:
    """The template context of an operand pod under the NVIDIA runtime class that waits for the
    validator's toolkit check (templates/toolkit-gate.yaml.j2): ``runtime_class``,
    ``gate_image``, ``status_dir``."""
    return {
        "runtime_class": policy.spec.operator.runtime_class,
        "gate_image": image_reference(policy.spec.validator),
        "status_dir": VALIDATOR_STATUS_DIR,
    }


def mig_env(policy: ClusterPolicy) -> dict[str, str]:
    """The MIG env NVIDIA's operator gives the device plugin and GPU feature discovery: the
    strategy, and MIG devices monitored unless it is ``none``."""
    strategy = policy.spec.mig.strategy
    values: dict[str, str] = {"MIG_STRATEGY": strategy}
    if strategy != "none":
        values["NVIDIA_MIG_MONITOR_DEVICES"] = "all"
    return values


def _device_plugin_env(policy: ClusterPolicy) -> tuple[dict[str, str], ...]:
    """The device plugin image's env as NVIDIA's operator sets it: the MPS root, the MIG
    strategy (MIG devices monitored unless it is ``none``) and, with CDI, GPUs handed out as CDI
    devices (annotations and the CRI field) with the CDI hook the installer put in the runtime
    dir."""
    mps = {"MPS_ROOT": policy.spec.device_plugin.mps.root}
    values = dict(_DEVICE_PLUGIN_ENV) | mps | mig_env(policy)
    if policy.spec.cdi.enabled:
        values |= {
            "CDI_ENABLED": "true",
            "DEVICE_LIST_STRATEGY": "cdi-annotations,cdi-cri",
            "CDI_ANNOTATION_PREFIX": "cdi.k8s.io/",
        }
        if hook := cdi_hook_path(policy):
            values["NVIDIA_CDI_HOOK_PATH"] = hook
    return env_entries(values)


def cdi_hook_path(policy: ClusterPolicy) -> str | None:
    """Where NVIDIA's CDI hook is on the host once gpuctrl's toolkit installed it
    (``<installDir>/toolkit/nvidia-cdi-hook``); None when gpuctrl deploys no toolkit."""
    if not policy.spec.toolkit.enabled:
        return None
    return posixpath.join(_runtime_dir(policy.spec.toolkit), "nvidia-cdi-hook")


def render_device_plugin(policy: ClusterPolicy, facts: ClusterFacts) -> list[dict[str, Any]]:
    """NVIDIA's device plugin's account and DaemonSet (nothing when disabled): the env NVIDIA's
    operator gives its image, started once the validator's toolkit check passed (an init
    container waits for ``toolkit-ready``) with the driver's roots from ``driver-ready``; with
    ``devicePlugin.config``, NVIDIA's config-manager and the copy of the accepted configs
    (raises `RenderError` while they are refused)."""
    plugin = policy.spec.device_plugin
    if not plugin.enabled:
        return []
    manager, ds = config_managed(
        policy,
        facts,
        "device-plugin",
        plugin,
        "nvidia-device-plugin",
        deploy_label="nvidia.com/gpu.deploy.device-plugin",
        image_env=_device_plugin_env(policy),
    )
    objects = account_objects(policy, facts, "device-plugin", _DEVICE_PLUGIN_PERMISSIONS)
    return (
        objects
        + manager.objects
        + render_template(
            "device-plugin.yaml.j2",
            ds=ds,
            config_manager=manager,
            host_root=VALIDATOR_HOST_ROOT,
            mps_root=plugin.mps.root,
            **gated_pod(policy),
        )
    )
