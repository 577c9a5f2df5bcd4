"""The node status exporter: gpuctrl's agent serving NVIDIA's node gauges where NVIDIA runs its
validator image with COMPONENT=metrics, with NVIDIA's port, mounts (read-only here), Service and
account (its own Node only)."""

from __future__ import annotations

from typing import Any

from render_kit import NODES, pod_of

from api.v1alpha1 import load_cluster_policy
from controllers.render import ClusterFacts, render_component

ENABLED = {"nodeStatusExporter": {"enabled": True}}


def _objects(spec: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    policy = load_cluster_policy({"spec": spec})
    facts = ClusterFacts.from_objects("gpuctrl", NODES, [])
    found = render_component("node-status-exporter", policy, facts)
    return {(o["kind"], o["metadata"]["name"]): o for o in found}


def test_it_is_off_by_default_as_in_nvidias_chart() -> None:
    assert _objects({}) == {}


def test_the_agent_serves_the_gauges_on_nvidias_port_from_read_only_mounts() -> None:
    pod = pod_of("node-status-exporter", ENABLED)
    [container] = pod["containers"]
    assert container["image"] == "ghcr.io/gpuctrl/gpuctrl:0.1.0"
    assert container["command"] == ["gpuctrl"]
    assert container["args"] == [
        "validate",
        "metrics",
        "--port",
        "8000",
        "--output-dir",
        "/run/nvidia/validations",
        "--host-root",
        "/host",
        "--driver-root",
        "/run/nvidia/driver",
        "--node",
        "$(NODE_NAME)",
    ]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}  # for $(NODE_NAME)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert container["ports"] == [{"name": "node-status", "containerPort": 8000}]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert set(mounts) == {"/run/nvidia", "/host"}
    assert all(m["readOnly"] for m in mounts.values())
    assert pod["nodeSelector"] == {"nvidia.com/gpu.deploy.node-status-exporter": "true"}
    assert "initContainers" not in pod  # NVIDIA's waits for nothing: it reports what is there


def test_its_account_reads_nodes_only_and_its_service_is_node_local() -> None:
    objects = _objects(ENABLED)
    role = objects["ClusterRole", "gpuctrl-node-status-exporter"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    assert not [key for key in objects if key[0] == "Role"]
    service = objects["Service", "gpuctrl-node-status-exporter"]["spec"]
    assert service["internalTrafficPolicy"] == "Local"
    assert service["ports"] == [
        {"name": "node-status", "port": 8000, "targetPort": 8000, "protocol": "TCP"}
    ]


def test_the_users_args_follow_gpuctrls() -> None:
    spec = {"nodeStatusExporter": {"enabled": True, "args": ["--interval", "30"]}}
    [container] = pod_of("node-status-exporter", spec)["containers"]
    assert container["args"][-2:] == ["--interval", "30"]
