"""Checks beyond the schema: every problem of a policy, each with its field path.

`validate` never stops at the first problem, so a user fixes a policy in one round. Paths use
the wire names (``spec.driver.repoConfig.nodeLocalPaths[0]``). It evaluates the CEL rules the
CRDs carry (declared beside the models' fields, see `api.v1alpha1._cel`), so what the
apiserver refuses at apply time is refused offline with the same message, and then the rules
CEL cannot carry (`api.v1alpha1._rules`). `load_cluster_policy` joins the schema's problems
and these into one `InvalidPolicy` (`load_pod_policy` likewise for PodPolicy). It first reads
NVIDIA's spellings with NVIDIA's meaning (`api.nvidia.nvidia_meaning`), so a policy made from a
values file written for NVIDIA's chart means what it means to NVIDIA.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from api.nvidia import NvidiaSettingError, nvidia_meaning
from api.v1alpha1._base import wire
from api.v1alpha1._clusterpolicy import ClusterPolicy, ClusterPolicySpec
from api.v1alpha1._component import Component, Image, image_reference
from api.v1alpha1._podpolicy import PodPolicy, PodPolicySpec, refused_key
from api.v1alpha1._rules import (
    Problem,
    annotation_problems,
    image_problems,
    label_problems,
    resource_problems,
    toleration_problems,
)
from api.v1alpha1._schema import rule_problems
from api.v1alpha1._validator import ValidatorWorkloads

__all__ = [
    "InvalidPolicy",
    "Problem",
    "load_cluster_policy",
    "load_pod_policy",
    "validate",
    "validate_pod_policy",
    "validate_workloads",
]


class InvalidPolicy(ValueError):
    """A policy failed its schema or `validate`; ``problems`` lists every reason."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


def load_cluster_policy(mapping: Mapping[str, Any]) -> ClusterPolicy:
    """Parse and validate a ClusterPolicy mapping (wire names, as stored), NVIDIA's spellings
    in its spec read as `api.nvidia.nvidia_meaning` reads them; raises `InvalidPolicy` with
    every problem."""
    spec = mapping.get("spec")
    if isinstance(spec, Mapping):
        try:
            mapping = {**mapping, "spec": nvidia_meaning(spec).spec}
        except NvidiaSettingError as error:
            raise InvalidPolicy([Problem(path, why) for path, why in error.problems]) from error
    return _load(ClusterPolicy, validate, mapping)


def load_pod_policy(mapping: Mapping[str, Any]) -> PodPolicy:
    """Parse and validate a PodPolicy mapping; raises `InvalidPolicy` with every problem."""
    return _load(PodPolicy, validate_pod_policy, mapping)


_Policy = TypeVar("_Policy", bound=BaseModel)


def _load(
    model: type[_Policy], check: Callable[[_Policy], list[Problem]], mapping: Mapping[str, Any]
) -> _Policy:
    try:
        policy = model.model_validate(mapping)
    except ValidationError as error:
        raise InvalidPolicy([_schema_problem(e) for e in error.errors()]) from error
    problems = check(policy)
    if problems:
        raise InvalidPolicy(problems)
    return policy


def _schema_problem(error: Any) -> Problem:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
    return Problem(path.lstrip(".") or "(root)", error["msg"])


def validate(policy: ClusterPolicy) -> list[Problem]:
    """Every problem beyond the types (the CRD's CEL rules, then those only Python checks),
    each with its field path; [] when valid."""
    spec = policy.spec
    checks: list[Iterator[Problem]] = [
        rule_problems(ClusterPolicySpec, wire(spec), "spec"),
        _node_local_paths(policy),
        _device_plugin_config(policy),
        label_problems("spec.operator.labels", spec.operator.labels),
        annotation_problems("spec.operator.annotations", spec.operator.annotations),
        label_problems("spec.daemonsets.labels", spec.daemonsets.labels),
        annotation_problems("spec.daemonsets.annotations", spec.daemonsets.annotations),
        label_problems("spec.daemonsets.nodeSelector", spec.daemonsets.node_selector),
        label_problems(
            "spec.dcgmExporter.serviceMonitor.additionalLabels",
            spec.dcgm_exporter.service_monitor.additional_labels,
        ),
        toleration_problems("spec.daemonsets.tolerations", spec.daemonsets.tolerations),
        _workload_problems(spec.validator.workloads, "spec.validator.workloads."),
        _image("spec.toolkit.runtimeImage", spec.toolkit.runtime_image),
        _image("spec.driver.manager", spec.driver.manager),
    ]
    for field, component in _components(policy):
        # The driver's tag gets an OS suffix at render time; check a realistic one.
        suffix = "-ubuntu22.04" if field == "driver" else ""
        checks.append(_image(f"spec.{field}", component, suffix))
        checks.append(resource_problems(f"spec.{field}.resources", component.resources))
    return [problem for check in checks for problem in check]


def validate_workloads(workloads: ValidatorWorkloads, prefix: str = "") -> list[Problem]:
    """Every problem of a policy's ``validator.workloads`` (paths start with ``prefix``, which
    is empty or ends with a dot)."""
    checks = [
        rule_problems(ValidatorWorkloads, wire(workloads), prefix.removesuffix(".")),
        _workload_problems(workloads, prefix),
    ]
    return [problem for check in checks for problem in check]


def _workload_problems(workloads: ValidatorWorkloads, prefix: str) -> Iterator[Problem]:
    yield from label_problems(f"{prefix}labels", workloads.labels)
    yield from annotation_problems(f"{prefix}annotations", workloads.annotations)
    yield from toleration_problems(f"{prefix}tolerations", workloads.tolerations)
    yield from resource_problems(f"{prefix}resources", workloads.resources)
    yield from image_problems(f"{prefix}image", workloads.image)


def validate_pod_policy(policy: PodPolicy) -> list[Problem]:
    """Every problem of a PodPolicy beyond the types (the CRD's CEL rules too); [] when valid."""
    spec = policy.spec
    checks = [
        rule_problems(PodPolicySpec, wire(spec), "spec"),
        label_problems("spec.labels", spec.labels),
        annotation_problems("spec.annotations", spec.annotations),
        _refused_keys("spec.labels", spec.labels),
        _refused_keys("spec.annotations", spec.annotations),
        resource_problems("spec.resources", spec.resources),
    ]
    if spec.targets.selector is not None:
        checks.append(
            label_problems("spec.targets.selector.matchLabels", spec.targets.selector.match_labels)
        )
    return [problem for check in checks for problem in check]


def _refused_keys(path: str, values: Mapping[str, str]) -> Iterator[Problem]:
    for key in values:
        reason = refused_key(key)
        if reason is not None:
            yield Problem(f"{path}[{key}]", f"a PodPolicy may not set {key!r}: {reason}")


def _components(policy: ClusterPolicy) -> list[tuple[str, Component]]:
    # Every operand section of the spec by wire name, so a new section is never left unchecked.
    spec = policy.spec
    sections = (
        (info.alias or name, getattr(spec, name)) for name, info in type(spec).model_fields.items()
    )
    return [(field, section) for field, section in sections if isinstance(section, Component)]


def _image(path: str, component: Component | Image, suffix: str = "") -> Iterator[Problem]:
    # Without a version the image breaks the version's CEL rule: one problem is enough.
    if component.version:
        yield from image_problems(f"{path}.version", image_reference(component, suffix))


def _node_local_paths(policy: ClusterPolicy) -> Iterator[Problem]:
    # The paths' own rules are CEL rules (HostFolder); this one reads a sibling field, and a
    # CEL rule on RepoConfig could not name nodeLocalPaths without fieldPath (Kubernetes 1.28).
    repo = policy.spec.driver.repo_config
    if repo.node_local_paths and not repo.config_map_name:
        yield Problem(
            "spec.driver.repoConfig.nodeLocalPaths",
            "requires repoConfig.configMapName: a repository on disk needs a source entry",
        )


def _device_plugin_config(policy: ClusterPolicy) -> Iterator[Problem]:
    # Reads a sibling field, as _node_local_paths does.
    config = policy.spec.device_plugin.config
    if config.default is not None and config.name is None:
        yield Problem(
            "spec.devicePlugin.config.default",
            "requires devicePlugin.config.name: the default names a key of that ConfigMap",
        )
