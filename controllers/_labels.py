"""The Node labels the controllers read and write (NVIDIA's names), in one place."""

from __future__ import annotations

from controllers._upgrade_plan import SKIP, STATE
from controllers.render._facts import OS_ID_LABEL, OS_VERSION_LABEL
from controllers.render._mpsdaemon import MPS_CAPABLE

__all__ = [
    "DEPLOY_LABELS",
    "DEPLOY_OPERANDS",
    "GPU_PRESENT",
    "GPU_PRESENT_FROM",
    "GPU_PRODUCT",
    "MIG_CAPABLE",
    "MIG_CONFIG",
    "MIG_DEPLOY_LABELS",
    "MPS_CAPABLE",
    "MPS_COMPONENTS",
    "NFD_GPU_LABELS",
    "READ_LABELS",
    "VGPU_HOST_DRIVER",
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
    "mig-manager": "nvidia.com/gpu.deploy.mig-manager",
    # NVIDIA's MPS daemon has none of its own: it selects the device plugin's.
    "mps-control-daemon": "nvidia.com/gpu.deploy.device-plugin",
}
"""Each gpuctrl component's deploy label (NVIDIA's names, which its DaemonSet selects)."""
MIG_CAPABLE = "nvidia.com/mig.capable"
"""``true`` on a node whose GPUs can be partitioned (NVIDIA's GPU feature discovery writes it)."""
GPU_PRODUCT = "nvidia.com/gpu.product"
"""The node's GPU model (GPU feature discovery writes it); read where ``mig.capable`` is absent."""
VGPU_HOST_DRIVER = "nvidia.com/vgpu.host-driver-version"
"""Set on a vGPU host, whose GPUs NVIDIA's operator never treats as MIG-capable."""
MIG_CONFIG = "nvidia.com/mig.config"
"""The mig-parted config a node's MIG manager applies (the user's, or ``all-disabled``)."""
MIG_DEPLOY_LABELS = frozenset({DEPLOY_LABELS["mig-manager"]})
"""The deploy labels given to MIG-capable GPU nodes only."""
MPS_COMPONENTS = frozenset({"mps-control-daemon"})
"""The components that run only on nodes labelled `MPS_CAPABLE` ``true`` (their DaemonSet
selects it)."""
READ_LABELS = (
    *NFD_GPU_LABELS,
    GPU_PRESENT,
    GPU_PRESENT_FROM,
    DEPLOY_OPERANDS,
    *DEPLOY_LABELS.values(),
    MIG_CAPABLE,
    GPU_PRODUCT,
    VGPU_HOST_DRIVER,
    MIG_CONFIG,
    MPS_CAPABLE,
    OS_ID_LABEL,
    OS_VERSION_LABEL,
    STATE,
    SKIP,
)
"""Every Node label a controller reads: the labeller's rule, the render's facts (GPU and OS
labels, see `controllers.render`), the ready-node count. A controller that reads another label
adds it here."""
