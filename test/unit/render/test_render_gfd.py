"""GPU feature discovery as NVIDIA's operator deploys it: its image and env, the MIG strategy
as the device plugin gets it, its node selector, host network and account."""

from __future__ import annotations

from typing import Any

import pytest
from render_kit import NODES, pod_of

from api.v1alpha1 import load_cluster_policy
from controllers.render import ClusterFacts, render_component


def _gfd(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    [container] = pod_of("gpu-feature-discovery", spec)["containers"]
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_nvidias_gfd_of_the_device_plugins_image_runs_on_its_deploy_label() -> None:
    pod = pod_of("gpu-feature-discovery")
    container = _gfd()
    assert container["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    assert container["command"] == ["gpu-feature-discovery"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.deploy.gpu-feature-discovery": "true"}
    assert pod["runtimeClassName"] == "nvidia"
    assert "hostNetwork" not in pod
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/sys"]["readOnly"] is True


@pytest.mark.parametrize(
    ("strategy", "monitored"), [("none", None), ("single", "all"), ("mixed", "all")]
)
def test_the_mig_strategy_reaches_gfd_as_it_reaches_the_device_plugin(
    strategy: str, monitored: str | None
) -> None:
    spec = {"mig": {"strategy": strategy}}
    for env in (_env(_gfd(spec)), _env(pod_of("device-plugin", spec)["containers"][0])):
        assert env["MIG_STRATEGY"] == strategy
        assert env.get("NVIDIA_MIG_MONITOR_DEVICES") == monitored


def test_the_users_env_args_and_host_network_are_honoured() -> None:
    spec = {
        "gfd": {
            "env": [{"name": "GFD_SLEEP_INTERVAL", "value": "10s"}],
            "args": ["--oneshot"],
            "hostNetwork": True,
        }
    }
    pod = pod_of("gpu-feature-discovery", spec)
    container = pod["containers"][0]
    assert _env(container)["GFD_SLEEP_INTERVAL"] == "10s"  # over NVIDIA's 60s
    assert container["args"] == ["--oneshot"]
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")


def test_its_account_may_write_nfds_node_features_and_read_nodes_only() -> None:
    policy = load_cluster_policy({"spec": {}})
    objects = render_component(
        "gpu-feature-discovery", policy, ClusterFacts.from_objects("gpuctrl", NODES, [])
    )
    by_kind = {o["kind"]: o for o in objects}
    assert by_kind["ServiceAccount"]["metadata"]["name"] == "gpuctrl-gpu-feature-discovery"
    [features, pods] = by_kind["Role"]["rules"]
    assert (features["apiGroups"], features["resources"]) == (["nfd.k8s-sigs.io"], ["nodefeatures"])
    assert "delete" not in features["verbs"]
    assert pods["verbs"] == ["get"]
    [nodes] = by_kind["ClusterRole"]["rules"]
    assert (nodes["resources"], nodes["verbs"]) == (["nodes"], ["get", "list", "watch"])


def test_disabled_it_renders_nothing() -> None:
    policy = load_cluster_policy({"spec": {"gfd": {"enabled": False}}})
    facts = ClusterFacts.from_objects("gpuctrl", NODES, [])
    assert render_component("gpu-feature-discovery", policy, facts) == []
