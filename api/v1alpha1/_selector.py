"""Label selectors with Kubernetes' semantics, and which pods a PodPolicy targets.

Pure functions shared by the webhook (which pods to change) and the manager's PodPolicy
controller (does a policy target anything): no client, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from api.v1alpha1._podpolicy import LabelSelector, LabelSelectorRequirement, PodTargets

__all__ = ["COMPONENT_LABEL", "selector_matches", "targets_pod"]

COMPONENT_LABEL = "app.kubernetes.io/component"
"""The label naming the gpuctrl component a pod belongs to (e.g. ``validator-workloads``)."""


def selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` satisfy every matchLabels entry and matchExpressions requirement
    (the empty selector matches everything). The caller owes a selector that passed
    `api.v1alpha1.validate_pod_policy` (values only, and always, for In and NotIn)."""
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    return all(_requirement_matches(r, labels) for r in selector.match_expressions)


def _requirement_matches(requirement: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    key, operator = requirement.key, requirement.operator
    if operator == "In":
        return key in labels and labels[key] in requirement.values
    if operator == "NotIn":
        return key not in labels or labels[key] not in requirement.values
    if operator == "Exists":
        return key in labels
    return key not in labels  # DoesNotExist


def targets_pod(targets: PodTargets, labels: Mapping[str, str]) -> bool:
    """Whether a pod with ``labels`` (in the operands' namespace) is targeted: its component
    label is one of ``targets.components`` or it matches ``targets.selector``."""
    if labels.get(COMPONENT_LABEL) in targets.components:
        return True
    return targets.selector is not None and selector_matches(targets.selector, labels)
