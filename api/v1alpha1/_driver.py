"""The driver section of a ClusterPolicy, with its package-repository settings."""

from __future__ import annotations

from pydantic import Field

from api.v1alpha1._base import ApiModel
from api.v1alpha1._component import Component

__all__ = ["CertConfig", "DriverSpec", "RepoConfig"]


class RepoConfig(ApiModel):
    """Package repositories the driver container installs kernel headers from."""

    config_map_name: str | None = Field(
        default=None,
        description="ConfigMap in the operator namespace; each key the OS's package manager "
        "reads (*.list and *.sources for apt, *.repo for dnf/yum and zypper) is mounted "
        "read-only as a file in that OS's repository folder (e.g. "
        "/etc/apt/sources.list.d/<key>), so one ConfigMap serves a mixed cluster.",
    )
    # Checked by api.v1alpha1.validate: absolute, normalised, unique, not a system folder nor
    # under or above one, and only together with config_map_name (the entry that uses them).
    node_local_paths: list[str] = Field(
        default_factory=list,
        description="Host folders holding a package repository (e.g. a file:///opt/local-"
        "packages apt repository on the node image), mounted read-only (hostPath type "
        "Directory, which must exist on the node) at the same path in each driver container "
        "whose repository files from configMapName refer into it (a file:// URI, a key "
        "file), and nowhere else. Absolute and "
        "normalised; never /, a system folder (/etc, /proc, /sys, /dev, /boot, /run, "
        "/var/run, /var/lib/kubelet, /var/lib/containerd, /var/lib/docker, /var/lib/etcd, "
        "/root, /home), a folder under or above one, or a folder of the image such as /usr. "
        "A symlink in the path is resolved on the node (the kubelet follows it), so list "
        "the folder the repository files name and make sure its target is not a system "
        "folder either. Requires configMapName.",
    )


class CertConfig(ApiModel):
    """CA certificates the driver container trusts when it fetches packages."""

    name: str | None = Field(
        default=None,
        description="ConfigMap in the operator namespace; each key is mounted read-only into "
        "the OS's CA certificate folder.",
    )


class DriverSpec(Component):
    """NVIDIA's driver container, one DaemonSet per OS found among the GPU nodes."""

    repository: str = Field(default="nvcr.io/nvidia", description="Image registry/path.")
    image: str = Field(default="driver", description="Image name.")
    version: str = Field(
        default="550.127.05",
        description="Driver version; the tag is <version>-<OS ID><OS VERSION_ID>.",
    )
    repo_config: RepoConfig = Field(
        default_factory=RepoConfig, description="Package repositories for the driver build."
    )
    cert_config: CertConfig = Field(
        default_factory=CertConfig, description="CA certificates for the package repositories."
    )
