"""Reading ``gpuctrl render`` input: YAML streams of one ClusterPolicy, Nodes, ConfigMaps and
the CustomResourceDefinitions to take as installed (the Prometheus Operator's ServiceMonitor).

PodPolicies may sit beside them (the samples keep a policy and its PodPolicy in one file); the
webhook, not render, acts on them, but they are validated so a broken one is reported here.
"""

from __future__ import annotations

import re
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
_ESTABLISHED = {"conditions": [{"type": "Established", "status": "True"}]}


@dataclass(frozen=True)
class RenderInput:
    """A validated policy and the facts read beside it."""

    policy: ClusterPolicy
    facts: ClusterFacts


def read_inputs(paths: Sequence[Path], namespace: str) -> RenderInput:
    """Read ``paths``; raises `InvalidPolicy` listing every problem, each where it is
    (``file:line``, the line of the field when the problem names one)."""
    problems: list[Problem] = []
    policies: list[_Document] = []
    nodes: list[dict[str, Any]] = []
    config_maps: list[dict[str, Any]] = []
    crds: list[dict[str, Any]] = []
    unreadable = False
    for path in paths:
        documents = _documents(path, problems)
        unreadable |= documents is None
        for document in documents or ():
            doc = document.content
            key = (doc.get("apiVersion"), doc.get("kind"))
            if key == ("gpuctrl.io/v1alpha1", "ClusterPolicy"):
                policies.append(document)
            elif key == ("v1", "Node"):
                nodes.append(doc)
            elif key == ("v1", "ConfigMap"):
                config_maps.append(doc)
            elif key == ("apiextensions.k8s.io/v1", "CustomResourceDefinition"):
                crds.append({**doc, "status": _ESTABLISHED})  # given: taken as installed
            elif key == ("gpuctrl.io/v1alpha1", "PodPolicy"):
                _check(load_pod_policy, document, problems)
            else:
                problems.append(Problem(document.where(), f"unexpected object {key[0]}/{key[1]}"))
    if len(policies) != 1 and not unreadable:  # an unreadable file may hold it: said already
        found = ", ".join(d.where() for d in policies) or "none"
        problems.append(Problem("input", f"expected one ClusterPolicy, found {found}"))
    policy = _check(load_cluster_policy, policies[0], problems) if len(policies) == 1 else None
    try:
        facts = ClusterFacts.from_objects(namespace, nodes, config_maps, crds)
    except (KeyError, TypeError, ValueError) as error:
        problems.append(Problem("input", f"a Node, ConfigMap or CRD is malformed: {error}"))
    if problems or policy is None:
        raise InvalidPolicy(problems)
    return RenderInput(policy, facts)


@dataclass(frozen=True)
class _Document:
    """One YAML document of an input file: its content and the node tree it was built from
    (which knows each value's line)."""

    path: Path
    content: dict[str, Any]
    node: yaml.Node

    def where(self, field: str = "") -> str:
        """``file:line`` of the document, or of ``field`` (a wire path) as far as it is found."""
        return f"{self.path}:{_line(self.node, field)}"


def _documents(path: Path, problems: list[Problem]) -> list[_Document] | None:
    """The mapping documents of ``path``; None (after adding one problem) when it cannot be
    read or is not YAML."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        problems.append(Problem(str(path), f"cannot read: {reason}"))
        return None
    loader = yaml.SafeLoader(text)
    found: list[_Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            doc = None if node is None else loader.construct_document(node)
            if node is None or doc is None:
                continue
            if not isinstance(doc, dict):
                line = node.start_mark.line + 1
                problems.append(Problem(f"{path}:{line}", "a document is not a mapping"))
                continue
            found.append(_Document(path, doc, node))
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problems.append(Problem(where, f"not valid YAML: {error.problem or error.context}"))
        return None
    except yaml.YAMLError as error:
        problems.append(Problem(str(path), f"not valid YAML: {error}"))
        return None
    finally:
        loader.dispose()
    return found


_STEP = re.compile(r"([^.\[]+)|\[([^\]]*)\]")


def _line(node: yaml.Node, field: str) -> int:
    """The 1-based line of ``field`` (``spec.a.b[0]``, ``labels[some/key]``) under ``node``, or
    of the deepest part of it found."""
    for name, index in _STEP.findall(field):
        step = name or index
        child = None
        if isinstance(node, yaml.MappingNode):
            child = next((v for k, v in node.value if k.value == step), None)
        elif isinstance(node, yaml.SequenceNode) and step.isdigit() and int(step) < len(node.value):
            child = node.value[int(step)]
        if child is None:
            break
        node = child
    return node.start_mark.line + 1


def _check(
    load: Callable[[dict[str, Any]], _Loaded],
    document: _Document,
    problems: list[Problem],
) -> _Loaded | None:
    """``load(document)``, or None after adding its problems, each at its line."""
    try:
        return load(document.content)
    except InvalidPolicy as error:
        found = (Problem(f"{document.where(p.path)}: {p.path}", p.message) for p in error.problems)
        problems.extend(found)
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
