"""devicePlugin.config as NVIDIA's operator applies it: the device plugin, GPU feature
discovery and the MPS control daemon get NVIDIA's config-manager init container and sidecar,
the shared config volume and the process namespace the sidecar signals in as
test/data/nvidia/config-manager-contract.yaml sums up NVIDIA's, but mount gpuctrl's copy of the
accepted configs, never the user's ConfigMap; a refused config fails the render naming its
config and field, MPS configs included."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from render_kit import NODES

from api.v1alpha1 import InvalidPolicy, load_cluster_policy
from controllers.render import (
    ClusterFacts,
    InvalidDevicePluginConfig,
    MissingConfigMap,
    render_component,
)

ROOT = Path(__file__).resolve().parents[3]
CONTRACT = yaml.safe_load(
    (ROOT / "test" / "data" / "nvidia" / "config-manager-contract.yaml").read_text()
)
OPERANDS = ("device-plugin", "gpu-feature-discovery", "mps-control-daemon")
TIME_SLICED_4 = (
    "version: v1\n"
    "sharing:\n"
    "  timeSlicing:\n"
    "    resources:\n"
    "    - name: nvidia.com/gpu\n"
    "      replicas: 4\n"
)
CONFIGS = {"default": "version: v1\n", "time-sliced-4": TIME_SLICED_4}
SPEC = {"devicePlugin": {"config": {"name": "plugin-configs", "default": "time-sliced-4"}}}


def _render(
    component: str,
    spec: dict[str, Any] | None = None,
    configs: dict[str, str] | None = CONFIGS,
    nodes: list[dict[str, Any]] | None = None,
) -> dict[str, dict[str, Any]]:
    """``component``'s objects by kind (the last of each) for a policy with ``spec`` and the
    user's ConfigMap ``plugin-configs`` holding ``configs`` (None: no such ConfigMap)."""
    policy = load_cluster_policy({"spec": SPEC if spec is None else spec})
    config_maps = [
        {"metadata": {"name": "plugin-configs", "namespace": "gpuctrl"}, "data": configs}
    ]
    facts = ClusterFacts.from_objects(
        "gpuctrl", nodes or NODES, config_maps if configs is not None else []
    )
    return {o["kind"]: o for o in render_component(component, policy, facts)}


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for kind in ("initContainers", "containers") for c in pod.get(kind, ())}


def _env(container: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container.get("env", ())}


def _mounts(container: dict[str, Any], pod: dict[str, Any]) -> dict[str, str]:
    volumes = {v["name"]: v for v in pod["volumes"]}
    return {
        m["mountPath"]: next(
            k for k in ("emptyDir", "configMap", "hostPath") if k in volumes[m["name"]]
        )
        for m in container["volumeMounts"]
        if m["mountPath"] in ("/config", "/available-configs")
    }


@pytest.mark.parametrize("component", OPERANDS)
def test_config_manager_containers_are_nvidias(component: str) -> None:
    contract = CONTRACT[component]
    objects = _render(component)
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    containers = _containers(pod)
    assert pod.get("shareProcessNamespace", False) is contract["shareProcessNamespace"]
    assert pod.get("hostPID", False) is contract.get("hostPID", False)
    main = containers[contract["main"]["name"]]
    assert _env(main).items() >= contract["main"]["env"].items()
    assert _mounts(main, pod) == contract["main"]["mounts"]
    plugin_image = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    for name in ("config-manager-init", "config-manager"):
        wanted, ours = contract[name], containers[name]
        assert ours["command"] == wanted["command"]
        assert ours["image"] == plugin_image
        expected_env = {
            k: ("time-sliced-4" if v == "<default>" else v) for k, v in wanted["env"].items()
        }
        assert _env(ours) == expected_env
        assert _mounts(ours, pod) == wanted["mounts"]
        privileged = (ours.get("securityContext") or {}).get("privileged", False)
        assert privileged is wanted.get("privileged", False)
    # the init container runs after the toolkit gate, the sidecar beside the operand
    assert [c["name"] for c in pod["initContainers"]] == contract["initContainers"]
    assert [c["name"] for c in pod["containers"]] == [contract["main"]["name"], "config-manager"]


@pytest.mark.parametrize("component", OPERANDS)
def test_without_a_config_there_is_no_config_manager_as_with_nvidia(component: str) -> None:
    objects = _render(component, spec={}, configs=None)
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    assert set(_containers(pod)) <= {
        "toolkit-validation",
        "nvidia-device-plugin",
        "gpu-feature-discovery",
        "mps-control-daemon-mounts",
        "mps-control-daemon-ctr",
    }
    assert "shareProcessNamespace" not in pod
    assert "ConfigMap" not in objects
    assert "annotations" not in objects["DaemonSet"]["spec"]["template"]["metadata"]


@pytest.mark.parametrize("component", OPERANDS)
def test_the_pods_mount_gpuctrls_copy_of_the_accepted_configs(component: str) -> None:
    objects = _render(component)
    copy = objects["ConfigMap"]
    assert copy["metadata"]["name"] == f"gpuctrl-{component}-config"
    assert copy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuctrl"
    assert copy["data"] == CONFIGS
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    sources = [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v]
    assert sources == [copy["metadata"]["name"]]  # never the user's plugin-configs


def _hash(objects: dict[str, dict[str, Any]]) -> str:
    annotations = objects["DaemonSet"]["spec"]["template"]["metadata"]["annotations"]
    return str(annotations["gpuctrl.io/config-hash"])


def test_a_change_of_the_configs_rolls_the_pods_a_node_label_does_not() -> None:
    before = _hash(_render("device-plugin"))
    changed = {**CONFIGS, "time-sliced-4": TIME_SLICED_4.replace("replicas: 4", "replicas: 8")}
    assert _hash(_render("device-plugin", configs=changed)) != before
    labelled = [
        {
            "metadata": {
                **node["metadata"],
                "labels": {
                    **node["metadata"]["labels"],
                    "nvidia.com/device-plugin.config": "default",
                },
            }
        }
        for node in NODES
    ]
    assert _render("device-plugin", nodes=labelled) == _render("device-plugin")


def test_the_config_managers_get_their_operands_resources_as_with_nvidia() -> None:
    resources = {"limits": {"memory": "100Mi"}}
    spec = {**SPEC, "gfd": {"resources": resources}}
    gfd = _containers(
        _render("gpu-feature-discovery", spec)["DaemonSet"]["spec"]["template"]["spec"]
    )
    plugin = _containers(_render("device-plugin", spec)["DaemonSet"]["spec"]["template"]["spec"])
    main = gfd["gpu-feature-discovery"]["resources"]
    assert main["limits"] == resources["limits"]
    assert gfd["config-manager"]["resources"] == gfd["config-manager-init"]["resources"] == main
    assert "resources" not in plugin["config-manager"]


def test_no_default_config_leaves_nodes_without_a_label_on_an_empty_config() -> None:
    spec = {"devicePlugin": {"config": {"name": "plugin-configs"}}}
    pod = _render("device-plugin", spec)["DaemonSet"]["spec"]["template"]["spec"]
    env = _env(_containers(pod)["config-manager-init"])
    assert (env["DEFAULT_CONFIG"], env["FALLBACK_STRATEGIES"]) == ("", "empty")


@pytest.mark.parametrize("component", OPERANDS)
def test_a_missing_configmap_fails_the_render(component: str) -> None:
    with pytest.raises(
        MissingConfigMap,
        match=re.escape("spec.devicePlugin.config.name: ConfigMap 'plugin-configs'"),
    ):
        _render(component, configs=None)


@pytest.mark.parametrize(
    ("configs", "expected"),
    [
        (
            {**CONFIGS, "broken": TIME_SLICED_4.replace("replicas: 4", "replicas: 1")},
            "broken: sharing.timeSlicing.resources[0].replicas: must be at least 2",
        ),
        (
            {"default": "version: v1\n"},
            "spec.devicePlugin.config.default: no config 'time-sliced-4' (default)",
        ),
        ({}, "holds no config"),
    ],
    ids=["bad-replicas", "default-missing", "empty"],
)
@pytest.mark.parametrize("component", OPERANDS)
def test_a_refused_config_fails_the_render_naming_it(
    component: str, configs: dict[str, str], expected: str
) -> None:
    with pytest.raises(InvalidDevicePluginConfig) as refused:
        _render(component, configs=configs)
    assert refused.value.reason == "InvalidDevicePluginConfig"
    assert "ConfigMap 'plugin-configs'" in str(refused.value)
    assert expected in str(refused.value)


MPS_4 = "version: v1\nsharing:\n  mps:\n    resources:\n    - {name: nvidia.com/gpu, replicas: 4}\n"


@pytest.mark.parametrize("component", OPERANDS)
def test_an_mps_config_reaches_each_operands_copy(component: str) -> None:
    configs = {**CONFIGS, "mps-4": MPS_4}
    spec = {"devicePlugin": {"config": {"name": "plugin-configs", "default": "mps-4"}}}
    objects = _render(component, spec, configs=configs)
    assert objects["ConfigMap"]["data"] == configs
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    assert _env(_containers(pod)["config-manager-init"])["DEFAULT_CONFIG"] == "mps-4"


@pytest.mark.parametrize(
    ("strategy", "mps", "expected"),
    [
        (
            "mixed",
            "{name: nvidia.com/gpu, replicas: 4}",
            "mps-4: sharing.mps: NVIDIA's device plugin refuses MPS with MIG strategy mixed",
        ),
        (
            "single",
            "{name: nvidia.com/gpu, replicas: 49}",
            "mps-4: sharing.mps.resources[0].replicas: at most 48 with MPS",
        ),
        (
            "single",
            "{name: nvidia.com/gpu, replicas: 1}",
            "mps-4: sharing.mps.resources[0].replicas: must be at least 2",
        ),
        (
            "mixed",
            "{name: nvidia.com/mig-1g.5gb, replicas: 4}",
            "sharing.mps.resources[0].name: nvidia.com/mig-1g.5gb: NVIDIA's device plugin does "
            "not share MIG devices with MPS",
        ),
    ],
    ids=["mig-mixed", "over-48-clients", "one-replica", "mig-device"],
)
@pytest.mark.parametrize("component", OPERANDS)
def test_the_mps_rules_of_nvidias_device_plugin_still_refuse(
    component: str, strategy: str, mps: str, expected: str
) -> None:
    config = f"sharing:\n  mps:\n    resources:\n    - {mps}\n"
    spec = {"devicePlugin": {"config": {"name": "plugin-configs"}}, "mig": {"strategy": strategy}}
    with pytest.raises(InvalidDevicePluginConfig) as refused:
        _render(component, spec, configs={"mps-4": config})
    assert expected in str(refused.value)


def test_a_default_without_a_configmap_is_refused_with_its_path() -> None:
    with pytest.raises(
        InvalidPolicy, match=re.escape("spec.devicePlugin.config.default: requires")
    ):
        load_cluster_policy({"spec": {"devicePlugin": {"config": {"default": "x"}}}})
    with pytest.raises(InvalidPolicy, match=re.escape("spec.devicePlugin.config.default")):
        load_cluster_policy({"spec": {"devicePlugin": {"config": {"name": "c", "default": "a b"}}}})
