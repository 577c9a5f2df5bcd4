"""The controllers' pure rules: node labels, when to apply, DaemonSet readiness, ready nodes."""

from __future__ import annotations

import json
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st
from operands_kit import EVERY_OPERAND_ENABLED

from api.v1alpha1 import TargetComponent, load_cluster_policy
from controllers._apply import APPLIED_HASH, holds, needs_apply, with_hash
from controllers._readiness import daemonset_readiness, summary
from controllers._reads import node_state
from controllers.nodes import DEPLOY_LABELS, is_gpu, is_mig_capable, label_changes
from controllers.policy import ready_nodes
from controllers.render import COMPONENTS, ClusterFacts, NodeFacts, render, render_component

NFD = "feature.node.kubernetes.io/pci-10de.present"
PRESENT = "nvidia.com/gpu.present"
DRIVER = "nvidia.com/gpu.deploy.driver"
PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
TOOLKIT = "nvidia.com/gpu.deploy.container-toolkit"
VALIDATOR = "nvidia.com/gpu.deploy.operator-validator"
FROM = "gpuctrl.io/gpu-present-from"
ALL = ("driver", "toolkit", "validator", "device-plugin")
MIG = "nvidia.com/gpu.deploy.mig-manager"
CAPABLE = "nvidia.com/mig.capable"
MIG_CONFIG = "nvidia.com/mig.config"
PAUSED = "paused-for-mig-change"
PRODUCT = "nvidia.com/gpu.product"
VGPU_HOST = "nvidia.com/vgpu.host-driver-version"
WORKLOAD = "nvidia.com/gpu.workload.config"
MPS = "nvidia.com/mps.capable"


@pytest.mark.parametrize(
    ("labels", "enabled", "changes"),
    [
        pytest.param(
            {NFD: "true"},
            ALL,
            {PRESENT: "true", FROM: "nfd", DRIVER: "true", TOOLKIT: "true", VALIDATOR: "true"}
            | {PLUGIN: "true"},
            id="new-gpu-node",
        ),
        pytest.param(
            {"feature.node.kubernetes.io/pci-0302_10de.present": "true", PRESENT: "true"},
            ("driver",),
            {DRIVER: "true"},
            id="3d-controller-class",
        ),
        pytest.param({}, ALL, {}, id="cpu-node-untouched"),
        pytest.param(
            {NFD: "true", PRESENT: "true", DRIVER: "paused-for-driver-upgrade", PLUGIN: "false"},
            ("driver", "device-plugin"),
            {},
            id="others-values-kept",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", DRIVER: ""}, ("driver",), {DRIVER: "true"}, id="empty"
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", DRIVER: "true", PLUGIN: "true"},
            ("driver",),
            {PLUGIN: None},
            id="disabled-operand-removed",
        ),
        pytest.param(
            {
                NFD: "true",
                PRESENT: "true",
                DRIVER: "true",
                "nvidia.com/gpu.deploy.operands": "false",
            },
            ALL,
            {DRIVER: None},
            id="operands-false",
        ),
        pytest.param(
            {PRESENT: "true", FROM: "nfd", DRIVER: "true", PLUGIN: "false"},
            ALL,
            {PRESENT: "false", FROM: None, DRIVER: None},
            id="gpu-gone",
        ),
        pytest.param({PRESENT: "false"}, ALL, {}, id="gpu-gone-settled"),
        pytest.param(
            {PRESENT: "true", DRIVER: "true", PLUGIN: "false"},
            ("driver", "toolkit"),
            {TOOLKIT: "true"},
            id="marked-by-someone-else-without-nfd",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true"},
            ("driver",),
            {DRIVER: "true"},
            id="nvidias-mark-kept-as-it-is",
        ),
        pytest.param({PRESENT: "false", FROM: "nfd"}, ALL, {FROM: None}, id="stale-mark-removed"),
        # The MPS control daemon selects the device plugin's label, written once for both.
        pytest.param(
            {NFD: "true", PRESENT: "true"},
            ("device-plugin", "mps-control-daemon"),
            {PLUGIN: "true"},
            id="label-shared-by-the-mps-daemon",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", PLUGIN: "true"},
            ("device-plugin",),
            {},
            id="shared-label-kept-while-one-of-its-components-is-enabled",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", PLUGIN: "true"},
            ("driver",),
            {DRIVER: "true", PLUGIN: None},
            id="shared-label-removed-with-both-components",
        ),
    ],
)
def test_label_changes(
    labels: dict[str, str], enabled: tuple[str, ...], changes: dict[str, str | None]
) -> None:
    assert label_changes(labels, enabled) == changes
    settled = {k: v for k, v in {**labels, **changes}.items() if v is not None}
    assert label_changes(settled, enabled) == {}  # one patch converges


@pytest.mark.parametrize(
    ("labels", "enabled", "mig_config", "changes"),
    [
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "true"},
            ("mig-manager",),
            "all-disabled",
            {MIG: "true", MIG_CONFIG: "all-disabled"},
            id="mig-capable-gpu-node",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "false"},
            ("mig-manager",),
            "all-disabled",
            {},
            id="not-mig-capable",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true"},
            ("mig-manager",),
            "all-disabled",
            {},
            id="no-mig-capable-label",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", PRODUCT: "NVIDIA-H100-80GB-HBM3"},
            ("mig-manager",),
            "all-disabled",
            {MIG: "true", MIG_CONFIG: "all-disabled"},
            id="no-mig-capable-label-but-a-mig-product",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "false", PRODUCT: "NVIDIA-A100-SXM4-40GB"},
            ("mig-manager",),
            "all-disabled",
            {},
            id="mig-capable-label-wins-over-the-product",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "true", VGPU_HOST: "550.90.05", MIG: "true"},
            ("mig-manager",),
            "all-disabled",
            {MIG: None},
            id="vgpu-host",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "true", WORKLOAD: "vm-passthrough"},
            ("mig-manager",),
            "all-disabled",
            {MIG: "true", MIG_CONFIG: "all-disabled"},
            id="workload-config-unread-without-sandbox-workloads",
        ),
        pytest.param({CAPABLE: "true"}, ("mig-manager",), "all-disabled", {}, id="no-gpu-node"),
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "false", MIG: "true"},
            ("mig-manager",),
            "all-disabled",
            {MIG: None},
            id="no-longer-mig-capable",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "true", MIG_CONFIG: "all-1g.10gb"},
            ("mig-manager",),
            "all-disabled",
            {MIG: "true"},
            id="users-mig-config-kept",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "true", MIG_CONFIG: ""},
            ("mig-manager",),
            "all-disabled",
            {MIG: "true", MIG_CONFIG: "all-disabled"},
            id="empty-mig-config",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "true"},
            ("mig-manager",),
            None,
            {MIG: "true"},
            id="config-default-empty",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "true", MIG: "true"},
            (),
            None,
            {MIG: None},
            id="mig-manager-disabled",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "true", MIG: "true", MIG_CONFIG: "a"}
            | {"nvidia.com/gpu.deploy.operands": "false"},
            ("mig-manager",),
            "all-disabled",
            {MIG: None},
            id="operands-false",
        ),
        pytest.param(
            {NFD: "true", PRESENT: "true", CAPABLE: "true", MIG: "true", MIG_CONFIG: "a"}
            | {PLUGIN: PAUSED, "nvidia.com/gpu.deploy.dcgm": PAUSED},
            ("mig-manager", "device-plugin"),
            "all-disabled",
            {},
            id="gpu-clients-paused-by-the-mig-manager",
        ),
    ],
)
def test_mig_label_changes(
    labels: dict[str, str],
    enabled: tuple[str, ...],
    mig_config: str | None,
    changes: dict[str, str | None],
) -> None:
    assert label_changes(labels, enabled, mig_config) == changes
    settled = {k: v for k, v in {**labels, **changes}.items() if v is not None}
    assert label_changes(settled, enabled, mig_config) == {}  # one patch converges


_KEYS = st.sampled_from(
    [
        NFD,
        PRESENT,
        "nvidia.com/gpu.deploy.operands",
        *DEPLOY_LABELS.values(),
        CAPABLE,
        MIG_CONFIG,
        PRODUCT,
        VGPU_HOST,
        "other",
        "os",
    ]
)
_VALUES = st.sampled_from(
    ["true", "false", "", "paused-for-driver-upgrade", PAUSED, "all-1g.5gb", "NVIDIA-A30"]
)
_COMPONENTS = st.sets(st.sampled_from((*ALL, "mig-manager", "dcgm", "mps-control-daemon")))
_MIG_DEFAULTS = st.sampled_from([None, "all-disabled"])


@given(labels=st.dictionaries(_KEYS, _VALUES), enabled=_COMPONENTS, mig_config=_MIG_DEFAULTS)
def test_the_mig_managers_label_only_on_mig_capable_gpu_nodes(
    labels: dict[str, str], enabled: set[str], mig_config: str | None
) -> None:
    """Whatever the labels: after one patch the MIG manager's deploy label holds gpuctrl's
    true only on a MIG-capable GPU node; a value someone else wrote (a pause) is never
    written over; mig.config is only ever added, never changed or removed."""
    changes = label_changes(labels, enabled, mig_config)
    after = {k: v for k, v in {**labels, **changes}.items() if v is not None}
    capable = is_gpu(labels) and is_mig_capable(labels)
    if after.get(MIG) == "true" and labels.get(MIG) != "true":
        assert capable
        assert "mig-manager" in enabled
    if not capable:
        assert after.get(MIG) != "true"
    for label, value in labels.items():
        if value not in ("", "true"):
            assert label not in changes or label == PRESENT  # others' values kept
    if MIG_CONFIG in changes:
        assert not labels.get(MIG_CONFIG)
        assert capable
        assert changes[MIG_CONFIG] == mig_config
    assert label_changes(after, enabled, mig_config) == {}


# GPU product names as GPU feature discovery writes them: NVIDIA's operator reads those naming
# an A100, A30 or H100 as MIG-capable, in any case, anywhere in the name.
_MIG_PRODUCTS = st.sampled_from(["A100", "A30", "H100"])
_OTHER_PRODUCTS = st.sampled_from(
    ["NVIDIA-L4", "Tesla-T4", "NVIDIA-L40S", "NVIDIA-GH200-480GB", "NVIDIA-B200", "Tesla-V100"]
)
_AROUND = st.text(st.sampled_from("NVIDIA-SXMPCIe4580GBHBM3 "), max_size=12)


def _cased(text: str, upper: list[bool]) -> str:
    return "".join(c.upper() if up else c.lower() for c, up in zip(text, upper, strict=False))


@given(
    st.tuples(_AROUND, _MIG_PRODUCTS, _AROUND),
    st.lists(st.booleans(), min_size=30, max_size=30),
    st.sampled_from([None, "", "550.90.05"]),
)
def test_a_product_naming_a_mig_gpu_is_mig_capable_without_the_label(
    parts: tuple[str, str, str], upper: list[bool], vgpu_host: str | None
) -> None:
    """Any product name holding A100, A30 or H100, in any case, is MIG-capable where
    mig.capable is absent; mig.capable decides where present; a vGPU host never is."""
    labels = {PRODUCT: _cased("".join(parts), upper)}
    if vgpu_host is not None:
        labels[VGPU_HOST] = vgpu_host
    host = bool(vgpu_host)
    assert is_mig_capable(labels) is not host
    assert is_mig_capable({**labels, CAPABLE: "false"}) is False
    assert is_mig_capable({**labels, CAPABLE: ""}) is False
    assert is_mig_capable({**labels, CAPABLE: "true"}) is not host


@given(_OTHER_PRODUCTS, st.booleans())
def test_other_products_are_mig_capable_only_by_the_label(product: str, labelled: bool) -> None:
    labels = {PRODUCT: product} | ({CAPABLE: "true"} if labelled else {})
    assert is_mig_capable(labels) is labelled


@given(labels=st.dictionaries(_KEYS, _VALUES), enabled=_COMPONENTS, mig_config=_MIG_DEFAULTS)
def test_labelling_state_decides_as_the_full_labels_do(
    labels: dict[str, str], enabled: set[str], mig_config: str | None
) -> None:
    """The reporter counts nodes by `node_state`: it must hold every label the labeller's
    rules read, and nothing else."""
    state = json.loads(node_state({"metadata": {"labels": labels}}))
    assert label_changes(state, enabled, mig_config) == label_changes(labels, enabled, mig_config)
    assert is_gpu(state) == is_gpu(labels)
    assert is_mig_capable(state) == is_mig_capable(labels)
    assert "other" not in state
    assert "os" not in state
    assert node_state({"metadata": {"labels": dict(reversed(labels.items()))}}) == (
        node_state({"metadata": {"labels": labels}})
    )


@pytest.mark.parametrize(
    ("actual", "wanted", "expected"),
    [
        pytest.param({"a": 1, "b": 2}, {"a": 1}, True, id="server-defaults-ignored"),
        pytest.param({"a": 2}, {"a": 1}, False, id="drifted-value"),
        pytest.param({}, {"a": [], "b": {}, "c": None}, True, id="empty-matches-absent"),
        pytest.param({"l": [{"x": 1, "d": 0}]}, {"l": [{"x": 1}]}, True, id="list-items"),
        pytest.param({"l": [{"x": 1}, {"x": 2}]}, {"l": [{"x": 1}]}, False, id="extra-item"),
        pytest.param({"l": None}, {"l": []}, True, id="null-list"),
        pytest.param({"a": "1"}, {"a": 1}, False, id="types-differ"),
        # The apiserver drops an empty string it omits (an env var's value: "").
        pytest.param(
            {"env": [{"name": "X"}]}, {"env": [{"name": "X", "value": ""}]}, True, id="empty-str"
        ),
        pytest.param({"a": "x"}, {"a": ""}, False, id="empty-str-is-not-any-str"),
    ],
)
def test_holds(actual: Any, wanted: Any, expected: bool) -> None:
    assert holds(actual, wanted) is expected


def test_needs_apply_on_a_render_change_a_removal_or_drift() -> None:
    desired = with_hash({"kind": "X", "metadata": {"name": "x"}, "spec": {"a": 1}})
    stored = {**desired, "spec": {"a": 1, "default": True}}
    assert not needs_apply(desired, stored)
    assert needs_apply(desired, None)
    assert needs_apply(desired, {**stored, "spec": {"a": 2}})
    fewer = with_hash({"kind": "X", "metadata": {"name": "x"}, "spec": {}})
    assert needs_apply(fewer, stored)  # the hash tells a removed field
    assert with_hash(desired) == desired  # re-hashing is stable
    assert len(desired["metadata"]["annotations"][APPLIED_HASH]) == 20


def _ds(strategy: str, status: dict[str, int], generation: int = 2) -> dict[str, Any]:
    return {
        "metadata": {"name": "ds", "uid": "u", "generation": 2},
        "spec": {"updateStrategy": {"type": strategy}},
        "status": {"observedGeneration": generation, **status},
    }


FULL = {"desiredNumberScheduled": 2, "updatedNumberScheduled": 2, "numberAvailable": 2}


@pytest.mark.parametrize("strategy", ["RollingUpdate", "OnDelete"])
@pytest.mark.parametrize(
    ("status", "generation", "ready", "done"),
    [
        pytest.param({}, 2, 0, True, id="nothing-desired"),
        pytest.param({}, 1, 0, False, id="nothing-desired-not-observed"),
        pytest.param(FULL, 2, 2, True, id="every-node-updated-and-available"),
        pytest.param(FULL, 1, 0, False, id="status-not-observed"),
        pytest.param({**FULL, "numberAvailable": 1}, 2, 1, False, id="one-unavailable"),
        # OnDelete after a template change: the pods run on, none on the newest revision.
        pytest.param({**FULL, "updatedNumberScheduled": 0}, 2, 0, False, id="none-updated"),
        pytest.param({**FULL, "updatedNumberScheduled": 1}, 2, 1, False, id="one-updated"),
    ],
)
def test_daemonset_readiness(
    strategy: str, status: dict[str, int], generation: int, ready: int, done: bool
) -> None:
    verdict = daemonset_readiness(_ds(strategy, status, generation))
    assert (verdict.ready, verdict.done) == (ready, done)


def test_summary_breaks_down_several_daemonsets() -> None:
    a = daemonset_readiness(_ds("RollingUpdate", FULL))
    b = daemonset_readiness(_ds("RollingUpdate", {**FULL, "numberAvailable": 1}))
    assert summary("driver", [("ubuntu22.04", a), ("rhel9.4", b)]) == (
        "driver: 3/4 nodes ready (ubuntu22.04 2/2, rhel9.4 1/2)"
    )
    assert summary("toolkit", [("toolkit", a)]) == "toolkit: 2/2 nodes ready"


def test_ready_nodes_needs_every_enabled_component_on_a_gpu_node() -> None:
    nodes = [{"metadata": {"name": n, "labels": {NFD: "true"}}} for n in ("a", "b")] + [
        {"metadata": {"name": "cpu", "labels": {}}}
    ]
    running = {"a": {"driver", "toolkit"}, "b": {"toolkit"}, "cpu": {"driver"}}
    every = {"driver": 2, "toolkit": 2}
    assert ready_nodes(nodes, running, frozenset({"driver"}), every) == "1/2"
    assert ready_nodes(nodes, running, frozenset({"driver", "toolkit"}), every) == "1/2"
    assert ready_nodes(nodes, running, frozenset({"toolkit"}), every) == "2/2"
    assert ready_nodes(nodes, running, frozenset(), every) == "2/2"
    assert ready_nodes(nodes, {}, frozenset({"driver"}), every) == "0/2"
    # During a roll the old pods stay Ready: no more nodes than the DaemonSets count updated.
    rolling = {"driver": 2, "toolkit": 1}
    assert ready_nodes(nodes, running, frozenset({"toolkit"}), rolling) == "1/2"
    assert ready_nodes(nodes, running, frozenset({"toolkit"}), {}) == "0/2"


def _gpu_node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {NFD: "true", **labels}}}


@pytest.mark.parametrize(
    ("component", "capable"), [("mig-manager", CAPABLE), ("mps-control-daemon", MPS)]
)
def test_ready_nodes_needs_an_operand_of_capable_nodes_only_where_it_runs_and_not_paused(
    component: str, capable: str
) -> None:
    components = frozenset({"device-plugin", component})
    nodes = [
        _gpu_node("plain"),
        _gpu_node("yes", **{capable: "true"}),
        _gpu_node("off", **{capable: "false"}),
    ]
    running = {n: {"device-plugin"} for n in ("plain", "yes", "off")}
    counts = {"device-plugin": 3, component: 1}
    # The capable node lacks its pod of the component; the others need none.
    assert ready_nodes(nodes, running, components, counts) == "2/3"
    running["yes"] = {"device-plugin", component}
    assert ready_nodes(nodes, running, components, counts) == "3/3"
    # Counts that lag behind the pods bound the ready nodes that need the component.
    assert ready_nodes(nodes, running, components, {**counts, component: 0}) == "2/3"
    # The MIG manager paused the node's device plugin, whose deploy label the MPS daemon
    # selects too: their pods are meant to be gone.
    paused = [_gpu_node("plain"), _gpu_node("yes", **{capable: "true", PLUGIN: PAUSED}), nodes[2]]
    running["yes"] -= {"device-plugin", "mps-control-daemon"}
    assert ready_nodes(paused, running, components, {**counts, "device-plugin": 2}) == "3/3"


def test_ready_nodes_needs_the_mig_manager_where_the_labeller_decides_mig_capable() -> None:
    # No mig.capable label: the product decides, unless the node is a vGPU host.
    a100 = {NFD: "true", PRODUCT: "NVIDIA-A100-SXM4-80GB"}
    nodes = [
        {"metadata": {"name": "a100", "labels": a100}},
        {"metadata": {"name": "vgpu", "labels": a100 | {VGPU_HOST: "550.90.05"}}},
    ]
    components = frozenset({"device-plugin", "mig-manager"})
    running = {"a100": {"device-plugin"}, "vgpu": {"device-plugin"}}
    counts = {"device-plugin": 2, "mig-manager": 1}
    assert ready_nodes(nodes, running, components, counts) == "1/2"
    running["a100"] = components
    assert ready_nodes(nodes, running, components, counts) == "2/2"


def test_components_partition_the_render() -> None:
    os_labels = {
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
    }
    facts = ClusterFacts(nodes=(NodeFacts(name="n", labels={NFD: "true", **os_labels}),))
    policy = load_cluster_policy({"spec": EVERY_OPERAND_ENABLED})
    parts = {c: render_component(c, policy, facts) for c in COMPONENTS}
    for component, objects in parts.items():
        assert objects
        assert {o["metadata"]["labels"]["app.kubernetes.io/component"] for o in objects} == {
            component
        }
    key = lambda o: (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace", ""))  # noqa: E731
    assert sorted(map(key, render(policy, facts))) == sorted(
        key(o) for objects in parts.values() for o in objects
    )
    with pytest.raises(ValueError, match="unknown component"):
        render_component("not-a-component", policy, facts)


def test_a_pod_policy_can_target_every_operand() -> None:
    # The PodPolicy's target names are API types, the operands controllers: one list each,
    # held together here.
    assert set(get_args(TargetComponent)) == {"validator-workloads", *COMPONENTS}
