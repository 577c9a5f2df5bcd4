"""What a simulated container does, chosen per pod and container.

In order, the first that applies wins:
1. the pod annotation `testing.gpuctrl.io/behavior`, a JSON object from container name to a
   behavior, e.g. ``{"istio-proxy": {"neverExits": true}, "cuda": {"exitCode": 1}}``;
2. rules added by `SimulatedKubelet.set_behavior` (by pod, container name and image), the
   most recent first;
3. the default: containers of pods with restartPolicy Always (DaemonSets, Deployments) run
   forever and are Ready; init containers and containers of Never/OnFailure pods exit 0 after
   a short run.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

__all__ = [
    "BEHAVIOR_ANNOTATION",
    "BehaviorError",
    "BehaviorRules",
    "ContainerBehavior",
    "PodMatch",
]

BEHAVIOR_ANNOTATION = "testing.gpuctrl.io/behavior"

PodMatch = Callable[[Mapping[str, Any]], bool]
"""A predicate on a pod (the object as a JSON dict)."""


class ContainerBehavior(BaseModel):
    """What one container does once started.

    It runs `run_seconds`, then exits with `exit_code` - unless `never_exits` (a server, a mesh
    sidecar). With `image_pull_fails` it never starts: ErrImagePull, then ImagePullBackOff.
    `ready` is whether it passes its readiness probe while running; `startup_seconds` is how long
    it runs before its startup probe (where it has one) would pass. `log` is what it writes
    (every run), served as a kubelet serves ``kubectl logs``. With `process` the container is
    not simulated but run for real as a local process in a bubblewrap sandbox (see
    `gpuctrl.testing._container`): its exit code, log and probes are the process's, and the
    other fields but `image_pull_fails` and `image_files` are ignored. `image_files`, a folder,
    stands in for the image's files where this machine lacks the image: each file under it is
    shown read-only at its path below the folder (``<folder>/usr/bin/x`` as ``/usr/bin/x``).
    In the annotation the fields are camelCase (`exitCode`, `runSeconds`, `neverExits`,
    `imagePullFails`, `ready`, `startupSeconds`, `log`, `process`, `imageFiles`).
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    exit_code: int = Field(default=0, ge=0, le=255)
    run_seconds: float = Field(default=0.2, ge=0)
    never_exits: bool = False
    image_pull_fails: bool = False
    ready: bool = True
    startup_seconds: float = Field(default=0, ge=0)
    log: str = ""
    process: bool = False
    image_files: Path | None = None


_RUNS_FOREVER = ContainerBehavior(never_exits=True)
_RUNS_BRIEFLY = ContainerBehavior()


class BehaviorError(ValueError):
    """A pod's behavior annotation is not valid JSON, names unknown containers or fields."""


@dataclass(frozen=True)
class _Rule:
    behavior: ContainerBehavior
    match: PodMatch | None
    container: str | None
    image: str | None  # a glob (fnmatch) the container's image must match

    def applies(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> bool:
        if self.container is not None and self.container != container["name"]:
            return False
        image = container.get("image", "")
        if self.image is not None and not fnmatch.fnmatchcase(image, self.image):
            return False
        return self.match is None or self.match(pod)


class BehaviorRules:
    """The rules set programmatically, and the resolution of a container's behavior."""

    def __init__(self) -> None:
        self._rules: list[_Rule] = []

    def add(
        self,
        behavior: ContainerBehavior,
        match: PodMatch | None,
        container: str | None,
        image: str | None = None,
    ) -> None:
        """Apply `behavior` to `container` (None: any) whose image matches the glob `image`
        (None: any) of pods `match` accepts (None: any)."""
        self._rules.append(_Rule(behavior, match, container, image))

    def for_pod(self, pod: Mapping[str, Any]) -> dict[str, ContainerBehavior]:
        """The behavior of every init container and container of `pod`, by name.

        Raises BehaviorError when the pod's annotation is invalid.
        """
        annotated = annotation_behaviors(pod)
        spec = pod.get("spec", {})
        always = spec.get("restartPolicy", "Always") == "Always"
        result: dict[str, ContainerBehavior] = {}
        for kind, default in (
            ("initContainers", _RUNS_BRIEFLY),
            ("containers", _RUNS_FOREVER if always else _RUNS_BRIEFLY),
        ):
            for container in spec.get(kind) or []:
                name = container["name"]
                result[name] = annotated.get(name) or self._from_rules(pod, container) or default
        return result

    def _from_rules(
        self, pod: Mapping[str, Any], container: Mapping[str, Any]
    ) -> ContainerBehavior | None:
        for rule in reversed(self._rules):
            if rule.applies(pod, container):
                return rule.behavior
        return None


def annotation_behaviors(pod: Mapping[str, Any]) -> dict[str, ContainerBehavior]:
    """The behaviors set by the pod's annotation, by container name (empty without one)."""
    metadata = pod.get("metadata", {})
    text = (metadata.get("annotations") or {}).get(BEHAVIOR_ANNOTATION)
    if text is None:
        return {}
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise BehaviorError(f"annotation {BEHAVIOR_ANNOTATION} is not JSON: {error}") from error
    if not isinstance(document, dict):
        raise BehaviorError(
            f"annotation {BEHAVIOR_ANNOTATION} must be a JSON object of container name to "
            f"behavior, got {type(document).__name__}"
        )
    spec = pod.get("spec", {})
    names = {c["name"] for kind in ("initContainers", "containers") for c in spec.get(kind) or []}
    unknown = sorted(set(document) - names)
    if unknown:
        raise BehaviorError(
            f"annotation {BEHAVIOR_ANNOTATION} names containers not in the pod: "
            f"{', '.join(unknown)} (the pod has: {', '.join(sorted(names))})"
        )
    try:
        return {name: ContainerBehavior.model_validate(value) for name, value in document.items()}
    except ValidationError as error:
        raise BehaviorError(f"annotation {BEHAVIOR_ANNOTATION} is invalid: {error}") from error
