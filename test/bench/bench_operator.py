"""Benchmark: `gpuctrl manager` on a local control plane with many GPU nodes (two OS versions).

Run: .venv/bin/python test/bench/bench_operator.py [--nodes 1000] [--quiet-seconds 60] [--pods]
[--profile FILE] [--manager-log FILE]

Default variant: nodes registered as Node objects (NFD labels of Ubuntu 22.04 and 24.04) on
etcd + kube-apiserver without controller-manager, so no operand pods are created: the figures
are the operator's own work. Prints (a) seconds from starting the manager until every GPU node
carries the deploy labels of the default policy's operands and the driver upgrade controller's
mark (``nvidia.com/gpu-driver-upgrade-enabled``), and every DaemonSet the policy renders for the
two OS versions is applied (from the renderer: two drivers, toolkit, validator, device plugin,
MPS control daemon, GPU feature discovery, DCGM exporter, MIG manager); (c) the manager's write
requests during ``--quiet-seconds`` once its writes have settled (none for 10 s: the policy's
status catching up), counted in the apiserver's audit log by its User-Agent (Lease renewals
listed apart); (d) the manager's peak RSS (VmHWM).

``--pods``: controller-manager and scheduler on (at their default API QPS of 20 and 50, which
the control plane kit does not raise: so use a few dozen nodes), and the simulated kubelet runs
the operand pods. Prints (b) too: seconds from the instant the bench's own watches see the last
of the operand pods (one per operand DaemonSet and node) Ready until they see the policy's
``state: ready`` with ``N/N`` ready nodes, split into the DaemonSet controller's part (its
status catching up) and the operator's. ``--profile FILE`` runs the manager under cProfile.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpuctrl.runtime import Client, Informer, NotFound, Resource, new_api_client
from gpuctrl.testing import ControlPlane, SimulatedKubelet, simulated_gpu_nodes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "integration" / "controllers"))
from operator_helpers import POLICIES, AuditLog, install_crds, policy  # noqa: E402

from api.v1alpha1 import load_cluster_policy  # noqa: E402
from controllers._labels import DEPLOY_LABELS  # noqa: E402
from controllers._upgrade_plan import ENABLED  # noqa: E402
from controllers.nodes import enabled_components, label_changes  # noqa: E402
from controllers.render import ClusterFacts, render  # noqa: E402

NODES = Resource("v1", "Node", "nodes", False)
DAEMON_SETS = Resource("apps/v1", "DaemonSet", "daemonsets")
PODS = Resource("v1", "Pod", "pods")
MANAGED = "app.kubernetes.io/managed-by=gpuctrl"
NFD = "feature.node.kubernetes.io"


def _expected() -> tuple[str, int, int]:
    """What the default policy asks for on this bench's nodes: the label selector of its
    operands' deploy labels, its DaemonSets, and its operand pods per node."""
    policy = load_cluster_policy({})
    enabled = enabled_components(policy)
    facts = ClusterFacts.from_objects("gpuctrl", [node(0), node(1)], [])
    [first, _] = facts.nodes
    labels = {**first.labels, **label_changes(first.labels, enabled)}
    # The deploy labels a bench node gets (not the MIG manager's: no node is MIG-capable).
    deploy = sorted({f"{k}=true" for k in DEPLOY_LABELS.values() if labels.get(k) == "true"})
    sets = [o for o in render(policy, facts) if o["kind"] == "DaemonSet"]
    # A node's pods: the DaemonSets that select it (its OS's driver; not the MIG manager nor
    # the MPS daemon, which select labels the bench's nodes lack).
    placed = [
        o for o in sets if o["spec"]["template"]["spec"]["nodeSelector"].items() <= labels.items()
    ]
    return ",".join(deploy), len(sets), len(placed)


def node(index: int) -> dict[str, object]:
    version = ("22.04", "24.04")[index % 2]
    labels = {
        f"{NFD}/pci-10de.present": "true",
        f"{NFD}/system-os_release.ID": "ubuntu",
        f"{NFD}/system-os_release.VERSION_ID": version,
        "kubernetes.io/hostname": f"gpu-{index}",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"gpu-{index}", "labels": labels},
    }


DEPLOY, SETS, PODS_PER_NODE = _expected()


async def create_nodes(client: Client, count: int) -> None:
    limit = asyncio.Semaphore(32)

    async def one(index: int) -> None:
        async with limit:
            await client.create(NODES, node(index))

    await asyncio.gather(*(one(i) for i in range(count)))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


async def converged(client: Client, count: int) -> bool:
    try:
        labelled = await client.list(NODES, label_selector=DEPLOY, metadata_only=True)
        sets = await client.list(DAEMON_SETS, "gpuctrl")
    except NotFound:
        return False
    # The driver upgrade controller's mark on every driver node, its one write per node here.
    marked = [n for n in labelled if (n["metadata"].get("annotations") or {}).get(ENABLED)]
    return len(labelled) == len(marked) == count and len(sets) == SETS


async def start_manager(
    plane: ControlPlane, profile: Path | None, log: Path | None
) -> asyncio.subprocess.Process:
    """``gpuctrl manager`` on ``plane`` (no leader election, free ports), optionally under
    cProfile and with its log kept."""
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    profiler = ["-m", "cProfile", "-o", str(profile)] if profile else []
    stderr = log.open("wb") if log else asyncio.subprocess.DEVNULL
    return await asyncio.create_subprocess_exec(
        sys.executable, *profiler, "-m", "gpuctrl", "manager",
        "--kubeconfig", str(plane.kubeconfig),
        "--no-leader-elect", "--metrics-bind-address", "127.0.0.1:0",
        "--health-probe-bind-address", "127.0.0.1:0", "--log-format", "json",
        env=env, stderr=stderr,
    )  # fmt: skip


async def stop(manager: asyncio.subprocess.Process) -> None:
    manager.terminate()
    await manager.wait()


async def settled(audit: AuditLog, window: float = 10, within: float = 600) -> str:
    """Once the manager has written nothing for ``window`` seconds (its last status writes
    done): a line saying about when its last write was, counted from now."""
    started = time.monotonic()
    while time.monotonic() - started < within:
        audit.mark()
        await asyncio.sleep(window)
        if not audit.writes(leases=True):
            last = time.monotonic() - started - window
            span = f"{last:.0f}-{last + window:.0f} s"
            return f"    its writes settled (none for {window:.0f} s) {span} later"
    raise RuntimeError(f"the manager kept writing for {within:.0f} s")


async def quiet_writes(audit: AuditLog, quiet: float) -> str:
    """(c): the manager's writes over ``quiet`` seconds from now."""
    audit.mark()
    await asyncio.sleep(quiet)
    writes = audit.writes(leases=True)
    listed = f" {json.dumps(writes[:10])}" if writes else ""
    return f"(c) write requests in {quiet:.0f} s after convergence: {len(writes)}{listed}"


async def main(count: int, quiet: float, profile: Path | None, log: Path | None) -> None:
    """Variant without pods: (a), (c), (d) at ``count`` nodes."""
    async with ControlPlane(audit=True) as plane, await new_api_client(plane.kubeconfig) as api:
        client = Client(api, request_timeout=120)
        await install_crds(client)
        started = time.monotonic()
        await create_nodes(client, count)
        print(f"{count} nodes registered in {time.monotonic() - started:.1f} s", flush=True)
        await client.create(POLICIES, policy("bench"))
        audit = AuditLog(plane.audit_log)
        started = time.monotonic()
        manager = await start_manager(plane, profile, log)
        try:
            while not await converged(client, count):  # noqa: ASYNC110 (the API has no event for this)
                await asyncio.sleep(1)  # a 5,000-node list costs the apiserver too
            work = time.monotonic() - started
            print(
                f"(a) manager start -> every node labelled, every DaemonSet applied: {work:.1f} s"
            )
            print(await settled(audit), flush=True)
            print(await quiet_writes(audit, quiet))
            print(f"(d) manager peak RSS: {peak_rss_mib(manager.pid):.0f} MiB")
        finally:
            await stop(manager)


class Timeline:
    """When the bench's own watches saw every operand pod Ready, every DaemonSet's status
    complete (kube-controller-manager's part) and the policy ``ready``; each instant is the
    first of an unbroken stretch (a pod that turns unready again resets it). O(1) per event,
    so the bench's loop (which also runs the simulated kubelet) stays responsive."""

    def __init__(self, nodes: int) -> None:
        self._expected = PODS_PER_NODE * nodes
        self._verdicts: dict[str, dict[str, bool]] = {"Pod": {}, "DaemonSet": {}, "Policy": {}}
        self._judges: dict[str, Callable[[Mapping[str, Any]], bool]] = {
            "Pod": _pod_ready,
            "DaemonSet": _set_complete,
            "Policy": lambda policy: _policy_ready(policy, nodes),
        }
        self.pods_ready: float | None = None
        self.sets_ready: float | None = None
        self.policy_ready: float | None = None
        self.done = asyncio.Event()

    def on_add(self, obj: Mapping[str, Any]) -> None:
        self._record(obj, deleted=False)

    def on_update(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self._record(new, deleted=False)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        self._record(obj, deleted=True)

    def _record(self, obj: Mapping[str, Any], *, deleted: bool) -> None:
        kind = obj["kind"] if obj["kind"] in ("Pod", "DaemonSet") else "Policy"
        verdicts = self._verdicts[kind]
        name = f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
        if deleted:
            verdicts.pop(name, None)
        else:
            verdicts[name] = self._judges[kind](obj)
        now = time.monotonic()
        pods, sets, policies = (self._verdicts[k] for k in ("Pod", "DaemonSet", "Policy"))
        all_ready = len(pods) == self._expected and all(pods.values())
        self.pods_ready = (self.pods_ready or now) if all_ready else None
        complete = len(sets) == SETS and all(sets.values())
        self.sets_ready = (self.sets_ready or now) if complete else None
        ready = all_ready and any(policies.values())
        self.policy_ready = (self.policy_ready or now) if ready else None
        if self.policy_ready is not None:
            self.done.set()


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _set_complete(ds: Mapping[str, Any]) -> bool:
    status = ds.get("status") or {}
    desired = status.get("desiredNumberScheduled")
    return (
        status.get("observedGeneration") == ds["metadata"].get("generation")
        and bool(desired)
        and status.get("numberReady") == desired
        and status.get("updatedNumberScheduled") == desired
        and status.get("numberAvailable", 0) == desired
    )


def _policy_ready(policy: Mapping[str, Any], nodes: int) -> bool:
    status = policy.get("status") or {}
    return bool(status.get("state") == "ready" and status.get("readyNodes") == f"{nodes}/{nodes}")


async def main_with_pods(count: int, quiet: float, profile: Path | None, log: Path | None) -> None:
    """Variant with pods: (b), and (a), (c), (d) at ``count`` simulated nodes."""
    nodes = simulated_gpu_nodes("gpu", count=count)
    async with (
        ControlPlane(controller_manager=True, scheduler=True, audit=True) as plane,
        await new_api_client(plane.kubeconfig) as api,
    ):
        client = Client(api, request_timeout=120)
        await install_crds(client)
        async with SimulatedKubelet(plane.kubeconfig, nodes):
            print(f"{count} nodes registered (simulated kubelet)", flush=True)
            await client.create(POLICIES, policy("bench"))
            watched = [
                Informer(client, PODS, namespace="gpuctrl", label_selector=MANAGED),
                Informer(client, DAEMON_SETS, namespace="gpuctrl", label_selector=MANAGED),
                Informer(client, POLICIES),
            ]
            timeline = Timeline(count)
            stopping = asyncio.Event()
            async with asyncio.TaskGroup() as tasks:
                for informer in watched:
                    informer.add_handler(timeline)
                    tasks.create_task(informer.start(stopping))
                audit = AuditLog(plane.audit_log)
                started = time.monotonic()
                manager = await start_manager(plane, profile, log)
                try:
                    while not await converged(client, count):  # noqa: ASYNC110
                        await asyncio.sleep(1)
                    work = time.monotonic() - started
                    print(f"(a) manager start -> labelled, DaemonSets applied: {work:.1f} s")
                    await asyncio.wait_for(timeline.done.wait(), timeout=600)
                    assert timeline.pods_ready is not None
                    assert timeline.sets_ready is not None
                    assert timeline.policy_ready is not None
                    pods_at = timeline.pods_ready - started
                    print(f"every operand pod Ready {pods_at:.1f} s after the manager's start")
                    latency = timeline.policy_ready - timeline.pods_ready
                    print(f"(b) last operand pod Ready -> state: ready: {latency:.2f} s")
                    operator = timeline.policy_ready - max(timeline.pods_ready, timeline.sets_ready)
                    print(
                        "    of which kube-controller-manager's DaemonSet status: "
                        f"{max(0.0, timeline.sets_ready - timeline.pods_ready):.2f} s, "
                        f"the operator after it: {operator:.2f} s"
                    )
                    print(await settled(audit), flush=True)
                    print(await quiet_writes(audit, quiet))
                    print(f"(d) manager peak RSS: {peak_rss_mib(manager.pid):.0f} MiB")
                finally:
                    await stop(manager)
                    stopping.set()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--quiet-seconds", type=float, default=60)
    parser.add_argument("--profile", type=Path, help="run the manager under cProfile, into this")
    parser.add_argument("--manager-log", type=Path, help="the manager's log (JSON lines) here")
    parser.add_argument(
        "--pods",
        action="store_true",
        help="with controller-manager, scheduler and simulated kubelet: measures (b) too",
    )
    options = parser.parse_args()
    variant = main_with_pods if options.pods else main
    asyncio.run(variant(options.nodes, options.quiet_seconds, options.profile, options.manager_log))
