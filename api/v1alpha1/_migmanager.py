"""The migManager section: NVIDIA's MIG manager, which partitions a node's GPUs as its
``nvidia.com/mig.config`` label asks."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.v1alpha1._base import ApiModel, ObjectName
from api.v1alpha1._component import Component, ImageVersion
from api.v1alpha1._images import NVIDIA_IMAGES

__all__ = ["MIGGPUClientsConfig", "MIGManagerSpec", "MIGPartedConfig"]

_PIN = NVIDIA_IMAGES["migManager"]


class MIGPartedConfig(ApiModel):
    """NVIDIA's ``migManager.config``: the mig-parted config file (``config.yaml``: version v1,
    ``mig-configs`` by name) a node's ``nvidia.com/mig.config`` label picks from."""

    name: ObjectName | None = Field(
        default=None,
        description="ConfigMap in the operator namespace whose config.yaml is the mig-parted "
        "config. Checked before it reaches a node (while it is invalid the nodes keep the last "
        "good one). Unset: gpuctrl's default (all-disabled, all-enabled, all-<profile> of "
        "A100-40GB, A100-80GB and H100-80GB).",
    )
    default: Literal["all-disabled", ""] = Field(
        default="all-disabled",
        description="all-disabled: MIG-capable nodes without an nvidia.com/mig.config label "
        "get nvidia.com/mig.config=all-disabled (the config must define it); '': they are left "
        "unlabelled.",
    )


class MIGGPUClientsConfig(ApiModel):
    """NVIDIA's ``migManager.gpuClientsConfig``: the host's systemd services that use the GPUs
    (``clients.yaml``: version v1, ``systemd-services``), stopped around a reconfiguration on
    nodes with a host driver."""

    name: ObjectName | None = Field(
        default=None,
        description="ConfigMap in the operator namespace whose clients.yaml lists them. Unset: "
        "gpuctrl's default (NVIDIA's DCGM and NVSM services).",
    )


class MIGManagerSpec(Component):
    """NVIDIA's MIG manager on each MIG-capable GPU node (``nvidia.com/mig.capable=true``, or
    without that label an A100, A30 or H100 ``nvidia.com/gpu.product``; never a vGPU host, as
    NVIDIA's operator decides): it applies the mig-parted config that the
    node's ``nvidia.com/mig.config`` label names and reports in ``nvidia.com/mig.config.state``
    (pending, rebooting, success, failed), pausing the node's GPU clients meanwhile."""

    repository: str = Field(default=_PIN.repository, description="Image registry/path.")
    image: str = Field(default=_PIN.image, description="Image name.")
    version: ImageVersion = Field(default=_PIN.version, description="Image tag or sha256: digest.")
    config: MIGPartedConfig = Field(
        default_factory=MIGPartedConfig, description="The mig-parted configs nodes choose from."
    )
    gpu_clients_config: MIGGPUClientsConfig = Field(
        default_factory=MIGGPUClientsConfig,
        description="The host's GPU clients stopped around a reconfiguration.",
    )
