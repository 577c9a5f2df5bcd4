"""The toolkit section: gpuctrl's agent that adds the NVIDIA runtime to containerd."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.v1alpha1._base import ApiModel, DnsLabel
from api.v1alpha1._component import (
    AGENT_REPOSITORY,
    AGENT_VERSION,
    Component,
    Image,
    ImageVersion,
)
from api.v1alpha1._images import NVIDIA_IMAGES

__all__ = [
    "CONTAINERD_DEFAULTS",
    "ContainerdDistribution",
    "ContainerdSettings",
    "DropInMode",
    "RestartMode",
    "RuntimeImage",
    "ToolkitSpec",
    "containerd_defaults",
]

ContainerdDistribution = Literal["containerd", "k3s", "rke2", "microk8s"]
RestartMode = Literal["signal", "systemd", "none"]
DropInMode = Literal["auto", "always", "never"]


class ContainerdSettings(ApiModel):
    """How the toolkit agent finds and changes containerd; unset fields are detected per node.

    The agent detects the node's distribution (plain containerd, k3s, RKE2, microk8s) when
    ``distribution`` is unset and takes the unset fields from `containerd_defaults`.
    """

    distribution: ContainerdDistribution | None = Field(
        default=None, description="The node's containerd flavour; unset = detected per node."
    )
    config_path: str | None = Field(
        default=None,
        pattern=r"^/",
        description="containerd's config file (for k3s/RKE2/microk8s: the template file).",
    )
    socket_path: str | None = Field(default=None, pattern=r"^/", description="containerd's socket.")
    runtime_class_name: DnsLabel | None = Field(
        default=None,
        description="Name of the runtime (handler) added to containerd; unset = the "
        "operator's runtimeClass.",
    )
    set_as_default: bool | None = Field(
        default=None,
        description="Make the NVIDIA runtime the container runtime's default; unset = as "
        "NVIDIA's operator: not with CDI (cdi.enabled), yes without it.",
    )
    drop_in_mode: DropInMode | None = Field(
        default=None,
        description="always: write a drop-in file imported by the config; never: edit the "
        "config itself; auto: drop-in when the config imports a conf.d folder.",
    )
    restart_mode: RestartMode | None = Field(
        default=None,
        description="How containerd is told to reload: signal (SIGHUP to its PID), systemd "
        "(restart the unit) or none.",
    )


# Defaults per distribution, from each one's documented layout (see reference/containerd.md).
CONTAINERD_DEFAULTS: dict[ContainerdDistribution, ContainerdSettings] = {
    "containerd": ContainerdSettings(
        distribution="containerd",
        config_path="/etc/containerd/config.toml",
        socket_path="/run/containerd/containerd.sock",
        drop_in_mode="auto",
        restart_mode="signal",
    ),
    "k3s": ContainerdSettings(
        distribution="k3s",
        config_path="/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl",
        socket_path="/run/k3s/containerd/containerd.sock",
        drop_in_mode="never",
        restart_mode="systemd",
    ),
    "rke2": ContainerdSettings(
        distribution="rke2",
        config_path="/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl",
        socket_path="/run/k3s/containerd/containerd.sock",
        drop_in_mode="never",
        restart_mode="systemd",
    ),
    "microk8s": ContainerdSettings(
        distribution="microk8s",
        config_path="/var/snap/microk8s/current/args/containerd-template.toml",
        socket_path="/var/snap/microk8s/common/run/containerd.sock",
        drop_in_mode="never",
        restart_mode="systemd",
    ),
}


def containerd_defaults(
    settings: ContainerdSettings, distribution: ContainerdDistribution, runtime_class: str
) -> ContainerdSettings:
    """``settings`` with every unset field taken from ``distribution``'s defaults.

    ``distribution`` is the one the node agent detected; an explicit ``settings.distribution``
    wins over it. ``runtime_class_name`` falls back to the operator's ``runtime_class``.
    """
    chosen = settings.distribution or distribution
    defaults = CONTAINERD_DEFAULTS[chosen].model_copy(update={"runtime_class_name": runtime_class})
    explicit = settings.model_dump(exclude_none=True)
    return defaults.model_copy(update=explicit)


_RUNTIME_PIN = NVIDIA_IMAGES["containerToolkit"]


class RuntimeImage(Image):
    """NVIDIA's container-toolkit image, whose installer puts the NVIDIA runtimes on the host.

    Its fields are NVIDIA's ``toolkit.repository``/``image``/``version``; it is pulled with
    the toolkit section's ``imagePullPolicy`` and ``imagePullSecrets``. The tag must name an
    image with a shell and NVIDIA's ``nvidia-toolkit`` installer (NVIDIA's ``-ubuntu20.04`` or
    ``-ubi8`` variants of v1.17).
    """

    repository: str = Field(default=_RUNTIME_PIN.repository, description="Image registry/path.")
    image: str = Field(default=_RUNTIME_PIN.image, description="Image name.")
    version: ImageVersion = Field(
        default=_RUNTIME_PIN.version,
        description="Image tag (a variant with a shell) or sha256: digest.",
    )


class ToolkitSpec(Component):
    """gpuctrl's toolkit agent: installs the NVIDIA container runtime and configures containerd.

    ``repository``/``image``/``version`` name gpuctrl's agent image (the main container); an
    init container of ``runtimeImage`` (NVIDIA's container-toolkit) first runs NVIDIA's
    installer, which writes the NVIDIA runtimes, their wrappers and their config into
    ``<installDir>/toolkit`` on the host and exits without touching containerd.
    """

    repository: str = Field(
        default=AGENT_REPOSITORY, description="gpuctrl's agent image: registry/path."
    )
    image: str = Field(default="gpuctrl", description="gpuctrl's agent image: name.")
    version: ImageVersion = Field(
        default=AGENT_VERSION, description="gpuctrl's agent image: tag or sha256: digest."
    )
    install_dir: str = Field(
        default="/usr/local/nvidia",
        pattern=r"^/",
        description="Host folder the NVIDIA container toolkit is installed into "
        "(its runtime binaries go to <installDir>/toolkit).",
    )
    runtime_image: RuntimeImage = Field(
        default_factory=RuntimeImage,
        description="NVIDIA's container-toolkit image whose installer an init container runs "
        "to install the NVIDIA runtimes into <installDir>/toolkit (NVIDIA's toolkit "
        "repository/image/version).",
    )
    containerd: ContainerdSettings = Field(
        default_factory=ContainerdSettings,
        description="containerd's paths and how to change it; unset fields are detected.",
    )
