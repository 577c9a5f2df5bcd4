"""A simulated kubelet for many GPU nodes at once: the I/O shell around `_nodes` and `_podsim`.

One instance registers its Nodes (created with a Ready status; then it removes the not-ready
taint that admission adds), renews their Leases round-robin (one renewal every
heartbeat/len(nodes) seconds, so 1,000 nodes cost a steady trickle, not bursts), and follows
every pod bound to a node with ONE watch on all bound pods. Each new pod gets a task that runs
the pure lifecycle of `_podsim` and merge-patches the status subresource whenever it changes,
then ends once nothing more will happen by itself.
A pod being deleted is deleted with grace period 0, as a kubelet does once its containers stop.

API calls go through `gpuctrl.runtime.Client` (raw JSON), at most `_CONCURRENCY` at a time;
transient errors (e.g. during `ControlPlane.restart_apiserver`) are retried. The nodes' kubelet
endpoint (`_logs.LogServer`, HTTPS on loopback) serves container logs, so ``kubectl logs`` works
through the apiserver; exec and port-forward are not available.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp

from gpuctrl.runtime import ApiError, Client, Gone, new_api_client

from ._behavior import BehaviorError, BehaviorRules, ContainerBehavior, PodMatch
from ._logs import LogServer
from ._nodes import (
    NODE_LEASE_NAMESPACE,
    SimulatedNode,
    lease_manifest,
    micro_timestamp,
    node_manifest,
    node_spec_patch,
)
from ._podsim import PodSim, advance, config_error_pod, new_pod, next_due
from ._podstatus import pod_status

__all__ = ["SimulatedKubelet"]

log = logging.getLogger(__name__)

_CONCURRENCY = 64
_SHUTDOWN_SECONDS = 60.0
_RETRY_SECONDS = 0.2
_WATCH_SECONDS = 300
_BOUND = {"fieldSelector": "spec.nodeName!="}
_PODS = "/api/v1/pods"
_NODES = "/api/v1/nodes"
_LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases"
_TRANSIENT = (aiohttp.ClientError, OSError, asyncio.TimeoutError)
_MERGE_PATCH = "application/merge-patch+json"


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
        self._log_server = LogServer(lambda namespace, name: self._sims.get((namespace, name)))
        self._kubelet_port = 0  # of the log server, once started
        self._finalizing: set[str] = set()  # uids of pods being deleted
        self._renewing: set[str] = set()  # nodes whose Lease renewal is in flight
        self._tasks: set[asyncio.Task[None]] = set()
        self._client: Client | None = None
        self._limit = asyncio.Semaphore(_CONCURRENCY)

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
    ) -> None:
        """Make `container` (None: every container) of the pods `match` selects behave so.

        `match` is a predicate on the pod (a JSON dict) or labels the pod must carry; None
        selects every pod. Applies to pods started afterwards; the latest matching rule wins,
        and a pod's `testing.gpuctrl.io/behavior` annotation wins over every rule.
        """
        if isinstance(match, Mapping):
            match = _has_labels(dict(match))
        self._rules.add(behavior, match, container)

    async def __aenter__(self) -> Self:
        self._client = Client(await new_api_client(self._kubeconfig))
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
        """Stop running the pods of these nodes and delete their Nodes and Leases."""
        names = [name for name in names if self._nodes.pop(name, None) is not None]
        for uid, (node, runner) in list(self._pods.items()):
            if node in names:
                runner.cancel()
                del self._pods[uid]
        await asyncio.gather(*(self._unregister(name) for name in names))

    async def _shut_down(self) -> None:
        tasks = list(self._tasks)  # the pod runners among them
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            async with asyncio.timeout(_SHUTDOWN_SECONDS):
                await self.remove_nodes(list(self._nodes))
        except TimeoutError:
            log.warning("apiserver unreachable: simulated Nodes %s not deleted", list(self._nodes))
        finally:
            await self._log_server.stop()
            assert self._client is not None
            await self._client.api_client.close()

    async def _register(self, node: SimulatedNode) -> None:
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
        patch = {"spec": {"renewTime": micro_timestamp(_now())}}
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
        elif metadata.get("deletionTimestamp"):
            self._forget(uid)
            if uid not in self._finalizing:
                self._finalizing.add(uid)
                self._spawn(self._finalize(metadata["namespace"], metadata["name"], uid))
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
        try:
            behaviors = self._rules.for_pod(pod)
        except BehaviorError as error:
            log.error("pod %s: %s", pod["metadata"]["name"], error)
            sim = config_error_pod(pod, str(error), host_ip=host_ip, now=now)
        else:
            sim = new_pod(pod, behaviors, host_ip=host_ip, pod_ip=node.next_pod_ip(), now=now)
        sent: dict[str, Any] | None = None
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        while True:
            sim = advance(sim, _now())
            self._sims[key] = sim
            status = pod_status(sim)
            if status != sent:
                if not await self._patch_pod_status(pod["metadata"], status):
                    return
                sent = status
            due = next_due(sim)
            if due is None:
                return
            await asyncio.sleep(max(0.0, (due - _now()).total_seconds()))

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

    async def _finalize(self, namespace: str, name: str, uid: str) -> None:
        """The containers are "stopped" at once: remove the pod for good."""
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
