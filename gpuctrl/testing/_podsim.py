"""The lifecycle of one pod on a simulated kubelet, as a pure discrete-event state machine.

`new_pod` starts a pod at a time; `advance(pod, now)` applies, in time order, every transition due
by `now`; `next_due(pod)` says when the next one is (None: nothing more will happen by itself);
`_podstatus.pod_status(pod)` renders the `status` a real kubelet would report. Timestamps come
from the transition times, not from the time `advance` was called, so a late caller sees the same
history.

The lifecycle follows the kubelet: init containers run one after another, each to exit 0
(a failure restarts it unless restartPolicy is Never, which fails the pod); then all containers
start together. A container is ContainerCreating for a moment, then Running (or ErrImagePull ->
ImagePullBackOff if its image cannot be pulled), then, unless it never exits, Terminated with its
exit code; restartPolicy decides whether it restarts after a CrashLoopBackOff (restartCount + 1).
The pod phase is computed as the kubelet's getPhase does; Succeeded and Failed are final.

A container with a startup probe is `started` once the probe passes (`_probe`): a simulated one
passes at the first probe after its behavior's `startup_seconds` of running, or is killed (exit
code 137) when the probe's failure threshold is used up first; until then it is not ready.

A sidecar (an init container with ``restartPolicy: Always``, Kubernetes 1.29+) starts in its turn
among the init containers, and the next one starts as soon as it has started. It is restarted
after every exit, whatever its code and the pod's restartPolicy, and counts for Ready like a
container; Initialized only needs it started, and the phase ignores it. Once the pod's phase is
final (its containers will not run again), the kubelet stops the sidecars that still run: a
simulated one exits 0 at that moment, as a sidecar that handles SIGTERM does; a process-backed
one is the kubelet's to stop, last declared first (`_podprocs.PodProcesses.stop`), and its
process's exit ends its run as any exit does. One waiting to restart is not restarted.

A container whose behavior is `ContainerBehavior.process` has no timers while it is creating or
running: the kubelet starts its process and reports what happens with `process_started`,
`process_failed`, `probe_result` (startup and readiness) and `process_exited`; `rebooted` is
the pod again after its node lost power.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ._behavior import ContainerBehavior
from ._probe import STARTUP_KILL_EXIT_CODE, Probe

__all__ = [
    "NOT_STARTED",
    "Condition",
    "ContainerSim",
    "PodSim",
    "ProbeKind",
    "Termination",
    "advance",
    "config_error_pod",
    "new_pod",
    "next_due",
    "pod_conditions",
    "pod_phase",
    "probe_result",
    "process_exited",
    "process_failed",
    "process_started",
    "rebooted",
    "sidecar_names",
]

CREATE_SECONDS = 0.05  # ContainerCreating -> Running: images are "present"
PULL_BACKOFF_SECONDS = 0.5  # ErrImagePull -> ImagePullBackOff
RESTART_BACKOFF_SECONDS = 0.2  # doubles with every restart ...
RESTART_BACKOFF_CAP_SECONDS = 5.0  # ... up to this
CONFIG_RETRY_SECONDS = 1.0  # a process that could not start is tried again after this

Seconds = datetime.timedelta
ProbeKind = Literal["startup", "readiness"]
Condition = tuple[bool, str | None, str | None]
"""A condition's status, reason and message."""
_KINDS = ("initContainers", "containers")
NOT_STARTED = ("pending", "creating", "pull-failed", "pull-backoff", "config-error")
State = Literal[
    "pending",  # not started yet: waits for earlier init containers (PodInitializing)
    "creating",  # ContainerCreating
    "pull-failed",  # ErrImagePull
    "pull-backoff",  # ImagePullBackOff; stays so
    "running",
    "crash-backoff",  # CrashLoopBackOff after a termination, before the restart
    "terminated",  # final unless restarted
    "config-error",  # CreateContainerConfigError; stays so
]


@dataclass(frozen=True)
class Termination:
    """One finished run of a container."""

    exit_code: int
    started_at: datetime.datetime
    finished_at: datetime.datetime
    container_id: str


@dataclass(frozen=True)
class ContainerSim:
    """One container (or init container) and where it is in its lifecycle."""

    name: str
    image: str
    init: bool
    behavior: ContainerBehavior
    sidecar: bool = False  # an init container with restartPolicy Always: runs beside the others
    state: State = "pending"
    since: datetime.datetime | None = None  # when `state` was entered
    restart_count: int = 0
    termination: Termination | None = None  # of the current run, once state is "terminated"
    last: Termination | None = None  # the previous run (lastState), once restarted
    probed_ready: bool | None = None  # a process's readiness probe result; None: no probe
    startup: Probe | None = None  # its startup probe
    probed_started: bool = False  # whether the startup probe has passed in this run

    def due(self, restart_policy: str) -> datetime.datetime | None:
        """When this container's next transition happens, None if it never does by itself."""
        if self.since is None:
            return None
        process = self.behavior.process and not self.behavior.image_pull_fails
        delay: float | None = {
            "creating": None if process else CREATE_SECONDS,
            "pull-failed": PULL_BACKOFF_SECONDS,
            "running": None if process else self._running_seconds(),
            "crash-backoff": self.backoff_seconds,
            "terminated": 0.0 if self._restarts(restart_policy) else None,
            "config-error": CONFIG_RETRY_SECONDS if process else None,
        }.get(self.state)
        return None if delay is None else self._due_at(delay)

    def fire(self, at: datetime.datetime, uid: str) -> ContainerSim:
        """The container after its due transition, which happens at `at`."""
        if self.state == "creating" and self.behavior.image_pull_fails:
            return self._enter("pull-failed", at)
        if self.state == "pull-failed":
            return self._enter("pull-backoff", at)
        if self.state == "config-error":  # a process: the kubelet tries to start it again
            return self._enter("creating", at)
        if self.state == "crash-backoff" and self.behavior.process:  # the kubelet starts it
            return dataclasses.replace(
                self._enter("creating", at), restart_count=self.restart_count + 1
            )
        if self.state in ("creating", "crash-backoff"):
            restarts = self.restart_count + (self.state == "crash-backoff")
            return dataclasses.replace(self._enter("running", at), restart_count=restarts)
        if self.state == "running":
            verdict = self._startup_verdict()
            if verdict is not None and self._due_at(verdict[0]) == at:
                if verdict[1]:
                    return dataclasses.replace(self, probed_started=True)
                return self.exited(STARTUP_KILL_EXIT_CODE, at, uid)
            return self.exited(self.behavior.exit_code, at, uid)
        return dataclasses.replace(self._enter("crash-backoff", at), last=self.termination)

    def _running_seconds(self) -> float | None:
        """When, after it began running, a simulated container's next transition is due: its
        startup probe's verdict, or the end of its run."""
        ends = None if self.behavior.never_exits else self.behavior.run_seconds
        verdict = self._startup_verdict()
        if verdict is None:
            return ends
        return verdict[0] if ends is None else min(verdict[0], ends)

    def _startup_verdict(self) -> tuple[float, bool] | None:
        """The startup probe's verdict on this run, when still to come."""
        if self.startup is None or self.probed_started:
            return None
        return self.startup.startup_verdict(self.behavior.startup_seconds)

    def _due_at(self, seconds: float) -> datetime.datetime:
        assert self.since is not None
        return self.since + Seconds(seconds=seconds)

    def exited(self, exit_code: int, at: datetime.datetime, uid: str) -> ContainerSim:
        """The running container after its run ended with `exit_code` at `at`."""
        assert self.since is not None
        run = Termination(exit_code, self.since, at, self.container_id(uid))
        return dataclasses.replace(self._enter("terminated", at), termination=run)

    def start(self, at: datetime.datetime) -> ContainerSim:
        """A pending container begins ContainerCreating."""
        return self._enter("creating", at)

    @property
    def backoff_seconds(self) -> float:
        """How long a CrashLoopBackOff lasts before the next restart."""
        return min(RESTART_BACKOFF_SECONDS * 2.0**self.restart_count, RESTART_BACKOFF_CAP_SECONDS)

    @property
    def succeeded(self) -> bool:
        """Terminated with exit code 0."""
        return (
            self.state == "terminated"
            and self.termination is not None
            and (self.termination.exit_code == 0)
        )

    @property
    def started(self) -> bool:
        """What the kubelet reports as `started`: running, and its startup probe passed."""
        return self.state == "running" and (self.startup is None or self.probed_started)

    @property
    def initialized(self) -> bool:
        """Whether this init container lets the next one start: exited 0, or, a sidecar,
        started."""
        return self.started if self.sidecar else self.succeeded

    @property
    def ready(self) -> bool:
        """What the kubelet reports as `ready`: running and passing readiness (a regular init
        container: done)."""
        if self.init and not self.sidecar:
            return self.succeeded
        if self.behavior.process:
            return self.started and self.probed_ready is not False
        return self.started and self.behavior.ready

    def container_id(self, uid: str) -> str:
        """The runtime's id of the current run."""
        digest = hashlib.sha256(f"{uid}/{self.name}/{self.restart_count}".encode()).hexdigest()
        return f"containerd://{digest}"

    def _restarts(self, restart_policy: str) -> bool:
        if self.termination is None:
            return False
        if self.sidecar:
            return True
        if restart_policy == "Never":
            return False
        return (restart_policy == "Always" and not self.init) or self.termination.exit_code != 0

    def _enter(self, state: State, at: datetime.datetime) -> ContainerSim:
        return dataclasses.replace(
            self, state=state, since=at, termination=None, probed_ready=None, probed_started=False
        )


@dataclass(frozen=True)
class PodSim:
    """A pod as its kubelet runs it."""

    uid: str
    restart_policy: str
    started_at: datetime.datetime
    host_ip: str
    pod_ip: str
    containers: tuple[ContainerSim, ...]  # init containers first, in order
    config_error: str | None = None
    # Condition type -> (status, the time it took that status).
    conditions: Mapping[str, tuple[bool, datetime.datetime]] = dataclasses.field(
        default_factory=dict
    )

    @property
    def init_containers(self) -> tuple[ContainerSim, ...]:
        """The init containers, sidecars among them, in order."""
        return tuple(c for c in self.containers if c.init)

    @property
    def regular_init_containers(self) -> tuple[ContainerSim, ...]:
        """The init containers that run to completion (not sidecars), in order."""
        return tuple(c for c in self.containers if c.init and not c.sidecar)

    @property
    def sidecars(self) -> tuple[ContainerSim, ...]:
        """The sidecars (init containers with restartPolicy Always), in order."""
        return tuple(c for c in self.containers if c.sidecar)

    @property
    def app_containers(self) -> tuple[ContainerSim, ...]:
        """The (regular) containers."""
        return tuple(c for c in self.containers if not c.init)


def new_pod(
    pod: Mapping[str, Any],
    behaviors: Mapping[str, ContainerBehavior],
    *,
    host_ip: str,
    pod_ip: str,
    now: datetime.datetime,
) -> PodSim:
    """The simulation of `pod` (a JSON dict) as its kubelet starts it at `now`."""
    spec = pod["spec"]
    sidecars = set(sidecar_names(pod))
    containers = tuple(
        ContainerSim(
            c["name"],
            c.get("image", ""),
            kind == "initContainers",
            behaviors[c["name"]],
            sidecar=c["name"] in sidecars,
            startup=Probe.of(c, "startupProbe"),
        )
        for kind in _KINDS
        for c in spec.get(kind) or []
    )
    sim = PodSim(
        uid=pod["metadata"]["uid"],
        restart_policy=spec.get("restartPolicy", "Always"),
        started_at=now,
        host_ip=host_ip,
        pod_ip=host_ip if spec.get("hostNetwork") else pod_ip,
        containers=containers,
    )
    return _settle(sim, now)


def sidecar_names(pod: Mapping[str, Any]) -> list[str]:
    """The names of `pod`'s sidecars (init containers with restartPolicy Always), in order."""
    inits = pod["spec"].get("initContainers") or []
    return [c["name"] for c in inits if c.get("restartPolicy") == "Always"]


def config_error_pod(
    pod: Mapping[str, Any], message: str, *, host_ip: str, now: datetime.datetime
) -> PodSim:
    """A pod whose containers cannot be created (CreateContainerConfigError with `message`)."""
    spec = pod["spec"]
    names = [c["name"] for kind in _KINDS for c in spec.get(kind) or []]
    behaviors = dict.fromkeys(names, ContainerBehavior())
    sim = new_pod(pod, behaviors, host_ip=host_ip, pod_ip="", now=now)
    containers = tuple(
        dataclasses.replace(c, state="config-error", since=now) for c in sim.containers
    )
    return dataclasses.replace(sim, containers=containers, config_error=message)


def process_started(
    sim: PodSim, name: str, at: datetime.datetime, *, probed: bool = False
) -> PodSim:
    """The process of the creating container `name` runs since `at` (unready until its first
    successful probe when `probed`)."""

    def start(container: ContainerSim) -> ContainerSim:
        if container.state != "creating":
            return container
        running = container._enter("running", at)
        return dataclasses.replace(running, probed_ready=False if probed else None)

    return _change(sim, name, at, start)


def process_failed(sim: PodSim, name: str, message: str, at: datetime.datetime) -> PodSim:
    """The process of container `name` cannot be started (CreateContainerConfigError, tried
    again after `CONFIG_RETRY_SECONDS`, as a kubelet does once the ConfigMap is there)."""
    changed = _change(sim, name, at, lambda c: c._enter("config-error", at))
    return dataclasses.replace(changed, config_error=message)


def process_exited(sim: PodSim, name: str, exit_code: int, at: datetime.datetime) -> PodSim:
    """The process of the running container `name` exited with `exit_code` at `at`."""

    def exit_(container: ContainerSim) -> ContainerSim:
        if container.state != "running":
            return container
        return container.exited(exit_code, at, sim.uid)

    return _change(sim, name, at, exit_)


def probe_result(
    sim: PodSim, name: str, kind: ProbeKind, passed: bool, at: datetime.datetime
) -> PodSim:
    """Container `name`'s `kind` probe now says `passed` (a startup probe says it once)."""

    def probe(container: ContainerSim) -> ContainerSim:
        if container.state != "running":
            return container
        if kind == "startup":
            return dataclasses.replace(container, probed_started=passed)
        return dataclasses.replace(container, probed_ready=passed)

    return _change(sim, name, at, probe)


def rebooted(sim: PodSim, restarted: PodSim) -> PodSim:
    """`restarted` (the pod started anew on its rebooted node) counting the runs of `sim`,
    the pod as it was when the power went: every container that had started restarts."""
    counts = {c.name: c.restart_count + (c.state not in NOT_STARTED) for c in sim.containers}
    containers = tuple(
        dataclasses.replace(c, restart_count=counts.get(c.name, 0)) for c in restarted.containers
    )
    return dataclasses.replace(restarted, containers=containers)


def _change(
    sim: PodSim, name: str, at: datetime.datetime, change: Callable[[ContainerSim], ContainerSim]
) -> PodSim:
    containers = tuple(change(c) if c.name == name else c for c in sim.containers)
    return _settle(dataclasses.replace(sim, containers=containers), at)


def advance(sim: PodSim, now: datetime.datetime) -> PodSim:
    """`sim` after every transition due by `now`, applied in time order."""
    while True:
        due = next_due(sim)
        if due is None or due > now:
            return sim
        index = next(i for i, c in enumerate(sim.containers) if c.due(sim.restart_policy) == due)
        containers = list(sim.containers)
        containers[index] = containers[index].fire(due, sim.uid)
        sim = _settle(dataclasses.replace(sim, containers=tuple(containers)), due)


def next_due(sim: PodSim) -> datetime.datetime | None:
    """When the next transition is due; None once the pod is finished or stuck."""
    if pod_phase(sim) in ("Succeeded", "Failed"):
        return None
    times = [t for c in sim.containers if (t := c.due(sim.restart_policy)) is not None]
    return min(times, default=None)


def pod_phase(sim: PodSim) -> str:
    """The phase, computed as the kubelet's getPhase does: sidecars do not count (until they
    have started, the containers wait in Pending)."""
    for container in sim.regular_init_containers:
        failed = container.state == "terminated" and not container.succeeded
        if failed and container.due(sim.restart_policy) is None:
            return "Failed"
    if not all(c.succeeded for c in sim.regular_init_containers):
        return "Pending"
    containers = sim.app_containers
    if any(c.state in NOT_STARTED for c in containers):
        return "Pending"
    if any(c.state == "running" for c in containers):
        return "Running"
    if sim.restart_policy == "Always" or any(c.state == "crash-backoff" for c in containers):
        return "Running"
    if all(c.succeeded for c in containers):
        return "Succeeded"
    return "Failed" if sim.restart_policy == "Never" else "Running"


def _settle(sim: PodSim, at: datetime.datetime) -> PodSim:
    """Start the containers whose turn has come, stop the sidecars of a finished pod, then
    record condition changes, all at `at`."""
    containers = list(sim.containers)
    for index, container in enumerate(containers):
        if container.state != "pending":
            continue
        # Only the init container just before counts, as with the kubelet: once it has let
        # the next one start, nothing it does later holds anything back (a sidecar restarting).
        earlier_inits = [c for c in containers[:index] if c.init]
        if not earlier_inits or earlier_inits[-1].initialized:
            containers[index] = container.start(at)
        if container.init:
            break  # one init container at a time
    sim = dataclasses.replace(sim, containers=tuple(containers))
    if pod_phase(sim) in ("Succeeded", "Failed"):
        sim = _stop_sidecars(sim, at)
    conditions = dict(sim.conditions)
    for kind, (status, _reason, _message) in pod_conditions(sim).items():
        if kind not in conditions or conditions[kind][0] != status:
            conditions[kind] = (status, at)
    return dataclasses.replace(sim, conditions=conditions)


def _stop_sidecars(sim: PodSim, at: datetime.datetime) -> PodSim:
    """`sim` with its running simulated sidecars exited 0 at `at` (all at one moment: the
    kubelet's order, the reverse of declaration, shows only for processes, which run on until
    the kubelet's SIGTERM ends them)."""

    def stop(container: ContainerSim) -> ContainerSim:
        if not (container.sidecar and container.started) or container.behavior.process:
            return container
        return container.exited(0, at, sim.uid)

    return dataclasses.replace(sim, containers=tuple(stop(c) for c in sim.containers))


def pod_conditions(sim: PodSim) -> dict[str, Condition]:
    """Each condition's (status, reason, message), as the kubelet computes them."""
    incomplete = [c.name for c in sim.init_containers if not c.initialized]
    # Once a container has run, a sidecar restarting does not make the pod uninitialized.
    if any(c.state in ("running", "terminated") for c in sim.app_containers):
        incomplete = []
    unready = [c.name for c in (*sim.sidecars, *sim.app_containers) if not c.ready]
    initialized: Condition = (True, None, None)
    if incomplete:
        message = f"containers with incomplete status: [{' '.join(incomplete)}]"
        initialized = (False, "ContainersNotInitialized", message)
    ready: Condition = (True, None, None)
    if pod_phase(sim) in ("Succeeded", "Failed"):
        ready = (False, "PodCompleted", None)
    elif unready:
        ready = (
            False,
            "ContainersNotReady",
            f"containers with unready status: [{' '.join(unready)}]",
        )
    return {
        "Initialized": initialized,
        "Ready": ready,
        "ContainersReady": ready,
        "PodScheduled": (True, None, None),
    }
