"""Overrides and the agent's own fields on a workload pod."""

from __future__ import annotations

import copy
from typing import Any

from api.v1alpha1 import ValidatorWorkloads
from gpuctrl.validator import (
    PodOwner,
    TemplateSource,
    apply_overrides,
    builtin_template,
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
        {"labels": {"gpuctrl.io/validation": "other", "app.kubernetes.io/managed-by": "helm"}}
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
