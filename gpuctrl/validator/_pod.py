"""The workload pod: a rendered template, the user's overrides and the agent's own fields (pure).

`apply_overrides` puts a ClusterPolicy's ``validator.workloads`` onto a pod; `pin_workload`
then sets what the agent relies on (namespace, node, labels, owner) whatever the template or
the overrides say. Both return a new dict and leave their input alone. `overrides_problems`
says what in the overrides the apiserver would reject, naming the field.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from api.v1alpha1 import ResourceRequirements, ValidatorWorkloads, validate_workloads, wire

__all__ = [
    "APP_LABEL",
    "COMPONENT",
    "COMPONENT_LABEL",
    "MANAGED_BY_LABEL",
    "NVIDIA_WORKLOAD_APPS",
    "VALIDATION_LABEL",
    "InvalidOverrides",
    "PodOwner",
    "apply_overrides",
    "overrides_field",
    "overrides_problems",
    "pin_workload",
    "template_containers",
    "workload_selector",
]

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
VALIDATION_LABEL = "gpuctrl.io/validation"
# The component of every workload pod: PodPolicies (and the webhook applying them) target it.
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "validator-workloads"
APP_LABEL = "app"
NVIDIA_WORKLOAD_APPS = {"cuda": "nvidia-cuda-validator", "plugin": "nvidia-device-plugin-validator"}
"""Each check's workload pod's `APP_LABEL`, NVIDIA's: NVIDIA's MIG manager deletes the validation
pods by it before it changes a node's MIG layout (the agent makes them again)."""

# Which overrides field sets a Pod field (a field path as the apiserver names it).
_FIELDS_BY_POD_FIELD = (
    (re.compile(r"^metadata\.labels\b"), "labels"),
    (re.compile(r"^metadata\.annotations\b"), "annotations"),
    (re.compile(r"^spec\.(initContainers|containers)\[\d+\]\.resources\b"), "resources"),
    (re.compile(r"^spec\.securityContext\b"), "securityContext"),
    (re.compile(r"^spec\.tolerations\b"), "tolerations"),
    (re.compile(r"^spec\.(priorityClassName|priority)\b"), "priorityClassName"),
    (re.compile(r"^spec\.runtimeClassName\b"), "runtimeClassName"),
)


class InvalidOverrides(ValueError):
    """Overrides (``validator.workloads``) that no pod can take; ``str()`` names the fields."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class PodOwner:
    """The pod the agent runs in; its workload pods are garbage-collected with it."""

    name: str
    uid: str


def workload_selector(check: str) -> str:
    """The label selector of every workload pod of ``check`` (all nodes, all runs)."""
    return f"{MANAGED_BY_LABEL}=gpuctrl,{VALIDATION_LABEL}={check}"


def template_containers(pod: dict[str, Any]) -> frozenset[str]:
    """The names of the containers and init containers ``pod``'s spec defines."""
    spec = pod.get("spec", {})
    return frozenset(
        container["name"]
        for field in ("initContainers", "containers")
        for container in spec.get(field) or []
    )


def overrides_problems(overrides: ValidatorWorkloads) -> list[str]:
    """What in ``overrides`` the apiserver would reject, each as ``field: problem``."""
    return [str(problem) for problem in validate_workloads(overrides)]


def overrides_field(pod_field: str) -> str | None:
    """The overrides field that sets ``pod_field`` (``metadata.labels`` -> ``labels``), if any."""
    return next((field for path, field in _FIELDS_BY_POD_FIELD if path.match(pod_field)), None)


def apply_overrides(pod: dict[str, Any], overrides: ValidatorWorkloads) -> dict[str, Any]:
    """``pod`` with ``overrides`` applied.

    Labels and annotations are merged into the metadata; each requests/limits entry of
    ``resources`` is set on every container and init container alike (resources it does not
    name, such as the template's ``nvidia.com/gpu``, keep the template's value); tolerations are
    added unless already present; the pod security context, priority and runtime class names
    replace the pod's own.
    """
    result = copy.deepcopy(pod)
    metadata = result.setdefault("metadata", {})
    spec = result.setdefault("spec", {})
    for field, extra in (("labels", overrides.labels), ("annotations", overrides.annotations)):
        if extra:
            metadata[field] = {**(metadata.get(field) or {}), **extra}
    if overrides.resources is not None:
        for container in _all_containers(spec):
            container["resources"] = _merged_resources(
                container.get("resources") or {}, overrides.resources
            )
    tolerations = spec.get("tolerations") or []
    for toleration in (wire(t) for t in overrides.tolerations):
        if toleration not in tolerations:
            tolerations.append(toleration)
    if tolerations:
        spec["tolerations"] = tolerations
    if overrides.security_context is not None:
        spec["securityContext"] = copy.deepcopy(overrides.security_context)
    if overrides.priority_class_name is not None:
        spec["priorityClassName"] = overrides.priority_class_name
    if overrides.runtime_class_name is not None:
        spec["runtimeClassName"] = overrides.runtime_class_name
    return result


def pin_workload(
    pod: dict[str, Any], check: str, namespace: str, node_name: str, owner: PodOwner | None
) -> dict[str, Any]:
    """``pod`` in ``namespace`` on ``node_name``, labelled as ``check``'s workload, as the
    ``validator-workloads`` component of gpuctrl (so that PodPolicies target it) and with
    NVIDIA's ``app`` value (`NVIDIA_WORKLOAD_APPS`).

    With an ``owner`` the pod's owner references become that one pod, so it is deleted with
    the agent. These fields win over anything the template or the overrides set.
    """
    result = copy.deepcopy(pod)
    metadata = result.setdefault("metadata", {})
    metadata["namespace"] = namespace
    metadata["labels"] = {
        **(metadata.get("labels") or {}),
        APP_LABEL: NVIDIA_WORKLOAD_APPS[check],
        MANAGED_BY_LABEL: "gpuctrl",
        COMPONENT_LABEL: COMPONENT,
        VALIDATION_LABEL: check,
    }
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner.name, "uid": owner.uid}
        ]
    result.setdefault("spec", {})["nodeName"] = node_name
    return result


def _all_containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _merged_resources(current: dict[str, Any], resources: ResourceRequirements) -> dict[str, Any]:
    merged = copy.deepcopy(current)
    for field in ("requests", "limits"):
        values = getattr(resources, field)
        if values:
            merged[field] = {**(merged.get(field) or {}), **values}
    return merged
