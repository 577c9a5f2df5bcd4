"""The process-backed containers of one pod: started when their turn comes, watched, stopped.

`PodProcesses.start_due` starts the process of every process-backed container the simulation
has in ContainerCreating (with its environment, mounts and ServiceAccount from `_container`)
and returns the simulation with it running, or with CreateContainerConfigError when it cannot
start. What happens afterwards arrives on `events` as `ProcessEvent`s (an exit, a startup or
readiness probe's verdict) for the kubelet's pod runner to `apply`. Exec probes run inside the
container, timed as `_probe` says; a container whose startup probe fails its failure threshold
is killed. A probe of another kind (HTTP, TCP) passes. `stop` terminates them as a kubelet does
on pod deletion and once a pod is finished (sidecars last, in reverse order), `kill` as a
power cut.
"""

from __future__ import annotations

import asyncio
import datetime
import os
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ._behavior import ContainerBehavior
from ._bwrap import Entry, Mount, host_listing, system_binds
from ._container import (
    ApiRequest,
    Cluster,
    ContainerConfigError,
    PodContext,
    container_env,
    container_mounts,
    default_path,
    expand,
    service_account,
)
from ._nvidia import nvidia_runtime_mounts
from ._podsim import (
    PodSim,
    ProbeKind,
    probe_result,
    process_exited,
    process_failed,
    process_started,
    sidecar_names,
)
from ._probe import Probe
from ._sandboxed import SandboxedProcess, SandboxStartError

__all__ = ["PodProcesses", "ProcessEvent", "image_mounts"]


@dataclass(frozen=True)
class ProcessEvent:
    """Something a container's process did: exited (`value`: exit code) or was probed
    (`value`: passed or not); `run` is the container's restart count when it started."""

    kind: Literal["exited"] | ProbeKind
    container: str
    run: int
    value: int | bool
    at: datetime.datetime


class PodProcesses:
    """The processes of one pod's process-backed containers (current runs, by container)."""

    def __init__(
        self, context: PodContext, cluster: Cluster, request: ApiRequest, system: Sequence[Entry]
    ) -> None:
        self.context = context
        self.events: asyncio.Queue[ProcessEvent] = asyncio.Queue()
        self._cluster = cluster
        self._request = request
        self._system = system
        self._running: dict[str, tuple[int, SandboxedProcess]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # exit watchers
        self._probes: set[asyncio.Task[None]] = set()

    @property
    def alive(self) -> bool:
        """Whether an event is still to come or waits to be applied: a process runs, or has
        exited and its watcher has not yet queued the event (the return code is set a loop
        iteration before that; judged by the return code alone, a quick exit was missed)."""
        return any(not task.done() for task in self._tasks) or not self.events.empty()

    def log_file(self, container: str, run: int) -> Path:
        """Where the output of run `run` of `container` goes."""
        return self.context.log_dir / container / f"{run}.log"

    async def start_due(self, sim: PodSim) -> PodSim:
        """Start every process-backed container `sim` has in ContainerCreating, and each that
        enters it meanwhile (a sidecar that runs lets the next container start)."""
        specs = _containers(self.context.pod)
        for index in range(len(sim.containers)):
            container = sim.containers[index]  # of the latest `sim`
            if not (container.behavior.process and container.state == "creating"):
                continue
            spec = specs[container.name]
            now = _now()
            starting = asyncio.ensure_future(
                self._start(spec, container.behavior, container.restart_count)
            )
            try:
                process = await asyncio.shield(starting)
            except asyncio.CancelledError:  # the pod is gone: so is what was starting
                starting.add_done_callback(self._kill_orphan)
                raise
            except (ContainerConfigError, SandboxStartError) as error:
                sim = process_failed(sim, container.name, str(error), now)
                continue
            # The kubelet probes containers and sidecars, not regular init containers.
            probed = container.sidecar or not container.init
            readiness = Probe.of(spec, "readinessProbe") if probed else None
            sim = process_started(sim, container.name, _now(), probed=readiness is not None)
            self._running[container.name] = (container.restart_count, process)
            run = container.restart_count
            self._spawn(self._tasks, self._watch(container.name, run, process))
            if container.startup is not None or readiness is not None:
                probes = self._probe(container.name, run, process, container.startup, readiness)
                self._spawn(self._probes, probes)
        return sim

    def apply(self, sim: PodSim, event: ProcessEvent) -> PodSim:
        """`sim` after `event` (ignored when it is about an earlier run)."""
        current = next((c for c in sim.containers if c.name == event.container), None)
        if current is None or current.restart_count != event.run:
            return sim
        if event.kind == "exited":
            return process_exited(sim, event.container, int(event.value), event.at)
        return probe_result(sim, event.container, event.kind, bool(event.value), event.at)

    async def stop(self, grace_seconds: float) -> None:
        """Terminate every process as a kubelet does (SIGTERM, then SIGKILL once the grace
        period is over): the sidecars' only once the others' have exited, one after another,
        last declared first. Processes that have exited already are left alone."""
        deadline = asyncio.get_running_loop().time() + grace_seconds
        sidecars = sidecar_names(self.context.pod)
        others = [p for name, (_, p) in self._running.items() if name not in sidecars]
        await asyncio.gather(*(p.stop(grace_seconds) for p in others))
        for name in reversed(sidecars):
            if name in self._running:
                left = max(0.0, deadline - asyncio.get_running_loop().time())
                await self._running[name][1].stop(left)
        self._cancel()

    async def kill(self) -> None:
        """SIGKILL every process at once (a power cut: no handler runs)."""
        await asyncio.gather(*(p.kill() for _, p in self._running.values()))
        self._cancel()

    async def _start(
        self, spec: Mapping[str, Any], behavior: ContainerBehavior, run: int
    ) -> SandboxedProcess:
        context = self.context
        env = {
            "PATH": default_path(),
            "HOSTNAME": _hostname(context),
            "HOME": "/root",
        }
        mounts = await container_mounts(context, spec, self._request)
        identity = await service_account(context, self._cluster, self._request)
        if identity is not None:
            mount, variables = identity
            if mount is not None:
                mounts.append(mount)
            env.update(variables)
        env.update(await container_env(context, spec, self._request))
        mounts += await nvidia_runtime_mounts(context, env, self._request)
        if behavior.image_files is not None:
            mounts += await asyncio.to_thread(image_mounts, behavior.image_files)
        command = [expand(part, env) for part in [*spec.get("command", []), *spec.get("args", [])]]
        if not command:
            raise ContainerConfigError("no command: the image's entrypoint is not known here")
        system = system_binds(self._system, [m.target for m in mounts], host_listing)
        return await SandboxedProcess.start(
            command,
            env=env,
            system=system,
            mounts=mounts,
            working_dir=spec.get("workingDir") or "/",
            hostname=_hostname(context),
            log_file=self.log_file(spec["name"], run),
        )

    async def _watch(self, name: str, run: int, process: SandboxedProcess) -> None:
        code = await process.wait()
        await self.events.put(ProcessEvent("exited", name, run, code, _now()))

    async def _probe(
        self,
        name: str,
        run: int,
        process: SandboxedProcess,
        startup: Probe | None,
        readiness: Probe | None,
    ) -> None:
        """Probe as the kubelet does: the startup probe until it passes (the container killed
        once it has failed its failure threshold in a row), then the readiness probe, reporting
        each change."""
        if startup is not None:
            await asyncio.sleep(startup.delay)
            failures = 0
            while not await _passes(process, startup):
                failures += 1
                if failures >= startup.failure_threshold or not process.running:
                    await process.kill()  # its exit comes as any exit does
                    return
                await asyncio.sleep(startup.period)
            await self.events.put(ProcessEvent("startup", name, run, True, _now()))
        if readiness is None:
            return
        await asyncio.sleep(readiness.delay)
        ready, streak = False, 0
        while process.running:
            passed = await _passes(process, readiness)
            streak = streak + 1 if passed == (not ready) else 0
            needed = readiness.failure_threshold if ready else readiness.success_threshold
            if streak >= needed:
                ready, streak = not ready, 0
                await self.events.put(ProcessEvent("readiness", name, run, ready, _now()))
            await asyncio.sleep(readiness.period)

    def _kill_orphan(self, starting: asyncio.Future[SandboxedProcess]) -> None:
        if not starting.cancelled() and starting.exception() is None:
            self._spawn(self._tasks, _killed(starting.result()))

    @staticmethod
    def _spawn(tasks: set[asyncio.Task[None]], coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def _cancel(self) -> None:
        for task in list(self._probes):
            task.cancel()


async def _killed(process: SandboxedProcess) -> None:
    await process.kill()


async def _passes(process: SandboxedProcess, probe: Probe) -> bool:
    if probe.command is None:
        return True
    return await process.probe(probe.command, probe.timeout)


def image_mounts(folder: Path) -> list[Mount]:
    """The files under `folder` (standing in for an image), each read-only at its path below
    `folder` in the sandbox: ``<folder>/usr/bin/x`` at ``/usr/bin/x``."""
    mounts = []
    for directory, _folders, files in os.walk(folder):
        for name in files:
            source = Path(directory, name)
            target = "/" + source.relative_to(folder).as_posix()
            mounts.append(Mount(str(source), target, read_only=True))
    return sorted(mounts, key=lambda m: m.target)


def _containers(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    spec = pod["spec"]
    return {c["name"]: c for kind in ("initContainers", "containers") for c in spec.get(kind) or []}


def _hostname(context: PodContext) -> str:
    if context.pod["spec"].get("hostNetwork"):
        return context.node_name
    return str(context.pod["metadata"]["name"])[:63]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
