"""Simulated GPU nodes: their specification and the Node, status and Lease objects they show.

Everything here is pure: objects are rendered from a `SimulatedNode` and a time. Addresses are
derived from a hash of the node name, so a node always gets the same ones.
"""

from __future__ import annotations

import datetime
import ipaddress
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuctrl.runtime import kube_micro_time, kube_time

from .envtest import kubernetes_version

__all__ = [
    "KUBELET_HOST",
    "KUBELET_PORT",
    "LEASE_DURATION_SECONDS",
    "NODE_LEASE_NAMESPACE",
    "SimulatedNode",
    "lease_manifest",
    "node_labels",
    "node_manifest",
    "node_spec_patch",
    "node_status",
    "simulated_gpu_nodes",
]

NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
NFD = "feature.node.kubernetes.io"
# Where the kubelet endpoint of every simulated node listens: on loopback, each
# `SimulatedKubelet` at a port of its own (a real kubelet's is 10250).
KUBELET_HOST = "127.0.0.1"
KUBELET_PORT = 10250
_NODE_IPS = ipaddress.ip_network("172.16.0.0/12")
_POD_NETWORK = ipaddress.ip_network("10.128.0.0/9")  # one /24 per node

# What a fresh install of each release reports (osImage) and a kernel it ships.
_OS_IMAGES = {
    "ubuntu": "Ubuntu {version} LTS",
    "rhel": "Red Hat Enterprise Linux {version}",
    "rocky": "Rocky Linux {version}",
    "debian": "Debian GNU/Linux {version}",
}
_KERNELS = {
    ("ubuntu", "20.04"): "5.4.0-182-generic",
    ("ubuntu", "22.04"): "5.15.0-105-generic",
    ("ubuntu", "24.04"): "6.8.0-45-generic",
    ("rhel", "8"): "4.18.0-513.5.1.el8_9.x86_64",
    ("rhel", "9"): "5.14.0-427.13.1.el9_4.x86_64",
    ("rocky", "9"): "5.14.0-427.13.1.el9_4.x86_64",
    ("debian", "12"): "6.1.0-18-amd64",
}
_FALLBACK_KERNEL = "6.1.0-18-amd64"


@dataclass(frozen=True)
class SimulatedNode:
    """A GPU node as the simulated kubelet registers it.

    `kernel` defaults to a kernel of that OS release; `labels` are added to the NFD and well-known
    labels (and win over them); `gpus` sets `nvidia.com/gpu` capacity (0: a node without GPUs and
    without the NFD NVIDIA PCI label). `root` is the node's own folder, its ``/`` for the
    ``hostPath`` volumes of process-backed containers (seed it with the files the node should
    have); None: the kubelet makes an empty one, and `SimulatedKubelet.nodes` shows where.
    """

    name: str
    os_id: str = "ubuntu"
    os_version: str = "22.04"
    kernel: str | None = None
    gpus: int = 1
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()
    container_runtime: str = "containerd://1.7.13"
    cpu: str = "16"
    memory: str = "64Gi"
    root: Path | None = None

    @property
    def kernel_version(self) -> str:
        """The kernel release the node reports."""
        if self.kernel:
            return self.kernel
        major = self.os_version.split(".")[0]
        return _KERNELS.get(
            (self.os_id, self.os_version), _KERNELS.get((self.os_id, major), _FALLBACK_KERNEL)
        )

    @property
    def os_image(self) -> str:
        """The human-readable OS name (`nodeInfo.osImage`)."""
        template = _OS_IMAGES.get(self.os_id, self.os_id + " {version}")
        return template.format(version=self.os_version)

    @property
    def internal_ip(self) -> str:
        """The node's InternalIP (stable for a name)."""
        offset = 1 + _hash(self.name) % (_NODE_IPS.num_addresses - 2)
        return str(_NODE_IPS.network_address + offset)

    @property
    def pod_cidr(self) -> ipaddress.IPv4Network:
        """The /24 its pods get addresses from (stable for a name)."""
        index = _hash(self.name) % 2 ** (24 - _POD_NETWORK.prefixlen)
        return ipaddress.IPv4Network((int(_POD_NETWORK.network_address) + (index << 8), 24))


def simulated_gpu_nodes(
    prefix: str,
    *,
    count: int = 2,
    os_releases: Iterable[tuple[str, str]] = (("ubuntu", "22.04"), ("ubuntu", "24.04")),
    gpus: int = 1,
    labels: Mapping[str, str] | None = None,
) -> list[SimulatedNode]:
    """`count` nodes named `{prefix}-{i}` cycling through `os_releases` ((os_id, version))."""
    releases = list(os_releases)
    if not releases:
        raise ValueError("os_releases is empty: give at least one (os_id, version) pair")
    return [
        SimulatedNode(
            name=f"{prefix}-{index}",
            os_id=releases[index % len(releases)][0],
            os_version=releases[index % len(releases)][1],
            gpus=gpus,
            labels=dict(labels or {}),
        )
        for index in range(count)
    ]


def node_labels(node: SimulatedNode) -> dict[str, str]:
    """Well-known kubelet labels, the labels NFD would add, then the node's own labels."""
    kernel = node.kernel_version
    kernel_major, kernel_minor = [*kernel.split("."), "0"][:2]
    version_major, version_minor = [*node.os_version.split("."), "0"][:2]
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        f"{NFD}/system-os_release.ID": node.os_id,
        f"{NFD}/system-os_release.VERSION_ID": node.os_version,
        f"{NFD}/system-os_release.VERSION_ID.major": version_major,
        f"{NFD}/system-os_release.VERSION_ID.minor": version_minor,
        f"{NFD}/kernel-version.full": kernel,
        f"{NFD}/kernel-version.major": kernel_major,
        f"{NFD}/kernel-version.minor": kernel_minor,
    }
    if node.gpus > 0:
        labels[f"{NFD}/pci-10de.present"] = "true"
    labels.update(node.labels)
    return labels


def node_manifest(
    node: SimulatedNode, now: datetime.datetime, kubelet_port: int = KUBELET_PORT
) -> dict[str, Any]:
    """The Node the kubelet creates, status included (the apiserver keeps a new Node's status);
    its kubelet endpoint is ``https://KUBELET_HOST:kubelet_port``."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": node_labels(node),
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": str(node.pod_cidr), "podCIDRs": [str(node.pod_cidr)]},
        "status": node_status(node, now, kubelet_port),
    }


def node_spec_patch(node: SimulatedNode) -> dict[str, Any]:
    """Sets the taints to the node's own, dropping the not-ready taint admission adds."""
    return {"spec": {"taints": [dict(taint) for taint in node.taints] or None}}


def node_status(
    node: SimulatedNode, now: datetime.datetime, kubelet_port: int = KUBELET_PORT
) -> dict[str, Any]:
    """The status of a healthy node: Ready, no pressure, capacity including its GPUs."""
    kubelet_version = f"v{kubernetes_version()}"
    resources = {
        "cpu": node.cpu,
        "memory": node.memory,
        "pods": "110",
        "ephemeral-storage": "500Gi",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    if node.gpus > 0:
        resources["nvidia.com/gpu"] = str(node.gpus)
    stamp = kube_time(now)
    pressures = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    conditions = [
        _condition(kind, "False", reason, text, stamp) for kind, reason, text in pressures
    ]
    conditions.append(
        _condition("Ready", "True", "KubeletReady", "kubelet is posting ready status", stamp)
    )
    machine_id = f"{_hash(node.name):08x}" * 4
    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": conditions,
        "addresses": [
            {"type": "InternalIP", "address": node.internal_ip},
            {"type": "Hostname", "address": node.name},
            # The address the apiserver reaches the kubelet endpoint at (`ControlPlane` prefers
            # it): every simulated node's endpoint is on loopback.
            {"type": "InternalDNS", "address": KUBELET_HOST},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "nodeInfo": {
            "machineID": machine_id,
            "systemUUID": machine_id,
            "bootID": machine_id,
            "kernelVersion": node.kernel_version,
            "osImage": node.os_image,
            "containerRuntimeVersion": node.container_runtime,
            "kubeletVersion": kubelet_version,
            "kubeProxyVersion": kubelet_version,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def lease_manifest(node_name: str, node_uid: str, now: datetime.datetime) -> dict[str, Any]:
    """The node's heartbeat Lease in kube-node-lease, owned by the Node (so GC removes it)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node_name,
            "namespace": NODE_LEASE_NAMESPACE,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
            ],
        },
        "spec": {
            "holderIdentity": node_name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": kube_micro_time(now),
        },
    }


def _condition(kind: str, status: str, reason: str, message: str, stamp: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }


def _hash(text: str) -> int:
    return zlib.crc32(text.encode())
