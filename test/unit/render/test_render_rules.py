"""One test per mount, selection and override rule of the renderer."""

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from operands_kit import EVERY_OPERAND_ENABLED

from api.v1alpha1 import ClusterPolicy, ValidatorWorkloads, load_cluster_policy
from controllers.render import (
    COMPONENTS,
    ClusterFacts,
    ConfigMapFacts,
    MissingConfigMap,
    NodeFacts,
    RenderError,
    builtin_workload_templates,
    nodes_without_driver,
    render,
)

OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"


def _node(name: str, os_id: str, version: str, gpu: bool = True) -> NodeFacts:
    labels = {OS_ID: os_id, OS_VERSION: version}
    if gpu:
        labels["nvidia.com/gpu.present"] = "true"
    return NodeFacts(name=name, labels=labels)


def _policy(**spec: Any) -> ClusterPolicy:
    return load_cluster_policy({"spec": spec})


def _facts(*nodes: NodeFacts, **config_maps: dict[str, str]) -> ClusterFacts:
    maps = tuple(ConfigMapFacts(name=n, data=d) for n, d in config_maps.items())
    return ClusterFacts(nodes=nodes or (_node("n1", "ubuntu", "22.04"),), config_maps=maps)


def _find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, [(o["kind"], o["metadata"]["name"]) for o in objects]
    return found[0]


def _pod(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return _find(objects, "DaemonSet", name)["spec"]["template"]


def _driver_container(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return _pod(objects, name)["spec"]["containers"][0]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_every_object_carries_managed_by_and_component() -> None:
    objects = render(_policy(), _facts())
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "gpuctrl"
        assert labels["app.kubernetes.io/component"] in COMPONENTS
    kinds = sorted({o["kind"] for o in objects})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DaemonSet",
        "Role",
        "RoleBinding",
        "RuntimeClass",
        "Service",
        "ServiceAccount",
    ]


def test_one_driver_daemonset_per_os_pinned_to_it() -> None:
    facts = _facts(
        _node("a", "ubuntu", "22.04"),
        _node("b", "ubuntu", "22.04"),
        _node("c", "rhel", "9.4"),
        _node("cpu", "debian", "12", gpu=False),
        NodeFacts(name="no-nfd", labels={"nvidia.com/gpu.present": "true"}),
    )
    objects = render(_policy(), facts)
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "DaemonSet"]
    assert names[:2] == ["gpuctrl-driver-rhel9.4", "gpuctrl-driver-ubuntu22.04"]
    pod = _pod(objects, "gpuctrl-driver-rhel9.4")
    assert pod["spec"]["nodeSelector"] == {
        OS_ID: "rhel",
        OS_VERSION: "9.4",
        "nvidia.com/gpu.deploy.driver": "true",
    }
    container = pod["spec"]["containers"][0]
    assert container["image"] == "nvcr.io/nvidia/driver:550.127.05-rhel9.4"


def test_no_gpu_nodes_no_driver_daemonset() -> None:
    objects = render(_policy(), _facts(_node("cpu", "ubuntu", "22.04", gpu=False)))
    assert not [o for o in objects if o["metadata"]["name"].startswith("gpuctrl-driver-")]


def test_gpu_nodes_without_os_labels_are_reported_not_rendered() -> None:
    unlabelled = NodeFacts(name="gpu-bare", labels={"nvidia.com/gpu.present": "true"})
    half = NodeFacts(name="gpu-half", labels={"nvidia.com/gpu.present": "true", OS_ID: "rhel"})
    cpu = NodeFacts(name="cpu-bare")
    facts = _facts(_node("n1", "ubuntu", "22.04"), unlabelled, half, cpu)
    assert nodes_without_driver(_policy(), facts) == ["gpu-bare", "gpu-half"]
    objects = render(_policy(), facts)
    drivers = [o["metadata"]["name"] for o in objects if o["kind"] == "DaemonSet"]
    assert [n for n in drivers if n.startswith("gpuctrl-driver-")] == ["gpuctrl-driver-ubuntu22.04"]
    assert nodes_without_driver(_policy(driver={"enabled": False}), facts) == []
    assert nodes_without_driver(_policy(), _facts()) == []


def test_driver_digest_gets_no_os_suffix() -> None:
    digest = "sha256:" + "b" * 64
    objects = render(_policy(driver={"version": digest}), _facts())
    image = _driver_container(objects, "gpuctrl-driver-ubuntu22.04")["image"]
    assert image == f"nvcr.io/nvidia/driver@{digest}"


@pytest.mark.parametrize(
    ("os_id", "folder", "suffix"),
    [
        ("ubuntu", "/etc/apt/sources.list.d", ".list"),
        ("debian", "/etc/apt/sources.list.d", ".sources"),
        ("rhel", "/etc/yum.repos.d", ".repo"),
        ("rocky", "/etc/yum.repos.d", ".repo"),
        ("rhcos", "/etc/yum.repos.d", ".repo"),
        ("sles", "/etc/zypp/repos.d", ".repo"),
        ("sl-micro", "/etc/zypp/repos.d", ".repo"),
    ],
)
def test_repo_config_keys_mounted_with_subpath_in_the_os_folder(
    os_id: str, folder: str, suffix: str
) -> None:
    facts = _facts(_node("n", os_id, "1"), repo={f"b{suffix}": "x", f"a{suffix}": "y"})
    objects = render(_policy(driver={"repoConfig": {"configMapName": "repo"}}), facts)
    pod = _pod(objects, f"gpuctrl-driver-{os_id}1")
    mounts = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "repo-config"]
    assert mounts == [
        {
            "mountPath": f"{folder}/a{suffix}",
            "name": "repo-config",
            "readOnly": True,
            "subPath": f"a{suffix}",
        },
        {
            "mountPath": f"{folder}/b{suffix}",
            "name": "repo-config",
            "readOnly": True,
            "subPath": f"b{suffix}",
        },
    ]
    assert {"configMap": {"name": "repo"}, "name": "repo-config"} in pod["spec"]["volumes"]


MIXED = {"apt.list": "a", "apt.sources": "b", "dnf.repo": "c", "notes.txt": "d", "list": "e"}


@pytest.mark.parametrize(
    ("os_id", "keys"),
    [
        pytest.param("ubuntu", ["apt.list", "apt.sources"], id="apt"),
        pytest.param("rhel", ["dnf.repo"], id="yum"),
        pytest.param("sles", ["dnf.repo"], id="zypper"),
    ],
)
def test_each_os_mounts_only_the_keys_its_package_manager_reads(
    os_id: str, keys: list[str]
) -> None:
    policy = _policy(driver={"repoConfig": {"configMapName": "repo"}})
    pod = _pod(
        render(policy, _facts(_node("n", os_id, "1"), repo=MIXED)), f"gpuctrl-driver-{os_id}1"
    )
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert [m["subPath"] for m in mounts if m["name"] == "repo-config"] == keys


def test_a_driver_whose_os_reads_no_key_mounts_no_repository_and_no_host_folder() -> None:
    policy = _policy(
        driver={"repoConfig": {"configMapName": "repo", "nodeLocalPaths": ["/opt/local"]}}
    )
    repo = {"a.list": "deb file:///opt/local ./"}
    facts = _facts(_node("u", "ubuntu", "22.04"), _node("r", "rhel", "9.4"), repo=repo)
    objects = render(policy, facts)
    rhel = _pod(objects, "gpuctrl-driver-rhel9.4")
    assert "/opt/local" not in json.dumps(rhel)
    assert "repo-config" not in json.dumps(rhel)
    assert "annotations" not in rhel["metadata"]
    ubuntu = _pod(objects, "gpuctrl-driver-ubuntu22.04")
    assert {"name": "local-repository-0", "mountPath": "/opt/local", "readOnly": True} in ubuntu[
        "spec"
    ]["containers"][0]["volumeMounts"]


def test_each_driver_mounts_only_the_host_folders_its_enabled_entries_use() -> None:
    paths = ["/opt/apt", "/opt/rpm", "/opt/unused", "/opt/disabled"]
    policy = _policy(driver={"repoConfig": {"configMapName": "repo", "nodeLocalPaths": paths}})
    repo = {
        "a.list": "deb file:///opt/apt/pool ./\n",
        "b.sources": "Enabled: no\nTypes: deb\nURIs: file:///opt/disabled\nSuites: ./\n",
        "c.repo": "[r]\nbaseurl=https://mirror/rpm\ngpgkey=file:///opt/rpm/KEY\n",
    }
    facts = _facts(_node("u", "ubuntu", "22.04"), _node("r", "rhel", "9.4"), repo=repo)
    objects = render(policy, facts)

    def host_folders(name: str) -> list[str]:
        volumes = _pod(objects, name)["spec"]["volumes"]
        return [v["hostPath"]["path"] for v in volumes if v["name"].startswith("local-")]

    assert host_folders("gpuctrl-driver-ubuntu22.04") == ["/opt/apt"]
    assert host_folders("gpuctrl-driver-rhel9.4") == ["/opt/rpm"]


def test_config_hash_covers_only_the_keys_the_os_reads() -> None:
    policy = _policy(driver={"repoConfig": {"configMapName": "repo"}})

    def hashes(repo: dict[str, str]) -> dict[str, str]:
        facts = _facts(_node("u", "ubuntu", "22.04"), _node("r", "rhel", "9.4"), repo=repo)
        objects = render(policy, facts)
        return {
            name: _pod(objects, name)["metadata"]["annotations"]["gpuctrl.io/config-hash"]
            for name in ("gpuctrl-driver-ubuntu22.04", "gpuctrl-driver-rhel9.4")
        }

    before = hashes({"a.list": "1", "b.repo": "1"})
    after = hashes({"a.list": "2", "b.repo": "1"})
    assert before["gpuctrl-driver-ubuntu22.04"] != after["gpuctrl-driver-ubuntu22.04"]
    assert before["gpuctrl-driver-rhel9.4"] == after["gpuctrl-driver-rhel9.4"]


@pytest.mark.parametrize(
    ("os_id", "folder"),
    [
        ("ubuntu", "/usr/local/share/ca-certificates"),
        ("rhel", "/etc/pki/ca-trust/extracted/pem"),
        ("sles", "/etc/pki/trust/anchors"),
    ],
)
def test_cert_config_keys_mounted_in_the_os_ca_folder(os_id: str, folder: str) -> None:
    facts = _facts(_node("n", os_id, "1"), certs={"site-ca.crt": "PEM"})
    objects = render(_policy(driver={"certConfig": {"name": "certs"}}), facts)
    mounts = _driver_container(objects, f"gpuctrl-driver-{os_id}1")["volumeMounts"]
    assert {
        "mountPath": f"{folder}/site-ca.crt",
        "name": "cert-config",
        "readOnly": True,
        "subPath": "site-ca.crt",
    } in mounts


def test_node_local_paths_are_read_only_host_directories_in_the_driver_only() -> None:
    policy = _policy(
        driver={"repoConfig": {"configMapName": "repo", "nodeLocalPaths": ["/srv/b", "/opt/a"]}}
    )
    repo = {"local.list": "deb [signed-by=/srv/b/key.gpg] file:///opt/a ./"}
    objects = render(policy, _facts(repo=repo))
    pod = _pod(objects, "gpuctrl-driver-ubuntu22.04")
    mounts = pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "local-repository-0", "mountPath": "/opt/a", "readOnly": True} in mounts
    assert {"name": "local-repository-1", "mountPath": "/srv/b", "readOnly": True} in mounts
    assert {
        "name": "local-repository-0",
        "hostPath": {"path": "/opt/a", "type": "Directory"},
    } in pod["spec"]["volumes"]
    for other in ("gpuctrl-toolkit", "gpuctrl-validator", "gpuctrl-device-plugin"):
        assert "/opt/a" not in json.dumps(_find(objects, "DaemonSet", other))


def test_config_hash_changes_with_config_map_content() -> None:
    policy = _policy(driver={"repoConfig": {"configMapName": "repo"}, "certConfig": {"name": "c"}})

    def hash_of(repo: dict[str, str]) -> str:
        objects = render(policy, _facts(repo=repo, c={"ca.crt": "x"}))
        return _pod(objects, "gpuctrl-driver-ubuntu22.04")["metadata"]["annotations"][
            "gpuctrl.io/config-hash"
        ]

    assert hash_of({"a.list": "1"}) == hash_of({"a.list": "1"})
    assert hash_of({"a.list": "1"}) != hash_of({"a.list": "2"})


def test_missing_repo_config_map_is_an_error_naming_the_field() -> None:
    with pytest.raises(MissingConfigMap, match=r"spec.driver.repoConfig.configMapName: .*'repo'"):
        render(_policy(driver={"repoConfig": {"configMapName": "repo"}}), _facts())


def test_repo_config_on_an_unknown_os_is_an_error() -> None:
    facts = _facts(_node("n", "arch", "rolling"), repo={"a.list": "b"})
    with pytest.raises(RenderError, match="OS 'arch'"):
        render(_policy(driver={"repoConfig": {"configMapName": "repo"}}), facts)


def test_operand_selection_uses_nvidia_labels_plus_node_selector_and_affinity() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    }
    policy = _policy(daemonsets={"nodeSelector": {"pool": "gpu"}, "affinity": affinity})
    objects = render(policy, _facts())
    expected = {
        "gpuctrl-driver-ubuntu22.04": "nvidia.com/gpu.deploy.driver",
        "gpuctrl-toolkit": "nvidia.com/gpu.deploy.container-toolkit",
        "gpuctrl-validator": "nvidia.com/gpu.deploy.operator-validator",
        "gpuctrl-device-plugin": "nvidia.com/gpu.deploy.device-plugin",
    }
    for name, label in expected.items():
        spec = _pod(objects, name)["spec"]
        assert spec["nodeSelector"][label] == "true"
        assert spec["nodeSelector"]["pool"] == "gpu"
        assert spec["affinity"] == affinity


def test_daemonset_settings_apply_to_every_operand() -> None:
    policy = _policy(
        daemonsets={
            "labels": {"tier": "gpu"},
            "annotations": {"note": "x"},
            "priorityClassName": "gpu-critical",
            "updateStrategy": "OnDelete",
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        },
        operator={"labels": {"site": "a"}},
    )
    for obj in render(policy, _facts()):
        assert obj["metadata"]["labels"]["site"] == "a"
        if obj["kind"] != "DaemonSet":
            continue
        template = obj["spec"]["template"]
        assert template["metadata"]["labels"]["tier"] == "gpu"
        assert template["metadata"]["annotations"]["note"] == "x"
        assert template["spec"]["priorityClassName"] == "gpu-critical"
        assert template["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
        assert obj["spec"]["updateStrategy"] == {"type": "OnDelete"}


def test_user_labels_cannot_override_gpuctrl_labels() -> None:
    policy = _policy(daemonsets={"labels": {"app.kubernetes.io/managed-by": "me", "app": "x"}})
    pod = _pod(render(policy, _facts()), "gpuctrl-toolkit")
    assert pod["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuctrl"
    assert pod["metadata"]["labels"]["app"] == "nvidia-container-toolkit-daemonset"


# NVIDIA's `app` values (assets/state-*), which NVIDIA's k8s-driver-manager and MIG manager
# wait for and delete GPU clients by.
NVIDIA_APP_LABELS = {
    "gpuctrl-toolkit": "nvidia-container-toolkit-daemonset",
    "gpuctrl-validator": "nvidia-operator-validator",
    "gpuctrl-device-plugin": "nvidia-device-plugin-daemonset",
    "gpuctrl-mps-control-daemon": "nvidia-device-plugin-mps-control-daemon",
    "gpuctrl-gpu-feature-discovery": "gpu-feature-discovery",
    "gpuctrl-dcgm": "nvidia-dcgm",
    "gpuctrl-dcgm-exporter": "nvidia-dcgm-exporter",
    "gpuctrl-mig-manager": "nvidia-mig-manager",
    "gpuctrl-node-status-exporter": "nvidia-node-status-exporter",
}


def _every_operand() -> list[dict[str, Any]]:
    nodes = (_node("a", "ubuntu", "22.04"), _node("b", "rhel", "9.4"))
    return render(_policy(**EVERY_OPERAND_ENABLED), _facts(*nodes))


def test_pods_carry_the_app_label_nvidias_node_agents_find_them_by() -> None:
    apps = {
        obj["metadata"]["name"]: obj["spec"]["template"]["metadata"]["labels"]["app"]
        for obj in _every_operand()
        if obj["kind"] == "DaemonSet"
    }
    assert {name: app for name, app in apps.items() if "driver" not in name} == NVIDIA_APP_LABELS
    # The driver keeps one DaemonSet per OS, each selecting its pods by its own name.
    assert {name: app for name, app in apps.items() if "driver" in name} == {
        "gpuctrl-driver-rhel9.4": "gpuctrl-driver-rhel9.4",
        "gpuctrl-driver-ubuntu22.04": "gpuctrl-driver-ubuntu22.04",
    }


def test_each_daemonset_and_service_selects_the_pods_of_its_own_daemonset_alone() -> None:
    objects = _every_operand()
    pods = {
        obj["metadata"]["name"]: obj["spec"]["template"]["metadata"]["labels"]
        for obj in objects
        if obj["kind"] == "DaemonSet"
    }

    def selected(selector: dict[str, str]) -> list[str]:
        return [name for name, labels in pods.items() if selector.items() <= labels.items()]

    for obj in objects:
        name = obj["metadata"]["name"]
        if obj["kind"] == "DaemonSet":
            assert selected(obj["spec"]["selector"]["matchLabels"]) == [name]
        elif obj["kind"] == "Service":
            assert selected(obj["spec"]["selector"]) == [name], name


def test_disabled_operands_are_not_rendered() -> None:
    policy = _policy(
        driver={"enabled": False},
        toolkit={"enabled": False},
        devicePlugin={"enabled": False},
        gfd={"enabled": False},
        dcgmExporter={"enabled": False},
        migManager={"enabled": False},
    )
    components = {
        o["metadata"]["labels"]["app.kubernetes.io/component"] for o in render(policy, _facts())
    }
    assert components == {"validator", "toolkit"}  # toolkit: the RuntimeClass alone


def test_toolkit_passes_the_set_containerd_settings_as_options() -> None:
    policy = _policy(
        operator={"runtimeClass": "gpu"},
        toolkit={
            "installDir": "/opt/nvidia",
            "containerd": {"distribution": "k3s", "setAsDefault": True},
        },
    )
    objects = render(policy, _facts())
    container = _pod(objects, "gpuctrl-toolkit")["spec"]["containers"][0]
    assert container["args"] == [
        "toolkit", "run", "--host-root", "/host", "--runtime-dir", "/opt/nvidia/toolkit",
        "--state-dir", "/var/lib/gpuctrl/toolkit", "--runtime-name", "gpu",
        "--ready-file", "/run/gpuctrl/toolkit-ready",
        "--set-as-default", "--enable-cdi", "--distribution", "k3s",
    ]  # fmt: skip
    # Ready only once the agent would clean up on SIGTERM: the file it writes then.
    probe = container["readinessProbe"]["exec"]["command"]
    assert probe == ["test", "-f", "/run/gpuctrl/toolkit-ready"]
    runtime_class = _find(objects, "RuntimeClass", "gpu")
    assert runtime_class["handler"] == "gpu"


def test_runtime_class_handler_follows_toolkit_setting() -> None:
    policy = _policy(toolkit={"containerd": {"runtimeClassName": "nvidia-cdi"}})
    assert _find(render(policy, _facts()), "RuntimeClass", "nvidia")["handler"] == "nvidia-cdi"


def test_validator_carries_workload_overrides_and_check_env() -> None:
    workloads = {
        "labels": {"sidecar.istio.io/inject": "false"},
        "annotations": {"linkerd.io/inject": "disabled"},
        "resources": {"limits": {"cpu": "1"}},
        "securityContext": {"runAsNonRoot": True},
        "tolerations": [{"operator": "Exists"}],
        "priorityClassName": "p",
        "timeoutSeconds": 60,
    }
    policy = _policy(
        validator={"workloads": workloads, "cuda": {"env": [{"name": "X", "value": "1"}]}}
    )
    pod = _pod(render(policy, _facts()), "gpuctrl-validator")
    init = pod["spec"]["initContainers"]
    assert [c["name"] for c in init] == [
        "driver-validation",
        "toolkit-validation",
        "cuda-validation",
        "plugin-validation",
    ]
    cuda = _env(init[2])
    assert cuda["X"] == "1"
    assert "X" not in _env(init[3])
    carried = ValidatorWorkloads.model_validate_json(cuda["GPUCTRL_VALIDATOR_WORKLOADS"])
    assert carried.config_map_name == "gpuctrl-validator-workloads"
    assert carried.runtime_class_name == "nvidia"
    assert carried.labels == workloads["labels"]
    assert carried.resources is not None
    assert carried.resources.limits == {"cpu": "1"}
    assert carried.timeout_seconds == 60


def test_a_checks_own_env_wins_over_the_validators_env() -> None:
    policy = _policy(
        validator={
            "env": [{"name": "WAIT", "value": "general"}, {"name": "ONLY_GENERAL", "value": "g"}],
            "toolkit": {"env": [{"name": "WAIT", "value": "toolkit"}]},
        }
    )
    init = _pod(render(policy, _facts()), "gpuctrl-validator")["spec"]["initContainers"]
    by_name = {c["name"]: c for c in init}
    toolkit = [e for e in by_name["toolkit-validation"]["env"] if e["name"] == "WAIT"]
    assert toolkit == [{"name": "WAIT", "value": "toolkit"}]  # once, and the check's value
    assert _env(by_name["toolkit-validation"])["ONLY_GENERAL"] == "g"
    assert _env(by_name["driver-validation"])["WAIT"] == "general"


@pytest.mark.parametrize("runtime_class", ["nvidia", "nvidia-gpu"])
def test_validator_and_device_plugin_run_under_the_nvidia_runtime_class(
    runtime_class: str,
) -> None:
    objects = render(_policy(operator={"runtimeClass": runtime_class}), _facts())
    for name in ("gpuctrl-validator", "gpuctrl-device-plugin"):
        assert _pod(objects, name)["spec"]["runtimeClassName"] == runtime_class, name
    assert _find(objects, "RuntimeClass", runtime_class)
    for name in ("gpuctrl-toolkit", "gpuctrl-driver-ubuntu22.04"):  # they install the runtime
        assert "runtimeClassName" not in _pod(objects, name)["spec"], name


def test_toolkit_check_sees_every_gpu_through_the_runtime() -> None:
    init = _pod(render(_policy(), _facts()), "gpuctrl-validator")["spec"]["initContainers"]
    by_name = {c["name"]: _env(c) for c in init}
    assert by_name["toolkit-validation"]["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "NVIDIA_VISIBLE_DEVICES" not in by_name["cuda-validation"]


def test_toolkit_init_container_runs_nvidias_installer_from_the_policys_runtime_image() -> None:
    runtime = {"repository": "mirror.example.com/nvidia", "version": "v1.17.8-ubi8"}
    policy = _policy(
        toolkit={"runtimeImage": runtime, "installDir": "/opt/nvidia", "imagePullSecrets": ["s"]}
    )
    pod = _pod(render(policy, _facts()), "gpuctrl-toolkit")["spec"]
    [installer] = [c for c in pod["initContainers"] if c["name"] == "runtime-install"]
    assert installer["image"] == "mirror.example.com/nvidia/container-toolkit:v1.17.8-ubi8"
    assert installer["command"] == ["sh", "-c"]
    [script] = installer["args"]
    assert script.split("\n")[-3:-1] == [
        "nvidia-toolkit",
        'test -x "$RUNTIME_DIR/nvidia-container-runtime"',
    ]
    assert _env(installer) == {
        "ROOT": "/opt/nvidia",
        "RUNTIME_DIR": "/opt/nvidia/toolkit",
        "NO_DAEMON": "true",
        "RUNTIME": "containerd",
        "RUNTIME_CONFIG": "/tmp/unused-containerd-config.toml",
        "RUNTIME_RESTART_MODE": "none",
        "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "NVIDIA_CONTAINER_RUNTIME_MODES_CDI_DEFAULT_KIND": "management.nvidia.com/gpu",
        "CDI_ENABLED": "true",
        "CDI_OUTPUT_DIR": "/var/run/cdi",
        "NVIDIA_CONTAINER_RUNTIME_MODE": "cdi",
    }
    mounts = {m["mountPath"]: m for m in installer["volumeMounts"]}
    assert mounts["/opt/nvidia"]["name"] == "install-dir"
    assert mounts["/var/run/cdi"]["name"] == "cdi-root"
    assert mounts["/host"]["readOnly"]
    assert mounts["/run/nvidia"]["readOnly"]
    volume = next(v for v in pod["volumes"] if v["name"] == "install-dir")
    assert volume["hostPath"] == {"path": "/opt/nvidia", "type": "DirectoryOrCreate"}
    assert pod["imagePullSecrets"] == [{"name": "s"}]
    assert pod["containers"][0]["image"].startswith("ghcr.io/gpuctrl/gpuctrl:")


def test_toolkit_config_names_the_hosts_root_as_driver_root_without_a_driver_container() -> None:
    pod = _pod(render(_policy(driver={"enabled": False}), _facts()), "gpuctrl-toolkit")["spec"]
    [installer] = [c for c in pod["initContainers"] if c["name"] == "runtime-install"]
    assert _env(installer)["NVIDIA_DRIVER_ROOT"] == "/"


def test_builtin_templates_go_into_the_workloads_config_map() -> None:
    objects = render(_policy(), _facts())
    config_map = _find(objects, "ConfigMap", "gpuctrl-validator-workloads")
    assert config_map["data"] == builtin_workload_templates()
    assert set(config_map["data"]) == {"cuda.yaml", "plugin.yaml"}
    assert "kind: Pod" in config_map["data"]["cuda.yaml"]


def test_user_templates_config_map_must_exist_with_both_keys() -> None:
    policy = _policy(validator={"workloads": {"configMapName": "mine"}})
    with pytest.raises(MissingConfigMap):
        render(policy, _facts())
    with pytest.raises(RenderError, match=r"lacks the key\(s\) plugin.yaml"):
        render(policy, _facts(mine={"cuda.yaml": "x"}))
    objects = render(policy, _facts(mine={"cuda.yaml": "x", "plugin.yaml": "y"}))
    env = _env(_pod(objects, "gpuctrl-validator")["spec"]["initContainers"][2])
    assert json.loads(env["GPUCTRL_VALIDATOR_WORKLOADS"])["configMapName"] == "mine"


def test_namespace_comes_from_the_facts() -> None:
    facts = ClusterFacts(namespace="gpu-system", nodes=(_node("n", "ubuntu", "22.04"),))
    for obj in render(_policy(), facts):
        meta = obj["metadata"]
        if (obj["kind"], meta.get("namespace")) in {
            ("Role", "default"),
            ("RoleBinding", "default"),
        }:
            assert meta["name"] == "gpuctrl-validator"  # Events on Nodes live in "default"
        elif obj["kind"] in {
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "DaemonSet",
            "ConfigMap",
            "Service",
        }:
            assert meta["namespace"] == "gpu-system"
        else:
            assert "namespace" not in meta


def _validator_roles(namespace: str) -> dict[str, list[dict[str, Any]]]:
    facts = ClusterFacts(namespace=namespace, nodes=(_node("n", "ubuntu", "22.04"),))
    objects = render(_policy(), facts)
    validator = [o for o in objects if o["metadata"]["name"] == "gpuctrl-validator"]
    assert "ClusterRole" not in {o["kind"] for o in validator}  # it reads no Node
    roles = {o["metadata"]["namespace"]: o["rules"] for o in validator if o["kind"] == "Role"}
    bindings = [o for o in validator if o["kind"] == "RoleBinding"]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(roles)
    for binding in bindings:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "gpuctrl-validator", "namespace": namespace}
        ]
    return roles


PODS = {
    "apiGroups": [""],
    "resources": ["pods"],
    "verbs": ["create", "delete", "get", "list", "watch"],
}
LOGS = {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}
CONFIG_MAPS = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
EVENTS = {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}


def test_validator_rbac_is_what_the_agent_calls() -> None:
    assert _validator_roles("gpu-system") == {
        "gpu-system": [PODS, LOGS, CONFIG_MAPS],
        "default": [EVENTS],
    }


def test_validator_in_namespace_default_gets_one_role() -> None:
    assert _validator_roles("default") == {"default": [PODS, LOGS, CONFIG_MAPS, EVENTS]}


def test_facts_from_objects_keep_only_config_maps_of_the_namespace() -> None:
    facts = ClusterFacts.from_objects(
        "gpuctrl",
        [{"metadata": {"name": "n", "labels": {"a": "b"}}}],
        [
            {"metadata": {"name": "x", "namespace": "gpuctrl"}, "data": {"k": "v"}},
            {"metadata": {"name": "y", "namespace": "other"}, "data": {}},
        ],
    )
    assert facts.nodes[0].labels == {"a": "b"}
    assert [c.name for c in facts.config_maps] == ["x"]


def test_toolkit_gets_no_api_access() -> None:
    objects = render(_policy(), _facts())
    toolkit = [o for o in objects if o["metadata"]["name"] == "gpuctrl-toolkit"]
    assert sorted(o["kind"] for o in toolkit) == ["DaemonSet", "ServiceAccount"]  # no RBAC
    pod = _pod(objects, "gpuctrl-toolkit")["spec"]
    assert pod["serviceAccountName"] == "gpuctrl-toolkit"
    assert pod["automountServiceAccountToken"] is False
    binds_toolkit = [
        o
        for o in objects
        if o["kind"] in {"RoleBinding", "ClusterRoleBinding"}
        and any(s["name"] == "gpuctrl-toolkit" for s in o["subjects"])
    ]
    assert binds_toolkit == []


def test_device_plugin_keeps_read_access_to_nodes() -> None:
    objects = render(_policy(), _facts())
    role = _find(objects, "ClusterRole", "gpuctrl-device-plugin")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    assert "automountServiceAccountToken" not in _pod(objects, "gpuctrl-device-plugin")["spec"]


@given(
    st.dictionaries(
        st.sampled_from(["n-2", "n-10", "a", "b-1", "z"]),
        st.sampled_from(
            [(OS_ID, "ubuntu"), (OS_VERSION, "22.04"), ("nvidia.com/gpu.present", "true")]
        ),
    )
)
def test_facts_from_node_states_are_the_facts_from_the_nodes(
    nodes: dict[str, tuple[str, str]],
) -> None:
    objects = [{"metadata": {"name": n, "labels": dict([nodes[n]])}} for n in sorted(nodes)]
    states: dict[tuple[str, str], list[str]] = {}
    for name, label in nodes.items():
        states.setdefault(label, []).append(name)
    grouped = [(dict([label]), names) for label, names in states.items()]
    crd = {
        "metadata": {"name": "x"},
        "status": {"conditions": [{"type": "Established", "status": "True"}]},
    }
    config_map = {"metadata": {"name": "c", "namespace": "gpuctrl"}, "data": {"k": "v"}}
    assert ClusterFacts.from_node_states("gpuctrl", grouped, [config_map], [crd]) == (
        ClusterFacts.from_objects("gpuctrl", objects, [config_map], [crd])
    )
