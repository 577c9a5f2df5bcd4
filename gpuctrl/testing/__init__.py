"""gpuctrl.testing: a real local control plane, a simulated kubelet and test helpers.

The Python counterpart of controller-runtime's envtest: etcd and kube-apiserver (optionally
kube-controller-manager and kube-scheduler) on loopback (`ControlPlane`), simulated GPU nodes
whose pods move through a realistic lifecycle (`SimulatedKubelet`, `SimulatedNode`,
`ContainerBehavior`) or run for real as sandboxed local processes (`ContainerBehavior.process`,
`SimulatedNode.root`, `SimulatedKubelet.restart_node`), a fake clock, an Istio-like sidecar
injector (`MeshInjector`), a node folder seeded as a GPU host (`seed_gpu_host`) and a driver root
(`install_fake_driver`), Secret
volumes swapped as the kubelet does (`write_secret_volume`),
`eventually` for polling, and pytest fixtures (`gpuctrl.testing.pytest_plugin`, opt-in with
``pytest_plugins = ["gpuctrl.testing.pytest_plugin"]`` in the top-level ``conftest.py``:
`control_plane`, `kube_api`, `namespace`, `gpu_nodes`).
"""

from ._behavior import BEHAVIOR_ANNOTATION, BehaviorError, ContainerBehavior
from ._clock import FakeClock
from ._controlplane import ControlPlane, ControlPlaneError, default_assets_dir
from ._eventually import eventually
from ._gpuhost import FAKE_NVIDIA_SMI, NODE_CONTAINERD_CONFIG, install_fake_driver, seed_gpu_host
from ._kubelet import SimulatedKubelet
from ._mesh import MeshInjector
from ._nodes import SimulatedNode, simulated_gpu_nodes
from ._volume import write_secret_volume

__all__ = [
    "BEHAVIOR_ANNOTATION",
    "FAKE_NVIDIA_SMI",
    "NODE_CONTAINERD_CONFIG",
    "BehaviorError",
    "ContainerBehavior",
    "ControlPlane",
    "ControlPlaneError",
    "FakeClock",
    "MeshInjector",
    "SimulatedKubelet",
    "SimulatedNode",
    "default_assets_dir",
    "eventually",
    "install_fake_driver",
    "seed_gpu_host",
    "simulated_gpu_nodes",
    "write_secret_volume",
]
