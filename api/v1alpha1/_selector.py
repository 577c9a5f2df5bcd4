"""Label selectors with Kubernetes' semantics, and which pods a PodPolicy targets.

Pure functions shared by the webhook (which pods to change) and the manager's PodPolicy
controller (does a policy target anything): no client, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from api.v1alpha1._podpolicy import LabelSelector, PodTargets
from api.v1alpha1._rules import Problem

__all__ = ["COMPONENT_LABEL", "selector_matches", "selector_problems", "targets_pod"]

COMPONENT_LABEL = "app.kubernetes.io/component"
"""The label naming the gpuctrl component a pod belongs to (e.g. ``validator-workloads``)."""

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy every matchLabels entry and matchExpressions requirement
    (the empty selector matches everything; an invalid requirement matches nothing)."""
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    return all(_requirement_matches(r, labels) for r in selector.match_expressions)


def _requirement_matches(requirement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    if _requirement_problem(requirement) is not None:
        return False
    key, operator = requirement["key"], requirement["operator"]
    values = requirement.get("values") or []
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    return key not in labels  # DoesNotExist


def _requirement_problem(requirement: Mapping[str, Any]) -> str | None:
    key, operator = requirement.get("key"), requirement.get("operator")
    values = requirement.get("values") or []
    if not isinstance(key, str) or not key:
        return "needs a key"
    if operator not in _OPERATORS:
        return f"operator {operator!r} is not one of {', '.join(_OPERATORS)}"
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        return "values must be a list of strings"
    if operator in ("In", "NotIn") and not values:
        return f"operator {operator} needs values"
    if operator in ("Exists", "DoesNotExist") and values:
        return f"operator {operator} takes no values"
    unknown = set(requirement) - {"key", "operator", "values"}
    if unknown:
        return f"unknown fields {sorted(unknown)}"
    return None


def selector_problems(path: str, selector: LabelSelector) -> Iterator[Problem]:
    """Problems of the selector's matchExpressions (Kubernetes would refuse the selector)."""
    for i, requirement in enumerate(selector.match_expressions):
        problem = _requirement_problem(requirement)
        if problem is not None:
            yield Problem(f"{path}.matchExpressions[{i}]", problem)


def targets_pod(targets: PodTargets, labels: Mapping[str, str]) -> bool:
    """Whether a pod with ``labels`` (in the operands' namespace) is targeted: its component
    label is one of ``targets.components`` or it matches ``targets.selector``."""
    if labels.get(COMPONENT_LABEL) in targets.components:
        return True
    return targets.selector is not None and selector_matches(targets.selector, labels)
