"""The driver upgrade policy (NVIDIA's ``driver.upgradePolicy``: its fields and defaults), and
the label selectors it takes as text."""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import Field, field_validator

from api.v1alpha1._base import ApiModel
from api.v1alpha1._podpolicy import LabelSelector, LabelSelectorRequirement

__all__ = [
    "DrainSpec",
    "DriverUpgradePolicySpec",
    "GPUPodDeletionSpec",
    "WaitForCompletionSpec",
    "parse_selector",
    "scaled_max_unavailable",
]

_PERCENT = r"^([0-9]|[1-9][0-9]|100)%$"
_KEY = r"(?:[a-z0-9A-Z](?:[-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z](?:[-a-z0-9A-Z_.]*[a-z0-9A-Z])?"
_VALUE = r"(?:[a-z0-9A-Z](?:[-a-z0-9A-Z_.]*[a-z0-9A-Z])?)?"
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^()]*)\)\s*$")
_EQUALS = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_VALUE_ONLY = re.compile(rf"^{_VALUE}$")


def _requirements(text: str) -> list[str]:
    """``text`` split at the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return parts


def parse_selector(text: str) -> LabelSelector:
    """The `LabelSelector` of a label selector in Kubernetes' text form (``app=train,tier in
    (a, b),!canary``: ``=``, ``==``, ``!=``, ``in``, ``notin``, exists and ``!`` not-exists);
    raises ``ValueError`` naming the requirement it cannot read. "" selects every pod."""
    labels: dict[str, str] = {}
    expressions: list[LabelSelectorRequirement] = []
    if not text.strip():
        return LabelSelector()
    for part in _requirements(text):
        if match := _SET.match(part):
            key, operator, listed = match.groups()
            values = [v.strip() for v in listed.split(",")]
            if not all(values) or not all(_VALUE_ONLY.match(v) for v in values):
                raise ValueError(f"{part.strip()!r}: the values in parentheses are not labels")
            requirement = LabelSelectorRequirement(
                key=key, operator="In" if operator == "in" else "NotIn", values=values
            )
            expressions.append(requirement)
        elif match := _EQUALS.match(part):
            key, operator, value = match.groups()
            if operator == "!=":
                expressions.append(
                    LabelSelectorRequirement(key=key, operator="NotIn", values=[value])
                )
            elif labels.get(key, value) != value:
                raise ValueError(f"{part.strip()!r}: {key} is required to equal two values")
            else:
                labels[key] = value
        elif match := _EXISTS.match(part):
            negated, key = match.groups()
            expressions.append(
                LabelSelectorRequirement(key=key, operator="DoesNotExist" if negated else "Exists")
            )
        else:
            raise ValueError(f"{part.strip()!r} is not a label selector requirement")
    return LabelSelector(match_labels=labels, match_expressions=expressions)


class _Selected(ApiModel):
    pod_selector: str = Field(
        default="",
        max_length=4096,
        description="A label selector in Kubernetes' text form (app=train,tier in (a,b)); "
        '"" selects every pod.',
    )

    @field_validator("pod_selector")
    @classmethod
    def _readable(cls, value: str) -> str:
        parse_selector(value)
        return value


class WaitForCompletionSpec(_Selected):
    """Which jobs on a node the upgrade waits for before it deletes GPU pods."""

    timeout_seconds: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="How long to wait for the selected pods to finish; 0 waits for ever. On "
        "timeout the upgrade goes on to GPU pod deletion.",
    )


class GPUPodDeletionSpec(ApiModel):
    """How the pods that use a node's GPUs are deleted before its driver is replaced."""

    force: bool = Field(
        default=False,
        description="Delete GPU pods no controller manages (NVIDIA's force); without it such "
        "a pod fails the node's upgrade.",
    )
    timeout_seconds: Annotated[int, Field(ge=0)] = Field(
        default=300,
        description="How long the pods may take to go (PodDisruptionBudgets may refuse an "
        "eviction); then the node's upgrade fails. 0 waits for ever.",
    )
    delete_empty_dir: bool = Field(
        default=False,
        description="Delete GPU pods with emptyDir volumes (their data is lost); without it "
        "such a pod fails the node's upgrade.",
    )


class DrainSpec(_Selected):
    """Draining a node (as ``kubectl drain``) after its GPU pods are gone; off by default."""

    enable: bool = Field(default=False, description="Drain the node before the driver restarts.")
    force: bool = Field(default=False, description="Evict pods no controller manages.")
    timeout_seconds: Annotated[int, Field(ge=0)] = Field(
        default=300, description="How long the drain may take; then the upgrade fails. 0: ever."
    )
    delete_empty_dir: bool = Field(
        default=False, description="Evict pods with emptyDir volumes (their data is lost)."
    )


class DriverUpgradePolicySpec(ApiModel):
    """How the driver's pods are replaced when its DaemonSet changes (NVIDIA's upgrade
    controller): node by node, cordoned, GPU jobs waited for and evicted, the new driver
    validated before the node is uncordoned."""

    auto_upgrade: bool = Field(
        default=True,
        description="Upgrade nodes automatically (NVIDIA's chart default). false: the driver's "
        "pods are replaced only when someone deletes them (its DaemonSet is OnDelete).",
    )
    max_parallel_upgrades: Annotated[int, Field(ge=0)] = Field(
        default=1, description="How many nodes upgrade at once; 0: no limit."
    )
    max_unavailable: Annotated[int, Field(ge=0)] | Annotated[str, Field(pattern=_PERCENT)] = Field(
        default="25%",
        json_schema_extra={"minimum": 0, "pattern": _PERCENT},
        description="How many driver nodes may be unavailable (cordoned or not Ready, for any "
        "reason) while nodes upgrade: a number, or a percentage of the driver nodes rounded up.",
    )
    wait_for_completion: WaitForCompletionSpec = Field(
        default_factory=WaitForCompletionSpec,
        description="Jobs to wait for; without a podSelector nothing is waited for.",
    )
    gpu_pod_deletion: GPUPodDeletionSpec = Field(
        default_factory=GPUPodDeletionSpec, description="Deleting the pods that use the GPUs."
    )
    drain: DrainSpec = Field(default_factory=DrainSpec, description="Draining the node.")


def scaled_max_unavailable(value: int | str, nodes: int) -> int:
    """``maxUnavailable`` as a number of nodes out of ``nodes``: a percentage rounded up."""
    if isinstance(value, int):
        return value
    return math.ceil(int(value.removesuffix("%")) * nodes / 100)
