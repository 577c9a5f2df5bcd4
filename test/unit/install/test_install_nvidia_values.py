"""A values file written for NVIDIA's chart means to gpuctrl's chart what ``gpuctrl migrate``
makes of the same settings in an ``nvidia.com/v1`` ClusterPolicy.

The chart copies NVIDIA's values into the ClusterPolicy as written; the operator's
``load_cluster_policy`` reads them with `api.nvidia.nvidia_meaning`, the mapping migrate uses.
The property: rendered by Helm's engine, defaulted as the apiserver defaults it (the CRD's
defaults are the models'), then loaded, the chart's policy is the one migrate gives, or both
fail with the same problems; the install notes name the env migrate reports as not carried.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from install_manifests import CHART, helm_render

from api.nvidia import NvidiaSettingError, from_nvidia
from api.v1alpha1 import ClusterPolicySpec, InvalidPolicy, load_cluster_policy, wire
from gpuctrl.cli import main

helm = pytest.importorskip("helm_python", reason="the chart tests need `make test`'s helm extra")

DIGEST = "sha256:" + "a" * 64
K3S = "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"
RKE2 = "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"

_TOOLKIT_ENV = st.sampled_from(
    [
        ("CONTAINERD_CONFIG", "/etc/containerd/config.toml"),
        ("CONTAINERD_CONFIG", K3S),
        ("CONTAINERD_CONFIG", RKE2),
        ("RUNTIME_CONFIG", "/etc/containerd/custom.toml"),
        ("CONTAINERD_SOCKET", "/run/k3s/containerd/containerd.sock"),
        ("CONTAINERD_RUNTIME_CLASS", "nvidia"),
        ("CONTAINERD_SET_AS_DEFAULT", "true"),
        ("NVIDIA_RUNTIME_SET_AS_DEFAULT", "0"),
        ("CONTAINERD_SET_AS_DEFAULT", "yes"),  # NVIDIA's toolkit refuses it: an error
        ("RUNTIME_RESTART_MODE", "systemd"),
        ("RUNTIME_RESTART_MODE", "reboot"),  # not a mode: an error
        ("RUNTIME_CONFIG_SOURCE", "file=/etc/containerd/config.toml"),
        ("NVIDIA_CONTAINER_RUNTIME_MODE", "auto"),  # plain env
    ]
)
_VALIDATOR_ENV = st.sampled_from(
    [
        ("WITH_WORKLOAD", "false"),
        ("WITH_WAIT", "true"),
        ("DISABLE_DEV_CHAR_SYMLINK_CREATION", "true"),
        ("HTTPS_PROXY", "http://proxy.example.com:3128"),  # plain env
    ]
)


def _env(entries: st.SearchStrategy[tuple[str, str]]) -> st.SearchStrategy[list[dict[str, str]]]:
    return st.lists(entries.map(lambda e: {"name": e[0], "value": e[1]}), max_size=4)


def _image(name: str) -> st.SearchStrategy[dict[str, str]]:
    """NVIDIA's repository/image/version: split fields, or a full reference in image."""
    return st.fixed_dictionaries(
        {},
        optional={
            "repository": st.sampled_from(["", "nvcr.io/nvidia", "mirror.example.com:5000/nv"]),
            "image": st.sampled_from(
                [
                    name,
                    f"registry.example.com/nvidia/{name}:v1.2.3",
                    f"mirror.example.com:5000/{name}",
                    f"registry.example.com/{name}@{DIGEST}",
                    f"cloud-native/{name}",
                ]
            ),
            "version": st.sampled_from(["", "v9.9.9"]),
        },
    )


def _config(names: list[str], defaults: list[str], data: Any) -> st.SearchStrategy[dict[str, Any]]:
    """NVIDIA's ``<section>.config``: a ConfigMap's name and default, and, with a name, maybe
    the chart's ``create`` and ``data`` (the chart makes the ConfigMap; migrate, reading a
    ClusterPolicy, has neither: the policy means the same)."""
    named = st.fixed_dictionaries(
        {}, optional={"name": st.sampled_from(names), "default": st.sampled_from(defaults)}
    )
    return st.tuples(named, st.booleans()).map(
        lambda t: t[0] | {"create": True, "data": data} if t[1] and t[0].get("name") else t[0]
    )


_PLUGIN_CONFIG = _config(["", "plugin-configs"], ["", "default"], {"default": "version: v1\n"})
_METRICS_CONFIG = _config(["", "metrics"], [""], "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock.\n")
_MIG_CONFIG = _config(
    ["", "mig-configs", "default-mig-parted-config"],
    ["", "all-disabled"],
    {"config.yaml": "version: v1\nmig-configs:\n  all-disabled: []\n"},
)

_SPEC = st.fixed_dictionaries(
    {},
    optional={
        "operator": st.fixed_dictionaries(
            {}, optional={"defaultRuntime": st.sampled_from(["containerd", "crio", "docker"])}
        ),
        "daemonsets": st.fixed_dictionaries(
            {},
            optional={
                "rollingUpdate": st.fixed_dictionaries(
                    {"maxUnavailable": st.sampled_from(["1", 2, "25%"])}
                )
            },
        ),
        "driver": _image("driver"),
        "devicePlugin": st.tuples(_image("k8s-device-plugin"), _PLUGIN_CONFIG).map(
            lambda t: {**t[0], "config": t[1]}
        ),
        "dcgmExporter": _METRICS_CONFIG.map(lambda config: {"config": config}),
        "migManager": _MIG_CONFIG.map(lambda config: {"config": config}),
        "toolkit": st.tuples(_image("container-toolkit"), _env(_TOOLKIT_ENV)).map(
            lambda t: {**t[0], "env": t[1]}
        ),
        "validator": st.fixed_dictionaries(
            {},
            optional={
                "env": _env(_VALIDATOR_ENV),
                "plugin": st.fixed_dictionaries({"env": _env(_VALIDATOR_ENV)}),
                "cuda": st.fixed_dictionaries({"env": _env(_VALIDATOR_ENV)}),
            },
        ),
        "cdi": st.fixed_dictionaries({"enabled": st.booleans()}),
        "mig": st.fixed_dictionaries({"strategy": st.sampled_from(["single", "mixed"])}),
    },
)


def _outcome(load: Any) -> tuple[str, Any]:
    """("ok", the loaded spec) or ("invalid", every problem as "path: why")."""
    try:
        return "ok", load().spec
    except NvidiaSettingError as error:
        return "invalid", [f"{path}: {why}" for path, why in error.problems]
    except InvalidPolicy as error:
        return "invalid", [str(problem) for problem in error.problems]


def _through_the_chart(spec: dict[str, Any]) -> tuple[tuple[str, Any], list[str]]:
    """The chart's ClusterPolicy for values ``spec``, defaulted as the apiserver does, loaded;
    and the env its install notes name as ignored."""
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(spec, name="gpuctrl", namespace="gpuctrl")
    (policy,) = [
        doc for doc in yaml.safe_load_all(rendered["gpuctrl/templates/clusterpolicy.yaml"]) if doc
    ]
    stored = wire(ClusterPolicySpec.model_validate(policy["spec"]))
    notes = rendered["gpuctrl/templates/NOTES.txt"]
    ignored = re.findall(r"^  (\S+\.env\[\d+\] .*)$", notes, flags=re.MULTILINE)
    return _outcome(lambda: load_cluster_policy({"spec": stored})), ignored


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(_SPEC)
def test_nvidia_values_mean_through_the_chart_what_migrate_makes_of_them(
    spec: dict[str, Any],
) -> None:
    nvidia = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": spec}
    migrated: list[Any] = []

    def migrate() -> Any:
        migrated.append(from_nvidia(nvidia))
        return load_cluster_policy(migrated[0].policy)

    expected = _outcome(migrate)
    got, ignored = _through_the_chart(spec)
    assert got == expected
    if migrated:  # the notes name the env migrate reports as not carried over
        env_notes = [line for line in migrated[0].dropped if re.search(r"\.env\[\d+\] ", line)]
        assert sorted(ignored) == sorted(line.removeprefix("spec.") for line in env_notes)


@pytest.mark.parametrize(
    ("values", "flag"),
    [
        ({"driver": {"nvidiaDriverCRD": {"enabled": True}}}, "driver.nvidiaDriverCRD.enabled"),
        ({"driver": {"useNvidiaDriverCRD": True}}, "driver.useNvidiaDriverCRD"),
    ],
    ids=["NVIDIA's chart's value", "its ClusterPolicy's field"],
)
def test_the_nvidia_driver_crd_fails_the_install_with_migrates_message(
    values: dict[str, Any], flag: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(helm.HelmRenderError) as failed:
        helm_render(values)
    source = tmp_path / "nvidia.yaml"
    nvidia = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy"}
    source.write_text(yaml.safe_dump({**nvidia, "spec": {"driver": {"useNvidiaDriverCRD": True}}}))
    assert main(["migrate", "-f", str(source)]) == 2
    why = (
        "is true: the driver is set up by NVIDIADriver objects, which gpuctrl does not read;"
        " put the NVIDIADriver's repository, image and version into "
    )
    assert f"spec.driver.useNvidiaDriverCRD {why}spec.driver (" in capsys.readouterr().err
    assert f"{flag} {why}driver (or set driver.enabled: false" in str(failed.value)
