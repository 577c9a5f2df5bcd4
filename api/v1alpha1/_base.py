"""Shared building blocks of the API types: the base model and small Kubernetes value types.

Every model is frozen, forbids unknown fields, speaks camelCase on the wire (``model_validate``
of a YAML mapping, ``model_dump(by_alias=True)``) and accepts the Python field names too.
The CEL rules declared here (`api.v1alpha1._cel`) are in the CRDs and in `validate` alike.
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

from api.v1alpha1._cel import Rule, cel_rules, interpolated, quoted

__all__ = [
    "DNS_LABEL",
    "DNS_SUBDOMAIN",
    "MAX_LIST_ITEMS",
    "NORMAL_PATH",
    "ApiModel",
    "ApiObject",
    "DnsLabel",
    "EnvVar",
    "LabelMap",
    "LocalObjectReference",
    "ObjectName",
    "PullPolicy",
    "Quantity",
    "ResourceRequirements",
    "Toleration",
    "wire",
]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL = rf"^{_LABEL}$"
"""RE2 pattern of a DNS label (RFC 1123), at most 63 characters: a runtime handler's name."""
DNS_SUBDOMAIN = rf"^{_LABEL}(\.{_LABEL})*$"
"""RE2 pattern of a DNS subdomain (RFC 1123), at most 253 characters: an object's name."""
NORMAL_PATH = r"^(/([^/.][^/]*|[.][^/.][^/]*|[.][.][^/]+))+$"
"""RE2 pattern of an absolute path other than / in normal form: no '//', no '.' or '..'
segment, no trailing '/' (what ``posixpath.normpath`` leaves unchanged)."""
MAX_LIST_ITEMS = 256
"""The most items of any list and entries of any map of a policy (the apiserver refuses more at
apply time; CEL rules need the bound for their cost budget): far more than any policy has, and
a policy cannot make the operator hold without end what it renders from it."""


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

LabelMap = Annotated[dict[str, str], Field(max_length=MAX_LIST_ITEMS)]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]

# The name of an object in the operator's namespace (a ConfigMap, a Secret, a PriorityClass).
ObjectName = Annotated[
    str,
    Field(
        max_length=253,
        json_schema_extra=cel_rules(
            Rule(
                rule=f"self.matches({quoted(DNS_SUBDOMAIN)})",
                message_expression=interpolated(
                    "'{self}' is not a valid object name (lower-case DNS subdomain)"
                ),
            )
        ),
    ),
]
# The name of a runtime handler (a RuntimeClass's handler, a containerd runtime).
DnsLabel = Annotated[
    str,
    Field(
        max_length=63,
        json_schema_extra=cel_rules(
            Rule(
                rule=f"self.matches({quoted(DNS_LABEL)})",
                message_expression=interpolated(
                    "'{self}' is not a DNS label (a runtime handler name)"
                ),
            )
        ),
    ),
]


class ResourceRequirements(ApiModel):
    """Compute resources of a container, as in a Pod spec."""

    requests: dict[str, Quantity] = Field(
        default_factory=dict,
        max_length=MAX_LIST_ITEMS,
        description="Minimum resources, by name (cpu, memory, ...).",
    )
    limits: dict[str, Quantity] = Field(
        default_factory=dict,
        max_length=MAX_LIST_ITEMS,
        description="Maximum resources, by name (cpu, memory, ...).",
    )


class Toleration(ApiModel):
    """A Pod toleration, as in a Pod spec."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            Rule(
                rule="has(self.key) && self.key != '' || "
                "has(self.operator) && self.operator == 'Exists'",
                message="an empty key requires operator Exists",
            ),
            Rule(
                rule="!has(self.operator) || self.operator != 'Exists' || "
                "!has(self.value) || self.value == ''",
                message="value must be empty with operator Exists",
            ),
            Rule(
                rule="!has(self.tolerationSeconds) || "
                "has(self.effect) && self.effect == 'NoExecute'",
                message="tolerationSeconds is only allowed with effect NoExecute",
            ),
        )
    )

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


_ENV_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"


class EnvVar(ApiModel):
    """An environment variable with a literal value."""

    name: str = Field(
        min_length=1,
        max_length=4096,  # a bound for the rule's cost, no limit of Kubernetes
        description="Variable name.",
        json_schema_extra=cel_rules(
            Rule(
                rule=f"self.matches({quoted(_ENV_NAME)})",
                message_expression=interpolated("'{self}' is not a valid variable name"),
            )
        ),
    )
    value: str = Field(default="", description="Variable value.")


class LocalObjectReference(ApiModel):
    """A reference to an object by name, in the operator's namespace."""

    name: str = Field(min_length=1, description="Name of the object.")
