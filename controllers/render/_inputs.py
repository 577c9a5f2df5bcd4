"""Reading ``gpuctrl render`` input: YAML streams of one ClusterPolicy, Nodes and ConfigMaps.

PodPolicies may sit beside them (the samples keep a policy and its PodPolicy in one file); the
webhook, not render, acts on them, but they are validated so a broken one is reported here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from api.v1alpha1 import (
    ClusterPolicy,
    InvalidPolicy,
    Problem,
    load_cluster_policy,
    load_pod_policy,
)
from controllers.render._facts import ClusterFacts

__all__ = ["RenderInput", "read_inputs", "to_yaml"]

_Loaded = TypeVar("_Loaded")


@dataclass(frozen=True)
class RenderInput:
    """A validated policy and the facts read beside it."""

    policy: ClusterPolicy
    facts: ClusterFacts


def read_inputs(paths: Sequence[Path], namespace: str) -> RenderInput:
    """Read ``paths``; raises `InvalidPolicy` listing every problem (file:document paths)."""
    problems: list[Problem] = []
    policies: list[tuple[str, dict[str, Any]]] = []
    nodes: list[dict[str, Any]] = []
    config_maps: list[dict[str, Any]] = []
    for path in paths:
        for where, doc in _documents(path, problems):
            key = (doc.get("apiVersion"), doc.get("kind"))
            if key == ("gpuctrl.io/v1alpha1", "ClusterPolicy"):
                policies.append((where, doc))
            elif key == ("v1", "Node"):
                nodes.append(doc)
            elif key == ("v1", "ConfigMap"):
                config_maps.append(doc)
            elif key == ("gpuctrl.io/v1alpha1", "PodPolicy"):
                _check(load_pod_policy, where, doc, problems)
            else:
                problems.append(Problem(where, f"unexpected object {key[0]}/{key[1]}"))
    if len(policies) != 1:
        found = ", ".join(where for where, _ in policies) or "none"
        problems.append(Problem("input", f"expected one ClusterPolicy, found {found}"))
    policy = _check(load_cluster_policy, *policies[0], problems) if len(policies) == 1 else None
    try:
        facts = ClusterFacts.from_objects(namespace, nodes, config_maps)
    except (KeyError, TypeError, ValueError) as error:
        problems.append(Problem("input", f"a Node or ConfigMap is malformed: {error}"))
    if problems or policy is None:
        raise InvalidPolicy(problems)
    return RenderInput(policy, facts)


def _documents(path: Path, problems: list[Problem]) -> list[tuple[str, dict[str, Any]]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        problems.append(Problem(str(path), f"cannot read: {error}"))
        return []
    found = []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            problems.append(Problem(f"{path}:{index}", "a document is not a mapping"))
            continue
        found.append((f"{path}:{index}", doc))
    return found


def _check(
    load: Callable[[dict[str, Any]], _Loaded],
    where: str,
    doc: dict[str, Any],
    problems: list[Problem],
) -> _Loaded | None:
    """``load(doc)``, or None after adding its problems, each prefixed with ``where``."""
    try:
        return load(doc)
    except InvalidPolicy as error:
        problems.extend(Problem(f"{where}: {p.path}", p.message) for p in error.problems)
        return None


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings (the Pod templates in a ConfigMap) as literal blocks."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_str)


def to_yaml(objects: Sequence[dict[str, Any]]) -> str:
    """``objects`` as one YAML stream, byte-stable for equal input."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, explicit_start=True, width=100)
