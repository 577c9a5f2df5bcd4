"""Status of a ClusterPolicy: its state and one condition per controller."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from api.v1alpha1._base import ApiModel

__all__ = ["ClusterPolicyStatus", "Condition", "State"]

State = Literal["ready", "notReady", "ignored"]


class Condition(ApiModel):
    """One controller's verdict, keyed by ``type`` so each controller owns its own entry."""

    type: str = Field(min_length=1, description="Kind of condition, e.g. Ready or DriverReady.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="CamelCase reason for the last transition.")
    message: str = Field(default="", description="Human-readable detail.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="The policy generation this condition was set from."
    )
    last_transition_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="When status last changed (RFC 3339).",
    )


class ClusterPolicyStatus(ApiModel):
    """What gpuctrl observed. Only the oldest ClusterPolicy is honoured; the others are ignored."""

    state: State | None = Field(default=None, description="ready, notReady or ignored.")
    namespace: str | None = Field(default=None, description="Namespace of the operands.")
    ready_nodes: str | None = Field(
        default=None,
        description="GPU nodes running every enabled operand Ready, of all GPU nodes (3/4).",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
        description="Conditions, one per type.",
    )
