"""``gpuctrl migrate`` on a realistic NVIDIA ClusterPolicy."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from api.nvidia import from_nvidia
from api.v1alpha1 import load_cluster_policy
from gpuctrl.cli import main

NVIDIA = Path(__file__).parents[2] / "data" / "nvidia-clusterpolicy.yaml"


def test_conversion_carries_shared_fields_and_lists_the_rest() -> None:
    migration = from_nvidia(yaml.safe_load(NVIDIA.read_text()))
    policy = load_cluster_policy(migration.policy)  # the result validates
    spec = policy.spec
    assert spec.driver.repository == "mirror.example.com/nvidia"
    assert spec.driver.version == "550.127.08"
    assert spec.driver.image_pull_secrets == ["mirror-pull"]
    assert spec.driver.repo_config.config_map_name == "repo-config"
    assert spec.driver.cert_config.name == "cert-config"
    assert spec.driver.resources is not None
    assert spec.driver.resources.requests == {"cpu": "200m", "memory": "512Mi"}
    assert spec.daemonsets.labels == {"site.example.com/tier": "gpu"}
    assert spec.mig.strategy == "single"
    assert spec.daemonsets.rolling_update.max_unavailable == 1
    # NVIDIA's toolkit env becomes gpuctrl's containerd settings; the rest stays env.
    assert spec.toolkit.containerd.config_path == "/etc/containerd/config.toml"
    assert spec.toolkit.containerd.socket_path == "/run/containerd/containerd.sock"
    assert spec.toolkit.containerd.set_as_default is False
    assert [v.name for v in spec.toolkit.env] == ["NVIDIA_CONTAINER_RUNTIME_MODE"]
    # gpuctrl's own agent images replace NVIDIA's toolkit and validator images; NVIDIA's
    # toolkit image remains the source of the runtime binaries.
    assert spec.toolkit.repository == "ghcr.io/gpuctrl"
    runtime = spec.toolkit.runtime_image
    assert (runtime.repository, runtime.image, runtime.version) == (
        "nvcr.io/nvidia/k8s",
        "container-toolkit",
        "v1.17.3-ubuntu20.04",
    )
    assert spec.validator.plugin.env[0].name == "WITH_WORKLOAD"
    assert [v.name for v in spec.device_plugin.env] == ["PASS_DEVICE_SPECS", "FAIL_ON_INIT_ERROR"]
    lost = {line.split(":")[0] for line in migration.dropped}
    for path in (
        "spec.hostPaths",
        "spec.dcgmExporter",
        "spec.operator.initContainer",
        "spec.driver.manager",
        "spec.driver.upgradePolicy",
        "spec.driver.licensingConfig",
        "spec.validator.repository",
    ):
        assert path in lost, path
    assert "spec.driver.repoConfig" not in lost
    # NVIDIA's "" names mean "none": nothing is lost (its config: {name: "", default: ""}).
    assert "spec.devicePlugin.config" not in lost
    assert not {"spec.toolkit.repository", "spec.toolkit.image", "spec.toolkit.version"} & lost


def test_rejects_other_kinds() -> None:
    with pytest.raises(ValueError, match=r"expected an nvidia.com/v1 ClusterPolicy"):
        from_nvidia({"apiVersion": "gpuctrl.io/v1alpha1", "kind": "ClusterPolicy"})


def test_cli_prints_policy_and_lost_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", "-f", str(NVIDIA)]) == 0
    out, err = capsys.readouterr()
    converted = yaml.safe_load(out)
    assert converted["apiVersion"] == "gpuctrl.io/v1alpha1"
    assert converted["metadata"] == {"name": "cluster-policy"}
    # NVIDIA quotes the number; the CRD's int-or-string takes a number or a percentage.
    assert converted["spec"]["daemonsets"]["rollingUpdate"] == {"maxUnavailable": 1}
    assert "not carried over: spec.dcgmExporter: gpuctrl has no dcgmExporter operand" in err


def test_cli_exit_2_on_wrong_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = tmp_path / "pod.yaml"
    wrong.write_text("apiVersion: v1\nkind: Pod\n")
    assert main(["migrate", "-f", str(wrong)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "expected an nvidia.com/v1 ClusterPolicy, got v1/Pod" in err


def _migrated(spec: dict[str, Any]) -> Any:
    return from_nvidia({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": spec})


@pytest.mark.parametrize("enabled", [True, False])
def test_cdi_and_mig_carry_nvidias_meaning(enabled: bool) -> None:
    spec = {"cdi": {"enabled": enabled, "default": True, "nriPluginEnabled": False}}
    spec["mig"] = {"strategy": "mixed"}
    migration = _migrated(spec)
    # cdi.default is "no longer used" in NVIDIA's CRD: nothing to carry, nothing lost.
    assert migration.policy["spec"]["cdi"] == {"enabled": enabled}
    assert migration.policy["spec"]["mig"] == {"strategy": "mixed"}
    assert migration.dropped == []
    policy = load_cluster_policy(migration.policy)
    assert policy.spec.cdi.enabled is enabled


def test_the_nri_plugin_is_named_as_not_carried() -> None:
    assert _migrated({"cdi": {"nriPluginEnabled": True}}).dropped == [
        "spec.cdi.nriPluginEnabled: not supported by gpuctrl"
    ]


@pytest.mark.parametrize(
    ("runtime", "carried", "dropped"),
    [("crio", "crio", []), ("containerd", "containerd", []), ("docker", None, [])],
)
def test_default_runtime(runtime: str, carried: str | None, dropped: list[str]) -> None:
    migration = _migrated({"operator": {"defaultRuntime": runtime}})
    assert migration.policy["spec"].get("operator", {}).get("defaultRuntime") == carried
    assert migration.dropped == dropped


@pytest.mark.parametrize("name", ["CONTAINERD_SET_AS_DEFAULT", "NVIDIA_RUNTIME_SET_AS_DEFAULT"])
def test_nvidias_set_as_default_env_is_the_setting(name: str) -> None:
    env = [{"name": name, "value": "false"}]
    migration = _migrated({"toolkit": {"env": env}})
    assert migration.policy["spec"]["toolkit"] == {"containerd": {"setAsDefault": False}}
