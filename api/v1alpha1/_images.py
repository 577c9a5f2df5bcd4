"""The NVIDIA images gpuctrl's operands are built against, pinned in this one place.

Each operand section's ``repository``/``image``/``version`` defaults come from here, and the
README's table of image versions is checked against it. A pin is the image NVIDIA's chart of
the same release deploys for that operand (``deployments/gpu-operator/values.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NVIDIA_IMAGES", "PinnedImage"]


@dataclass(frozen=True)
class PinnedImage:
    """One image: ``repository/image:version``."""

    repository: str
    image: str
    version: str

    @property
    def reference(self) -> str:
        """The full image reference."""
        return f"{self.repository}/{self.image}:{self.version}"


NVIDIA_IMAGES: dict[str, PinnedImage] = {
    "driver": PinnedImage("nvcr.io/nvidia", "driver", "550.127.05"),
    "driverManager": PinnedImage("nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.12.0"),
    "containerToolkit": PinnedImage(
        "nvcr.io/nvidia/k8s", "container-toolkit", "v1.17.8-ubuntu20.04"
    ),
    "devicePlugin": PinnedImage("nvcr.io/nvidia", "k8s-device-plugin", "v0.17.0"),
    "dcgm": PinnedImage("nvcr.io/nvidia/cloud-native", "dcgm", "3.3.9-1-ubuntu22.04"),
    "dcgmExporter": PinnedImage("nvcr.io/nvidia/k8s", "dcgm-exporter", "3.3.9-3.6.1-ubuntu22.04"),
    "migManager": PinnedImage(
        "nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.10.0-ubuntu20.04"
    ),
    "cudaSample": PinnedImage("nvcr.io/nvidia/k8s", "cuda-sample", "vectoradd-cuda12.5.0"),
}
"""The pinned images by operand, under NVIDIA's value names (``driver.manager`` is
``driverManager``; ``cudaSample`` is the validator's workload image)."""
