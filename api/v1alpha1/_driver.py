"""The driver section of a ClusterPolicy, with its package-repository settings."""

from __future__ import annotations

import posixpath
import re
from typing import Annotated

from pydantic import Field

from api.v1alpha1._base import (
    MAX_LIST_ITEMS,
    NORMAL_PATH,
    ApiModel,
    EnvVar,
    ObjectName,
    PullPolicy,
)
from api.v1alpha1._cel import Rule, cel_rules, interpolated, literal, quoted
from api.v1alpha1._component import Component, Image, ImageVersion
from api.v1alpha1._images import NVIDIA_IMAGES
from api.v1alpha1._upgrade import DriverUpgradePolicySpec

__all__ = [
    "FORBIDDEN_HOST_ROOTS",
    "SHADOWED_IMAGE_FOLDERS",
    "CertConfig",
    "DriverManagerSpec",
    "DriverSpec",
    "HostFolder",
    "RepoConfig",
]

# Host folders a node-local repository must never be, be under, or hold: the system's own
# state (credentials, kubelet secrets, container layers, devices, home folders).
FORBIDDEN_HOST_ROOTS = (
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/run",
    "/var/run",
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/lib/etcd",
    "/root",
    "/home",
)
# Folders of the driver image that a host folder mounted at the same path would hide (the
# image's programs, libraries and kernel sources); folders below them are fine.
SHADOWED_IMAGE_FOLDERS = (
    "/bin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/sbin",
    "/usr",
    "/usr/bin",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local",
    "/usr/sbin",
    "/usr/share",
    "/usr/src",
)


def _parents(path: str) -> list[str]:
    """The folders above absolute ``path``, / excepted."""
    parents = []
    while (path := posixpath.dirname(path)) != "/":
        parents.append(path)
    return parents


# Whether self is absolute, normal and not / (NORMAL_PATH).
_NORMAL = f"self.matches({quoted(NORMAL_PATH)})"
_ROOTS = literal(FORBIDDEN_HOST_ROOTS)
_UNDER = "r == self || self.startsWith(r + '/')"
_HOLDS = "r.startsWith(self + '/')"
# Each verdict is one regular expression or membership test, cheap in both evaluators; only a
# failing rule's message runs a macro over the roots to name one. Above the roots: /var, ...
_UNDER_A_ROOT = "self.matches({})".format(
    quoted("^(" + "|".join(map(re.escape, FORBIDDEN_HOST_ROOTS)) + ")(/.*)?$")
)
_ABOVE_ROOTS = tuple(sorted({parent for root in FORBIDDEN_HOST_ROOTS for parent in _parents(root)}))
# A path that is not absolute and normal gets that one problem: the later rules hold for it.
_HOST_FOLDER_RULES = (
    Rule(
        rule="self.startsWith('/')",
        message_expression=interpolated("'{self}' is not absolute"),
    ),
    Rule(
        rule=f"!self.startsWith('/') || self == '/' || {_NORMAL}",
        message_expression=interpolated(
            "'{self}' is not normalised (no '..', '.', '//' or trailing '/')"
        ),
    ),
    Rule(rule="self != '/'", message="'/' would expose the whole host"),
    Rule(
        rule=f"!{_UNDER_A_ROOT} || !{_NORMAL}",
        message_expression=interpolated(
            "'{self}' is under {root}, a system folder", root=f"{_ROOTS}.filter(r, {_UNDER})[0]"
        ),
    ),
    Rule(
        rule=f"!(self in {literal(_ABOVE_ROOTS)})",
        message_expression=interpolated(
            "'{self}' holds {root}, a system folder", root=f"{_ROOTS}.filter(r, {_HOLDS})[0]"
        ),
    ),
    Rule(
        rule=f"!(self in {literal(SHADOWED_IMAGE_FOLDERS)})",
        message_expression=interpolated("'{self}' would hide the driver image's own {self}"),
    ),
)
# A host folder a driver container may mount: absolute, normal, not a system folder nor under
# or above one, not a folder of the driver image. The bounds of its length and of the list
# keep the rules within the apiserver's cost budget; no repository path comes near them.
HostFolder = Annotated[
    str, Field(max_length=1024, json_schema_extra=cel_rules(*_HOST_FOLDER_RULES))
]
_MAX_HOST_FOLDERS = 64
_ONCE = "self.exists_one(q, q == p)"


class RepoConfig(ApiModel):
    """Package repositories the driver container installs kernel headers from."""

    config_map_name: ObjectName | None = Field(
        default=None,
        description="ConfigMap in the operator namespace; each key the OS's package manager "
        "reads (*.list and *.sources for apt, *.repo for dnf/yum and zypper) is mounted "
        "read-only as a file in that OS's repository folder (e.g. "
        "/etc/apt/sources.list.d/<key>), so one ConfigMap serves a mixed cluster.",
    )
    # Only together with config_map_name (the entry that uses them): checked by validate.
    node_local_paths: list[HostFolder] = Field(
        default_factory=list,
        max_length=_MAX_HOST_FOLDERS,
        json_schema_extra=cel_rules(
            Rule(
                rule=f"self.all(p, {_ONCE})",
                message_expression=interpolated(
                    "'{path}' is listed twice", path=f"self.filter(p, !{_ONCE})[0]"
                ),
            )
        ),
        description="Host folders holding a package repository (e.g. a file:///opt/local-"
        "packages apt repository on the node image), mounted read-only (hostPath type "
        "Directory, which must exist on the node) at the same path in each driver container "
        "whose repository files from configMapName refer into it (a file:// URI, a key "
        "file), and nowhere else. Absolute and "
        f"normalised; never /, a system folder ({', '.join(FORBIDDEN_HOST_ROOTS)}), "
        "a folder under or above one, or a folder of the image such as /usr. "
        "A symlink in the path is resolved on the node (the kubelet follows it), so list "
        "the folder the repository files name and make sure its target is not a system "
        "folder either. Requires configMapName.",
    )


class CertConfig(ApiModel):
    """CA certificates the driver container trusts when it fetches packages."""

    name: ObjectName | None = Field(
        default=None,
        description="ConfigMap in the operator namespace; each key is mounted read-only into "
        "the OS's CA certificate folder.",
    )


_PIN = NVIDIA_IMAGES["driver"]
_MANAGER_PIN = NVIDIA_IMAGES["driverManager"]


class DriverManagerSpec(Image):
    """NVIDIA's k8s-driver-manager, the driver pod's init container that, before the driver
    container (re)installs, evicts what still uses the GPUs and unloads the old modules."""

    repository: str = Field(default=_MANAGER_PIN.repository, description="Image registry/path.")
    image: str = Field(default=_MANAGER_PIN.image, description="Image name.")
    version: ImageVersion = Field(
        default=_MANAGER_PIN.version, description="Image tag or sha256: digest."
    )
    image_pull_policy: PullPolicy = Field(
        default="IfNotPresent", description="Pull policy of the image."
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Environment variables of the driver manager, set over its defaults "
        "(ENABLE_GPU_POD_EVICTION, ENABLE_AUTO_DRAIN, DRAIN_* as NVIDIA's operator sets them).",
    )


class DriverSpec(Component):
    """NVIDIA's driver container, one DaemonSet per OS found among the GPU nodes."""

    repository: str = Field(default=_PIN.repository, description="Image registry/path.")
    image: str = Field(default=_PIN.image, description="Image name.")
    version: ImageVersion = Field(
        default=_PIN.version,
        description="Driver version; the tag is <version>-<OS ID><OS VERSION_ID>.",
    )
    repo_config: RepoConfig = Field(
        default_factory=RepoConfig, description="Package repositories for the driver build."
    )
    cert_config: CertConfig = Field(
        default_factory=CertConfig, description="CA certificates for the package repositories."
    )
    manager: DriverManagerSpec = Field(
        default_factory=DriverManagerSpec,
        description="NVIDIA's k8s-driver-manager, run before the driver container.",
    )
    upgrade_policy: DriverUpgradePolicySpec = Field(
        default_factory=DriverUpgradePolicySpec,
        description="How nodes move to a new driver. The driver's DaemonSets are always "
        "OnDelete (daemonsets.updateStrategy applies to the other operands): the upgrade "
        "controller replaces each node's driver pod in turn.",
    )
