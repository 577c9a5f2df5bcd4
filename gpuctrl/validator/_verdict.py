"""The verdict on a workload pod, from its status alone (pure).

Only the containers the template defines count: a container injected by a mesh (an
``istio-proxy`` that never exits, as a container or as a native sidecar, a ``linkerd-init``)
can neither pass nor hold a check. A sidecar the template defines itself (an init container
with ``restartPolicy: Always``) is never waited for either: it runs until the kubelet stops it
once the others are done, and is restarted whatever its exit code, so only an image it cannot
pull (which keeps the containers after it from starting) fails the check.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_MAX_RESTARTS",
    "NODE_KILL_REASONS",
    "Evicted",
    "Failed",
    "Passed",
    "Pending",
    "Verdict",
    "verdict",
]

# A template container restarted more often than this is failing, not flaking.
DEFAULT_MAX_RESTARTS = 3

# Waiting reasons that mean the image will not arrive without someone fixing something.
_PULL_FAILURES = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}
)

# Reasons a kubelet gives a pod it killed for its own sake (phase Failed), not the pod's:
# eviction under node pressure, graceful node shutdown (1.20: NodeShutdown; later: Terminated),
# a device or resource admission the node could not honour after all, and preemption to admit
# a critical pod ("Preempting", pkg/kubelet/preemption). Such a pod has disappeared in all
# but name.
NODE_KILL_REASONS = frozenset(
    {"Evicted", "NodeShutdown", "Terminated", "UnexpectedAdmissionError", "Preempting"}
)


@dataclass(frozen=True)
class Pending:
    """No verdict yet; ``detail`` says what the pod is waiting for (for a timeout message)."""

    detail: str


@dataclass(frozen=True)
class Passed:
    """Every template container terminated with exit code 0."""


@dataclass(frozen=True)
class Failed:
    """The check failed: a ``reason`` word, a ``message`` naming what failed, and the container
    whose log may explain it (None when no container is to blame); ``previous`` when that log is
    of the container's previous run (it restarted since it failed)."""

    reason: str
    message: str
    container: str | None = None
    previous: bool = False


@dataclass(frozen=True)
class Evicted:
    """No verdict: the node killed the pod (``reason`` is one of `NODE_KILL_REASONS`) before
    its template containers finished; the caller deletes it and tries a new one."""

    reason: str
    message: str


Verdict = Pending | Passed | Failed | Evicted


def verdict(
    pod: dict[str, Any],
    template_containers: frozenset[str],
    max_restarts: int = DEFAULT_MAX_RESTARTS,
) -> Verdict:
    """Judge ``pod`` (a Pod as the API returns it, camelCase keys).

    Passed when every container and init container named in ``template_containers`` but the
    sidecars has terminated with exit code 0. Failed when one of them terminated non-zero and
    the pod's restartPolicy will not retry it, restarted more than ``max_restarts`` times after
    failing, or cannot pull its image (a sidecar: only this), or when the pod itself failed.
    Pending otherwise, and also while the pod is being deleted without having passed: its
    containers are being killed.
    """
    result = _judge(pod, template_containers, max_restarts)
    if isinstance(result, Failed) and pod.get("metadata", {}).get("deletionTimestamp"):
        return Pending("the pod is being deleted")
    return result


def _judge(pod: dict[str, Any], template_containers: frozenset[str], max_restarts: int) -> Verdict:
    restart_policy = pod.get("spec", {}).get("restartPolicy", "Always")
    statuses = {status["name"]: status for status in _container_statuses(pod)}
    sidecars = template_containers & _sidecars(pod)
    passed = all(_exited_zero(statuses.get(name)) for name in template_containers - sidecars)
    status = pod.get("status", {})
    if not passed and status.get("phase") == "Failed" and status.get("reason") in NODE_KILL_REASONS:
        return Evicted(status["reason"], status.get("message") or "the node killed the pod")
    for name in sorted(template_containers & statuses.keys()):
        failure = _pull_failure(statuses[name])
        if failure is None and name not in sidecars:
            failure = _exit_failure(statuses[name], restart_policy, max_restarts)
        if failure is not None:
            return failure
    if passed:
        return Passed()
    if status.get("phase") == "Failed":
        reason = status.get("reason") or "PodFailed"
        message = status.get("message") or "the pod failed"
        return Failed(reason, f"pod failed: {reason}: {message}")
    return Pending(_pending_detail(status, template_containers, statuses))


def _sidecars(pod: dict[str, Any]) -> frozenset[str]:
    """The names of the pod's sidecars: its init containers with restartPolicy Always."""
    inits = pod.get("spec", {}).get("initContainers") or []
    return frozenset(c["name"] for c in inits if c.get("restartPolicy") == "Always")


def _container_statuses(pod: dict[str, Any]) -> Iterator[dict[str, Any]]:
    status = pod.get("status", {})
    yield from status.get("initContainerStatuses") or []
    yield from status.get("containerStatuses") or []


def _exited_zero(status: dict[str, Any] | None) -> bool:
    terminated = (status or {}).get("state", {}).get("terminated")
    return terminated is not None and terminated.get("exitCode") == 0


def _pull_failure(status: dict[str, Any]) -> Failed | None:
    waiting = status.get("state", {}).get("waiting") or {}
    if waiting.get("reason") not in _PULL_FAILURES:
        return None
    return Failed(
        waiting["reason"],
        f"container {status['name']}: image {status.get('image')} cannot be pulled: "
        f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": "),
    )


def _exit_failure(status: dict[str, Any], restart_policy: str, max_restarts: int) -> Failed | None:
    name = status["name"]
    state = status.get("state", {})
    terminated = state.get("terminated")
    if terminated is not None and terminated.get("exitCode") != 0 and restart_policy == "Never":
        return Failed(terminated.get("reason") or "Error", _exit_message(name, terminated), name)
    last = (status.get("lastState") or {}).get("terminated")
    failed = terminated if terminated is not None and terminated.get("exitCode") != 0 else last
    if failed is not None and status.get("restartCount", 0) > max_restarts:
        return Failed(
            "CrashLoop",
            f"{_exit_message(name, failed)}; restarted {status['restartCount']} times",
            name,
            previous=failed is last,
        )
    return None


def _exit_message(name: str, terminated: dict[str, Any]) -> str:
    message = (
        f"container {name} exited with code {terminated.get('exitCode')} "
        f"({terminated.get('reason') or 'Error'})"
    )
    if terminated.get("message"):
        message += f": {terminated['message']}"
    return message


def _pending_detail(
    status: dict[str, Any], template_containers: frozenset[str], statuses: dict[str, Any]
) -> str:
    parts = [f"phase {status.get('phase', 'unknown')}"]
    for name in sorted(template_containers):
        state = (statuses.get(name) or {}).get("state") or {}
        if not state:
            parts.append(f"{name}: no status yet")
            continue
        kind, detail = next(iter(state.items()))
        reason = (detail or {}).get("reason")
        parts.append(f"{name}: {kind}" + (f" ({reason})" if reason else ""))
    return "; ".join(parts)
