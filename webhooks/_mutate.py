"""What gpuctrl's webhook does to a pod: a pure function from a pod and PodPolicies to a patch.

`mutate` applies every PodPolicy that targets the pod, in name order, each seeing the pod as
the previous ones left it: the mesh opt-outs (`mesh_opt_outs`), ``spec.labels`` and
``spec.annotations``, and each requests/limits entry of ``spec.resources`` on every container
and init container (entries it does not name are kept). Where two policies set one key to
different values the later one wins and a warning names both.

What a policy may not do is skipped with a warning, whatever the policy says (the webhook only
loads valid policies; this holds for any caller): set a key `refused_key` refuses, or change a
label or annotation the pod was created with (its controller may select on it, as a DaemonSet
does on ``app``: a changed selector label makes it create pods without end). A mesh opt-out
may replace what the pod says about that mesh: it only ever turns injection off.

The patch holds no operation for a value that is already equal, so calling `mutate` again on
the patched pod yields no patch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api.v1alpha1 import PodPolicy, mesh_opt_outs, refused_key, targets_pod
from gpuctrl.runtime.webhook import patched

__all__ = ["MAX_CONTAINERS", "InvalidPod", "Mutation", "mutate"]

MAX_CONTAINERS = 500
"""The most containers and init containers (together) of a pod `mutate` changes: far beyond any
pod gpuctrl makes, and it bounds the work a request can cost (3 MiB of empty containers would
be some 100,000)."""


class InvalidPod(ValueError):
    """The object is not shaped like a pod where the mutation needs it; the message says where."""


@dataclass(frozen=True)
class Mutation:
    """The JSON Patch for a pod, the warnings to return, and the policies that changed it."""

    patch: Sequence[Mapping[str, Any]]
    warnings: tuple[str, ...]
    changed_by: tuple[str, ...]


def mutate(pod: Mapping[str, Any], policies: Iterable[PodPolicy]) -> Mutation:
    """Apply the PodPolicies targeting ``pod`` (see the module docstring); the pod is the
    request's object and is not changed. Raises `InvalidPod` on a pod of the wrong shape."""
    _check_shape(pod)
    mutated = _writable(pod)
    created_with = {  # the request's own maps: `mutated` is the copy written to
        kind: (pod.get("metadata") or {}).get(kind) or {} for kind in ("labels", "annotations")
    }
    setters: dict[tuple[str, ...], tuple[str, str]] = {}  # field -> (policy, value) that set it
    warnings: list[str] = []
    changed_by: list[str] = []
    for policy in sorted(policies, key=_name):
        labels = (mutated.get("metadata") or {}).get("labels") or {}
        if not targets_pod(policy.spec.targets, labels):
            continue
        changed = False
        for field, value, opt_out in _settings(policy, mutated):
            refusal = None if opt_out else _refusal(field, value, created_with)
            if refusal is not None:
                warnings.append(f"PodPolicy {_name(policy)} {refusal}")
                continue
            changed |= _set(mutated, field, value)
            previous = setters.get(field)
            if previous is not None and previous[1] != value:
                warnings.append(
                    f"PodPolicy {_name(policy)} sets {_describe(field)} to {value!r}, "
                    f"overriding {previous[1]!r} of PodPolicy {previous[0]}"
                )
            setters[field] = (_name(policy), value)
        if changed:
            changed_by.append(_name(policy))
    return Mutation(patched(pod, mutated).patch, tuple(warnings), tuple(changed_by))


def _writable(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``pod`` in which `_set` may write: the maps it writes into (metadata, its
    labels and annotations, spec, the container lists, each container, its resources and their
    requests and limits) are copied; the rest (commands, env, volumes, ...) is shared."""
    out = dict(pod)
    metadata = pod.get("metadata")
    if isinstance(metadata, dict):
        out["metadata"] = _copied(metadata, ("labels", "annotations"))
    spec = pod.get("spec")
    if isinstance(spec, dict):
        out["spec"] = dict(spec)
        for name in ("initContainers", "containers"):
            if isinstance(spec.get(name), list):
                out["spec"][name] = [_writable_container(c) for c in spec[name]]
    return out


def _writable_container(container: dict[str, Any]) -> dict[str, Any]:
    out = dict(container)
    resources = container.get("resources")
    if isinstance(resources, dict):
        out["resources"] = _copied(resources, ("requests", "limits"))
    return out


def _copied(parent: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``parent`` copied, with the maps under ``keys`` copied too."""
    out = dict(parent)
    for key in keys:
        if isinstance(out.get(key), dict):
            out[key] = dict(out[key])
    return out


def _name(policy: PodPolicy) -> str:
    return str(policy.metadata.get("name", ""))


_Setting = tuple[tuple[str, ...], str, bool]


def _settings(policy: PodPolicy, pod: Mapping[str, Any]) -> list[_Setting]:
    """(field, value, is a mesh opt-out) the policy sets, fields being ``("labels", key)``,
    ``("annotations", key)`` or ``(containers field, index, "requests"/"limits", resource)``;
    the opt-outs come last, so they win over the policy's own labels and annotations."""
    spec = policy.spec
    opt_out_labels, opt_out_annotations = mesh_opt_outs(spec.meshes)
    settings: list[_Setting] = []
    for kind, values, opt_out in (
        ("labels", spec.labels, False),
        ("annotations", spec.annotations, False),
        ("labels", opt_out_labels, True),
        ("annotations", opt_out_annotations, True),
    ):
        settings += [((kind, key), value, opt_out) for key, value in values.items()]
    if spec.resources is not None:
        for list_name in ("initContainers", "containers"):
            for index, _ in enumerate((pod.get("spec") or {}).get(list_name) or ()):
                for section in ("requests", "limits"):
                    for resource, quantity in getattr(spec.resources, section).items():
                        field = (list_name, str(index), section, resource)
                        settings.append((field, quantity, False))
    return settings


def _refusal(
    field: tuple[str, ...], value: str, created_with: Mapping[str, Mapping[str, str]]
) -> str | None:
    """Why the label or annotation ``field`` is left as it is, or None to set it."""
    if field[0] not in created_with:
        return None
    kind, key = field
    reason = refused_key(key)
    if reason is not None:
        return f"may not set {_describe(field)}: {reason}; left unchanged"
    old = created_with[kind].get(key)
    if old is not None and old != value:
        return (
            f"would change {_describe(field)} from {old!r} to {value!r}, which the pod was "
            "created with; left unchanged"
        )
    return None


def _set(pod: dict[str, Any], field: tuple[str, ...], value: str) -> bool:
    """Set ``field`` of ``pod`` to ``value``; return whether it had another value."""
    if field[0] in ("labels", "annotations"):
        values = _child(_child(pod, "metadata"), field[0])
        key = field[1]
    else:
        list_name, index, section, key = field
        container = pod["spec"][list_name][int(index)]
        values = _child(_child(container, "resources"), section)
    if values.get(key) == value:
        return False
    values[key] = value
    return True


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]``, made an empty map first when absent or null."""
    if parent.get(key) is None:
        parent[key] = {}
    child: dict[str, Any] = parent[key]
    return child


def _describe(field: tuple[str, ...]) -> str:
    if field[0] in ("labels", "annotations"):
        return f"{field[0][:-1]} {field[1]}"
    list_name, index, section, resource = field
    return f"{list_name}[{index}].resources.{section}.{resource}"


def _check_shape(pod: Mapping[str, Any]) -> None:
    """What `_set` relies on: maps where maps go, lists of maps where containers go."""
    metadata = _map(pod, "metadata", "metadata")
    for key in ("labels", "annotations"):
        values = _map(metadata, key, f"metadata.{key}")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
            raise InvalidPod(f"metadata.{key} must map strings to strings")
    spec = _map(pod, "spec", "spec")
    lists = (spec.get("initContainers"), spec.get("containers"))
    count = sum(len(v) for v in lists if isinstance(v, list))
    if count > MAX_CONTAINERS:
        raise InvalidPod(
            f"the pod has {count} containers and init containers; PodPolicies are applied to "
            f"pods of at most {MAX_CONTAINERS}"
        )
    for list_name in ("initContainers", "containers"):
        containers = spec.get(list_name)
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise InvalidPod(f"spec.{list_name} must be a list")
        for index, container in enumerate(containers):
            where = f"spec.{list_name}[{index}]"
            if not isinstance(container, dict):
                raise InvalidPod(f"{where} must be an object")
            resources = _map(container, "resources", f"{where}.resources")
            for section in ("requests", "limits"):
                _map(resources, section, f"{where}.resources.{section}")


def _map(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidPod(f"{where} must be an object, not {type(value).__name__}")
    return value
