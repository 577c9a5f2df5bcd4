"""A simulated kubelet for many GPU nodes at once: the I/O shell around `_nodes` and `_podsim`.

One instance registers its Nodes (created with a Ready status; then it removes the not-ready
taint that admission adds), renews their Leases round-robin (one renewal every
heartbeat/len(nodes) seconds, so 1,000 nodes cost a steady trickle, not bursts), and follows
every pod bound to a node with ONE watch on all bound pods. Each new pod gets a task that runs
the pure lifecycle of `_podsim` and merge-patches the status subresource whenever it changes,
then ends once nothing more will happen by itself.
A pod being deleted is deleted with grace period 0, as a kubelet does once its containers stop.

A container whose behavior has `ContainerBehavior.process` (chosen per pod, container or image
with `set_behavior`, or by the pod's annotation) runs for real as a local process in a
bubblewrap sandbox (`_podprocs`): its exit code, log and readiness are the process's; deleting
the pod sends it SIGTERM, waits the grace period, then SIGKILL, as does the end of a pod to its
sidecars (init containers with restartPolicy Always); `restart_node` is a power cut.
Each node has its own folder (`SimulatedNode.root`) that ``hostPath`` volumes come from.

API calls go through `gpuctrl.runtime.Client` (raw JSON), at most `_CONCURRENCY` at a time;
transient errors (e.g. during `ControlPlane.restart_apiserver`) are retried. The nodes' kubelet
endpoint (`_logs.LogServer`, HTTPS on loopback) serves container logs, so ``kubectl logs`` works
through the apiserver; exec and port-forward are not available.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import logging
import shutil
import tempfile
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp
import yaml

from gpuctrl.runtime import ApiError, Client, Gone, kube_micro_time, new_api_client

from ._behavior import BehaviorError, BehaviorRules, ContainerBehavior, PodMatch
from ._bwrap import ETC_FILES, Entry, host_entry
from ._container import Cluster, PodContext, python_roots
from ._logs import LogServer
from ._nodes import (
    NODE_LEASE_NAMESPACE,
    SimulatedNode,
    lease_manifest,
    node_manifest,
    node_spec_patch,
)
from ._podprocs import PodProcesses
from ._podsim import (
    PodSim,
    advance,
    config_error_pod,
    new_pod,
    next_due,
    pod_phase,
    rebooted,
)
from ._podstatus import pod_status

__all__ = ["SimulatedKubelet"]

log = logging.getLogger(__name__)

_CONCURRENCY = 64
_SHUTDOWN_SECONDS = 60.0
_RETRY_SECONDS = 0.2
_WATCH_SECONDS = 300
_BOUND = {"fieldSelector": "spec.nodeName!="}
_PODS = "/api/v1/pods"
# Kernel folders a node's root always has (sysfs), seeded into each simulated node's folder.
_KERNEL_FOLDERS = ("sys/devices/system",)
_NODES = "/api/v1/nodes"
_LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases"
_TRANSIENT = (aiohttp.ClientError, OSError, asyncio.TimeoutError)
_MERGE_PATCH = "application/merge-patch+json"
_DEFAULT_GRACE_SECONDS = 30
_FINAL = ("Succeeded", "Failed")
# What the sandbox of a process-backed container shows of the host, read-only.
_SYSTEM_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", *ETC_FILES)


@dataclass
class _Node:
    spec: SimulatedNode
    pods_started: int = 0  # picks each new pod's address in the node's pod CIDR

    def next_pod_ip(self) -> str:
        self.pods_started += 1
        hosts = self.spec.pod_cidr.num_addresses - 3  # network, gateway, broadcast
        return str(self.spec.pod_cidr.network_address + 2 + self.pods_started % hosts)


class SimulatedKubelet:
    """The kubelet of simulated GPU nodes: registers them and runs the pods bound to them.

    Use as ``async with SimulatedKubelet(kubeconfig, nodes) as kubelet:``. Leaving the block
    stops it and deletes its Nodes and Leases (pods bound to them are left to the pod GC).
    Container logs (each container's `ContainerBehavior.log`) are served to the apiserver as a
    kubelet serves them; exec and port-forward are unavailable.
    """

    def __init__(
        self,
        kubeconfig: Path,
        nodes: Iterable[SimulatedNode] = (),
        *,
        heartbeat_seconds: float = 10.0,
    ) -> None:
        self._kubeconfig = kubeconfig
        self._initial_nodes = list(nodes)
        self._heartbeat_seconds = heartbeat_seconds
        self._rules = BehaviorRules()
        self._nodes: dict[str, _Node] = {}
        self._pods: dict[str, tuple[str, asyncio.Task[None]]] = {}  # uid -> (node, runner)
        # (namespace, name) -> the pod as last simulated, until it is deleted: for its logs.
        self._sims: dict[tuple[str, str], PodSim] = {}
        self._log_server = LogServer(
            lambda namespace, name: self._sims.get((namespace, name)), self._process_log
        )
        self._kubelet_port = 0  # of the log server, once started
        self._finalizing: set[str] = set()  # uids of pods being deleted
        self._renewing: set[str] = set()  # nodes whose Lease renewal is in flight
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: Client | None = None
        self._limit = asyncio.Semaphore(_CONCURRENCY)
        self._directory: Path | None = None  # nodes' default roots, pods' volumes and logs
        self._cluster: Cluster | None = None
        self._processes: dict[str, PodProcesses] = {}  # uid -> its process-backed containers
        self._system: list[Entry] | None = None  # host paths shown in sandboxes, on first use

    @property
    def nodes(self) -> list[SimulatedNode]:
        """The nodes this kubelet runs, in registration order."""
        return [node.spec for node in self._nodes.values()]

    def set_behavior(
        self,
        *,
        behavior: ContainerBehavior,
        match: PodMatch | Mapping[str, str] | None = None,
        container: str | None = None,
        image: str | None = None,
    ) -> None:
        """Make `container` (None: every container) whose image matches the glob `image`
        (None: any) of the pods `match` selects behave so.

        `match` is a predicate on the pod (a JSON dict) or labels the pod must carry; None
        selects every pod. Applies to pods started afterwards; the latest matching rule wins,
        and a pod's `testing.gpuctrl.io/behavior` annotation wins over every rule. E.g.
        ``set_behavior(behavior=ContainerBehavior(process=True), image="*/gpuctrl:*")`` runs
        every gpuctrl container for real.
        """
        if isinstance(match, Mapping):
            match = _has_labels(dict(match))
        self._rules.add(behavior, match, container, image)

    async def __aenter__(self) -> Self:
        self._client = Client(await new_api_client(self._kubeconfig))
        self._directory = Path(tempfile.mkdtemp(prefix="gpuctrl-kubelet-"))
        self._cluster = _cluster(self._kubeconfig)
        try:
            self._kubelet_port = await self._log_server.start()
            self._spawn(self._watch_pods())
            self._spawn(self._heartbeat())
            await self.add_nodes(self._initial_nodes)
        except BaseException:
            await self._shut_down()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._shut_down()

    async def add_nodes(self, nodes: Iterable[SimulatedNode]) -> None:
        """Register `nodes` (concurrently) and start running the pods bound to them.

        Returns once every Node is Ready and untainted. Raises `AlreadyExists` when a Node of
        that name exists already.
        """
        new = [node for node in nodes if node.name not in self._nodes]
        results = await asyncio.gather(*(self._register(n) for n in new), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        await self._scan_pods()  # pods bound to these names before they registered

    async def remove_nodes(self, names: Iterable[str]) -> None:
        """Stop running the pods of these nodes (their processes are killed) and delete their
        Nodes and Leases."""
        names = [name for name in names if self._nodes.pop(name, None) is not None]
        await self._power_off(names)
        await asyncio.gather(*(self._unregister(name) for name in names))

    async def restart_node(self, name: str) -> None:
        """A power cut and reboot of node `name`: every process of its pods is SIGKILLed at
        once (no signal handler runs), then its pods start again from their init containers,
        each container's restart count one higher, as a kubelet restarts them after a reboot.
        Returns once the pods are started again."""
        if name not in self._nodes:
            raise KeyError(f"no simulated node {name!r}")
        await self._power_off([name], reboot=True)
        await self._scan_pods()

    async def _power_off(self, names: list[str], *, reboot: bool = False) -> None:
        """Cancel the pod runners of the nodes `names` and SIGKILL their processes; with
        `reboot`, pods that had finished (Succeeded, Failed) stay finished."""
        finished = {sim.uid for sim in self._sims.values() if pod_phase(sim) in _FINAL}
        for uid, (node, runner) in list(self._pods.items()):
            if node in names and not (reboot and uid in finished):
                runner.cancel()
                del self._pods[uid]
        doomed = [p for p in self._processes.values() if p.context.node_name in names]
        await asyncio.gather(*(p.kill() for p in doomed))
        if not reboot:
            for uid in [u for u, p in self._processes.items() if p in doomed]:
                del self._processes[uid]

    async def _shut_down(self) -> None:
        tasks = list(self._tasks)  # the pod runners among them
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(p.kill() for p in self._processes.values()))
        self._processes.clear()
        try:
            async with asyncio.timeout(_SHUTDOWN_SECONDS):
                await self.remove_nodes(list(self._nodes))
        except TimeoutError:
            log.warning("apiserver unreachable: simulated Nodes %s not deleted", list(self._nodes))
        finally:
            await self._log_server.stop()
            assert self._client is not None
            await self._client.api_client.close()
            if self._directory is not None:
                shutil.rmtree(self._directory, ignore_errors=True)

    async def _register(self, node: SimulatedNode) -> None:
        root = node.root
        if root is None:
            assert self._directory is not None
            root = self._directory / "nodes" / node.name
            node = dataclasses.replace(node, root=root)
        root.mkdir(parents=True, exist_ok=True)
        for folder in _KERNEL_FOLDERS:  # on every Linux node; operands mount them (type Directory)
            (root / folder).mkdir(parents=True, exist_ok=True)
        now = _now()
        created = await self._request(
            "POST", _NODES, body=node_manifest(node, now, self._kubelet_port)
        )
        self._nodes[node.name] = _Node(node)  # from now on, removed on shutdown
        await self._request("PATCH", f"{_NODES}/{node.name}", body=node_spec_patch(node))
        lease = lease_manifest(node.name, created["metadata"]["uid"], now)
        await self._request("POST", _LEASES, body=lease)

    async def _unregister(self, name: str) -> None:
        for path in (f"{_NODES}/{name}", f"{_LEASES}/{name}"):
            try:
                await self._request("DELETE", path)
            except ApiError as error:
                if error.status != 404:
                    raise

    async def _heartbeat(self) -> None:
        """Renew one Lease every heartbeat/len(nodes) seconds, round-robin."""
        while True:
            names = list(self._nodes)
            if not names:
                await asyncio.sleep(self._heartbeat_seconds)
            for name in names:
                if name in self._nodes and name not in self._renewing:
                    self._spawn(self._renew(name))
                await asyncio.sleep(self._heartbeat_seconds / len(names))

    async def _renew(self, name: str) -> None:
        patch = {"spec": {"renewTime": kube_micro_time(_now())}}
        self._renewing.add(name)
        try:
            with contextlib.suppress(ApiError, *_TRANSIENT):  # the next round renews it
                await self._send("PATCH", f"{_LEASES}/{name}", None, patch)
        finally:
            self._renewing.discard(name)

    async def _watch_pods(self) -> None:
        """Follow every bound pod with one watch; list again when the watch falls behind."""
        resource_version: str | None = None
        while True:
            try:
                if resource_version is None:
                    resource_version = await self._scan_pods(prune=True)
                resource_version = await self._follow_pods(resource_version)
            except Gone:
                resource_version = None
            except (ApiError, *_TRANSIENT) as error:
                log.debug("pod watch interrupted, retrying: %s", error)
                await asyncio.sleep(_RETRY_SECONDS)

    async def _scan_pods(self, *, prune: bool = False) -> str:
        """List the bound pods and handle each; with `prune`, forget pods no longer listed."""
        listing = await self._request("GET", _PODS, query=_BOUND)
        seen = set()
        for pod in listing["items"]:
            seen.add(pod["metadata"]["uid"])
            self._on_pod(pod, deleted=False)
        if prune:
            for uid in set(self._pods) - seen:
                self._pods.pop(uid)[1].cancel()
        return str(listing["metadata"]["resourceVersion"])

    async def _follow_pods(self, resource_version: str) -> str:
        """Handle the events of one watch from `resource_version`; the last version seen.

        Raises `Gone` when the version is too old.
        """
        query: dict[str, str | int | bool] = {
            **_BOUND,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": _WATCH_SECONDS,
        }
        limits = aiohttp.ClientTimeout(total=_WATCH_SECONDS + 30, sock_connect=10)
        assert self._client is not None
        async with contextlib.aclosing(self._client.watch(_PODS, query, limits)) as events:
            async for event in events:
                kind, pod = event["type"], event["object"]
                resource_version = pod["metadata"]["resourceVersion"]
                if kind != "BOOKMARK":
                    self._on_pod(pod, deleted=kind == "DELETED")
        return resource_version

    def _on_pod(self, pod: dict[str, Any], *, deleted: bool) -> None:
        metadata = pod["metadata"]
        uid = metadata["uid"]
        node = self._nodes.get(pod["spec"].get("nodeName", ""))
        if deleted or node is None:
            self._forget(uid)
            self._finalizing.discard(uid)
            key = (metadata["namespace"], metadata["name"])
            if key in self._sims and self._sims[key].uid == uid:
                del self._sims[key]
            processes = self._processes.pop(uid, None)
            if processes is not None:  # deleted at once (grace 0), or its node is gone
                self._spawn(_remove(processes))
        elif metadata.get("deletionTimestamp"):
            self._forget(uid)
            if uid not in self._finalizing:
                self._finalizing.add(uid)
                grace = metadata.get("deletionGracePeriodSeconds", _DEFAULT_GRACE_SECONDS)
                self._spawn(self._finalize(metadata["namespace"], metadata["name"], uid, grace))
        elif uid not in self._pods:
            self._pods[uid] = (node.spec.name, self._spawn(self._run_pod(pod, node)))

    def _forget(self, uid: str) -> None:
        entry = self._pods.pop(uid, None)
        if entry is not None:
            entry[1].cancel()

    async def _run_pod(self, pod: dict[str, Any], node: _Node) -> None:
        """Drive `pod` through its lifecycle until nothing more happens by itself."""
        now = _now()
        host_ip = node.spec.internal_ip
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        try:
            behaviors = self._rules.for_pod(pod)
        except BehaviorError as error:
            log.error("pod %s: %s", pod["metadata"]["name"], error)
            sim = config_error_pod(pod, str(error), host_ip=host_ip, now=now)
        else:
            sim = new_pod(pod, behaviors, host_ip=host_ip, pod_ip=node.next_pod_ip(), now=now)
            before = self._sims.get(key)
            if before is not None and before.uid == sim.uid:  # its node rebooted
                sim = rebooted(before, sim)
        processes = self._pod_processes(pod, node, sim)
        sent: dict[str, Any] | None = None
        stopping = False  # the processes of a finished pod (its sidecars') are being stopped
        while True:
            sim = advance(sim, _now())
            if processes is not None:
                sim = await processes.start_due(sim)
            self._sims[key] = sim
            status = pod_status(sim)
            if status != sent:
                if not await self._patch_pod_status(pod["metadata"], status):
                    return
                sent = status
            if processes is not None and not stopping and pod_phase(sim) in _FINAL:
                stopping = True
                grace = pod["spec"].get("terminationGracePeriodSeconds", _DEFAULT_GRACE_SECONDS)
                self._spawn(processes.stop(grace))
            due = next_due(sim)
            if processes is None or not (processes.alive or due is not None):
                if due is None:
                    return
                await asyncio.sleep(max(0.0, (due - _now()).total_seconds()))
                continue
            wait = None if due is None else max(0.0, (due - _now()).total_seconds())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    sim = processes.apply(sim, await processes.events.get())

    def _pod_processes(
        self, pod: Mapping[str, Any], node: _Node, sim: PodSim
    ) -> PodProcesses | None:
        """The processes of the pod's process-backed containers (None: it has none)."""
        if not any(c.behavior.process for c in sim.containers):
            return None
        assert self._directory is not None
        assert self._cluster is not None
        assert node.spec.root is not None
        if self._system is None:
            self._system = _system_roots()
        context = PodContext(
            pod=pod,
            node_name=node.spec.name,
            node_root=node.spec.root,
            pod_dir=self._directory / "pods" / sim.uid,
            host_ip=sim.host_ip,
            pod_ip=sim.pod_ip,
            log_dir=self._pod_log_dir(pod["metadata"]),
        )
        processes = PodProcesses(context, self._cluster, self._api_request, self._system)
        self._processes[sim.uid] = processes
        return processes

    def _pod_log_dir(self, metadata: Mapping[str, Any]) -> Path:
        assert self._directory is not None
        name = f"{metadata['namespace']}_{metadata['name']}_{metadata['uid']}"
        return self._directory / "logs" / name

    def process_logs(self, namespace: str, name: str) -> dict[str, str]:
        """What the process-backed containers of every pod ``namespace/name`` ran so far wrote,
        by ``container/run`` (``toolkit/0``), also once the pod is gone (as a kubelet's
        /var/log/pods): for a test's failure message."""
        assert self._directory is not None
        found = {}
        for folder in sorted((self._directory / "logs").glob(f"{namespace}_{name}_*")):
            for log in sorted(folder.glob("*/*.log")):
                found[f"{log.parent.name}/{log.stem}"] = log.read_text(errors="replace")
        return found

    async def _api_request(self, method: str, path: str, body: Any) -> Any:
        return await self._request(method, path, body=body)

    def _process_log(self, sim: PodSim, container: str, run: int) -> str:
        processes = self._processes.get(sim.uid)
        if processes is None:
            return ""
        try:
            return processes.log_file(container, run).read_text(errors="replace")
        except FileNotFoundError:
            return ""

    async def _patch_pod_status(self, metadata: Mapping[str, Any], status: dict[str, Any]) -> bool:
        """Patch the status; False when the pod is gone or was replaced (another uid)."""
        body = {"metadata": {"uid": metadata["uid"]}, "status": status}
        path = f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}/status"
        try:
            await self._request("PATCH", path, body=body)
        except ApiError as error:
            if error.status in (404, 409, 422):
                return False
            raise
        return True

    async def _finalize(self, namespace: str, name: str, uid: str, grace: float) -> None:
        """Stop the pod's processes (SIGTERM, `grace` seconds, SIGKILL; simulated containers
        stop at once), then remove the pod for good."""
        processes = self._processes.get(uid)
        if processes is not None:
            await processes.stop(grace)
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        with contextlib.suppress(ApiError):  # 404 gone, 409 replaced: nothing to do
            await self._request("DELETE", path, body=body)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
    ) -> dict[str, Any]:
        """Send a request (PATCH: merge patch), retrying while the apiserver is unavailable."""
        while True:
            try:
                return await self._send(method, path, query, body)
            except ApiError as error:
                if error.status not in (429, 500, 503, 504):
                    raise
            except _TRANSIENT as error:
                log.debug("retrying after %s", error)
            await asyncio.sleep(_RETRY_SECONDS)

    async def _send(
        self, method: str, path: str, query: Mapping[str, str] | None, body: Any
    ) -> dict[str, Any]:
        """Send one request (PATCH: merge patch), waiting while `_CONCURRENCY` are in flight."""
        assert self._client is not None
        content_type = _MERGE_PATCH if method == "PATCH" else "application/json"
        async with self._limit:
            result: dict[str, Any] = await self._client.request(
                method, path, query=query, body=body, content_type=content_type
            )
        return result

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("simulated kubelet task failed", exc_info=task.exception())


def _has_labels(labels: dict[str, str]) -> PodMatch:
    def match(pod: Mapping[str, Any]) -> bool:
        pod_labels = pod.get("metadata", {}).get("labels") or {}
        return all(pod_labels.get(key) == value for key, value in labels.items())

    return match


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def _remove(processes: PodProcesses) -> None:
    """Kill what is left of a deleted pod's processes and remove its folder."""
    await processes.kill()
    await asyncio.to_thread(shutil.rmtree, processes.context.pod_dir, True)


def _system_roots() -> list[Entry]:
    """The host paths a sandbox shows read-only: the system and this Python, where present."""
    return [e for path in (*_SYSTEM_ROOTS, *python_roots()) if (e := host_entry(path))]


def _cluster(kubeconfig: Path) -> Cluster:
    """The apiserver's URL and CA certificate, from the kubelet's own kubeconfig."""
    document = yaml.safe_load(kubeconfig.read_text())
    contexts = {c["name"]: c["context"] for c in document.get("contexts") or []}
    current = contexts.get(document.get("current-context"), {}).get("cluster")
    clusters = {c["name"]: c["cluster"] for c in document["clusters"]}
    cluster = clusters.get(current) or document["clusters"][0]["cluster"]
    if "certificate-authority-data" in cluster:
        ca_pem = base64.b64decode(cluster["certificate-authority-data"])
    else:
        ca_pem = Path(cluster["certificate-authority"]).read_bytes()
    return Cluster(server=cluster["server"], ca_pem=ca_pem)
