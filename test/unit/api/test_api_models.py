"""The API types: defaults, wire names, public surface, helpers."""

from decimal import Decimal

import pytest
import yaml
from pydantic import ValidationError

import api.v1alpha1 as v1alpha1
from api.v1alpha1 import (
    ClusterPolicy,
    ContainerdSettings,
    PodPolicy,
    ValidatorWorkloads,
    containerd_defaults,
    mesh_opt_outs,
    parse_quantity,
    wire,
)


def test_empty_spec_is_valid_and_fully_defaulted() -> None:
    policy = ClusterPolicy.model_validate(
        {"apiVersion": "gpuctrl.io/v1alpha1", "kind": "ClusterPolicy"}
    )
    spec = policy.spec
    assert spec.driver.repository == "nvcr.io/nvidia"
    assert spec.driver.version == "550.127.05"
    assert spec.toolkit.install_dir == "/usr/local/nvidia"
    assert spec.operator.runtime_class == "nvidia"
    assert spec.daemonsets.rolling_update.max_unavailable == 1
    assert v1alpha1.validate(policy) == []


def test_camel_case_on_the_wire_and_python_names_accepted() -> None:
    text = """
    configMapName: my-templates
    labels: {team: gpu}
    resources: {requests: {cpu: 1}, limits: {cpu: 2, memory: 1Gi}}
    securityContext: {runAsNonRoot: true}
    tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]
    priorityClassName: high
    runtimeClassName: nvidia
    timeoutSeconds: 90
    """
    workloads = ValidatorWorkloads.model_validate(yaml.safe_load(text))
    assert workloads.config_map_name == "my-templates"
    assert workloads.resources is not None
    assert workloads.resources.requests == {"cpu": "1"}  # an int quantity is kept as a string
    assert wire(workloads)["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    ]
    assert ValidatorWorkloads(config_map_name="x", timeout_seconds=5).timeout_seconds == 5


@pytest.mark.parametrize(
    "mapping",
    [
        pytest.param({"timeoutSeconds": 0}, id="timeout-below-1"),
        pytest.param({"unknownField": 1}, id="unknown-field"),
        pytest.param({"resources": {"limits": {"cpu": "lots"}}}, id="bad-quantity"),
        pytest.param({"tolerations": [{"operator": "Maybe"}]}, id="bad-enum"),
    ],
)
def test_schema_rejects(mapping: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ValidatorWorkloads.model_validate(mapping)


def test_models_are_frozen() -> None:
    policy = ClusterPolicy()
    with pytest.raises(ValidationError):
        policy.spec.driver.version = "1"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("1Gi", Decimal(2**30)),
        ("2", Decimal(2)),
        ("1e3", Decimal(1000)),
        ("1.5k", Decimal(1500)),
        (".5", Decimal("0.5")),
    ],
    ids=["milli", "binary", "plain", "exponent", "decimal-si", "leading-dot"],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1.2.3", "5 Gi", "1Qi", "Gi"])
def test_parse_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a resource quantity"):
        parse_quantity(text)


def test_containerd_defaults_fill_only_unset_fields() -> None:
    settings = ContainerdSettings(socket_path="/custom.sock")
    resolved = containerd_defaults(settings, "k3s", "nvidia")
    assert resolved.socket_path == "/custom.sock"
    assert resolved.config_path == "/var/lib/rancher/k3s/agent/etc/containerd/config.toml.tmpl"
    assert resolved.runtime_class_name == "nvidia"
    pinned = containerd_defaults(ContainerdSettings(distribution="microk8s"), "containerd", "x")
    assert pinned.socket_path == "/var/snap/microk8s/common/run/containerd.sock"


def test_mesh_opt_outs_split_labels_and_annotations() -> None:
    labels, annotations = mesh_opt_outs(["istio", "linkerd", "kuma", "consul"])
    assert labels == {"sidecar.istio.io/inject": "false", "kuma.io/sidecar-injection": "disabled"}
    assert annotations == {
        "linkerd.io/inject": "disabled",
        "consul.hashicorp.com/connect-inject": "false",
    }


def test_pod_policy_defaults_target_workload_pods() -> None:
    policy = PodPolicy.model_validate({"spec": {"meshes": ["istio"]}})
    assert policy.spec.targets.components == ["validator-workloads"]
