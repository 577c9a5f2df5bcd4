"""What simulated GPU nodes look like (pure rendering)."""

from __future__ import annotations

import datetime

import pytest

from gpuctrl.testing import SimulatedNode, simulated_gpu_nodes
from gpuctrl.testing._nodes import lease_manifest, node_manifest, node_spec_patch

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
NFD = "feature.node.kubernetes.io"


@pytest.mark.parametrize(
    ("node", "os_image", "kernel"),
    [
        (SimulatedNode("a"), "Ubuntu 22.04 LTS", "5.15.0-105-generic"),
        (SimulatedNode("b", os_version="24.04"), "Ubuntu 24.04 LTS", "6.8.0-45-generic"),
        (
            SimulatedNode("c", os_id="rhel", os_version="9.4"),
            "Red Hat Enterprise Linux 9.4",
            "5.14.0-427.13.1.el9_4.x86_64",
        ),
        (
            SimulatedNode("d", os_id="flatcar", os_version="3815", kernel="6.1.96"),
            "flatcar 3815",
            "6.1.96",
        ),
    ],
    ids=["ubuntu-22.04", "ubuntu-24.04", "rhel-9.4", "unknown-os-own-kernel"],
)
def test_os_release_shows_in_labels_and_node_info(node, os_image, kernel):
    labels = node_manifest(node, NOW)["metadata"]["labels"]
    info = node_manifest(node, NOW)["status"]["nodeInfo"]
    assert labels[f"{NFD}/system-os_release.ID"] == node.os_id
    assert labels[f"{NFD}/system-os_release.VERSION_ID"] == node.os_version
    assert labels[f"{NFD}/kernel-version.full"] == kernel
    assert info["osImage"] == os_image
    assert info["kernelVersion"] == kernel
    assert info["containerRuntimeVersion"] == "containerd://1.7.13"


def test_gpus_show_in_capacity_and_pci_label():
    node = SimulatedNode("g", gpus=8, labels={"team": "ml"})
    status = node_manifest(node, NOW)["status"]
    labels = node_manifest(node, NOW)["metadata"]["labels"]
    assert status["capacity"]["nvidia.com/gpu"] == "8"
    assert status["allocatable"]["nvidia.com/gpu"] == "8"
    assert labels[f"{NFD}/pci-10de.present"] == "true"
    assert labels["team"] == "ml"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"


def test_node_without_gpus_has_neither_label_nor_resource():
    node = SimulatedNode("cpu", gpus=0)
    assert "nvidia.com/gpu" not in node_manifest(node, NOW)["status"]["capacity"]
    assert f"{NFD}/pci-10de.present" not in node_manifest(node, NOW)["metadata"]["labels"]


def test_spec_patch_drops_admission_taints_and_keeps_own():
    assert node_spec_patch(SimulatedNode("a")) == {"spec": {"taints": None}}
    taint = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
    assert node_spec_patch(SimulatedNode("a", taints=[taint])) == {"spec": {"taints": [taint]}}


def test_kubelet_endpoint_is_on_loopback_at_the_given_port():
    status = node_manifest(SimulatedNode("a"), NOW, kubelet_port=40123)["status"]
    assert {"type": "InternalDNS", "address": "127.0.0.1"} in status["addresses"]
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 40123}}


def test_addresses_are_stable_and_distinct():
    a, b = SimulatedNode("node-a"), SimulatedNode("node-b")
    assert a.internal_ip == SimulatedNode("node-a").internal_ip
    assert a.internal_ip != b.internal_ip
    assert a.pod_cidr != b.pod_cidr
    assert a.pod_cidr.prefixlen == 24


def test_lease_is_owned_by_its_node():
    lease = lease_manifest("n", "uid-9", NOW)
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "uid-9"
    assert lease["spec"]["renewTime"] == "2026-01-01T12:00:00.000000Z"


def test_simulated_gpu_nodes_cycles_os_releases():
    nodes = simulated_gpu_nodes("t", count=3, os_releases=[("ubuntu", "22.04"), ("rhel", "9.4")])
    assert [(n.name, n.os_id, n.os_version) for n in nodes] == [
        ("t-0", "ubuntu", "22.04"),
        ("t-1", "rhel", "9.4"),
        ("t-2", "ubuntu", "22.04"),
    ]
    with pytest.raises(ValueError, match="os_releases is empty"):
        simulated_gpu_nodes("t", os_releases=[])
