"""The MIG manager's two config files, checked as NVIDIA's MIG manager (mig-parted v0.10.0,
``api/spec/v1`` and ``cmd/nvidia-mig-manager``) reads them, and gpuctrl's defaults of both.

`mig_parted_problems` finds what NVIDIA's parser refuses in a mig-parted config
(``config.yaml``), so that a node never gets a file on which every reconfiguration fails:

- a mapping of ``version`` (required, ``v1``) and ``mig-configs`` (at least one config), no
  other key;
- each config a non-empty list of entries, each a mapping of ``devices`` (``all`` or a list of
  GPU indexes) and ``mig-enabled`` (a boolean), both required, ``mig-devices`` (MIG profile ->
  count; required when ``mig-enabled``, empty when not; the counts integers of at least 0, one
  of them above 0) and ``device-filter`` (a PCI device ID such as ``0x20B010DE``, or a list of
  them), no other key;
- a profile written as NVIDIA's parser takes it: ``[<C>c.]<G>g.<M>gb[+<attr>[,<attr>]]``.

NVIDIA's parser ignores a device filter it cannot read (the entry then matches no GPU); gpuctrl
refuses it. `gpu_clients_problems` checks ``clients.yaml`` (``version``, ``systemd-services``:
a list of service names).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

__all__ = [
    "CLIENTS_KEY",
    "CONFIG_KEY",
    "DEFAULT_GPU_CLIENTS",
    "DEFAULT_MIG_PARTED_CONFIG",
    "gpu_clients_problems",
    "mig_config_names",
    "mig_parted_problems",
]

CONFIG_KEY = "config.yaml"
"""The key of the mig-parted config in its ConfigMap (NVIDIA's)."""
CLIENTS_KEY = "clients.yaml"
"""The key of the GPU clients file in its ConfigMap (NVIDIA's)."""
_VERSION = "v1"
_ENTRY_KEYS = ("device-filter", "devices", "mig-enabled", "mig-devices")
# [<C>c.]<G>g.<M>gb, then + and comma-separated attributes of letters and digits, not starting
# with a digit (go-nvlib's parseMigProfile, which mig-parted validates profiles with).
_ATTRIBUTE = r"[A-Za-z][A-Za-z0-9]*"
_PROFILE = re.compile(rf"([0-9]+c\.)?[0-9]+g\.[0-9]+gb(\+{_ATTRIBUTE}(,{_ATTRIBUTE})*)?")
_DEVICE_ID = re.compile(r"0[xX][0-9a-fA-F]{1,8}|[0-9]+")  # Go's ParseInt with base 0, 32 bits


def _load(text: str, what: str) -> tuple[Any, list[str]]:
    try:
        return yaml.safe_load(text), []
    except yaml.YAMLError as error:
        return None, [f"not YAML ({what}): {' '.join(str(error).split())}"]


def mig_parted_problems(text: str) -> list[str]:
    """Why NVIDIA's MIG manager would refuse the mig-parted config ``text`` ([] when it would
    not), each problem naming where in the file (its keys)."""
    config, problems = _load(text, "a mig-parted config")
    if problems:
        return problems
    return list(_spec(config))


def mig_config_names(text: str) -> frozenset[str]:
    """The names of the configs of an accepted mig-parted config ``text``."""
    configs = (yaml.safe_load(text) or {}).get("mig-configs") or {}
    return frozenset(str(name) for name in configs)


def _spec(config: Any) -> Iterator[str]:
    if not isinstance(config, Mapping):
        yield "must be a mapping of version and mig-configs"
        return
    for key in config:
        if key not in ("version", "mig-configs"):
            yield f"{key}: unknown key (known: version, mig-configs)"
    if config.get("version") != _VERSION:
        yield f"version: must be {_VERSION!r}, not {config.get('version')!r}"
    configs = config.get("mig-configs")
    if not isinstance(configs, Mapping) or not configs:
        yield "mig-configs: required, a mapping of at least one named config"
        return
    for name, entries in configs.items():
        where = f"mig-configs.{name}"
        if not isinstance(entries, list) or not entries:
            yield f"{where}: must be a list of at least one entry (devices, mig-enabled)"
            continue
        for index, entry in enumerate(entries):
            yield from _entry(f"{where}[{index}]", entry)


def _entry(where: str, entry: Any) -> Iterator[str]:
    if not isinstance(entry, Mapping):
        yield f"{where}: must be a mapping (devices, mig-enabled, mig-devices)"
        return
    for key in entry:
        if key not in _ENTRY_KEYS:
            yield f"{where}.{key}: unknown key (known: {', '.join(_ENTRY_KEYS)})"
    for key in ("devices", "mig-enabled"):
        if key not in entry:
            yield f"{where}.{key}: required"
    devices = entry.get("devices", "all")
    if devices != "all" and not (
        isinstance(devices, list) and all(_is_int(d) and d >= 0 for d in devices)
    ):
        yield f"{where}.devices: must be 'all' or a list of GPU indexes, not {devices!r}"
    enabled = entry.get("mig-enabled", False)
    if not isinstance(enabled, bool):
        yield f"{where}.mig-enabled: must be a boolean, not {enabled!r}"
    yield from _device_filter(f"{where}.device-filter", entry.get("device-filter"))
    profiles = entry.get("mig-devices")
    if enabled is True and profiles is None:
        yield f"{where}.mig-devices: required when mig-enabled is true ({{}} for none)"
    elif enabled is False and profiles:
        yield f"{where}.mig-devices: must be empty when mig-enabled is false"
    elif profiles is not None:
        yield from _profiles(f"{where}.mig-devices", profiles)


def _device_filter(where: str, value: Any) -> Iterator[str]:
    if value is None:
        return
    ids = value if isinstance(value, list) else [value]
    for device_id in ids:
        if not isinstance(device_id, str) or not _DEVICE_ID.fullmatch(device_id):
            yield (
                f"{where}: {device_id!r} is not a PCI device ID (e.g. 0x20B010DE: device "
                "0x20B0, vendor 0x10DE); NVIDIA's MIG manager would match no GPU"
            )


def _profiles(where: str, profiles: Any) -> Iterator[str]:
    if not isinstance(profiles, Mapping):
        yield f"{where}: must be a mapping of MIG profile to count"
        return
    for profile, count in profiles.items():
        if not isinstance(profile, str) or not _PROFILE.fullmatch(profile):
            yield f"{where}.{profile}: not a MIG profile (e.g. 1g.5gb, 1c.2g.10gb, 1g.10gb+me)"
        if not _is_int(count) or count < 0:
            yield f"{where}.{profile}: the count must be an integer of at least 0, not {count!r}"
    if profiles and all(_is_int(c) and c == 0 for c in profiles.values()):
        yield f"{where}: every count is 0 (use {{}} for no MIG devices)"


def gpu_clients_problems(text: str) -> list[str]:
    """Why the GPU clients file ``text`` is refused ([] when it is not)."""
    clients, problems = _load(text, "a GPU clients file")
    if problems:
        return problems
    if clients is None:
        return []
    if not isinstance(clients, Mapping):
        return ["must be a mapping of version and systemd-services"]
    problems = [
        f"{key}: unknown key (known: version, systemd-services)"
        for key in clients
        if key not in ("version", "systemd-services")
    ]
    services = clients.get("systemd-services")
    if services is not None and not (
        isinstance(services, list) and all(isinstance(s, str) and s for s in services)
    ):
        problems.append("systemd-services: must be a list of systemd unit names")
    return problems


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# gpuctrl's default mig-parted config, written from NVIDIA's public MIG facts: the MIG user
# guide's "Supported MIG Profiles" tables (profile name -> most instances per GPU) for A100-40GB,
# A100-80GB and H100-80GB, and the PCI device IDs of those boards (the PCI ID repository,
# vendor 0x10de: A100 SXM4 40GB 0x20b0, A100 PCIe 40GB 0x20f1, A100 SXM4 80GB 0x20b2, A100 PCIe
# 80GB 0x20b5, H100 SXM5 80GB 0x2330, H100 PCIe 0x2331). mig-parted's device filter is the
# device ID above the vendor ID (0x20B010DE).
# A100-80GB and H100-80GB offer the same MIG profiles, by how many fit one GPU.
_PROFILES_80GB = {
    "1g.10gb": 7,
    "1g.10gb+me": 1,
    "1g.20gb": 4,
    "2g.20gb": 3,
    "3g.40gb": 2,
    "4g.40gb": 1,
    "7g.80gb": 1,
}
_GPUS: dict[str, tuple[tuple[str, ...], dict[str, int]]] = {
    "A100-40GB": (
        ("0x20B010DE", "0x20F110DE"),
        {
            "1g.5gb": 7,
            "1g.5gb+me": 1,
            "1g.10gb": 4,
            "2g.10gb": 3,
            "3g.20gb": 2,
            "4g.20gb": 1,
            "7g.40gb": 1,
        },
    ),
    "A100-80GB": (
        ("0x20B210DE", "0x20B510DE"),
        _PROFILES_80GB,
    ),
    "H100-80GB": (
        ("0x233010DE", "0x233110DE"),
        _PROFILES_80GB,
    ),
}


def _default_mig_parted_config() -> str:
    configs: dict[str, list[dict[str, Any]]] = {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    for ids, profiles in _GPUS.values():
        for profile, count in profiles.items():
            name = "all-" + profile.replace("+", ".")
            entry = {
                "device-filter": list(ids),
                "devices": "all",
                "mig-enabled": True,
                "mig-devices": {profile: count},
            }
            configs.setdefault(name, []).append(entry)
    document = {"version": _VERSION, "mig-configs": configs}
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=None)


DEFAULT_MIG_PARTED_CONFIG = _default_mig_parted_config()
"""gpuctrl's mig-parted config when ``migManager.config.name`` is unset: ``all-disabled``,
``all-enabled`` (MIG mode on, no devices) and ``all-<profile>`` (``+`` written ``.``) for
every profile of A100-40GB, A100-80GB and H100-80GB, each GPU model's entry filtered by its PCI
device IDs."""
DEFAULT_GPU_CLIENTS = yaml.safe_dump(
    {
        "version": _VERSION,
        # Host services that hold the GPUs open (DCGM, its exporter, NVSM, the peer memory
        # module's service): stopped around a reconfiguration on nodes with a host driver.
        "systemd-services": [
            "nvidia-dcgm.service",
            "dcgm.service",
            "dcgm-exporter.service",
            "nvsm.service",
            "nv_peer_mem.service",
        ],
    },
    sort_keys=False,
)
"""gpuctrl's GPU clients file when ``migManager.gpuClientsConfig.name`` is unset."""
