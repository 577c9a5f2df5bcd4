"""Shared building blocks of the API types: the base model and small Kubernetes value types.

Every model is frozen, forbids unknown fields, speaks camelCase on the wire (``model_validate``
of a YAML mapping, ``model_dump(by_alias=True)``) and accepts the Python field names too.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "ApiModel",
    "ApiObject",
    "EnvVar",
    "LabelMap",
    "LocalObjectReference",
    "PullPolicy",
    "Quantity",
    "ResourceRequirements",
    "Toleration",
    "wire",
]


class ApiModel(BaseModel):
    """Base of every API type: frozen, strict about unknown keys, camelCase aliases."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


class ApiObject(ApiModel):
    """The header of every ``gpuctrl.io/v1alpha1`` object; a subclass fixes ``kind`` to its
    own Literal and adds ``spec`` (and ``status``) after ``metadata``."""

    api_version: Literal["gpuctrl.io/v1alpha1"] = "gpuctrl.io/v1alpha1"
    kind: str
    metadata: dict[str, Any] = Field(default_factory=dict)


def wire(model: BaseModel) -> dict[str, Any]:
    """The model as the apiserver would store it: camelCase keys, unset optional fields left out."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _number_to_str(value: Any) -> Any:
    # YAML reads `cpu: 1` as an int; Kubernetes accepts both forms and stores a string.
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return str(value)
    return value


_QUANTITY_PATTERN = r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[numkMGTPE]|[KMGTPE]i)?$"

# A resource quantity such as "500m", "1Gi" or 2, stored as a string; its value is
# `api.v1alpha1.parse_quantity`. On the wire an int or a string, as in a Pod spec.
Quantity = Annotated[
    str,
    BeforeValidator(_number_to_str),
    StringConstraints(pattern=_QUANTITY_PATTERN),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "pattern": _QUANTITY_PATTERN,
            "description": "A Kubernetes resource quantity, e.g. 500m, 1Gi or 2.",
        }
    ),
]

LabelMap = dict[str, str]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]


class ResourceRequirements(ApiModel):
    """Compute resources of a container, as in a Pod spec."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict, description="Minimum resources, by name (cpu, memory, ...)."
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict, description="Maximum resources, by name (cpu, memory, ...)."
    )


class Toleration(ApiModel):
    """A Pod toleration, as in a Pod spec."""

    key: str | None = Field(default=None, description="Taint key; empty with Exists = all.")
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists or Equal (default Equal)."
    )
    value: str | None = Field(default=None, description="Taint value for Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; empty = all effects."
    )
    toleration_seconds: int | None = Field(
        default=None, description="How long a NoExecute taint is tolerated."
    )


class EnvVar(ApiModel):
    """An environment variable with a literal value."""

    name: str = Field(min_length=1, description="Variable name.")
    value: str = Field(default="", description="Variable value.")


class LocalObjectReference(ApiModel):
    """A reference to an object by name, in the operator's namespace."""

    name: str = Field(min_length=1, description="Name of the object.")
