"""The Node labels the controllers read and write (NVIDIA's names), in one place."""

from __future__ import annotations

from controllers._upgrade_plan import SKIP, STATE
from controllers.render._facts import OS_ID_LABEL, OS_VERSION_LABEL

__all__ = [
    "DEPLOY_LABELS",
    "DEPLOY_OPERANDS",
    "GPU_PRESENT",
    "GPU_PRESENT_FROM",
    "NFD_GPU_LABELS",
    "READ_LABELS",
]

GPU_PRESENT = "nvidia.com/gpu.present"
# gpuctrl's mark beside a gpu.present=true it wrote from NFD's labels (value "nfd"): only that
# one is gpuctrl's to turn false when NFD's labels go; another's gpu.present=true is kept.
GPU_PRESENT_FROM = "gpuctrl.io/gpu-present-from"
DEPLOY_OPERANDS = "nvidia.com/gpu.deploy.operands"
# NFD's labels of an NVIDIA PCI device (any class, 3D controller, VGA).
NFD_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
DEPLOY_LABELS = {
    "driver": "nvidia.com/gpu.deploy.driver",
    "toolkit": "nvidia.com/gpu.deploy.container-toolkit",
    "validator": "nvidia.com/gpu.deploy.operator-validator",
    "device-plugin": "nvidia.com/gpu.deploy.device-plugin",
    "gpu-feature-discovery": "nvidia.com/gpu.deploy.gpu-feature-discovery",
    "dcgm": "nvidia.com/gpu.deploy.dcgm",
    "dcgm-exporter": "nvidia.com/gpu.deploy.dcgm-exporter",
    "node-status-exporter": "nvidia.com/gpu.deploy.node-status-exporter",
}
"""Each gpuctrl component's deploy label (NVIDIA's names, which its DaemonSet selects)."""
READ_LABELS = (
    *NFD_GPU_LABELS,
    GPU_PRESENT,
    GPU_PRESENT_FROM,
    DEPLOY_OPERANDS,
    *DEPLOY_LABELS.values(),
    OS_ID_LABEL,
    OS_VERSION_LABEL,
    STATE,
    SKIP,
)
"""Every Node label a controller reads: the labeller's rule, the render's facts (GPU and OS
labels, see `controllers.render`), the ready-node count. A controller that reads another label
adds it here."""
