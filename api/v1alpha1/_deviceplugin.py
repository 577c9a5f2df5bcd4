"""The device-plugin section: NVIDIA's Kubernetes device plugin."""

from __future__ import annotations

from pydantic import Field

from api.v1alpha1._component import Component, ImageVersion
from api.v1alpha1._images import NVIDIA_IMAGES

__all__ = ["DevicePluginSpec"]

_PIN = NVIDIA_IMAGES["devicePlugin"]


class DevicePluginSpec(Component):
    """NVIDIA's device plugin, which advertises nvidia.com/gpu on each GPU node."""

    repository: str = Field(default=_PIN.repository, description="Image registry/path.")
    image: str = Field(default=_PIN.image, description="Image name.")
    version: ImageVersion = Field(default=_PIN.version, description="Image tag or sha256: digest.")
