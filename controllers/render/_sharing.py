"""Checks of the device plugin's named configs (``devicePlugin.config``) before they reach a node.

Each key of the ConfigMap is one config: a YAML document NVIDIA's device plugin and GPU feature
discovery read as their config file (``version: v1``, ``flags``, ``sharing``). `config_problems`
finds what NVIDIA's parser (k8s-device-plugin ``api/config/v1``, the pinned v0.17) refuses, and
what it would silently ignore, so a config that does not do what it says never reaches a node:

- ``version`` absent or ``v1``; every key one NVIDIA's config knows, spelt as NVIDIA spells it
  (NVIDIA's parser ignores unknown keys, so a typo would silently mean no sharing).
- ``sharing.timeSlicing`` or ``sharing.mps``, not both (NVIDIA's plugin would use MPS alone):
  ``resources`` a non-empty list, each entry a ``name`` the plugin advertises (``nvidia.com/gpu``,
  ``gpu``; ``nvidia.com/mig-<profile>`` only with MIG strategy ``mixed``), listed once, with an
  integer ``replicas`` of at least 2 (NVIDIA's parser refuses fewer), ``renameByDefault`` and
  ``failRequestsGreaterThanOne`` booleans.
- ``rename`` (other than ``renameByDefault``'s ``<name>.shared``), ``devices`` other than
  ``all`` and top-level ``resources`` are refused: v0.17 ignores them with a log warning.
- MPS: not with MIG strategy ``mixed`` and not on MIG devices (``nvidia.com/gpu`` only),
  at most 48 replicas (an MPS server's client limit on Volta and newer), and not
  ``failRequestsGreaterThanOne: false`` (v0.17 forces it true).
- ``flags``: known keys of the right types, ``migStrategy`` one of ``none``, ``single``,
  ``mixed``. The env the operator sets (``MIG_STRATEGY`` and the like) wins over them, as with
  NVIDIA's operator.

The MIG strategy that matters is the one the plugin runs with: the policy's ``mig.strategy``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

__all__ = [
    "MIG_STRATEGIES",
    "MPS_MAX_REPLICAS",
    "ConfigProblem",
    "config_problems",
]

MIG_STRATEGIES = ("none", "single", "mixed")
MPS_MAX_REPLICAS = 48
"""The most clients an MPS server takes on Volta and newer GPUs (16 before): more replicas of a
GPU than that fail on every GPU."""
_VERSION = "v1"
_PREFIX = "nvidia.com/"
_MAX_RESOURCE_NAME = 63  # NVIDIA's limit on the full name, prefix included
_SHARED_SUFFIX = ".shared"  # renameByDefault's rename
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# A MIG device's resource under the mixed strategy: mig-1g.5gb, mig-1c.3g.20gb, mig-1g.10gb.me
# (NVIDIA's plugin writes a profile's "+" as ".").
_MIG_RESOURCE = re.compile(r"^mig-([0-9]+c\.)?[0-9]+g\.[0-9]+gb(\.[a-z0-9]+)*$")

_BOOL, _STR, _STRS, _INTS = "a boolean", "a string", "a string or a list of strings", "integers"
# The keys of NVIDIA's config (v0.17) by section; a value a type name, or the section's keys.
_FLAGS: dict[str, Any] = {
    "migStrategy": _STR,
    "failOnInitError": _BOOL,
    "mpsRoot": _STR,
    "nvidiaDriverRoot": _STR,
    "nvidiaDevRoot": _STR,
    "gdsEnabled": _BOOL,
    "mofedEnabled": _BOOL,
    "useNodeFeatureAPI": _BOOL,
    "deviceDiscoveryStrategy": _STR,
    "plugin": {
        "passDeviceSpecs": _BOOL,
        "deviceListStrategy": _STRS,
        "deviceIDStrategy": _STR,
        "cdiAnnotationPrefix": _STR,
        "nvidiaCTKPath": _STR,
        "containerDriverRoot": _STR,
    },
    "gfd": {
        "oneshot": _BOOL,
        "noTimestamp": _BOOL,
        "sleepInterval": _STR,
        "outputFile": _STR,
        "machineTypeFile": _STR,
    },
}
_IMEX = {"channelIDs": _INTS, "required": _BOOL}
_TOP = ("version", "flags", "resources", "sharing", "imex")
_SHARING = ("timeSlicing", "mps")
_REPLICATED = ("renameByDefault", "failRequestsGreaterThanOne", "resources")
_RESOURCE = ("name", "rename", "devices", "replicas")


@dataclass(frozen=True)
class ConfigProblem:
    """Why config ``config`` (a key of the ConfigMap) is refused, at ``path`` inside it (its
    wire names; empty for the whole document)."""

    config: str
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.config}: {self.path}" if self.path else self.config
        return f"{where}: {self.message}"


def config_problems(configs: Mapping[str, str], mig_strategy: str) -> list[ConfigProblem]:
    """Every problem of the named ``configs`` (ConfigMap data: name -> YAML) for a plugin run
    with ``mig_strategy``, in key order; [] when all of them may reach a node."""
    return [
        ConfigProblem(name, path, message)
        for name in sorted(configs)
        for path, message in _document(configs[name], mig_strategy)
    ]


def _document(text: str, mig_strategy: str) -> Iterator[tuple[str, str]]:
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        yield "", f"not YAML: {' '.join(str(error).split())}"
        return
    if config is None:
        return  # an empty config: NVIDIA's defaults
    if not isinstance(config, Mapping):
        yield "", f"must be a mapping (version, flags, sharing), not {_kind(config)}"
        return
    yield from _unknown_keys("", config, _TOP)
    version = config.get("version")
    if version not in (None, "", _VERSION):  # unset is v1 to NVIDIA's parser
        yield (
            "version",
            f"must be {_VERSION!r} (the only version NVIDIA's plugin reads), not {version!r}",
        )
    # A null section is an absent one to NVIDIA's parser.
    if (flags := config.get("flags")) is not None:
        yield from _typed("flags", flags, _FLAGS)
        strategy = flags.get("migStrategy") if isinstance(flags, Mapping) else None
        if isinstance(strategy, str) and strategy not in MIG_STRATEGIES:
            yield (
                "flags.migStrategy",
                f"must be one of {', '.join(MIG_STRATEGIES)}, not {strategy!r}",
            )
    if (imex := config.get("imex")) is not None:
        yield from _typed("imex", imex, _IMEX)
    if config.get("resources"):
        yield "resources", "NVIDIA's device plugin ignores custom resources (v0.17): remove them"
    if (sharing := config.get("sharing")) is not None:
        yield from _sharing(sharing, mig_strategy)


def _sharing(sharing: Any, mig_strategy: str) -> Iterator[tuple[str, str]]:
    if not isinstance(sharing, Mapping):
        yield "sharing", f"must be a mapping (timeSlicing or mps), not {_kind(sharing)}"
        return
    yield from _unknown_keys("sharing", sharing, _SHARING)
    if "timeSlicing" in sharing and "mps" in sharing:
        yield (
            "sharing",
            "timeSlicing and mps exclude each other (NVIDIA's plugin would use mps alone)",
        )
    if "timeSlicing" in sharing:
        yield from _replicated(
            "sharing.timeSlicing", sharing["timeSlicing"], mig_strategy, mps=False
        )
    if "mps" in sharing:
        path = "sharing.mps"
        if mig_strategy == "mixed":
            yield path, "NVIDIA's device plugin refuses MPS with MIG strategy mixed (mig.strategy)"
        yield from _replicated(path, sharing["mps"], mig_strategy, mps=True)


def _replicated(
    path: str, section: Any, mig_strategy: str, *, mps: bool
) -> Iterator[tuple[str, str]]:
    if not isinstance(section, Mapping):
        yield path, f"must be a mapping with resources, not {_kind(section)}"
        return
    yield from _unknown_keys(path, section, _REPLICATED)
    for key in ("renameByDefault", "failRequestsGreaterThanOne"):
        if section.get(key) is not None and not isinstance(section[key], bool):
            yield f"{path}.{key}", f"must be a boolean, not {_kind(section[key])}"
    if mps and section.get("failRequestsGreaterThanOne") is False:
        yield (
            f"{path}.failRequestsGreaterThanOne",
            "NVIDIA's device plugin (v0.17) always fails MPS requests for more than one GPU: "
            "remove it or set it true",
        )
    resources = section.get("resources")
    if not isinstance(resources, list) or not resources:
        yield f"{path}.resources", "required: a list of at least one resource to share"
        return
    rename_by_default = section.get("renameByDefault") is True
    seen: set[str] = set()
    for index, entry in enumerate(resources):
        where = f"{path}.resources[{index}]"
        yield from _resource(
            where, entry, mig_strategy, mps=mps, rename_by_default=rename_by_default
        )
        name = _full_name(entry.get("name")) if isinstance(entry, Mapping) else None
        if name is not None and name in seen:
            yield f"{where}.name", f"{name} is listed twice"
        elif name is not None:
            seen.add(name)


def _resource(
    path: str, entry: Any, mig_strategy: str, *, mps: bool, rename_by_default: bool
) -> Iterator[tuple[str, str]]:
    if not isinstance(entry, Mapping):
        yield path, f"must be a mapping (name, replicas), not {_kind(entry)}"
        return
    yield from _unknown_keys(path, entry, _RESOURCE)
    name = entry.get("name")
    if "name" not in entry:
        yield f"{path}.name", "required: the resource to share (nvidia.com/gpu)"
    else:
        yield from _name(f"{path}.name", name, mig_strategy, mps=mps)
    if "replicas" not in entry:
        yield f"{path}.replicas", "required: how many pods may share each device (at least 2)"
    else:
        yield from _replicas(f"{path}.replicas", entry["replicas"], mps=mps)
    if "devices" in entry and entry["devices"] != "all":
        yield (
            f"{path}.devices",
            "NVIDIA's device plugin (v0.17) ignores devices other than 'all' and shares every "
            "device: remove it or set it to all",
        )
    if "rename" in entry:
        full = _full_name(name)
        if not (
            rename_by_default and full and _full_name(entry["rename"]) == full + _SHARED_SUFFIX
        ):
            yield (
                f"{path}.rename",
                "NVIDIA's device plugin (v0.17) ignores rename; renameByDefault: true renames "
                f"every shared resource to <name>{_SHARED_SUFFIX}",
            )


def _name(path: str, name: Any, mig_strategy: str, *, mps: bool) -> Iterator[tuple[str, str]]:
    full = _full_name(name)
    if full is None:
        hint = "; NVIDIA's plugin writes a MIG profile's + as ." if "+" in str(name) else ""
        yield path, f"{name!r} is not a resource name (nvidia.com/gpu, or gpu){hint}"
        return
    short = full.removeprefix(_PREFIX)
    if short == "gpu":
        return
    if not _MIG_RESOURCE.match(short):
        yield path, f"{full} is not a resource NVIDIA's device plugin advertises (nvidia.com/gpu)"
    elif mps:
        yield path, f"{full}: NVIDIA's device plugin does not share MIG devices with MPS"
    elif mig_strategy != "mixed":
        yield (
            path,
            f"{full}: MIG devices are advertised by profile only with MIG strategy mixed "
            f"(mig.strategy is {mig_strategy}); share nvidia.com/gpu instead",
        )


def _full_name(name: Any) -> str | None:
    """``name`` with NVIDIA's ``nvidia.com/`` prefix added as NVIDIA's parser adds it; None
    when it is no resource name NVIDIA's parser takes."""
    if not isinstance(name, str):
        return None
    full = name if name.startswith(_PREFIX) else _PREFIX + name
    short = full.removeprefix(_PREFIX)
    if len(full) > _MAX_RESOURCE_NAME or not _DNS_SUBDOMAIN.match(short):
        return None
    return full


def _replicas(path: str, replicas: Any, *, mps: bool) -> Iterator[tuple[str, str]]:
    if isinstance(replicas, bool) or not isinstance(replicas, int):
        yield path, f"must be an integer, not {_kind(replicas)}"
    elif replicas < 2:
        yield path, f"must be at least 2 (NVIDIA's parser refuses fewer), not {replicas}"
    elif mps and replicas > MPS_MAX_REPLICAS:
        yield (
            path,
            f"at most {MPS_MAX_REPLICAS} with MPS (an MPS server's client limit), not {replicas}",
        )


def _typed(path: str, value: Any, fields: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Problems of ``value`` against ``fields`` (key -> a type name or the keys of a section)."""
    if not isinstance(value, Mapping):
        yield path, f"must be a mapping, not {_kind(value)}"
        return
    yield from _unknown_keys(path, value, tuple(fields))
    for key, kind in fields.items():
        if key not in value or value[key] is None:
            continue
        where = f"{path}.{key}"
        if isinstance(kind, Mapping):
            yield from _typed(where, value[key], kind)
        elif not _is(kind, value[key]):
            yield where, f"must be {kind}, not {_kind(value[key])}"


def _is(kind: str, value: Any) -> bool:
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _STR:
        return isinstance(value, str)
    if kind == _STRS:
        return isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(v, str) for v in value)
        )
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    )


def _unknown_keys(
    path: str, value: Mapping[Any, Any], known: tuple[str, ...]
) -> Iterator[tuple[str, str]]:
    for key in value:
        if key in known:
            continue
        where = f"{path}.{key}" if path else str(key)
        spelt = next((k for k in known if isinstance(key, str) and k.lower() == key.lower()), None)
        hint = f"NVIDIA spells it {spelt}" if spelt else f"known: {', '.join(known)}"
        yield where, f"unknown key ({hint})"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "a list"
    return "a mapping"
