"""The device-plugin section: NVIDIA's Kubernetes device plugin."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from api.v1alpha1._base import ApiModel, ObjectName
from api.v1alpha1._cel import Rule, cel_rules, interpolated, quoted
from api.v1alpha1._component import Component, ImageVersion
from api.v1alpha1._images import NVIDIA_IMAGES

__all__ = ["CONFIG_KEY", "DevicePluginConfig", "DevicePluginSpec"]

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


class DevicePluginSpec(Component):
    """NVIDIA's device plugin, which advertises nvidia.com/gpu on each GPU node."""

    repository: str = Field(default=_PIN.repository, description="Image registry/path.")
    image: str = Field(default=_PIN.image, description="Image name.")
    version: ImageVersion = Field(default=_PIN.version, description="Image tag or sha256: digest.")
    config: DevicePluginConfig = Field(
        default_factory=DevicePluginConfig,
        description="Named configs (time-slicing, MPS) the device plugin and GPU feature "
        "discovery select per node.",
    )
