"""Checks beyond the schema: every problem of a policy, each with its field path.

`validate` never stops at the first problem, so a user fixes a policy in one round. Paths use
the wire names (``spec.driver.repoConfig.nodeLocalPaths[0]``). `load_cluster_policy` joins the
schema's problems and these into one `InvalidPolicy` (`load_pod_policy` likewise for PodPolicy).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from api.v1alpha1._clusterpolicy import ClusterPolicy
from api.v1alpha1._component import Component, image_reference
from api.v1alpha1._podpolicy import PodPolicy
from api.v1alpha1._rules import (
    Problem,
    annotation_problems,
    env_problems,
    image_problems,
    label_name_problems,
    label_problems,
    name_problems,
    resource_problems,
    toleration_problems,
)
from api.v1alpha1._selector import selector_problems
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

# Host folders a node-local repository must never be, be under, or hold: the system's own
# state (credentials, kubelet secrets, container layers, devices, home folders).
FORBIDDEN_HOST_ROOTS = (
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/run",
    "/var/run",
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/lib/etcd",
    "/root",
    "/home",
)
# Folders of the driver image that a host folder mounted at the same path would hide (the
# image's programs, libraries and kernel sources); folders below them are fine.
SHADOWED_IMAGE_FOLDERS = (
    "/bin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/sbin",
    "/usr",
    "/usr/bin",
    "/usr/lib",
    "/usr/lib64",
    "/usr/local",
    "/usr/sbin",
    "/usr/share",
    "/usr/src",
)


class InvalidPolicy(ValueError):
    """A policy failed its schema or `validate`; ``problems`` lists every reason."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems


def load_cluster_policy(mapping: Mapping[str, Any]) -> ClusterPolicy:
    """Parse and validate a ClusterPolicy mapping; raises `InvalidPolicy` with every problem."""
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
    """Every problem the schema cannot express, each with its field path; [] when valid."""
    spec = policy.spec
    checks: list[Iterator[Problem]] = [
        _node_local_paths(policy),
        _names(policy),
        label_problems("spec.operator.labels", spec.operator.labels),
        annotation_problems("spec.operator.annotations", spec.operator.annotations),
        label_problems("spec.daemonsets.labels", spec.daemonsets.labels),
        annotation_problems("spec.daemonsets.annotations", spec.daemonsets.annotations),
        label_problems("spec.daemonsets.nodeSelector", spec.daemonsets.node_selector),
        toleration_problems("spec.daemonsets.tolerations", spec.daemonsets.tolerations),
        iter(validate_workloads(spec.validator.workloads, "spec.validator.workloads.")),
        image_problems(
            "spec.toolkit.runtimeImage.version", image_reference(spec.toolkit.runtime_image)
        ),
    ]
    for field, component in _components(policy):
        # The driver's tag gets an OS suffix at render time; check a realistic one.
        suffix = "-ubuntu22.04" if field == "driver" else ""
        checks.append(_component(f"spec.{field}", component, suffix))
    for check in ("driver", "toolkit", "cuda", "plugin"):
        env = getattr(spec.validator, check).env
        checks.append(env_problems(f"spec.validator.{check}.env", env))
    return [problem for check in checks for problem in check]


def validate_workloads(workloads: ValidatorWorkloads, prefix: str = "") -> list[Problem]:
    """Every problem of a policy's ``validator.workloads`` (paths start with ``prefix``)."""
    checks = [
        label_problems(f"{prefix}labels", workloads.labels),
        annotation_problems(f"{prefix}annotations", workloads.annotations),
        toleration_problems(f"{prefix}tolerations", workloads.tolerations),
        resource_problems(f"{prefix}resources", workloads.resources),
        image_problems(f"{prefix}image", workloads.image),
    ]
    named = {
        "configMapName": workloads.config_map_name,
        "priorityClassName": workloads.priority_class_name,
        "runtimeClassName": workloads.runtime_class_name,
    }
    checks.extend(
        name_problems(f"{prefix}{field}", name) for field, name in named.items() if name is not None
    )
    return [problem for check in checks for problem in check]


def validate_pod_policy(policy: PodPolicy) -> list[Problem]:
    """Every problem of a PodPolicy the schema cannot express; [] when valid."""
    spec = policy.spec
    checks = [
        label_problems("spec.labels", spec.labels),
        annotation_problems("spec.annotations", spec.annotations),
        resource_problems("spec.resources", spec.resources),
    ]
    if spec.targets.selector is not None:
        checks.append(
            label_problems("spec.targets.selector.matchLabels", spec.targets.selector.match_labels)
        )
        checks.append(selector_problems("spec.targets.selector", spec.targets.selector))
    return [problem for check in checks for problem in check]


def _components(policy: ClusterPolicy) -> list[tuple[str, Component]]:
    spec = policy.spec
    return [
        ("driver", spec.driver),
        ("toolkit", spec.toolkit),
        ("validator", spec.validator),
        ("devicePlugin", spec.device_plugin),
    ]


def _component(path: str, component: Component, suffix: str) -> Iterator[Problem]:
    yield from image_problems(f"{path}.version", image_reference(component, suffix))
    for i, secret in enumerate(component.image_pull_secrets):
        yield from name_problems(f"{path}.imagePullSecrets[{i}]", secret)
    yield from env_problems(f"{path}.env", component.env)
    yield from resource_problems(f"{path}.resources", component.resources)


def _node_local_paths(policy: ClusterPolicy) -> Iterator[Problem]:
    repo = policy.spec.driver.repo_config
    base = "spec.driver.repoConfig.nodeLocalPaths"
    if repo.node_local_paths and not repo.config_map_name:
        yield Problem(
            base, "requires repoConfig.configMapName: a repository on disk needs a source entry"
        )
    seen: set[str] = set()
    for i, path in enumerate(repo.node_local_paths):
        for message in _host_path_problems(path, seen):
            yield Problem(f"{base}[{i}]", message)
        seen.add(path)


def _host_path_problems(path: str, seen: set[str]) -> Iterator[str]:
    if not path.startswith("/"):
        yield f"{path!r} is not absolute"
        return
    if posixpath.normpath(path) != path or path.startswith("//"):
        yield f"{path!r} is not normalised (no '..', '.', '//' or trailing '/')"
        return
    if path == "/":
        yield "'/' would expose the whole host"
        return
    for root in FORBIDDEN_HOST_ROOTS:
        if path == root or path.startswith(root + "/"):
            yield f"{path!r} is under {root}, a system folder"
    held = [root for root in FORBIDDEN_HOST_ROOTS if root.startswith(path + "/")]
    if held:
        yield f"{path!r} holds system folders ({', '.join(held)})"
    if path in SHADOWED_IMAGE_FOLDERS:
        yield f"{path!r} would hide the driver image's own {path}"
    if path in seen:
        yield f"{path!r} is listed twice"


def _names(policy: ClusterPolicy) -> Iterator[Problem]:
    spec = policy.spec
    named = {
        "spec.daemonsets.priorityClassName": spec.daemonsets.priority_class_name,
        "spec.driver.repoConfig.configMapName": spec.driver.repo_config.config_map_name,
        "spec.driver.certConfig.name": spec.driver.cert_config.name,
    }
    for path, name in named.items():
        if name is not None:
            yield from name_problems(path, name)
    # These also name containerd's runtime handler (the RuntimeClass's handler): a DNS label.
    handlers = {
        "spec.operator.runtimeClass": spec.operator.runtime_class,
        "spec.toolkit.containerd.runtimeClassName": spec.toolkit.containerd.runtime_class_name,
    }
    for path, name in handlers.items():
        if name is not None:
            yield from label_name_problems(path, name)
