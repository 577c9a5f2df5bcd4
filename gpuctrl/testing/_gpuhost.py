"""A simulated node's folder seeded as a GPU host, as gpuctrl's node agents see one.

`seed_gpu_host` writes containerd's config as a cluster installer leaves it (a runc runtime
with ``SystemdCgroup = true``) and the host's driver as far as the validator reaches it: a
fake ``usr/bin/nvidia-smi``, with ``bin/sh`` and the libraries it loads copied from this
machine, so that the driver check's ``chroot <host root> nvidia-smi`` runs it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

__all__ = ["FAKE_NVIDIA_SMI", "NODE_CONTAINERD_CONFIG", "install_fake_driver", "seed_gpu_host"]

NODE_CONTAINERD_CONFIG = """\
# Written by the cluster installer. The kubelet uses the systemd cgroup driver:
# keep SystemdCgroup = true below or the control plane static pods crash-loop.
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    stream_server_port = "0"

    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes]
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
          runtime_type = "io.containerd.runc.v2"  # the v2 shim

          [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
            SystemdCgroup = true
"""
"""The ``etc/containerd/config.toml`` `seed_gpu_host` writes by default."""

_SHELL = "/bin/sh"
FAKE_NVIDIA_SMI = """#!/bin/sh
echo "NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4 (simulated)"
"""


def seed_gpu_host(
    root: Path, containerd_config: str = NODE_CONTAINERD_CONFIG, *, host_driver: bool = True
) -> None:
    """Give the node folder ``root`` what the toolkit and validator agents need of a GPU host
    (see the module docstring); ``containerd_config`` becomes ``etc/containerd/config.toml``.
    Without ``host_driver`` the host has no driver of its own (a driver container's to install)."""
    config = root / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(containerd_config)
    if host_driver:
        install_fake_driver(root)


def install_fake_driver(root: Path) -> None:
    """Make the folder ``root`` a driver root as the validator reaches one: a fake
    ``usr/bin/nvidia-smi`` with ``bin/sh`` and the libraries it loads, copied from this machine,
    so that ``chroot <root> nvidia-smi`` runs it."""
    for name in (_SHELL, *_libraries(_SHELL)):
        target = root / name.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(name).resolve(), target)
        target.chmod(0o755)
    smi = root / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(0o755)


def _libraries(program: str) -> list[str]:
    """The shared libraries ``program`` loads (its loader included), as ``ldd`` lists them."""
    listing = subprocess.run(["ldd", program], capture_output=True, text=True, check=True)
    return [word for word in listing.stdout.split() if word.startswith("/")]
