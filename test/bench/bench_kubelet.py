"""Benchmark: bring up many simulated GPU nodes on the local control plane and report the cost.

Run: .venv/bin/python test/bench/bench_kubelet.py [--nodes 1000] [--daemonset] [--no-tracemalloc]

Prints the control plane's start time, how long registering the nodes takes (until every Node is
Ready and untainted), the simulator's memory (RSS growth of this process, tracemalloc current and
peak), the CPU the simulator burns per second while only heartbeats run, and with --daemonset how
long until a DaemonSet has a Running, Ready pod on every node (real controller-manager and
scheduler). Figures, not assertions: the machine's load changes them, and tracemalloc slows this
process down (--no-tracemalloc for timings without it).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
import tracemalloc
from pathlib import Path

from kubernetes_asyncio import client

from gpuctrl.runtime import new_api_client
from gpuctrl.testing import ControlPlane, SimulatedKubelet, simulated_gpu_nodes


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def memory(rss_before: float) -> str:
    text = f"RSS +{rss_mib() - rss_before:.1f} MiB"
    if tracemalloc.is_tracing():
        current, peak = tracemalloc.get_traced_memory()
        text += f", tracemalloc current {current / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB"
    return text


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def wait_daemonset_ready(plane: ControlPlane, count: int) -> float:
    started = time.monotonic()
    daemonset = {
        "metadata": {"name": "bench"},
        "spec": {
            "selector": {"matchLabels": {"app": "bench"}},
            "template": {
                "metadata": {"labels": {"app": "bench"}},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
            },
        },
    }
    async with await new_api_client(plane.kubeconfig) as api:
        apps = client.AppsV1Api(api)
        await apps.create_namespaced_daemon_set("default", daemonset)
        while True:
            status = (await apps.read_namespaced_daemon_set_status("bench", "default")).status
            if status.number_ready == count:
                return time.monotonic() - started
            await asyncio.sleep(0.5)


async def main(nodes: int, daemonset: bool, heartbeat_seconds: float, trace: bool) -> None:
    started = time.monotonic()
    async with ControlPlane(controller_manager=daemonset, scheduler=daemonset) as plane:
        print(f"control plane up in {time.monotonic() - started:.1f} s")
        specs = simulated_gpu_nodes(
            "bench", count=nodes, os_releases=[("ubuntu", "22.04"), ("ubuntu", "24.04")]
        )
        rss_before = rss_mib()
        if trace:
            tracemalloc.start()
        started, cpu = time.monotonic(), cpu_seconds()
        async with SimulatedKubelet(
            plane.kubeconfig, specs, heartbeat_seconds=heartbeat_seconds
        ) as kubelet:
            elapsed = time.monotonic() - started
            print(
                f"{len(kubelet.nodes)} nodes Ready in {elapsed:.1f} s "
                f"({len(kubelet.nodes) / elapsed:.0f} nodes/s; "
                f"this process used {cpu_seconds() - cpu:.1f} s of CPU)"
            )
            print(f"simulator memory: {memory(rss_before)}")
            cpu, wall = cpu_seconds(), time.monotonic()
            await asyncio.sleep(heartbeat_seconds)
            busy = (cpu_seconds() - cpu) / (time.monotonic() - wall)
            print(
                f"heartbeats ({nodes / heartbeat_seconds:.0f} Lease renewals/s): "
                f"this process uses {busy * 100:.0f}% of a core"
            )
            if daemonset:
                ready = await wait_daemonset_ready(plane, nodes)
                print(f"DaemonSet Running and Ready on all {nodes} nodes in {ready:.1f} s")
                print(f"with {nodes} pods: {memory(rss_before)}")
            started = time.monotonic()
        print(f"kubelet stopped and {nodes} Nodes deleted in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--daemonset", action="store_true", help="also run a DaemonSet on them")
    parser.add_argument("--heartbeat-seconds", type=float, default=10.0)
    parser.add_argument("--no-tracemalloc", action="store_true", help="time without tracemalloc")
    arguments = parser.parse_args()
    asyncio.run(
        main(
            arguments.nodes,
            arguments.daemonset,
            arguments.heartbeat_seconds,
            trace=not arguments.no_tracemalloc,
        )
    )
