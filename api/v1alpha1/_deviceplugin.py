"""The device-plugin section: NVIDIA's Kubernetes device plugin."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from api.v1alpha1._base import NORMAL_PATH, ApiModel, ObjectName
from api.v1alpha1._cel import Rule, cel_rules, interpolated, quoted
from api.v1alpha1._component import Component, ImageVersion
from api.v1alpha1._images import NVIDIA_IMAGES

__all__ = ["CONFIG_KEY", "DevicePluginConfig", "DevicePluginSpec", "MPSConfig"]

_PIN = NVIDIA_IMAGES["devicePlugin"]
CONFIG_KEY = r"^[-._a-zA-Z0-9]+$"
"""A ConfigMap key (what Kubernetes allows), which names one config of the plugin's ConfigMap."""

ConfigName = Annotated[
    str,
    Field(
        max_length=253,
        json_schema_extra=cel_rules(
            Rule(
                rule=f"self.matches({quoted(CONFIG_KEY)})",
                message_expression=interpolated(
                    "'{self}' is not a ConfigMap key (letters, digits, '-', '_', '.')"
                ),
            )
        ),
    ),
]


class DevicePluginConfig(ApiModel):
    """NVIDIA's ``devicePlugin.config``: a ConfigMap of named device plugin configs (time-slicing,
    MPS, flags), shared by the device plugin and GPU feature discovery; each node runs the one
    its ``nvidia.com/device-plugin.config`` label names."""

    name: ObjectName | None = Field(
        default=None,
        description="ConfigMap in the operator namespace; each key is a config (NVIDIA's device "
        "plugin config file, version v1) that a node selects with its "
        "nvidia.com/device-plugin.config label. Checked before it reaches a node: while a config "
        "is invalid the nodes keep the last good ones. Unset: no config, NVIDIA's defaults.",
    )
    default: ConfigName | None = Field(
        default=None,
        description="The config (a key of the ConfigMap) of nodes without the label; unset: "
        "NVIDIA's defaults (an empty config). Requires name.",
    )


class MPSConfig(ApiModel):
    """NVIDIA's ``devicePlugin.mps``: where on the host NVIDIA's MPS control daemon keeps its
    pipes, logs and shared memory, which the device plugin mounts into the pods it gives a
    GPU shared by MPS."""

    root: str = Field(
        default="/run/nvidia/mps",  # NVIDIA's
        max_length=1024,
        json_schema_extra=cel_rules(
            Rule(
                rule=f"self.matches({quoted(NORMAL_PATH)})",
                message_expression=interpolated(
                    "'{self}' is not an absolute path in normal form other than / (no '..', "
                    "'.', '//' or trailing '/')"
                ),
            )
        ),
        description="Host folder of the MPS control daemon's per-resource pipe and log "
        "folders; its shm subfolder becomes a tmpfs the MPS daemon and its clients share.",
    )


class DevicePluginSpec(Component):
    """NVIDIA's device plugin, which advertises nvidia.com/gpu on each GPU node, and beside it
    NVIDIA's MPS control daemon on the nodes whose config shares GPUs by MPS."""

    repository: str = Field(default=_PIN.repository, description="Image registry/path.")
    image: str = Field(default=_PIN.image, description="Image name.")
    version: ImageVersion = Field(default=_PIN.version, description="Image tag or sha256: digest.")
    config: DevicePluginConfig = Field(
        default_factory=DevicePluginConfig,
        description="Named configs (time-slicing, MPS) the device plugin, GPU feature "
        "discovery and the MPS control daemon select per node.",
    )
    mps: MPSConfig = Field(
        default_factory=MPSConfig,
        description="Where NVIDIA's MPS control daemon keeps its files on the host. The daemon "
        "is deployed with the device plugin and runs on the nodes labelled "
        "nvidia.com/mps.capable=true (GPU feature discovery's label of a node whose config "
        "shares by MPS).",
    )
