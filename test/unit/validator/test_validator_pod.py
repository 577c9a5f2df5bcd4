"""Overrides and the agent's own fields on a workload pod."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from api.v1alpha1 import ValidatorWorkloads
from gpuctrl.validator import (
    InvalidOverrides,
    PodOwner,
    TemplateSource,
    apply_overrides,
    builtin_template,
    overrides_field,
    overrides_problems,
    pin_workload,
    render_template,
    template_containers,
    workload_selector,
)

VARIABLES = {
    "namespace": "gpu-operator",
    "node_name": "gpu-node-1",
    "image": "cuda-sample:vectoradd",
    "image_pull_policy": "IfNotPresent",
    "runtime_class_name": "nvidia",
}


def _pod(key: str = "plugin.yaml") -> dict[str, Any]:
    return render_template(builtin_template(key), TemplateSource("ns/cm", key), VARIABLES)


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


# The report's example: keep Istio out, same requests and limits on every container.
REPORT_EXAMPLE = ValidatorWorkloads.model_validate(
    {
        "labels": {"sidecar.istio.io/inject": "false"},
        "annotations": {"linkerd.io/inject": "disabled"},
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "100m", "memory": "128Mi"},
        },
        "securityContext": {"runAsUser": 1000, "runAsNonRoot": True},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu"}],
        "priorityClassName": "system-node-critical",
        "runtimeClassName": "nvidia-cdi",
    }
)


def test_overrides_reach_every_container_and_init_container() -> None:
    pod = apply_overrides(_pod(), REPORT_EXAMPLE)

    for container in _containers(pod):
        assert container["resources"] == {
            "requests": {"cpu": "100m", "memory": "128Mi", "nvidia.com/gpu": 1},
            "limits": {"cpu": "100m", "memory": "128Mi", "nvidia.com/gpu": 1},
        }, container["name"]
    metadata, spec = pod["metadata"], pod["spec"]
    assert metadata["labels"]["sidecar.istio.io/inject"] == "false"
    assert metadata["labels"]["app.kubernetes.io/name"] == "gpuctrl-plugin-validator"
    assert metadata["annotations"] == {"linkerd.io/inject": "disabled"}
    assert spec["securityContext"] == {"runAsUser": 1000, "runAsNonRoot": True}
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["runtimeClassName"] == "nvidia-cdi"
    assert spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists"},
        {"key": "dedicated", "operator": "Equal", "value": "gpu"},
    ]


def test_overrides_leave_their_input_alone_and_apply_idempotently() -> None:
    pod = _pod()
    before = copy.deepcopy(pod)

    once = apply_overrides(pod, REPORT_EXAMPLE)

    assert pod == before
    assert apply_overrides(once, REPORT_EXAMPLE) == once


def test_empty_overrides_change_nothing() -> None:
    assert apply_overrides(_pod(), ValidatorWorkloads()) == _pod()


def test_pinned_fields_win_over_template_and_overrides() -> None:
    hostile = ValidatorWorkloads.model_validate(
        {
            "labels": {
                "gpuctrl.io/validation": "other",
                "app.kubernetes.io/managed-by": "helm",
                "app.kubernetes.io/component": "other",
            }
        }
    )
    pod = apply_overrides(_pod("cuda.yaml"), hostile)
    pod["metadata"]["namespace"] = "elsewhere"
    pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "j", "uid": "1"}]
    pod["spec"]["nodeName"] = "another-node"

    pinned = pin_workload(pod, "cuda", "gpu-operator", "gpu-node-7", PodOwner("agent-x", "u-1"))

    metadata = pinned["metadata"]
    assert metadata["namespace"] == "gpu-operator"
    assert pinned["spec"]["nodeName"] == "gpu-node-7"
    assert metadata["labels"]["gpuctrl.io/validation"] == "cuda"
    assert metadata["labels"]["app.kubernetes.io/managed-by"] == "gpuctrl"
    # The component PodPolicies target by default (the webhook's objectSelector needs both).
    assert metadata["labels"]["app.kubernetes.io/component"] == "validator-workloads"
    assert metadata["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "agent-x", "uid": "u-1"}
    ]
    assert (
        workload_selector("cuda")
        == "app.kubernetes.io/managed-by=gpuctrl,gpuctrl.io/validation=cuda"
    )


def test_pin_without_owner_keeps_no_owner() -> None:
    pinned = pin_workload(_pod("cuda.yaml"), "cuda", "ns", "node", None)

    assert "ownerReferences" not in pinned["metadata"]


def test_template_containers_are_init_and_main() -> None:
    assert template_containers(_pod("cuda.yaml")) == {"cuda-validation", "cuda-validation-done"}


def test_pinned_component_is_the_one_pod_policies_target_by_default() -> None:
    from api.v1alpha1 import PodTargets

    labels = pin_workload(_pod("cuda.yaml"), "cuda", "ns", "node", None)["metadata"]["labels"]

    assert labels["app.kubernetes.io/component"] in PodTargets().components


@pytest.mark.parametrize(
    ("check", "app"),
    [("cuda", "nvidia-cuda-validator"), ("plugin", "nvidia-device-plugin-validator")],
)
def test_pinned_pods_carry_the_app_label_nvidias_mig_manager_deletes_them_by(
    check: str, app: str
) -> None:
    template = _pod(f"{check}.yaml")
    template["metadata"].setdefault("labels", {})["app"] = "mine"

    labels = pin_workload(template, check, "ns", "node", None)["metadata"]["labels"]

    assert labels["app"] == app


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        pytest.param({"labels": {"bad key": "x"}}, "labels[bad key]", id="label-key"),
        pytest.param({"labels": {"team": "a b"}}, "labels[team]", id="label-value"),
        pytest.param({"labels": {"team": "x" * 64}}, "labels[team]", id="label-value-too-long"),
        pytest.param({"annotations": {"-x": "ok"}}, "annotations[-x]", id="annotation-key"),
        pytest.param(
            {"tolerations": [{"key": "a b", "operator": "Exists"}]},
            "tolerations[0].key",
            id="toleration",
        ),
        pytest.param(
            {"resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}},
            "resources.requests[memory]",
            id="request-over-limit",
        ),
        pytest.param({"priorityClassName": "Not_A_Name"}, "priorityClassName", id="priority"),
        pytest.param({"runtimeClassName": "Not_A_Name"}, "runtimeClassName", id="runtime-class"),
    ],
)
def test_overrides_the_apiserver_would_reject_are_named_by_field(
    overrides: dict[str, Any], field: str
) -> None:
    problems = overrides_problems(ValidatorWorkloads.model_validate(overrides))

    assert len(problems) == 1
    assert problems[0].startswith(f"{field}: ")
    assert field in str(InvalidOverrides(problems))


def test_sound_overrides_have_no_problems() -> None:
    assert overrides_problems(REPORT_EXAMPLE) == []
    assert overrides_problems(ValidatorWorkloads()) == []


@pytest.mark.parametrize(
    ("pod_field", "field"),
    [
        pytest.param("metadata.labels", "labels", id="labels"),
        pytest.param("metadata.labels[bad key]", "labels", id="one-label"),
        pytest.param("metadata.annotations", "annotations", id="annotations"),
        pytest.param("spec.containers[1].resources.limits", "resources", id="resources"),
        pytest.param("spec.initContainers[0].resources", "resources", id="init-resources"),
        pytest.param("spec.securityContext.runAsUser", "securityContext", id="security"),
        pytest.param("spec.tolerations[2].key", "tolerations", id="tolerations"),
        pytest.param("spec.runtimeClassName", "runtimeClassName", id="runtime-class"),
        pytest.param("spec.containers[0].image", None, id="not-an-override"),
        pytest.param("metadata.labelsX", None, id="not-a-prefix-match"),
        pytest.param("", None, id="no-field"),
    ],
)
def test_overrides_field_of_a_pod_field(pod_field: str, field: str | None) -> None:
    assert overrides_field(pod_field) == field
