"""The device-plugin section: NVIDIA's Kubernetes device plugin."""

from __future__ import annotations

from pydantic import Field

from api.v1alpha1._component import Component, ImageVersion

__all__ = ["DevicePluginSpec"]


class DevicePluginSpec(Component):
    """NVIDIA's device plugin, which advertises nvidia.com/gpu on each GPU node."""

    repository: str = Field(default="nvcr.io/nvidia", description="Image registry/path.")
    image: str = Field(default="k8s-device-plugin", description="Image name.")
    version: ImageVersion = Field(default="v0.17.0", description="Image tag or sha256: digest.")
