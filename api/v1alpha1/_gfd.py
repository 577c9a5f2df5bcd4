"""The gfd section: NVIDIA's GPU feature discovery, which labels nodes with their GPUs."""

from __future__ import annotations

from pydantic import Field

from api.v1alpha1._component import Component, ImageVersion
from api.v1alpha1._images import NVIDIA_IMAGES

__all__ = ["GFDSpec"]

# GPU feature discovery ships in the device plugin's image (``gpu-feature-discovery``), of the
# same version in NVIDIA's chart.
_PIN = NVIDIA_IMAGES["devicePlugin"]


class GFDSpec(Component):
    """NVIDIA's GPU feature discovery (NVIDIA's ``gfd``): labels each GPU node with what its
    GPUs are (``nvidia.com/gpu.product``, ``.count``, ``.memory``, the MIG strategy's labels)
    through node-feature-discovery, on the nodes labelled
    ``nvidia.com/gpu.deploy.gpu-feature-discovery=true``."""

    repository: str = Field(default=_PIN.repository, description="Image registry/path.")
    image: str = Field(default=_PIN.image, description="Image name.")
    version: ImageVersion = Field(default=_PIN.version, description="Image tag or sha256: digest.")
    host_network: bool = Field(
        default=False, description="Run its pods in the node's network namespace."
    )
