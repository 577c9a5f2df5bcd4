"""NVIDIA's ``nvidia.com/v1`` spellings and what they mean in gpuctrl: one mapping, two users.

`nvidia_meaning` reads, in a ClusterPolicy spec (wire names), what NVIDIA writes where gpuctrl
has a field of its own: a full image reference in ``image`` (split into ``repository``,
``image`` and ``version``), the containerd settings NVIDIA's toolkit installer takes from
``toolkit.env`` (``toolkit.containerd``), and the env NVIDIA's components read that gpuctrl's
do not (left out). ``api.v1alpha1.load_cluster_policy`` applies it to every policy it loads,
so gpuctrl's Helm chart passes NVIDIA's values through and the operator gives them NVIDIA's
meaning; `from_nvidia` (``gpuctrl migrate``) applies it to each section it converts and
reports what it left out. It imports nothing of gpuctrl's models, which import it.

`from_nvidia` is pure: it returns the converted object and the path of every field it could
not carry over, each with the reason. NVIDIA writes ``""`` (and ``{}``, ``[]`` or nothing at
all) for "none" in many fields (``repoConfig.configMapName``, ``certConfig.name``, ...), and
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

__all__ = [
    "IGNORED_ENV",
    "IMAGE_SECTIONS",
    "NO_OP_VALUES",
    "NVIDIA_DEFAULTS",
    "OPERANDS",
    "REFUSED",
    "Meaning",
    "Migration",
    "NvidiaSettingError",
    "from_nvidia",
    "nvidia_meaning",
    "split_reference",
    "unset_empty",
]

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
    "driver": (*_IMAGE, *_COMMON, "repoConfig", "certConfig", "manager", "upgradePolicy"),
    "toolkit": (*_IMAGE, *_COMMON, "installDir"),
    "validator": (*_COMMON, "driver", "toolkit", "cuda", "plugin"),
    "devicePlugin": (*_IMAGE, *_COMMON, "config", "mps"),
    "gfd": (*_IMAGE, *_COMMON, "hostNetwork"),
    "dcgm": (*_IMAGE, *_COMMON, "hostNetwork"),
    "dcgmExporter": (
        *_IMAGE,
        *_COMMON,
        "config",
        "service",
        "serviceMonitor",
        "hostNetwork",
        "hostPID",
    ),
    "nodeStatusExporter": _COMMON,
    "migManager": (*_IMAGE, *_COMMON, "config", "gpuClientsConfig"),
    "mig": ("strategy",),
    "cdi": ("enabled",),
}
# NVIDIA's fields that mean nothing any more: cdi.default ("no longer used", NVIDIA's CRD),
# dcgm.hostPort (deprecated, read by no NVIDIA code: the engine is reached through its Service).
_NO_OP = {"cdi": ("default",), "dcgm": ("hostPort",)}
# operator.defaultRuntime values gpuctrl configures.
_RUNTIMES = ("containerd", "crio")
# NVIDIA's values that mean "unset" to gpuctrl, by (section, field): operator.defaultRuntime
# docker is NVIDIA's fallback when no node says its runtime (and no runtime Kubernetes runs
# since 1.24); gpuctrl's default, containerd, applies.
NO_OP_VALUES: dict[tuple[str, str], tuple[str, ...]] = {("operator", "defaultRuntime"): ("docker",)}
# Settings migrate and the chart refuse rather than give another meaning, by path in NVIDIA's
# spec; {flag} is how the caller names the setting, {section} the section to fill instead.
REFUSED: dict[tuple[str, ...], str] = {
    ("driver", "useNvidiaDriverCRD"): (
        "{flag} is true: the driver is set up by NVIDIADriver objects, which gpuctrl does not"
        " read; put the NVIDIADriver's repository, image and version into {section} (or set"
        " {section}.enabled: false for a preinstalled driver)"
    ),
}
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
_RESTART_MODES = ("signal", "systemd", "none")
# Go's strconv.ParseBool, which NVIDIA's toolkit reads its boolean env with.
_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}
# k3s/RKE2 config paths NVIDIA's chart sets: the distribution regenerates that file from its
# template, which is what gpuctrl's agent edits when told the distribution.
_GENERATED_CONFIGS = {
    "/var/lib/rancher/k3s/agent/etc/containerd/config.toml": "k3s",
    "/var/lib/rancher/rke2/agent/etc/containerd/config.toml": "rke2",
}
_SAME_WAIT = "gpuctrl's checks wait as their DaemonSet says"
_NO_LINKS = "gpuctrl's validator creates no /dev/char links"
# NVIDIA's validator reads these from a check's env; gpuctrl's agent reads none of them.
_VALIDATOR_ENV = {
    "WITH_WORKLOAD": "gpuctrl's cuda and plugin checks always run their workload pod",
    "WITH_WAIT": _SAME_WAIT,
    "SLEEP_INTERVAL_SECONDS": _SAME_WAIT,
    "DISABLE_DEV_CHAR_SYMLINK_CREATION": _NO_LINKS,
    "CREATE_DEV_CHAR_SYMLINKS": _NO_LINKS,
}
# Env NVIDIA's components read and gpuctrl's do not, by the (wire) path of its section, with
# why: left out of the policy (the chart's NOTES and migrate name each one).
IGNORED_ENV: dict[tuple[str, ...], dict[str, str]] = {
    ("toolkit",): {
        "RUNTIME_CONFIG_SOURCE": "gpuctrl's agent reads the config files themselves, never"
        " `containerd config dump`",
    },
    ("validator",): _VALIDATOR_ENV,
    **{("validator", check): _VALIDATOR_ENV for check in ("driver", "toolkit", "cuda", "plugin")},
}
# gpuctrl's sections named by repository/image/version (wire paths); a test holds this to the
# models' Component and Image fields.
IMAGE_SECTIONS: tuple[tuple[str, ...], ...] = (
    ("driver",),
    ("driver", "manager"),
    ("toolkit",),
    ("toolkit", "runtimeImage"),
    ("validator",),
    ("devicePlugin",),
    ("gfd",),
    ("dcgm",),
    ("dcgmExporter",),
    ("nodeStatusExporter",),
    ("migManager",),
)
# NVIDIA's defaults that mean "nothing set", by path in NVIDIA's spec: migrate leaves them out
# unreported, and the chart leaves them out of its ClusterPolicy.
NVIDIA_DEFAULTS: dict[tuple[str, ...], object] = {
    ("hostPaths", "rootFS"): "/",
    ("hostPaths", "driverInstallDir"): "/run/nvidia/driver",
    ("driver", "licensingConfig", "nlsEnabled"): True,
    # The MIG manager's ConfigMaps NVIDIA's operator makes itself (its CRD's default name):
    # gpuctrl's own defaults stand in for them.
    ("migManager", "config", "name"): "default-mig-parted-config",
    ("migManager", "gpuClientsConfig", "name"): "default-gpu-clients",
}
_VALIDATOR_CHECK_FIELDS = ("env",)
# NVIDIA's sections of its validator image, which gpuctrl's agent image replaces.
_AGENT_SECTIONS = ("validator", "nodeStatusExporter")
# The fields gpuctrl carries of NVIDIA's nested settings, by (section, field).
_NESTED_FIELDS = {
    ("driver", "repoConfig"): ("configMapName",),
    ("driver", "certConfig"): ("name",),
    ("devicePlugin", "config"): ("name", "default"),
    ("devicePlugin", "mps"): ("root",),
    ("dcgmExporter", "config"): ("name",),
    ("migManager", "config"): ("name", "default"),
    ("migManager", "gpuClientsConfig"): ("name",),
    ("dcgmExporter", "service"): ("type", "internalTrafficPolicy"),
    ("dcgmExporter", "serviceMonitor"): (
        "enabled",
        "interval",
        "scrapeTimeout",
        "honorLabels",
        "additionalLabels",
        "relabelings",
    ),
}
# NVIDIA's sections that are operands (a DaemonSet each); the others are settings.
OPERANDS = (
    "gds", "gdrcopy",
    "vgpuManager", "vgpuDeviceManager", "vfioManager", "sandboxDevicePlugin", "kataManager",
    "ccManager", "kataSandboxDevicePlugin",
)  # fmt: skip


class NvidiaSettingError(ValueError):
    """NVIDIA's settings in a spec contradict each other or gpuctrl's own fields, or have a
    value NVIDIA's components refuse; ``problems``: (wire path, why) of each."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        super().__init__("\n".join(f"{path}: {why}" for path, why in problems))
        self.problems = problems


@dataclass(frozen=True)
class Meaning:
    """A spec with NVIDIA's spellings read as gpuctrl's fields; ``notes``: "path NAME: why" of
    each env entry left out because gpuctrl's components do not read it."""

    spec: dict[str, Any]
    notes: list[str]


def nvidia_meaning(spec: Mapping[str, Any]) -> Meaning:
    """``spec`` (wire names, as stored) with NVIDIA's spellings given NVIDIA's meaning; raises
    `NvidiaSettingError` with every contradiction. Idempotent.

    - A full reference in ``image`` (one naming a registry, a tag or a digest) wins over
      ``repository`` and ``version`` and is split into the three (see `split_reference`).
    - ``toolkit.env`` entries NVIDIA's installer reads (``CONTAINERD_CONFIG``, ...) become
      ``toolkit.containerd`` fields; one that contradicts the field set explicitly, or another
      entry, is an error, never a silent choice.
    - `IGNORED_ENV` entries are left out, each named in the notes.
    """
    out = copy.deepcopy(dict(spec))
    notes: list[str] = []
    problems: list[tuple[str, str]] = []
    for path in IMAGE_SECTIONS:
        section = _at(out, path)
        if section is not None:
            section.update(_split_image(section))
    for path, ignored in IGNORED_ENV.items():
        section = _at(out, path)
        if section is not None and isinstance(section.get("env"), list):
            _read_env(section, ".".join(("spec", *path)), ignored, notes, problems)
    if problems:
        raise NvidiaSettingError(problems)
    return Meaning(out, notes)


def split_reference(image: str) -> dict[str, str] | None:
    """``repository``/``image``/``version`` of a full image reference (``host[:port]/path``,
    ``name:tag`` or ``...@sha256:...``; untagged is ``latest``); ``repository`` is left out
    when the reference names none. None for a bare name (``driver``,
    ``cloud-native/k8s-driver-manager``), which NVIDIA joins to ``repository`` and ``version``.
    """
    name, _, digest = image.partition("@")
    first, slash, _ = name.partition("/")
    # The reference grammar's rule: a first part with a dot or port, or localhost, is a host.
    host = bool(slash) and ("." in first or ":" in first or first == "localhost")
    repository, _, base = name.rpartition("/")
    if not (digest or host or ":" in base):
        return None
    base, _, tag = base.partition(":")  # a registry port's colon is in repository
    fields = {"image": base, "version": digest or tag or "latest"}
    return {"repository": repository, **fields} if repository else fields


def _at(spec: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """The mapping at ``path`` in ``spec``, or None."""
    value: Any = spec
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else None


def _split_image(section: Mapping[str, Any]) -> dict[str, str]:
    image = section.get("image")
    return (split_reference(image) if isinstance(image, str) else None) or {}


# The section whose env NVIDIA's toolkit installer reads its containerd settings from.
_TOOLKIT = "spec.toolkit"


def _read_env(
    section: dict[str, Any],
    where: str,
    ignored: Mapping[str, str],
    notes: list[str],
    problems: list[tuple[str, str]],
) -> None:
    """Read ``section.env`` in place: `IGNORED_ENV` entries left out (noted), the toolkit's
    containerd env moved into ``containerd`` (a contradiction is a problem), the rest kept."""
    given = section.get("containerd")
    containerd = dict(given) if isinstance(given, Mapping) else {}
    said = {key: f"{where}.containerd.{key}" for key in containerd}
    kept = []
    for index, variable in enumerate(section.pop("env")):
        if not isinstance(variable, Mapping):
            kept.append(variable)  # not an env entry: the schema says so
            continue
        name, entry = str(variable.get("name")), f"{where}.env[{index}]"
        setting = _containerd_setting(variable, entry, problems) if where == _TOOLKIT else None
        if name in ignored:
            notes.append(f"{entry} {name}: {ignored[name]}")
            continue
        if setting is None:
            kept.append(variable)
            continue
        key, meant = setting
        if containerd.get(key, meant) != meant:
            why = f"{name} means {key} {meant!r}, but {said[key]} is {containerd[key]!r}: keep one"
            problems.append((entry, why))
        said.setdefault(key, f"{entry} {name}")
        containerd.setdefault(key, meant)
    if kept:
        section["env"] = kept
    if containerd and (given is None or isinstance(given, Mapping)):
        section["containerd"] = containerd  # else the schema names the wrong type


def _containerd_setting(
    variable: Mapping[str, Any], where: str, problems: list[tuple[str, str]]
) -> tuple[str, Any] | None:
    """The ``toolkit.containerd`` (field, value) NVIDIA's installer reads ``variable`` as;
    None for env it does not read that way, or (a problem noted) a value it refuses."""
    name = variable.get("name")
    key = _TOOLKIT_ENV.get(str(name))
    if key is None:
        return None
    value = str(variable.get("value") or "")
    if key == "configPath" and value in _GENERATED_CONFIGS:
        return "distribution", _GENERATED_CONFIGS[value]
    if key == "setAsDefault":
        if value not in _BOOLS:
            problems.append((where, f"{name} {value!r} is not a boolean (true or false)"))
            return None
        return key, _BOOLS[value]
    if key == "restartMode" and value not in _RESTART_MODES:
        problems.append((where, f"{name} {value!r} is not one of {', '.join(_RESTART_MODES)}"))
        return None
    return key, value


@dataclass(frozen=True)
class Migration:
    """A converted ClusterPolicy (a mapping); ``dropped``: "path: reason" of each setting not
    carried over; ``lacking``: the path of each enabled NVIDIA operand gpuctrl does not have."""

    policy: dict[str, Any]
    dropped: list[str]
    lacking: list[str]


def from_nvidia(nvidia: Mapping[str, Any]) -> Migration:
    """Convert an ``nvidia.com/v1`` ClusterPolicy mapping; ``ValueError`` for another kind, a
    `REFUSED` setting, or an `NvidiaSettingError`."""
    if nvidia.get("apiVersion") != "nvidia.com/v1" or nvidia.get("kind") != "ClusterPolicy":
        found = f"{nvidia.get('apiVersion')}/{nvidia.get('kind')}"
        raise ValueError(f"expected an nvidia.com/v1 ClusterPolicy, got {found}")
    dropped: list[str] = []
    lacking: list[str] = []
    metadata = nvidia.get("metadata") or {}
    spec: dict[str, Any] = {}
    given = nvidia.get("spec")
    given = unset_empty(_without_defaults(given if isinstance(given, Mapping) else {}))
    for refused, refusal in REFUSED.items():
        owner = _at(given, refused[:-1])
        if owner is not None and owner.get(refused[-1]) is True:
            flag, section = ".".join(("spec", *refused)), ".".join(("spec", *refused[:-1]))
            raise ValueError(f"{refusal.format(flag=flag, section=section)} and migrate again")
    for section, value in given.items():
        path = f"spec.{section}"
        if section not in _CARRIED:
            if _is_set(value) and section in OPERANDS:
                lacking.append(path)
            elif _is_set(value):
                dropped.append(f"{path}: not supported by gpuctrl")
            continue
        carried = _section(section, value, path, dropped)
        meaning = nvidia_meaning({section: carried})
        dropped += meaning.notes
        carried = unset_empty(meaning.spec).get(section, {})
        if carried:
            spec[section] = carried
    policy = {
        "apiVersion": "gpuctrl.io/v1alpha1",
        "kind": "ClusterPolicy",
        "metadata": {"name": metadata.get("name", "gpu-cluster-policy")},
        "spec": spec,
    }
    return Migration(policy, dropped, lacking)


def _without_defaults(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``spec`` less the fields that hold NVIDIA's meaningless defaults
    (`NVIDIA_DEFAULTS`); `unset_empty` then drops the mappings this leaves empty."""
    out = copy.deepcopy(dict(spec))
    for path, default in NVIDIA_DEFAULTS.items():
        owner = _at(out, path[:-1])
        if owner is not None and owner.get(path[-1]) == default:
            del owner[path[-1]]
    return out


def unset_empty(value: Mapping[str, Any]) -> dict[str, Any]:
    """``value`` without the keys NVIDIA reads as unset: ``""``, null, and (after this, inside)
    empty mappings and lists. Lists are kept whole: ``value: ""`` in an env entry is a value."""
    out: dict[str, Any] = {}
    for key, field_value in value.items():
        if isinstance(field_value, Mapping):
            field_value = unset_empty(field_value)
        if field_value not in ("", None, {}, []):
            out[key] = field_value
    return out


def _is_set(value: Any) -> bool:
    # NVIDIA's `if` reads false as off: a disabled feature gpuctrl lacks loses nothing.
    return value is not False and not (isinstance(value, Mapping) and value.get("enabled") is False)


def _plugin_config(value: Mapping[str, Any], path: str, dropped: list[str]) -> dict[str, Any]:
    """NVIDIA's ``devicePlugin.config``: its ConfigMap and default config; a default without a
    ConfigMap is nothing to NVIDIA's operator (no config-manager runs), so it is dropped."""
    out = _only(value, _NESTED_FIELDS["devicePlugin", "config"], path, dropped)
    if "default" in out and not out.get("name"):
        dropped.append(f"{path}.default: NVIDIA's operator ignores it without config.name")
        del out["default"]
    return out


def _section(
    section: str, value: Mapping[str, Any], path: str, dropped: list[str]
) -> dict[str, Any]:
    """The fields of NVIDIA's ``section`` gpuctrl carries, under gpuctrl's names; the rest
    appended to ``dropped``. `nvidia_meaning` then reads the result."""
    out: dict[str, Any] = {}
    for key, field_value in value.items():
        where = f"{path}.{key}"
        if section in _AGENT_SECTIONS and key in _IMAGE:
            dropped.append(f"{where}: gpuctrl runs its own agent image")
        elif section == "toolkit" and key in _IMAGE:
            # gpuctrl's agent runs the toolkit; NVIDIA's image still supplies the runtime.
            out.setdefault("runtimeImage", {})[key] = field_value
        elif key in _NO_OP.get(section, ()) or field_value in NO_OP_VALUES.get((section, key), ()):
            continue
        elif key not in _CARRIED[section]:
            if _is_set(field_value):
                dropped.append(f"{where}: not supported by gpuctrl")
        elif section == "operator" and key == "defaultRuntime" and field_value not in _RUNTIMES:
            dropped.append(f"{where}: runtime {field_value!r} is not one gpuctrl configures")
        elif section == "validator" and key in ("driver", "toolkit", "cuda", "plugin"):
            out[key] = _only(field_value or {}, _VALIDATOR_CHECK_FIELDS, where, dropped)
        elif section == "daemonsets" and key == "rollingUpdate":
            out[key] = _rolling_update(_only(field_value, ("maxUnavailable",), where, dropped))
        elif section == "driver" and key == "upgradePolicy":
            out[key] = _upgrade_policy(field_value or {}, where, dropped)
        elif section == "devicePlugin" and key == "config":
            out[key] = _plugin_config(field_value or {}, where, dropped)
        elif (section, key) in _NESTED_FIELDS:
            out[key] = _only(field_value or {}, _NESTED_FIELDS[section, key], where, dropped)
        else:
            out[key] = field_value
    return out


def _rolling_update(value: dict[str, Any]) -> dict[str, Any]:
    # NVIDIA's chart quotes the number (maxUnavailable: "1"), in rollingUpdate and upgradePolicy
    # alike; gpuctrl's CRD takes a number or a percentage.
    number = value.get("maxUnavailable")
    if isinstance(number, str) and number.isdigit():
        return {**value, "maxUnavailable": int(number)}
    return value


def _upgrade_policy(value: dict[str, Any], path: str, dropped: list[str]) -> dict[str, Any]:
    # NVIDIA's CR says podDeletion where its chart's values (and gpuctrl) say gpuPodDeletion.
    found = dict(value)
    if "podDeletion" in found:
        moved = found.pop("podDeletion")
        if "gpuPodDeletion" in found and found["gpuPodDeletion"] != moved:
            dropped.append(f"{path}.podDeletion: gpuPodDeletion is set too and wins")
        else:
            found["gpuPodDeletion"] = moved
    return _rolling_update(found)


def _only(
    value: Mapping[str, Any], kept: tuple[str, ...], path: str, dropped: list[str]
) -> dict[str, Any]:
    for key in value:
        if key not in kept:
            dropped.append(f"{path}.{key}: not supported by gpuctrl")
    return {k: v for k, v in value.items() if k in kept}
