"""NVIDIA's MPS control daemon as NVIDIA's operator deploys it beside the device plugin
(assets/state-mps-control-daemon and TransformMPSControlDaemon): the device plugin's image on
the device plugin's deploy label and nvidia.com/mps.capable=true, in the host's PID namespace,
the init container that mounts its shm, the MPS root's host folders (devicePlugin.mps.root,
the device plugin's too), its account; nothing without the device plugin."""

from __future__ import annotations

from typing import Any

import pytest
from render_kit import NODES, pod_of

from api.v1alpha1 import InvalidPolicy, load_cluster_policy
from controllers.render import ClusterFacts, render_component

COMPONENT = "mps-control-daemon"
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"


def _objects(spec: dict[str, Any] | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    policy = load_cluster_policy({"spec": spec or {}})
    facts = ClusterFacts.from_objects("gpuctrl", NODES, [])
    return {
        (o["kind"], o["metadata"]["name"]): o for o in render_component(COMPONENT, policy, facts)
    }


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for kind in ("initContainers", "containers") for c in pod.get(kind, ())}


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def _host_paths(pod: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}


def test_it_runs_the_device_plugins_image_on_mps_capable_nodes_as_nvidias_operator_does() -> None:
    objects = _objects()
    name = "gpuctrl-mps-control-daemon"
    assert set(objects) == {
        ("ServiceAccount", name),
        ("ClusterRole", name),
        ("ClusterRoleBinding", name),
        ("DaemonSet", name),
    }
    [nodes] = objects["ClusterRole", name]["rules"]  # config-manager reads its Node's label
    assert (nodes["resources"], nodes["verbs"]) == (["nodes"], ["get", "list", "watch"])
    pod = objects["DaemonSet", name]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == name
    assert pod["nodeSelector"] == {
        "nvidia.com/gpu.deploy.device-plugin": "true",
        "nvidia.com/mps.capable": "true",
    }
    assert (pod["hostPID"], pod["runtimeClassName"]) == (True, "nvidia")
    assert "hostIPC" not in pod  # the shm is a host folder, as in NVIDIA's asset
    assert "shareProcessNamespace" not in pod  # Kubernetes refuses it beside hostPID
    assert [c["name"] for c in pod["initContainers"]] == [
        "toolkit-validation",
        "mps-control-daemon-mounts",
    ]
    containers = _containers(pod)
    mounts = containers["mps-control-daemon-mounts"]
    assert (mounts["image"], mounts["command"]) == (
        PLUGIN_IMAGE,
        ["mps-control-daemon", "mount-shm"],
    )
    assert mounts["securityContext"] == {"privileged": True}
    [main] = pod["containers"]
    assert (main["name"], main["image"]) == ("mps-control-daemon-ctr", PLUGIN_IMAGE)
    assert main["command"] == ["mps-control-daemon"]
    assert "args" not in main
    assert main["securityContext"] == {"privileged": True}
    assert _env(main) | {"NODE_NAME": None, "NAMESPACE": None} == {
        "NODE_NAME": None,
        "NAMESPACE": None,
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        "MIG_STRATEGY": "single",
        "NVIDIA_MIG_MONITOR_DEVICES": "all",
    }
    assert _host_paths(pod) == {
        "validations": "/run/nvidia/validations",
        "mps-root": "/run/nvidia/mps",
        "mps-shm": "/run/nvidia/mps/shm",
    }


def test_the_device_plugins_image_settings_reach_it_but_not_its_args_and_env() -> None:
    resources = {"limits": {"memory": "100Mi"}}
    spec = {
        "devicePlugin": {
            "repository": "registry.example.com/nvidia",
            "version": "v0.17.1",
            "imagePullPolicy": "Always",
            "imagePullSecrets": ["pull"],
            "resources": resources,
            "args": ["--fail-on-init-error=false"],
            "env": [{"name": "PASS_DEVICE_SPECS", "value": "false"}],
        },
        "mig": {"strategy": "none"},
    }
    pod = pod_of(COMPONENT, spec)
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    image = "registry.example.com/nvidia/k8s-device-plugin:v0.17.1"
    for name in ("mps-control-daemon-mounts", "mps-control-daemon-ctr"):
        container = _containers(pod)[name]
        assert (container["image"], container["imagePullPolicy"]) == (image, "Always")
    [main] = pod["containers"]
    assert main["resources"]["limits"] == resources["limits"]
    assert "args" not in main  # the plugin's flags, which mps-control-daemon refuses
    env = _env(main)
    assert "PASS_DEVICE_SPECS" not in env
    assert env["MIG_STRATEGY"] == "none"
    assert "NVIDIA_MIG_MONITOR_DEVICES" not in env


def test_the_mps_root_moves_the_daemons_and_the_device_plugins_host_folders() -> None:
    spec = {"devicePlugin": {"mps": {"root": "/var/lib/nvidia-mps"}}}
    for component in (COMPONENT, "device-plugin"):
        paths = _host_paths(pod_of(component, spec))
        assert (paths["mps-root"], paths["mps-shm"]) == (
            "/var/lib/nvidia-mps",
            "/var/lib/nvidia-mps/shm",
        )
    plugin = _env(pod_of("device-plugin", spec)["containers"][0])
    assert plugin["MPS_ROOT"] == "/var/lib/nvidia-mps"


@pytest.mark.parametrize("root", ["/", "run/nvidia/mps", "/run/nvidia/mps/", "/run/../mps", "//x"])
def test_an_mps_root_that_is_not_an_absolute_normal_path_is_refused(root: str) -> None:
    with pytest.raises(InvalidPolicy, match=r"spec\.devicePlugin\.mps\.root"):
        load_cluster_policy({"spec": {"devicePlugin": {"mps": {"root": root}}}})


def test_without_the_device_plugin_it_renders_nothing() -> None:
    assert _objects({"devicePlugin": {"enabled": False}}) == {}
