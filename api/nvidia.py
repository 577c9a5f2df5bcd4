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
    "driver": (*_IMAGE, *_COMMON, "repoConfig", "certConfig"),
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
_VALIDATOR_CHECK_FIELDS = ("env",)
_REPO_FIELDS = ("configMapName",)
_CERT_FIELDS = ("name",)


@dataclass(frozen=True)
class Migration:
    """A converted ClusterPolicy (a mapping) and ``dropped``: "path: reason" of each lost field."""

    policy: dict[str, Any]
    dropped: list[str]


def from_nvidia(nvidia: Mapping[str, Any]) -> Migration:
    """Convert an ``nvidia.com/v1`` ClusterPolicy mapping; ``ValueError`` for another kind."""
    if nvidia.get("apiVersion") != "nvidia.com/v1" or nvidia.get("kind") != "ClusterPolicy":
        found = f"{nvidia.get('apiVersion')}/{nvidia.get('kind')}"
        raise ValueError(f"expected an nvidia.com/v1 ClusterPolicy, got {found}")
    dropped: list[str] = []
    metadata = nvidia.get("metadata") or {}
    spec: dict[str, Any] = {}
    given = nvidia.get("spec")
    for section, value in unset_empty(given if isinstance(given, Mapping) else {}).items():
        path = f"spec.{section}"
        if section not in _CARRIED:
            if _is_set(value):
                dropped.append(f"{path}: gpuctrl has no {section} operand")
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
    return Migration(policy, dropped)


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
        if section == "toolkit" and key in _IMAGE:
            # gpuctrl's agent runs the toolkit; NVIDIA's image still supplies the runtime.
            out.setdefault("runtimeImage", {})[key] = field
        elif section == "validator" and key in _IMAGE:
            dropped.append(f"{where}: gpuctrl runs its own validator agent image")
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
            out[key] = _only(field or {}, _VALIDATOR_CHECK_FIELDS, where, dropped)
        elif section == "daemonsets" and key == "rollingUpdate":
            out[key] = _rolling_update(_only(field, ("maxUnavailable",), where, dropped))
        elif section == "driver" and key in ("repoConfig", "certConfig"):
            kept = _REPO_FIELDS if key == "repoConfig" else _CERT_FIELDS
            out[key] = _only(field or {}, kept, where, dropped)
        else:
            out[key] = field
    return out


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
        field = _TOOLKIT_ENV.get(variable.get("name", ""))
        if field is None:
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
