"""Where containerd keeps its config and socket on a node, and how it is restarted.

In its DaemonSet the agent sees the host's root at ``host_root`` (``--host-root /host``). The
distribution (plain containerd, k3s, RKE2, microk8s) is recognised by the folder its installer
creates; `api.v1alpha1.containerd_defaults` holds each one's layout, and options given
explicitly win over it. Every path here is a HOST path; `in_container` gives the path this
process opens.
"""

from __future__ import annotations

import os
import posixpath

import pydantic

from api.v1alpha1 import ContainerdDistribution, ContainerdSettings, containerd_defaults
from gpuctrl.toolkit._errors import InvalidConfig, ToolkitError
from gpuctrl.toolkit._fs import read_bytes, resolve
from gpuctrl.toolkit._imports import covers
from gpuctrl.toolkit._toml import load

__all__ = ["DROP_IN", "detect_distribution", "drop_in_path", "in_container", "resolve_containerd"]

# A folder only that distribution's installer creates, checked in this order.
_MARKERS: tuple[tuple[ContainerdDistribution, str], ...] = (
    ("microk8s", "/var/snap/microk8s"),
    ("rke2", "/var/lib/rancher/rke2"),
    ("k3s", "/var/lib/rancher/k3s"),
)
DROP_IN = "conf.d/99-nvidia.toml"  # gpuctrl's drop-in file, relative to the config's folder


def in_container(host_root: str, path: str) -> str:
    """Host path ``path`` as seen by a process that sees the host's root at ``host_root``."""
    return posixpath.join(host_root, path.lstrip("/"))


def detect_distribution(host_root: str) -> ContainerdDistribution:
    """The containerd distribution installed under ``host_root``; plain containerd if no other."""
    for distribution, marker in _MARKERS:
        if os.path.isdir(in_container(host_root, marker)):
            return distribution
    return "containerd"


def resolve_containerd(
    host_root: str, runtime_name: str, **explicit: str | None
) -> ContainerdSettings:
    """The ``explicit`` `ContainerdSettings` fields (None: unset) completed with the defaults of
    their ``distribution``, detected under ``host_root`` when unset.

    Raises `InvalidConfig` naming the bad value (e.g. a relative path).
    """
    try:
        given = ContainerdSettings.model_validate(
            {k: v for k, v in explicit.items() if v is not None}
        )
    except pydantic.ValidationError as error:
        raise InvalidConfig(f"invalid containerd option: {error}") from error
    distribution = given.distribution or detect_distribution(host_root)
    return containerd_defaults(given, distribution, runtime_name)


def drop_in_path(host_root: str, settings: ContainerdSettings) -> str | None:
    """The host path of gpuctrl's drop-in as ``settings.drop_in_mode`` says; None: edit the
    config itself. ``auto`` uses the drop-in when the config's ``imports`` already cover it."""
    config = str(settings.config_path)
    drop_in = posixpath.join(posixpath.dirname(config), DROP_IN)
    if settings.drop_in_mode == "always":
        return drop_in
    if settings.drop_in_mode == "never":
        return None
    try:
        data = read_bytes(resolve(host_root, in_container(host_root, config)))
        text = (data or b"").decode("utf-8", "surrogateescape").removeprefix("\ufeff")
        imports = load(text).get("imports", [])
    except ToolkitError:  # unreadable or invalid: install refuses it with the same message
        return None
    names = [i for i in imports if isinstance(i, str)] if isinstance(imports, list) else []
    return drop_in if covers(names, config, drop_in) else None
