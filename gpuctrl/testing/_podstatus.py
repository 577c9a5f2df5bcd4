"""The `status` a real kubelet reports for a simulated pod (pure rendering of a `PodSim`)."""

from __future__ import annotations

import datetime
import hashlib
from typing import Any

from gpuctrl.runtime import kube_time

from ._podsim import (
    NOT_STARTED,
    Condition,
    ContainerSim,
    PodSim,
    Termination,
    pod_conditions,
    pod_phase,
)

__all__ = ["pod_status"]


def pod_status(sim: PodSim) -> dict[str, Any]:
    """The pod's `status` as its kubelet reports it (to be sent as a merge patch)."""
    status: dict[str, Any] = {
        "phase": pod_phase(sim),
        "conditions": [
            _condition_status(kind, value, sim.conditions[kind][1])
            for kind, value in pod_conditions(sim).items()
        ],
        "hostIP": sim.host_ip,
        "startTime": kube_time(sim.started_at),
        "containerStatuses": [_container_status(c, sim) for c in sim.app_containers],
    }
    if sim.pod_ip:
        status["podIP"] = sim.pod_ip
        status["podIPs"] = [{"ip": sim.pod_ip}]
    if sim.init_containers:
        status["initContainerStatuses"] = [_container_status(c, sim) for c in sim.init_containers]
    return status


def _condition_status(kind: str, value: Condition, since: datetime.datetime) -> dict[str, Any]:
    status, reason, message = value
    condition: dict[str, Any] = {
        "type": kind,
        "status": "True" if status else "False",
        "lastProbeTime": None,
        "lastTransitionTime": kube_time(since),
    }
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _container_status(container: ContainerSim, sim: PodSim) -> dict[str, Any]:
    pulled = container.state not in NOT_STARTED
    status: dict[str, Any] = {
        "name": container.name,
        "image": container.image,
        "imageID": _image_id(container.image) if pulled else "",
        "ready": container.ready,
        "restartCount": container.restart_count,
        "started": container.started,
        "state": _state(container, sim),
        "lastState": {"terminated": _terminated(container.last)} if container.last else {},
    }
    if pulled:
        status["containerID"] = container.container_id(sim.uid)
    return status


def _state(container: ContainerSim, sim: PodSim) -> dict[str, Any]:
    image = container.image
    waiting: dict[str, tuple[str, str | None]] = {
        "pending": ("PodInitializing", None),
        "creating": ("ContainerCreating", None),
        "pull-failed": (
            "ErrImagePull",
            f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
            f'failed to resolve reference "{image}": {image}: not found',
        ),
        "pull-backoff": ("ImagePullBackOff", f'Back-off pulling image "{image}"'),
        "crash-backoff": (
            "CrashLoopBackOff",
            f"back-off {container.backoff_seconds:g}s restarting failed container={container.name}",
        ),
        "config-error": ("CreateContainerConfigError", sim.config_error),
    }
    if container.state in waiting:
        reason, message = waiting[container.state]
        return {
            "waiting": {"reason": reason, "message": message} if message else {"reason": reason}
        }
    if container.state == "running":
        assert container.since is not None
        return {"running": {"startedAt": kube_time(container.since)}}
    assert container.termination is not None
    return {"terminated": _terminated(container.termination)}


def _terminated(termination: Termination) -> dict[str, Any]:
    return {
        "exitCode": termination.exit_code,
        "reason": "Completed" if termination.exit_code == 0 else "Error",
        "startedAt": kube_time(termination.started_at),
        "finishedAt": kube_time(termination.finished_at),
        "containerID": termination.container_id,
    }


def _image_id(image: str) -> str:
    """What containerd reports for a pulled image: the repository and a (made-up) digest."""
    repository = image.split("@", 1)[0]
    name, _, tag = repository.rpartition(":")
    if name and "/" not in tag:
        repository = name
    return f"{repository}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"
