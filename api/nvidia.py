"""Conversion of NVIDIA's ``nvidia.com/v1`` ClusterPolicy into a ``gpuctrl.io/v1alpha1`` one.

`from_nvidia` is pure: it returns the converted object and the path of every field it could
not carry over, each with the reason, so ``gpuctrl migrate`` can print them.

NVIDIA writes ``""`` (and ``{}``, ``[]`` or nothing at all) for "none" in many fields
(``repoConfig.configMapName``, ``certConfig.name``, ``licensingConfig.secretName``, ...), and
its chart and controller test them with ``if``: `unset_empty` drops them the same way before
anything is converted, so they are neither carried over nor reported as lost. A section of an
operand or feature gpuctrl lacks that NVIDIA's file turns off (``false``, ``enabled: false``)
loses nothing either.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Migration", "from_nvidia", "unset_empty"]

# NVIDIA's fields whose meaning gpuctrl shares, per section (wire names).
_IMAGE = ("repository", "image", "version")
_COMMON = ("enabled", "imagePullPolicy", "imagePullSecrets", "env", "resources", "args")
_CARRIED = {
    "operator": ("runtimeClass", "labels", "annotations", "defaultRuntime"),
    "daemonsets": (
        "labels",
        "annotations",
        "tolerations",
        "priorityClassName",
        "updateStrategy",
        "rollingUpdate",
    ),
    "driver": (*_IMAGE, *_COMMON, "repoConfig", "certConfig", "manager"),
    "toolkit": (*_IMAGE, *_COMMON, "installDir"),
    "validator": (*_COMMON, "driver", "toolkit", "cuda", "plugin"),
    "devicePlugin": (*_IMAGE, *_COMMON),
    "mig": ("strategy",),
    "cdi": ("enabled",),
}
# NVIDIA's fields that mean nothing any more: cdi.default ("no longer used", NVIDIA's CRD).
_NO_OP = {"cdi": ("default",)}
# operator.defaultRuntime values gpuctrl configures; NVIDIA's chart default, docker, is only its
# fallback when no node says its runtime (and no runtime Kubernetes runs since 1.24).
_RUNTIMES = ("containerd", "crio")
# NVIDIA's toolkit installer env -> gpuctrl's toolkit.containerd field.
_TOOLKIT_ENV = {
    "CONTAINERD_CONFIG": "configPath",
    "RUNTIME_CONFIG": "configPath",
    "CONTAINERD_SOCKET": "socketPath",
    "CONTAINERD_RUNTIME_CLASS": "runtimeClassName",
    "CONTAINERD_SET_AS_DEFAULT": "setAsDefault",
    "NVIDIA_RUNTIME_SET_AS_DEFAULT": "setAsDefault",
    "RUNTIME_RESTART_MODE": "restartMode",
}
# NVIDIA's validator reads these from a check's env; gpuctrl's agent reads none of them.
_VALIDATOR_ENV = {
    "WITH_WORKLOAD": "gpuctrl's cuda and plugin checks always run their workload pod",
    "WITH_WAIT": "gpuctrl's checks wait as their DaemonSet says",
    "SLEEP_INTERVAL_SECONDS": "gpuctrl's checks wait as their DaemonSet says",
    "DISABLE_DEV_CHAR_SYMLINK_CREATION": "gpuctrl's validator creates no /dev/char links",
    "CREATE_DEV_CHAR_SYMLINKS": "gpuctrl's validator creates no /dev/char links",
}
# NVIDIA's toolkit env gpuctrl's agent does not read, and why.
_TOOLKIT_ENV_IGNORED = {
    "RUNTIME_CONFIG_SOURCE": "gpuctrl's agent reads the config files themselves, never"
    " `containerd config dump`",
}
# k3s/RKE2 config paths NVIDIA's chart sets: the distribution regenerates that file from its
# template, which is what gpuctrl's agent edits when told the distribution.
_GENERATED_CONFIGS = {
    "/var/lib/rancher/k3s/agent/etc/containerd/config.toml": "k3s",
    "/var/lib/rancher/rke2/agent/etc/containerd/config.toml": "rke2",
}
# NVIDIA's defaults that mean "nothing set": not reported when left as they are.
_NVIDIA_DEFAULTS = {
    ("hostPaths", "rootFS"): "/",
    ("hostPaths", "driverInstallDir"): "/run/nvidia/driver",
    ("driver", "licensingConfig", "nlsEnabled"): True,
}
_VALIDATOR_CHECK_FIELDS = ("env",)
_REPO_FIELDS = ("configMapName",)
_CERT_FIELDS = ("name",)


@dataclass(frozen=True)
class Migration:
    """A converted ClusterPolicy (a mapping); ``dropped``: "path: reason" of each setting not
    carried over; ``lacking``: the path of each enabled NVIDIA operand gpuctrl does not have."""

    policy: dict[str, Any]
    dropped: list[str]
    lacking: list[str]


def from_nvidia(nvidia: Mapping[str, Any]) -> Migration:
    """Convert an ``nvidia.com/v1`` ClusterPolicy mapping; ``ValueError`` for another kind."""
    if nvidia.get("apiVersion") != "nvidia.com/v1" or nvidia.get("kind") != "ClusterPolicy":
        found = f"{nvidia.get('apiVersion')}/{nvidia.get('kind')}"
        raise ValueError(f"expected an nvidia.com/v1 ClusterPolicy, got {found}")
    dropped: list[str] = []
    lacking: list[str] = []
    metadata = nvidia.get("metadata") or {}
    spec: dict[str, Any] = {}
    given = nvidia.get("spec")
    given = unset_empty(_without_defaults(given if isinstance(given, Mapping) else {}))
    driver = given.get("driver")
    if isinstance(driver, Mapping) and driver.get("useNvidiaDriverCRD") is True:
        raise ValueError(
            "spec.driver.useNvidiaDriverCRD is true: the driver is set up by NVIDIADriver"
            " objects, which gpuctrl does not read; put the NVIDIADriver's repository, image"
            " and version into spec.driver (or set spec.driver.enabled: false for a"
            " preinstalled driver) and migrate again"
        )
    for section, value in given.items():
        path = f"spec.{section}"
        if section not in _CARRIED:
            if _is_set(value) and section in _OPERANDS:
                lacking.append(path)
            elif _is_set(value):
                dropped.append(f"{path}: not supported by gpuctrl")
            continue
        carried = _section(section, value, path, dropped)
        if carried:
            spec[section] = carried
    policy = {
        "apiVersion": "gpuctrl.io/v1alpha1",
        "kind": "ClusterPolicy",
        "metadata": {"name": metadata.get("name", "gpu-cluster-policy")},
        "spec": spec,
    }
    return Migration(policy, dropped, lacking)


# NVIDIA's sections that are operands (a DaemonSet each); the others are settings.
_OPERANDS = (
    "gfd", "dcgm", "dcgmExporter", "migManager", "nodeStatusExporter", "gds", "gdrcopy",
    "vgpuManager", "vgpuDeviceManager", "vfioManager", "sandboxDevicePlugin", "kataManager",
    "ccManager", "kataSandboxDevicePlugin",
)  # fmt: skip


def _without_defaults(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``spec`` less the fields that hold NVIDIA's meaningless defaults
    (`_NVIDIA_DEFAULTS`); `unset_empty` then drops the mappings this leaves empty."""
    out = copy.deepcopy(dict(spec))
    for path, default in _NVIDIA_DEFAULTS.items():
        owner: Any = out
        for key in path[:-1]:
            owner = owner.get(key) if isinstance(owner, dict) else None
        if isinstance(owner, dict) and owner.get(path[-1]) == default:
            del owner[path[-1]]
    return out


def unset_empty(value: Mapping[str, Any]) -> dict[str, Any]:
    """``value`` without the keys NVIDIA reads as unset: ``""``, null, and (after this, inside)
    empty mappings and lists. Lists are kept whole: ``value: ""`` in an env entry is a value."""
    out: dict[str, Any] = {}
    for key, field in value.items():
        if isinstance(field, Mapping):
            field = unset_empty(field)
        if field not in ("", None, {}, []):
            out[key] = field
    return out


def _is_set(value: Any) -> bool:
    # NVIDIA's `if` reads false as off: a disabled feature gpuctrl lacks loses nothing.
    return value is not False and not (isinstance(value, Mapping) and value.get("enabled") is False)


def _section(
    section: str, value: Mapping[str, Any], path: str, dropped: list[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, field in value.items():
        where = f"{path}.{key}"
        if section == "validator" and key in _IMAGE:
            dropped.append(f"{where}: gpuctrl runs its own validator agent image")
        elif key in _IMAGE and key in _CARRIED[section]:
            # gpuctrl's agent runs the toolkit; NVIDIA's image still supplies the runtime.
            target = out.setdefault("runtimeImage", {}) if section == "toolkit" else out
            target.update(_image_field(value, key))
        elif key in _NO_OP.get(section, ()):
            continue
        elif section == "operator" and key == "defaultRuntime":
            if field in _RUNTIMES:
                out[key] = field
            elif field != "docker":
                dropped.append(f"{where}: runtime {field!r} is not one gpuctrl configures")
        elif key not in _CARRIED[section]:
            if _is_set(field):
                dropped.append(f"{where}: not supported by gpuctrl")
        elif section == "toolkit" and key == "env":
            _toolkit_env(field or [], out, where, dropped)
        elif section == "validator" and key in ("driver", "toolkit", "cuda", "plugin"):
            check = _only(field or {}, _VALIDATOR_CHECK_FIELDS, where, dropped)
            if "env" in check:
                check["env"] = _validator_env(check["env"], f"{where}.env", dropped)
            out[key] = {k: v for k, v in check.items() if v}
        elif section == "validator" and key == "env":
            env = _validator_env(field, where, dropped)
            if env:
                out[key] = env
        elif section == "daemonsets" and key == "rollingUpdate":
            out[key] = _rolling_update(_only(field, ("maxUnavailable",), where, dropped))
        elif section == "driver" and key in ("repoConfig", "certConfig"):
            kept = _REPO_FIELDS if key == "repoConfig" else _CERT_FIELDS
            out[key] = _only(field or {}, kept, where, dropped)
        else:
            out[key] = field
    return out


def _image_field(section: Mapping[str, Any], key: str) -> dict[str, str]:
    """gpuctrl's image fields for NVIDIA's ``key`` (repository, image or version) of
    ``section``. A full reference in ``image`` (``registry/path/name:tag`` or
    ``...@sha256:...``) wins over the other two, as NVIDIA's imagePath takes it, and is split
    into all three; an untagged one is ``latest``."""
    image = section.get("image")
    reference = isinstance(image, str) and any(c in image for c in "/:@")
    if not reference:
        return {key: section[key]}
    if key != "image":
        return {}
    name, _, digest = str(image).partition("@")
    repository, _, base = name.rpartition("/")
    base, _, tag = base.partition(":")  # a registry port's colon is in repository
    fields = {"image": base, "version": digest or tag or "latest"}
    return {"repository": repository, **fields} if repository else fields


def _validator_env(
    env: list[Mapping[str, Any]], path: str, dropped: list[str]
) -> list[Mapping[str, Any]]:
    kept = []
    for index, variable in enumerate(env):
        why = _VALIDATOR_ENV.get(str(variable.get("name", "")))
        if why is None:
            kept.append(variable)
        else:
            dropped.append(f"{path}[{index}] {variable.get('name')}: {why}")
    return kept


def _rolling_update(value: dict[str, Any]) -> dict[str, Any]:
    # NVIDIA's chart quotes the number (maxUnavailable: "1"); gpuctrl's CRD takes a number or
    # a percentage.
    number = value.get("maxUnavailable")
    if isinstance(number, str) and number.isdigit():
        return {**value, "maxUnavailable": int(number)}
    return value


def _only(
    value: Mapping[str, Any], kept: tuple[str, ...], path: str, dropped: list[str]
) -> dict[str, Any]:
    for key in value:
        if key not in kept:
            dropped.append(f"{path}.{key}: not supported by gpuctrl")
    return {k: v for k, v in value.items() if k in kept}


def _toolkit_env(
    env: list[Mapping[str, Any]], out: dict[str, Any], path: str, dropped: list[str]
) -> None:
    containerd: dict[str, Any] = {}
    plain = []
    for index, variable in enumerate(env):
        name = variable.get("name", "")
        field = _TOOLKIT_ENV.get(name)
        if name in _TOOLKIT_ENV_IGNORED:
            dropped.append(f"{path}[{index}] {name}: {_TOOLKIT_ENV_IGNORED[name]}")
        elif field == "configPath" and variable.get("value") in _GENERATED_CONFIGS:
            containerd["distribution"] = _GENERATED_CONFIGS[variable["value"]]
        elif field is None:
            plain.append(dict(variable))
        elif field == "setAsDefault":
            containerd[field] = str(variable.get("value", "")).lower() in ("true", "1")
        elif field == "restartMode" and variable.get("value") not in ("signal", "systemd", "none"):
            dropped.append(f"{path}[{index}]: restart mode {variable.get('value')!r} is unknown")
        else:
            containerd[field] = variable.get("value", "")
    if containerd:
        out["containerd"] = containerd
    if plain:
        out["env"] = plain
