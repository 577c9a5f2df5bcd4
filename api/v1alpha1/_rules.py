"""The field rules `validate` applies in Python: labels, toleration keys, images, resources.

Each rule yields `Problem`s for one field (a wire path) and never stops at the first one. These
are the rules the CRDs' CEL cannot carry: per-key paths of a map, image references composed at
render time, quantity arithmetic (see `api.v1alpha1._cel` for the others).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal

from api.v1alpha1._base import DNS_SUBDOMAIN, ResourceRequirements, Toleration
from api.v1alpha1._quantity import parse_quantity

__all__ = [
    "Problem",
    "annotation_problems",
    "image_problems",
    "label_problems",
    "resource_problems",
    "toleration_problems",
]

_DNS_SUBDOMAIN = re.compile(DNS_SUBDOMAIN)
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
# The distribution reference grammar: [host[:port]/]path[:tag][@digest].
_IMAGE = re.compile(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*"
    r"(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a policy: where (a wire field path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def image_problems(path: str, reference: str) -> Iterator[Problem]:
    """A problem when ``reference`` is not a well-formed image reference."""
    if not _IMAGE.match(reference) or len(reference) > 512:
        yield Problem(path, f"{reference!r} is not a well-formed image reference")


def _qualified_name_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return f"{key!r}: prefix {prefix!r} is not a DNS subdomain"
    if len(name) > 63 or not _LABEL_NAME.match(name):
        return f"{key!r} is not a qualified name (at most 63 alphanumerics, '-', '_', '.')"
    return None


def label_problems(path: str, labels: Mapping[str, str]) -> Iterator[Problem]:
    """Problems of label keys (qualified names) and values."""
    for key, value in labels.items():
        problem = _qualified_name_problem(key)
        if problem:
            yield Problem(f"{path}[{key}]", problem)
        if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
            yield Problem(f"{path}[{key}]", f"{value!r} is not a valid label value")


def annotation_problems(path: str, annotations: Mapping[str, str]) -> Iterator[Problem]:
    """Problems of annotation keys (qualified names)."""
    for key in annotations:
        problem = _qualified_name_problem(key)
        if problem:
            yield Problem(f"{path}[{key}]", problem)


def toleration_problems(path: str, tolerations: list[Toleration]) -> Iterator[Problem]:
    """Problems of toleration keys (qualified names) and values (label values); the rules
    across a toleration's fields are `Toleration`'s CEL rules."""
    for i, toleration in enumerate(tolerations):
        where = f"{path}[{i}]"
        if toleration.key:
            problem = _qualified_name_problem(toleration.key)
            if problem:
                yield Problem(f"{where}.key", problem)
        if toleration.value and not _LABEL_NAME.match(toleration.value):
            yield Problem(f"{where}.value", f"{toleration.value!r} is not a valid label value")


def resource_problems(path: str, resources: ResourceRequirements | None) -> Iterator[Problem]:
    """Problems of resource names and quantities, and requests a Pod spec cannot have."""
    if resources is None:
        return
    values: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
    for kind in ("requests", "limits"):
        for name, text in getattr(resources, kind).items():
            where = f"{path}.{kind}[{name}]"
            problem = _qualified_name_problem(name) or _resource_name_problem(name)
            if problem:
                yield Problem(where, problem)
            try:
                values[kind][name] = parse_quantity(text)
            except ValueError as error:
                yield Problem(where, str(error))
                continue
            if values[kind][name] < 0:
                yield Problem(where, "must not be negative")
    for name, request in values["requests"].items():
        limit = values["limits"].get(name)
        where = f"{path}.requests[{name}]"
        if limit is not None and request > limit:
            yield Problem(where, f"exceeds the limit {resources.limits[name]}")
        elif _not_overcommittable(name) and limit != request:
            yield Problem(where, "cannot be overcommitted: set an equal limit")
    for kind in ("requests", "limits"):
        for name, value in values[kind].items():
            if _extended(name) and value != value.to_integral_value():
                yield Problem(f"{path}.{kind}[{name}]", "an extended resource must be whole")


_STANDARD_RESOURCES = re.compile(r"^(cpu|memory|ephemeral-storage|hugepages-.+)$")


def _resource_name_problem(name: str) -> str | None:
    if "/" not in name and not _STANDARD_RESOURCES.match(name):
        return f"{name!r} is neither a standard resource nor a domain-qualified one"
    if "/" in name and not _extended(name):
        return f"{name!r} is in the kubernetes.io domain, reserved for standard resources"
    return None


def _extended(name: str) -> bool:
    # A resource outside the kubernetes.io domains, such as nvidia.com/gpu.
    prefix = name.partition("/")[0] if "/" in name else ""
    return bool(prefix) and not (prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"))


def _not_overcommittable(name: str) -> bool:
    return _extended(name) or name.startswith("hugepages-")
