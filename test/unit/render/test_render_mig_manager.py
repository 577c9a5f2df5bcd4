"""The MIG manager: NVIDIA's DaemonSet on MIG-capable nodes, its mig-parted config and GPU
clients file mounted from gpuctrl's copies (gpuctrl's defaults, or the named ConfigMaps once
they pass mig-parted's checks), and what a refused config names."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from render_kit import NODES, pod_of

from api.v1alpha1 import load_cluster_policy
from controllers.render import ClusterFacts, MissingConfigMap, RenderError, render_component
from controllers.render._migparted import (
    DEFAULT_GPU_CLIENTS,
    DEFAULT_MIG_PARTED_CONFIG,
    gpu_clients_problems,
    mig_config_names,
    mig_parted_problems,
)

HASH = "gpuctrl.io/config-hash"
V1 = "version: v1\nmig-configs: "
USER_CONFIG = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  two-3g:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [2]
      mig-enabled: false
"""


def _objects(
    spec: dict[str, Any] | None = None, config_maps: list[dict[str, Any]] | None = None
) -> dict[tuple[str, str], dict[str, Any]]:
    policy = load_cluster_policy({"spec": spec or {}})
    facts = ClusterFacts.from_objects("gpuctrl", NODES, config_maps or [])
    return {
        (o["kind"], o["metadata"]["name"]): o
        for o in render_component("mig-manager", policy, facts)
    }


def _config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "gpuctrl"}, "data": data}


def _named() -> dict[str, Any]:
    """A spec naming ConfigMap my-mig as the mig-parted config."""
    return {"migManager": {"config": {"name": "my-mig"}}}


def test_it_runs_nvidias_image_on_mig_capable_nodes_as_nvidias_operator_does() -> None:
    objects = _objects()
    assert set(objects) == {
        ("ServiceAccount", "gpuctrl-mig-manager"),
        ("Role", "gpuctrl-mig-manager"),
        ("RoleBinding", "gpuctrl-mig-manager"),
        ("ClusterRole", "gpuctrl-mig-manager"),
        ("ClusterRoleBinding", "gpuctrl-mig-manager"),
        ("ConfigMap", "gpuctrl-mig-parted-config"),
        ("ConfigMap", "gpuctrl-gpu-clients"),
        ("DaemonSet", "gpuctrl-mig-manager"),
    }
    pod = objects["DaemonSet", "gpuctrl-mig-manager"]["spec"]["template"]
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.deploy.mig-manager": "true"}
    assert (spec["hostPID"], spec["hostIPC"], spec["runtimeClassName"]) == (True, True, "nvidia")
    assert [c["name"] for c in spec["initContainers"]] == ["toolkit-validation"]
    [container] = spec["containers"]
    assert container["image"] == "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.10.0-ubuntu20.04"
    assert container["securityContext"] == {"privileged": True}
    script = container["args"][0]
    assert ". /run/nvidia/validations/driver-ready" in script
    assert 'WITH_SHUTDOWN_HOST_GPU_CLIENTS="$IS_HOST_DRIVER"' in script
    assert script.rstrip().endswith('exec nvidia-mig-manager "$@"')
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["mig-parted-config"]["configMap"] == {"name": "gpuctrl-mig-parted-config"}
    assert volumes["gpu-clients"]["configMap"] == {"name": "gpuctrl-gpu-clients"}
    assert HASH in pod["metadata"]["annotations"]
    rules = objects["ClusterRole", "gpuctrl-mig-manager"]["rules"]
    assert rules == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]}
    ]


def test_env_is_nvidias_and_the_users_comes_last() -> None:
    env = {
        e["name"]: e
        for e in pod_of(
            "mig-manager",
            {
                "migManager": {
                    "env": [
                        {"name": "WITH_REBOOT", "value": "true"},
                        {"name": "CDI_ENABLED", "value": "false"},
                    ]
                }
            },
        )["containers"][0]["env"]
    }
    assert env["CONFIG_FILE"]["value"] == "/mig-parted-config/config.yaml"
    assert env["GPU_CLIENTS_FILE"]["value"] == "/gpu-clients/clients.yaml"
    assert env["DEFAULT_GPU_CLIENTS_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }
    assert env["NVIDIA_CDI_HOOK_PATH"]["value"] == "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
    assert env["WITH_REBOOT"]["value"] == "true"
    assert env["CDI_ENABLED"]["value"] == "false"  # the user's, last


@pytest.mark.parametrize(
    ("spec", "absent"),
    [
        pytest.param(
            {"cdi": {"enabled": False}}, {"CDI_ENABLED", "NVIDIA_CDI_HOOK_PATH"}, id="no-cdi"
        ),
        pytest.param({"toolkit": {"enabled": False}}, {"NVIDIA_CDI_HOOK_PATH"}, id="no-toolkit"),
    ],
)
def test_cdi_env_follows_cdi_and_the_toolkit(spec: dict[str, Any], absent: set[str]) -> None:
    names = {e["name"] for e in pod_of("mig-manager", spec)["containers"][0]["env"]}
    assert not names & absent


def test_disabled_renders_nothing() -> None:
    assert _objects({"migManager": {"enabled": False}}) == {}


def test_gpuctrls_default_config_is_valid_and_covers_a100_and_h100() -> None:
    assert mig_parted_problems(DEFAULT_MIG_PARTED_CONFIG) == []
    assert gpu_clients_problems(DEFAULT_GPU_CLIENTS) == []
    configs = yaml.safe_load(DEFAULT_MIG_PARTED_CONFIG)["mig-configs"]
    assert configs["all-disabled"] == [{"devices": "all", "mig-enabled": False}]
    assert configs["all-enabled"] == [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]
    filters = {
        f for entries in configs.values() for e in entries for f in e.get("device-filter", ())
    }
    # A100-40GB SXM4/PCIe, A100-80GB SXM4/PCIe, H100-80GB SXM5/PCIe (device, then vendor 10DE)
    assert filters == {
        "0x20B010DE",
        "0x20F110DE",
        "0x20B210DE",
        "0x20B510DE",
        "0x233010DE",
        "0x233110DE",
    }
    assert configs["all-1g.5gb"][0]["mig-devices"] == {"1g.5gb": 7}
    assert configs["all-7g.80gb"][0]["mig-devices"] == {"7g.80gb": 1}
    # 1g.10gb: 4 on an A100-40GB, 7 on an A100-80GB or H100-80GB, each entry filtered.
    assert [e["mig-devices"]["1g.10gb"] for e in configs["all-1g.10gb"]] == [4, 7, 7]
    assert "all-1g.10gb.me" in configs  # a profile's + written .
    copy = _objects()["ConfigMap", "gpuctrl-mig-parted-config"]
    assert copy["data"] == {"config.yaml": DEFAULT_MIG_PARTED_CONFIG}


def test_a_named_config_is_mounted_from_gpuctrls_copy_and_rolls_the_pods() -> None:
    first = _objects(_named(), [_config_map("my-mig", {"config.yaml": USER_CONFIG})])
    assert first["ConfigMap", "gpuctrl-mig-parted-config"]["data"] == {"config.yaml": USER_CONFIG}
    edited = USER_CONFIG.replace('"3g.40gb": 2', '"3g.40gb": 1')
    second = _objects(_named(), [_config_map("my-mig", {"config.yaml": edited})])
    hashes = [
        objects["DaemonSet", "gpuctrl-mig-manager"]["spec"]["template"]["metadata"]["annotations"][
            HASH
        ]
        for objects in (first, second)
    ]
    assert hashes[0] != hashes[1]


def test_a_named_gpu_clients_file_is_copied() -> None:
    text = "version: v1\nsystemd-services: [my-gpu-daemon.service]\n"
    spec = {"migManager": {"gpuClientsConfig": {"name": "clients"}}}
    objects = _objects(spec, [_config_map("clients", {"clients.yaml": text})])
    assert objects["ConfigMap", "gpuctrl-gpu-clients"]["data"] == {"clients.yaml": text}


def test_a_missing_config_map_is_missing() -> None:
    with pytest.raises(MissingConfigMap, match=r"spec\.migManager\.config\.name"):
        _objects(_named())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}",
            "version: must be 'v1'",
            id="version",
        ),
        pytest.param(
            "mig-configs: {a: [{devices: all, mig-enabled: false}]}",
            "version: must be 'v1'",
            id="no-version",
        ),
        pytest.param("version: v1\nmig-configs: {}", "mig-configs: required", id="no-configs"),
        pytest.param(
            V1 + "{a: []}\n",
            "mig-configs.a: must be a list of at least one",
            id="empty-config",
        ),
        pytest.param(
            V1 + "{a: [{devices: all}]}",
            "mig-configs.a[0].mig-enabled: required",
            id="no-mig-enabled",
        ),
        pytest.param(
            V1 + "{a: [{devices: some, mig-enabled: false}]}",
            "mig-configs.a[0].devices: must be 'all'",
            id="devices",
        ),
        pytest.param(
            V1 + "{a: [{devices: all, mig-enabled: true}]}",
            "mig-configs.a[0].mig-devices: required",
            id="enabled-without-devices",
        ),
        pytest.param(
            V1 + "{a: [{devices: all, mig-enabled: false, mig-devices: {1g.5gb: 1}}]}",
            "must be empty when mig-enabled is false",
            id="disabled-with-devices",
        ),
        pytest.param(
            V1 + "{a: [{devices: all, mig-enabled: true, mig-devices: {1g5gb: 1}}]}",
            "mig-configs.a[0].mig-devices.1g5gb: not a MIG profile",
            id="profile",
        ),
        pytest.param(
            V1 + "{a: [{devices: all, mig-enabled: true, mig-devices: {1g.5gb: -1}}]}",
            "the count must be an integer of at least 0",
            id="count",
        ),
        pytest.param(
            V1 + "{a: [{devices: all, mig-enabled: true, mig-devices: {1g.5gb: 0}}]}",
            "every count is 0",
            id="all-zero",
        ),
        pytest.param(
            V1 + "{a: [{devices: all, mig-enabled: false, device-filter: A100}]}",
            "'A100' is not a PCI device ID",
            id="device-filter",
        ),
        pytest.param(
            V1 + "{a: [{devices: all, mig-enabled: false, mig-enable: true}]}",
            "mig-configs.a[0].mig-enable: unknown key",
            id="typo",
        ),
        pytest.param("version: v1\nmig-config: {}", "mig-config: unknown key", id="top-typo"),
        pytest.param("version: v1\nmig-configs: [a", "not YAML", id="not-yaml"),
    ],
)
def test_a_config_mig_parted_refuses_is_refused_naming_the_config_and_field(
    text: str, message: str
) -> None:
    with pytest.raises(RenderError) as error:
        _objects(_named(), [_config_map("my-mig", {"config.yaml": text})])
    assert "spec.migManager.config.name: config.yaml of ConfigMap 'my-mig'" in str(error.value)
    assert message in str(error.value)
    assert error.value.reason == "InvalidSpec"


def test_the_config_must_define_the_default() -> None:
    text = "version: v1\nmig-configs: {only: [{devices: all, mig-enabled: false}]}\n"
    with pytest.raises(RenderError, match="defines no config 'all-disabled'"):
        _objects(_named(), [_config_map("my-mig", {"config.yaml": text})])
    spec = {"migManager": {"config": {"name": "my-mig", "default": ""}}}
    assert _objects(spec, [_config_map("my-mig", {"config.yaml": text})])  # no default: fine


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param({"other": ""}, "lacks the key clients.yaml", id="no-key"),
        pytest.param(
            {"clients.yaml": "systemd-services: nvsm.service"},
            "systemd-services: must be a list",
            id="not-a-list",
        ),
        pytest.param({"clients.yaml": "services: []"}, "services: unknown key", id="typo"),
    ],
)
def test_a_bad_gpu_clients_file_is_refused(data: dict[str, str], message: str) -> None:
    spec = {"migManager": {"gpuClientsConfig": {"name": "clients"}}}
    with pytest.raises(RenderError, match=r"spec\.migManager\.gpuClientsConfig\.name") as error:
        _objects(spec, [_config_map("clients", data)])
    assert message in str(error.value)


_PROFILES = st.builds(
    lambda c, g, gb, attrs: (
        (f"{c}c." if c else "") + f"{g}g.{gb}gb" + (f"+{','.join(attrs)}" if attrs else "")
    ),
    st.integers(0, 7),
    st.integers(1, 8),
    st.integers(1, 200),
    st.lists(st.sampled_from(["me", "gfx", "all"]), unique=True, max_size=2),
)
_ENTRIES = st.one_of(
    st.fixed_dictionaries({"devices": st.just("all"), "mig-enabled": st.just(False)}),
    st.fixed_dictionaries(
        {
            "devices": st.one_of(st.just("all"), st.lists(st.integers(0, 7), min_size=1)),
            "mig-enabled": st.just(True),
            "mig-devices": st.dictionaries(_PROFILES, st.integers(1, 7), max_size=3),
        },
        optional={"device-filter": st.sampled_from(["0x20B010DE", "0x233010DE"])},
    ),
)


@given(
    st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9.-]{0,12}", fullmatch=True),
        st.lists(_ENTRIES, min_size=1, max_size=3),
        min_size=1,
        max_size=4,
    )
)
def test_every_well_formed_config_is_accepted(configs: dict[str, list[dict[str, Any]]]) -> None:
    text = yaml.safe_dump({"version": "v1", "mig-configs": configs})
    assert mig_parted_problems(text) == []
    assert mig_config_names(text) == set(configs)
