"""``gpuctrl migrate`` on a realistic NVIDIA ClusterPolicy, and the mapping of NVIDIA's meaning
it shares with ``load_cluster_policy`` (`api.nvidia.nvidia_meaning`)."""

import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from api.nvidia import (
    IMAGE_SECTIONS,
    NvidiaSettingError,
    from_nvidia,
    nvidia_meaning,
    split_reference,
)
from api.v1alpha1 import (
    ClusterPolicySpec,
    Component,
    Image,
    InvalidPolicy,
    image_reference,
    load_cluster_policy,
    wire,
)
from gpuctrl.cli import main

NVIDIA = Path(__file__).parents[2] / "data" / "nvidia-clusterpolicy.yaml"
DIGEST = "sha256:" + "b" * 64
K3S_CONFIG = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"


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
    # NVIDIA's validator env means nothing to gpuctrl's agent: listed, not carried.
    assert not spec.validator.plugin.env
    assert any("plugin.env[0] WITH_WORKLOAD" in line for line in migration.dropped)
    assert [v.name for v in spec.device_plugin.env] == ["PASS_DEVICE_SPECS", "FAIL_ON_INIT_ERROR"]
    # NVIDIA's driver manager runs before gpuctrl's driver container too.
    assert spec.driver.manager.version == "v0.7.0"
    lost = {line.split(":")[0] for line in migration.dropped}
    for path in ("spec.operator.initContainer", "spec.validator.repository"):
        assert path in lost, path
    # NVIDIA's upgrade policy, with its meaning (a quoted maxUnavailable is a number).
    assert "spec.driver.upgradePolicy" not in lost
    upgrade = spec.driver.upgrade_policy
    assert (upgrade.auto_upgrade, upgrade.max_parallel_upgrades) == (True, 1)
    assert upgrade.gpu_pod_deletion.timeout_seconds == 300  # NVIDIA's CR calls it podDeletion
    assert migration.lacking == []  # the MIG manager is one of gpuctrl's operands now
    assert spec.mig_manager.enabled
    exporter = spec.dcgm_exporter
    assert (exporter.enabled, exporter.image, exporter.version) == (
        True,
        "dcgm-exporter",
        "3.3.9-3.6.1-ubuntu22.04",
    )
    assert spec.dcgm.enabled is False
    # NVIDIA's defaults that set nothing (hostPaths /, nlsEnabled without a licence) lose nothing.
    assert not {"spec.hostPaths", "spec.driver.licensingConfig"} & lost
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
    assert "operands gpuctrl lacks" not in err  # migManager is carried over


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


NFD = "feature.node.kubernetes.io"
GPU_NODE = {
    "name": "gpu-0",
    "labels": {
        f"{NFD}/pci-10de.present": "true",
        f"{NFD}/system-os_release.ID": "ubuntu",
        f"{NFD}/system-os_release.VERSION_ID": "22.04",
    },
}


def _migrate_then_render(spec: dict[str, Any], tmp_path: Path) -> tuple[dict[str, Any], str]:
    """``gpuctrl migrate`` of an NVIDIA policy with ``spec``, then ``gpuctrl render`` of the
    result: the rendered objects by kind/name, and migrate's stderr."""
    source = tmp_path / "nvidia.yaml"
    nvidia = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": spec}
    source.write_text(yaml.safe_dump(nvidia))
    migrated = tmp_path / "gpuctrl.yaml"
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["migrate", "-f", str(source)]) == 0, err.getvalue()
    migrated.write_text(out.getvalue())
    node = tmp_path / "node.yaml"
    node.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": GPU_NODE}))
    rendered = io.StringIO()
    with contextlib.redirect_stdout(rendered):
        assert main(["render", "-f", str(migrated), "-f", str(node)]) == 0
    objects = {
        f"{o['kind']}/{o['metadata']['name']}": o for o in yaml.safe_load_all(rendered.getvalue())
    }
    return objects, err.getvalue()


def _containers(ds: dict[str, Any]) -> dict[str, dict[str, Any]]:
    pod = ds["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*pod.get("initContainers", []), *pod["containers"]]}


def test_full_image_references_are_split_as_nvidias_image_path_reads_them(
    tmp_path: Path,
) -> None:
    spec = {
        "devicePlugin": {
            "repository": "",
            "version": "",
            "image": "registry.example.com/nvidia/k8s-device-plugin:v0.17.0",
        },
        "toolkit": {"image": "registry.example.com/nvidia/container-toolkit@sha256:" + "a" * 64},
        "driver": {"repository": "ignored.example.com", "image": "mirror.example.com:5000/driver"},
    }
    objects, _ = _migrate_then_render(spec, tmp_path)
    plugin = _containers(objects["DaemonSet/gpuctrl-device-plugin"])["nvidia-device-plugin"]
    assert plugin["image"] == "registry.example.com/nvidia/k8s-device-plugin:v0.17.0"
    installer = _containers(objects["DaemonSet/gpuctrl-toolkit"])["runtime-install"]
    assert installer["image"] == "registry.example.com/nvidia/container-toolkit@sha256:" + "a" * 64
    # A registry port is no tag; an untagged reference is what a runtime pulls: latest.
    driver = next(o for k, o in objects.items() if k.startswith("DaemonSet/gpuctrl-driver"))
    image = _containers(driver)["nvidia-driver-ctr"]["image"]
    assert image.startswith("mirror.example.com:5000/driver:latest-")


def test_k3s_and_rke2_config_paths_become_the_distribution(tmp_path: Path) -> None:
    for distribution in ("k3s", "rke2"):
        config = f"/var/lib/rancher/{distribution}/agent/etc/containerd/config.toml"
        env = [
            {"name": "CONTAINERD_CONFIG", "value": config},
            {"name": "CONTAINERD_SOCKET", "value": "/run/k3s/containerd/containerd.sock"},
            {"name": "RUNTIME_CONFIG_SOURCE", "value": "file=/etc/x.toml"},
        ]
        objects, err = _migrate_then_render({"toolkit": {"env": env}}, tmp_path)
        args = _containers(objects["DaemonSet/gpuctrl-toolkit"])["toolkit"]["args"]
        assert args[args.index("--distribution") + 1] == distribution
        assert "--config" not in args  # the agent edits the template k3s/RKE2 generate from
        assert "RUNTIME_CONFIG_SOURCE: gpuctrl's agent reads the config files" in err


def test_a_preinstalled_driver_and_cdi_off_carry_their_meaning(tmp_path: Path) -> None:
    spec = {"driver": {"enabled": False}, "cdi": {"enabled": False}}
    objects, err = _migrate_then_render(spec, tmp_path)
    assert not [k for k in objects if k.startswith("DaemonSet/gpuctrl-driver")]
    toolkit = _containers(objects["DaemonSet/gpuctrl-toolkit"])
    assert "--set-as-default" in toolkit["toolkit"]["args"]
    env = {e["name"]: e["value"] for e in toolkit["runtime-install"]["env"]}
    assert env["NVIDIA_DRIVER_ROOT"] == "/"
    assert "CDI_ENABLED" not in env
    assert err == ""


def test_nvidia_driver_crd_is_refused_with_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "nvidia.yaml"
    nvidia = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy"}
    source.write_text(yaml.safe_dump({**nvidia, "spec": {"driver": {"useNvidiaDriverCRD": True}}}))
    assert main(["migrate", "-f", str(source)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "useNvidiaDriverCRD is true" in err
    assert "spec.driver (or set spec.driver.enabled: false" in err


# --- NVIDIA's meaning in gpuctrl's own API: the mapping migrate and load_cluster_policy share.


def _component_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The wire paths of the model's Component and Image sections, recursively."""
    found = set()
    hints = typing.get_type_hints(model)
    for name, info in model.model_fields.items():
        hint = hints[name]
        if isinstance(hint, type) and issubclass(hint, BaseModel):
            path = (*prefix, info.alias or name)
            if issubclass(hint, Component | Image):
                found.add(path)
            found |= _component_paths(hint, path)
    return found


def test_image_sections_are_the_models_image_fields() -> None:
    assert set(IMAGE_SECTIONS) == _component_paths(ClusterPolicySpec)


@pytest.mark.parametrize(
    ("image", "fields"),
    [
        ("driver", None),
        ("cloud-native/k8s-driver-manager", None),  # NVIDIA joins it to repository/version
        ("nvidia/cuda:12.4.1", {"repository": "nvidia", "image": "cuda", "version": "12.4.1"}),
        ("driver:550.1", {"image": "driver", "version": "550.1"}),  # repository kept
        ("mirror.example.com:5000/driver", {"repository": "mirror.example.com:5000",
                                            "image": "driver", "version": "latest"}),
        ("localhost/x/driver", {"repository": "localhost/x", "image": "driver",
                                "version": "latest"}),
        (f"r.example.com/nv/plugin@{DIGEST}", {"repository": "r.example.com/nv",
                                               "image": "plugin", "version": DIGEST}),
    ],
)  # fmt: skip
def test_split_reference(image: str, fields: dict[str, str] | None) -> None:
    assert split_reference(image) == fields


@given(
    st.sampled_from(["", "registry.example.com/", "mirror.example.com:5000/", "localhost/"]),
    st.lists(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), min_size=1, max_size=3),
    st.one_of(st.from_regex(r":[A-Za-z0-9_][A-Za-z0-9_.-]{0,10}", fullmatch=True),
              st.just(f"@{DIGEST}")),
)  # fmt: skip
def test_a_split_reference_names_the_same_image(host: str, path: list[str], tag: str) -> None:
    reference = host + "/".join(path) + tag
    fields = split_reference(reference)
    assert fields is not None
    image = Image.model_validate({"repository": "nvcr.io/nvidia", **fields})
    expected = reference if host or len(path) > 1 else f"nvcr.io/nvidia/{reference}"
    assert image_reference(image) == expected


def test_a_full_reference_wins_over_the_crds_defaults() -> None:
    # As the apiserver stores a chart's driver.image: the CRD filled repository and version in.
    stored = wire(
        ClusterPolicySpec.model_validate({"driver": {"image": f"r.example.com/d@{DIGEST}"}})
    )
    driver = load_cluster_policy({"spec": stored}).spec.driver
    assert (driver.repository, driver.image, driver.version) == ("r.example.com", "d", DIGEST)


def _toolkit(**toolkit: Any) -> Any:
    return load_cluster_policy({"spec": {"toolkit": toolkit}}).spec.toolkit


def test_toolkit_env_is_read_as_the_containerd_settings_at_load() -> None:
    env = [
        {"name": "CONTAINERD_CONFIG", "value": K3S_CONFIG.replace("k3s", "rke2")},
        {"name": "CONTAINERD_SOCKET", "value": "/run/k3s/containerd/containerd.sock"},
        {"name": "CONTAINERD_SET_AS_DEFAULT", "value": "False"},
        {"name": "RUNTIME_CONFIG_SOURCE", "value": "command"},
        {"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
    ]  # fmt: skip
    toolkit = _toolkit(env=env, containerd={"socketPath": "/run/k3s/containerd/containerd.sock"})
    assert toolkit.containerd.distribution == "rke2"
    assert toolkit.containerd.socket_path == "/run/k3s/containerd/containerd.sock"
    assert toolkit.containerd.set_as_default is False
    assert [v.name for v in toolkit.env] == ["HTTPS_PROXY"]  # the config source: left out


@pytest.mark.parametrize(
    ("toolkit", "path", "why"),
    [
        (
            {"env": [{"name": "CONTAINERD_SOCKET", "value": "/run/a.sock"}],
             "containerd": {"socketPath": "/run/b.sock"}},
            "spec.toolkit.env[0]",
            "CONTAINERD_SOCKET means socketPath '/run/a.sock', but"
            " spec.toolkit.containerd.socketPath is '/run/b.sock': keep one",
        ),
        (
            {"env": [{"name": "CONTAINERD_CONFIG", "value": "/etc/a.toml"},
                     {"name": "RUNTIME_CONFIG", "value": "/etc/b.toml"}]},
            "spec.toolkit.env[1]",
            "RUNTIME_CONFIG means configPath '/etc/b.toml', but spec.toolkit.env[0]"
            " CONTAINERD_CONFIG is '/etc/a.toml': keep one",
        ),
        (
            {"env": [{"name": "CONTAINERD_CONFIG", "value": K3S_CONFIG}],
             "containerd": {"distribution": "rke2"}},
            "spec.toolkit.env[0]",
            "CONTAINERD_CONFIG means distribution 'k3s', but"
            " spec.toolkit.containerd.distribution is 'rke2': keep one",
        ),
        (
            {"env": [{"name": "RUNTIME_RESTART_MODE", "value": "reboot"}]},
            "spec.toolkit.env[0]",
            "RUNTIME_RESTART_MODE 'reboot' is not one of signal, systemd, none",
        ),
        (
            {"env": [{"name": "NVIDIA_RUNTIME_SET_AS_DEFAULT", "value": "yes"}]},
            "spec.toolkit.env[0]",
            "NVIDIA_RUNTIME_SET_AS_DEFAULT 'yes' is not a boolean (true or false)",
        ),
    ],
    ids=["env-vs-field", "env-vs-env", "k3s-vs-distribution", "restart-mode", "boolean"],
)  # fmt: skip
def test_contradicting_or_refused_nvidia_env_is_a_problem_naming_it(
    toolkit: dict[str, Any], path: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(InvalidPolicy) as invalid:
        _toolkit(**toolkit)
    assert [(p.path, p.message) for p in invalid.value.problems] == [(path, why)]
    # migrate says the same of NVIDIA's env (NVIDIA's toolkit section has no containerd).
    if "containerd" not in toolkit:
        source = tmp_path / "nvidia.yaml"
        nvidia = {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "spec": {"toolkit": toolkit},
        }
        source.write_text(yaml.safe_dump(nvidia))
        assert main(["migrate", "-f", str(source)]) == 2
        out, err = capsys.readouterr()
        assert (out, err) == ("", f"error: {source}: {path}: {why}\n")


def test_env_that_agrees_with_the_explicit_field_is_no_contradiction() -> None:
    env = [{"name": "CONTAINERD_RUNTIME_CLASS", "value": "nvidia"}]
    toolkit = _toolkit(env=env, containerd={"runtimeClassName": "nvidia"})
    assert toolkit.containerd.runtime_class_name == "nvidia"
    assert not toolkit.env


_ENV = st.sampled_from(
    ["CONTAINERD_CONFIG", "CONTAINERD_SOCKET", "RUNTIME_CONFIG_SOURCE", "WITH_WORKLOAD", "OTHER"]
)


@given(
    st.dictionaries(
        st.sampled_from(["toolkit", "validator", "driver"]),
        st.fixed_dictionaries(
            {"env": st.lists(st.builds(lambda n: {"name": n, "value": "/x"}, _ENV), max_size=4)},
            optional={"image": st.sampled_from(["driver", "r.example.com/a/b:1", f"b@{DIGEST}"])},
        ),
    )
)
def test_nvidia_meaning_is_idempotent(spec: dict[str, Any]) -> None:
    try:
        once = nvidia_meaning(spec)
    except NvidiaSettingError:
        return
    twice = nvidia_meaning(once.spec)
    assert twice.spec == once.spec
    assert twice.notes == []


SHARING = Path(__file__).parents[2] / "data" / "nvidia" / "sharing"


def test_the_device_plugins_named_configs_are_carried(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["migrate", "-f", str(SHARING / "clusterpolicy-time-slicing.yaml")]) == 0
    out, err = capsys.readouterr()
    spec = yaml.safe_load(out)["spec"]
    assert spec["devicePlugin"]["config"] == {"name": "time-slicing-config", "default": "any"}
    assert spec["devicePlugin"]["mps"] == {"root": "/run/nvidia/mps"}
    assert "devicePlugin" not in err
    plugin = load_cluster_policy(yaml.safe_load(out)).spec.device_plugin
    assert (plugin.config.name, plugin.config.default) == ("time-slicing-config", "any")
    assert plugin.mps.root == "/run/nvidia/mps"


def test_nvidias_mps_root_is_carried_and_what_gpuctrl_lacks_of_it_named() -> None:
    nvidia = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "p"},
        "spec": {"devicePlugin": {"mps": {"root": "/var/lib/mps", "pipes": "x"}}},
    }
    migration = from_nvidia(nvidia)
    assert migration.policy["spec"] == {"devicePlugin": {"mps": {"root": "/var/lib/mps"}}}
    assert migration.dropped == ["spec.devicePlugin.mps.pipes: not supported by gpuctrl"]
    policy = load_cluster_policy(migration.policy)
    assert policy.spec.device_plugin.mps.root == "/var/lib/mps"


def test_a_default_without_a_configmap_is_dropped_as_nvidia_ignores_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["migrate", "-f", str(SHARING / "clusterpolicy-default-only.yaml")]) == 0
    out, err = capsys.readouterr()
    assert "devicePlugin" not in (yaml.safe_load(out)["spec"] or {})
    assert (
        "not carried over: spec.devicePlugin.config.default: NVIDIA's operator ignores it "
        "without config.name"
    ) in err


def test_a_migrated_policy_renders_with_nvidias_sharing_configmap() -> None:
    from controllers.render import ClusterFacts, render_component

    nvidia = yaml.safe_load((SHARING / "clusterpolicy-time-slicing.yaml").read_text())
    policy = load_cluster_policy(from_nvidia(nvidia).policy)
    config_map = yaml.safe_load((SHARING / "time-slicing-config.yaml").read_text())
    config_map["metadata"]["namespace"] = "gpuctrl"
    facts = ClusterFacts.from_objects("gpuctrl", [], [config_map])
    rendered = render_component("device-plugin", policy, facts)
    [copy] = [o for o in rendered if o["kind"] == "ConfigMap"]
    assert copy["data"] == config_map["data"]
