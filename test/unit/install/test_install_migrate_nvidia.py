"""``gpuctrl migrate`` on NVIDIA's published sample ClusterPolicy (test/data/nvidia/, its facts
in gpuctrl's own layout), and NVIDIA's "" names."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from api.nvidia import from_nvidia, unset_empty
from api.v1alpha1 import load_cluster_policy
from gpuctrl.cli import main

SAMPLE = Path(__file__).parents[2] / "data" / "nvidia" / "v1_clusterpolicy.yaml"

# What gpuctrl cannot carry over from NVIDIA's sample, in the order of the file. A change here
# is a change users moving over will see: review it, then update the list.
SAMPLE_NOT_CARRIED = [
    "spec.operator.use_ocp_driver_toolkit: not supported by gpuctrl",
    "spec.validator.env[0] WITH_WORKLOAD: gpuctrl's cuda and plugin checks always run their"
    " workload pod",
]
SAMPLE_LACKING = (
    "operands gpuctrl lacks:"
    " spec.vgpuManager, spec.vgpuDeviceManager, spec.vfioManager, spec.sandboxDevicePlugin"
)


def test_nvidia_sample_migrates_and_the_lost_list_is_stable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["migrate", "-f", str(SAMPLE)]) == 0
    out, err = capsys.readouterr()
    policy = load_cluster_policy(yaml.safe_load(out))
    # NVIDIA's "" names mean "none": unset here, not an invalid name.
    assert policy.spec.driver.repo_config.config_map_name is None
    assert policy.spec.driver.cert_config.name is None
    assert not policy.spec.validator.env  # NVIDIA's WITH_WORKLOAD: listed, not carried
    assert policy.spec.operator.runtime_class == "nvidia"
    *settings, lacking = err.splitlines()
    lost = [line.removeprefix("not carried over: ") for line in settings]
    assert lost == SAMPLE_NOT_CARRIED
    assert lacking == SAMPLE_LACKING
    # Disabled operands gpuctrl lacks (psp, gds, nodeStatusExporter, ...) lose nothing.
    assert not [line for line in lost if line.startswith(("spec.psp", "spec.gds", "spec.kata"))]


# NVIDIA's name fields that it writes as "" for "none", with where gpuctrl keeps them.
_NAME_FIELDS = [
    ("driver", "repoConfig", "configMapName"),
    ("driver", "certConfig", "name"),
    ("driver", "licensingConfig", "secretName"),
    ("driver", "kernelModuleConfig", "name"),
    ("devicePlugin", "config", "name"),
]
_NONE = st.sampled_from(["", None, {}, []])


@given(st.lists(st.tuples(st.sampled_from(_NAME_FIELDS), _NONE), max_size=6))
def test_empty_names_anywhere_never_invalidate_the_result(
    unset: list[tuple[tuple[str, str, str], Any]],
) -> None:
    spec: dict[str, Any] = {"driver": {"enabled": True, "version": "550.127.05"}}
    for (section, sub, key), empty in unset:
        spec.setdefault(section, {}).setdefault(sub, {})[key] = empty
    migration = from_nvidia({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": spec})
    load_cluster_policy(migration.policy)
    assert migration.dropped == []


@given(
    st.recursive(
        st.one_of(st.none(), st.just(""), st.booleans(), st.integers(), st.text(max_size=3)),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=12,
    ).filter(lambda value: isinstance(value, dict))
)
def test_unset_empty_is_idempotent_and_leaves_no_empty_key(value: dict[str, Any]) -> None:
    once = unset_empty(value)
    assert unset_empty(once) == once

    def check(mapping: dict[str, Any]) -> None:
        for field in mapping.values():
            assert field not in ("", None, {}, [])
            if isinstance(field, dict):
                check(field)

    check(once)


def test_gfd_carries_over_with_a_full_image_reference_and_its_host_network() -> None:
    gfd = {
        "enabled": True,
        "repository": "",
        "image": "registry.example.com/nvidia/k8s-device-plugin:v0.17.1",
        "version": "",
        "hostNetwork": True,
        "env": [{"name": "GFD_SLEEP_INTERVAL", "value": "30s"}],
        "resources": {},
    }
    migration = from_nvidia({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                             "spec": {"gfd": gfd, "mig": {"strategy": "mixed"}}})  # fmt: skip
    assert migration.dropped == []
    spec = load_cluster_policy(migration.policy).spec
    assert (spec.gfd.repository, spec.gfd.image, spec.gfd.version) == (
        "registry.example.com/nvidia",
        "k8s-device-plugin",
        "v0.17.1",
    )
    assert spec.gfd.host_network is True
    assert [(e.name, e.value) for e in spec.gfd.env] == [("GFD_SLEEP_INTERVAL", "30s")]
    assert spec.mig.strategy == "mixed"
    off = from_nvidia({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                       "spec": {"gfd": {"enabled": False}}})  # fmt: skip
    assert load_cluster_policy(off.policy).spec.gfd.enabled is False
